package ingress

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fastagent/fastagent/internal/turnusage"
)

// CodePrincipalLimit is the refusal when the caller's principal reached its own limit of
// concurrent turns, turns per minute or tokens per day (limits.perPrincipal); 429 with
// Retry-After, and nothing was started.
const CodePrincipalLimit = "principal_limit"

// PrincipalLimits bound the new turns of one principal; 0 is no limit.
type PrincipalLimits struct {
	// ConcurrentTurns bounds the principal's turns running at once.
	ConcurrentTurns int
	// TurnsPerMinute bounds the turns it starts in any minute.
	TurnsPerMinute int
	// TokensPerDay bounds the tokens (input + output) of the principal's
	// turns per UTC day: checked before a turn starts, charged when it
	// ends, so the turn that crosses it runs to its end (a soft limit).
	TokensPerDay int64
	// ExemptAdmins leaves admin principals unlimited.
	ExemptAdmins bool
	// Exempt are the principals never limited.
	Exempt []string
}

// Enabled reports whether any limit is set.
func (l PrincipalLimits) Enabled() bool {
	return l.ConcurrentTurns > 0 || l.TurnsPerMinute > 0 || l.TokensPerDay > 0
}

// PrincipalLimiter counts each principal's running turns, the turns it
// started in the last minute and the tokens its turns used today (UTC), in
// this process; one is shared by every agent's routes of a deployment.
// Safe for concurrent use.
type PrincipalLimiter struct {
	limits PrincipalLimits
	now    func() time.Time

	mu      sync.Mutex
	running map[string]int
	started map[string][]time.Time
	// day is the UTC date tokens counts for; charged the turn runs
	// already charged (turnusage.Report.ID) and when, kept chargedFor.
	day     string
	tokens  map[string]int64
	charged map[string]time.Time
	pruned  time.Time
}

// chargedFor is how long a charged turn run is remembered, so that its
// outcome answered again (the same Idempotency-Key, re-attaching) is not
// charged twice: longer than the default idempotency window.
const chargedFor = 48 * time.Hour

// NewPrincipalLimiter returns a limiter enforcing l.
func NewPrincipalLimiter(l PrincipalLimits) *PrincipalLimiter {
	return &PrincipalLimiter{limits: l, now: time.Now, running: map[string]int{}, started: map[string][]time.Time{},
		tokens: map[string]int64{}, charged: map[string]time.Time{}}
}

// limited reports whether principal p (admin: whether it is an admin) is
// under the limits.
func (l *PrincipalLimiter) limited(p string, admin bool) bool {
	return l != nil && l.limits.Enabled() && (!admin || !l.limits.ExemptAdmins) && !slices.Contains(l.limits.Exempt, p)
}

// rollDay starts a new UTC day's token counts; l.mu is held.
func (l *PrincipalLimiter) rollDay(now time.Time) {
	if day := now.UTC().Format(time.DateOnly); day != l.day {
		l.day = day
		clear(l.tokens)
	}
}

// untilMidnight is how long from now until the next 00:00 UTC.
func untilMidnight(now time.Time) time.Duration {
	u := now.UTC()
	return time.Date(u.Year(), u.Month(), u.Day()+1, 0, 0, 0, 0, time.UTC).Sub(u)
}

// overTokens refuses a turn of p once its tokens today reached
// TokensPerDay; l.mu is held.
func (l *PrincipalLimiter) overTokens(p string, now time.Time) error {
	max := l.limits.TokensPerDay
	if max <= 0 {
		return nil
	}
	l.rollDay(now)
	if used := l.tokens[p]; used >= max {
		principalRefused.WithLabelValues(p, "tokens_per_day").Inc()
		wait := untilMidnight(now)
		return &principalRefusal{wait: wait, msg: fmt.Sprintf(
			"principal %q used %d tokens today (UTC), the most limits.perPrincipal.tokensPerDay (%d) allows; new turns are refused until 00:00 UTC (in %s)",
			p, used, max, wait.Truncate(time.Minute))}
	}
	return nil
}

