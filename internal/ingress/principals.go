package ingress

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// CodePrincipalLimit is the refusal when the caller's principal reached its own limit of
// concurrent turns or turns per minute (limits.perPrincipal); 429 with
// Retry-After, and nothing was started.
const CodePrincipalLimit = "principal_limit"

// PrincipalLimits bound the new turns of one principal; 0 is no limit.
type PrincipalLimits struct {
	// ConcurrentTurns bounds the principal's turns running at once.
	ConcurrentTurns int
	// TurnsPerMinute bounds the turns it starts in any minute.
	TurnsPerMinute int
	// ExemptAdmins leaves admin principals unlimited.
	ExemptAdmins bool
	// Exempt are the principals never limited.
	Exempt []string
}

// Enabled reports whether any limit is set.
func (l PrincipalLimits) Enabled() bool { return l.ConcurrentTurns > 0 || l.TurnsPerMinute > 0 }

// PrincipalLimiter counts each principal's running turns and the turns it
// started in the last minute, in this process; one is shared by every
// agent's routes of a deployment. Safe for concurrent use.
type PrincipalLimiter struct {
	limits PrincipalLimits
	now    func() time.Time

	mu      sync.Mutex
	running map[string]int
	started map[string][]time.Time
}

// NewPrincipalLimiter returns a limiter enforcing l.
func NewPrincipalLimiter(l PrincipalLimits) *PrincipalLimiter {
	return &PrincipalLimiter{limits: l, now: time.Now, running: map[string]int{}, started: map[string][]time.Time{}}
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
	if l == nil || !l.limits.Enabled() || (admin && l.limits.ExemptAdmins) || slices.Contains(l.limits.Exempt, p) {
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
		Help: "New turns refused by limits.perPrincipal, by principal and limit (concurrent_turns, turns_per_minute).",
	}, []string{"principal", "limit"})
)