// CheckTokens refuses principal p (admin: whether it is an admin) once its
// turns used limits.perPrincipal.tokensPerDay today; it counts nothing
// (steering messages are checked this way: the turn they join is charged).
func (l *PrincipalLimiter) CheckTokens(p string, admin bool) error {
	if !l.limited(p, admin) {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.overTokens(p, l.now())
}

// Charge counts an ended turn run's tokens against principal p today,
// once per run (a remembered outcome answered again is not charged).
func (l *PrincipalLimiter) Charge(p string, admin bool, r turnusage.Report) {
	if !l.limited(p, admin) || l.limits.TokensPerDay <= 0 {
		return
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	id := r.ID()
	if _, ok := l.charged[id]; ok {
		return
	}
	if now.Sub(l.pruned) > time.Hour {
		l.pruned = now
		for k, at := range l.charged {
			if now.Sub(at) > chargedFor {
				delete(l.charged, k)
			}
		}
	}
	l.charged[id] = now
	l.rollDay(now)
	n := r.Usage.Tokens()
	l.tokens[p] += n
	principalTokens.WithLabelValues(p).Add(float64(n))
}

// principalRefusal says why a principal's turn was refused and when to
// retry; it has the RetryDelay refuseOverloaded reads.
type principalRefusal struct {
	msg  string
	wait time.Duration
}

func (r *principalRefusal) Error() string             { return r.msg }
func (r *principalRefusal) RetryDelay() time.Duration { return r.wait }

// Take counts a new turn of principal p (admin: whether it is an admin).
// It returns done, to call once when the turn has ended (or never
// started), or a refusal when a limit is reached; a refused turn is not
// counted.
func (l *PrincipalLimiter) Take(p string, admin bool) (done func(), refusal error) {
	noop := func() {}
	if !l.limited(p, admin) {
		return noop, nil
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	recent := l.started[p][:0]
	for _, t := range l.started[p] {
		if now.Sub(t) < time.Minute {
			recent = append(recent, t)
		}
	}
	l.started[p] = recent
	if err := l.overTokens(p, now); err != nil {
		return nil, err
	}
	if max := l.limits.ConcurrentTurns; max > 0 && l.running[p] >= max {
		principalRefused.WithLabelValues(p, "concurrent_turns").Inc()
		return nil, &principalRefusal{wait: time.Second, msg: fmt.Sprintf(
			"principal %q already runs %d turn(s), the most limits.perPrincipal.concurrentTurns allows; wait for one to end", p, l.running[p])}
	}
	if max := l.limits.TurnsPerMinute; max > 0 && len(recent) >= max {
		principalRefused.WithLabelValues(p, "turns_per_minute").Inc()
		return nil, &principalRefusal{wait: recent[0].Add(time.Minute).Sub(now), msg: fmt.Sprintf(
			"principal %q started %d turns in the last minute, the most limits.perPrincipal.turnsPerMinute allows", p, len(recent))}
	}
	l.running[p]++
	l.started[p] = append(recent, now)
	principalRunning.WithLabelValues(p).Set(float64(l.running[p]))
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.running[p]--
			principalRunning.WithLabelValues(p).Set(float64(l.running[p]))
			if l.running[p] <= 0 {
				delete(l.running, p)
			}
		})
	}, nil
}

var (
	// principalRunning is each limited principal's turns running through
	// this ingress.
	principalRunning = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fastagent_principal_turns_running",
		Help: "Turns of each principal running through this ingress (principals under limits.perPrincipal only).",
	}, []string{"principal"})
	// principalRefused counts the turns refused by limits.perPrincipal.
	principalRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fastagent_principal_turns_refused_total",
		Help: "New turns refused by limits.perPrincipal, by principal and limit (concurrent_turns, turns_per_minute, tokens_per_day).",
	}, []string{"principal", "limit"})
	// principalTokens counts the tokens charged to each principal
	// (limits.perPrincipal.tokensPerDay).
	principalTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fastagent_principal_tokens_total",
		Help: "Tokens (input + output) of the turns of each principal under limits.perPrincipal.tokensPerDay, charged when each turn ends.",
	}, []string{"principal"})
)
