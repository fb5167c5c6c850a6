// Package admission decides whether a door (the HTTP ingress, a channel)
// accepts a new turn or refuses it because the system is saturated: too
// many turns in flight through this process, or a task-queue backlog (count
// or age of the oldest task) that says workers are not keeping up. A
// refused caller is told when to retry instead of waiting seconds for a
// worker.
package admission

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"
)

// Limits are the saturation thresholds; a zero field is no limit, so the
// zero value admits everything.
type Limits struct {
	// MaxInFlight bounds the turns in flight through this door at once.
	MaxInFlight int `yaml:"maxInFlight" json:"maxInFlight,omitempty"`
	// MaxBacklog bounds the tasks waiting on the task queue (workflow and
	// activity tasks not yet picked up by any worker).
	MaxBacklog int64 `yaml:"maxBacklog" json:"maxBacklog,omitempty"`
	// MaxBacklogAge bounds how long the oldest waiting task has waited (its
	// schedule-to-start latency so far).
	MaxBacklogAge time.Duration `yaml:"maxBacklogAge" json:"maxBacklogAge,omitempty"`
	// RetryAfter is the least a refused caller is told to wait (default
	// 2 s); each refusal adds a jitter of whole seconds up to as much again.
	RetryAfter time.Duration `yaml:"retryAfter" json:"retryAfter,omitempty"`
}

// DefaultRetryAfter is Limits.RetryAfter when unset.
const DefaultRetryAfter = 2 * time.Second

// SampleEvery is the longest a backlog sample is reused: the probe runs at
// most this often, in the background, whatever the request rate.
const SampleEvery = 500 * time.Millisecond

// Backlog is one sample of a task queue's backlog.
type Backlog struct {
	// Count is the approximate number of tasks waiting for a worker.
	Count int64
	// Age is how long the oldest waiting task has waited.
	Age time.Duration
}

// Probe samples the task queue's backlog (a DescribeTaskQueue call).
type Probe func(ctx context.Context) (Backlog, error)

// Refusal says why a turn was not admitted and when to retry.
type Refusal struct {
	Reason     string
	RetryAfter time.Duration
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("at capacity: %s", r.Reason)
}

// RetryDelay is how long the refused caller should wait.
func (r *Refusal) RetryDelay() time.Duration { return r.RetryAfter }

// Limiter admits or refuses turns. It is safe for concurrent use; a nil
// *Limiter admits everything.
type Limiter struct {
	limits Limits
	probe  Probe
	log    *slog.Logger
	now    func() time.Time

	mu       sync.Mutex
	inFlight int
	sample   Backlog
	sampled  time.Time // when sample was taken (zero: never)
	next     time.Time // when the next sample may be taken
	probing  bool
}

// New returns a limiter for limits; probe may be nil when no backlog limit
// is set (then backlog limits are ignored). log may be nil.
func New(limits Limits, probe Probe, log *slog.Logger) *Limiter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Limiter{limits: limits, probe: probe, log: log, now: time.Now}
}

// Enabled reports whether any limit is set.
func (l Limits) Enabled() bool {
	return l.MaxInFlight > 0 || l.MaxBacklog > 0 || l.MaxBacklogAge > 0
}

// Validate rejects negative limits.
func (l Limits) Validate() error {
	if l.MaxInFlight < 0 || l.MaxBacklog < 0 || l.MaxBacklogAge < 0 || l.RetryAfter < 0 {
		return fmt.Errorf("admission: limits must not be negative: %+v", l)
	}
	return nil
}

// retryAfter is the configured delay plus a jitter of whole seconds up to
// as much again, so that refused callers do not all come back at once.
func (l *Limiter) retryAfter() time.Duration {
	base := DefaultRetryAfter
	if l.limits.RetryAfter > 0 {
		base = l.limits.RetryAfter
	}
	secs := max(int64(base/time.Second), 1)
	return base + time.Duration(rand.Int64N(secs+1))*time.Second //nolint:gosec // jitter, not a secret
}

// Admit takes a place for one turn, or refuses it with a *Refusal. On
// success the caller must call release when the turn no longer needs its
// place (its stream ended; further calls are no-ops); on refusal release is
// nil.
func (l *Limiter) Admit() (release func(), refusal error) {
	r, no := l.admit()
	if no != nil {
		return nil, no // not a typed nil inside the error
	}
	return r, nil
}

func (l *Limiter) admit() (release func(), refusal *Refusal) {
	if l == nil {
		return func() {}, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if max := l.limits.MaxInFlight; max > 0 && l.inFlight >= max {
		return nil, &Refusal{Reason: fmt.Sprintf("%d turns in flight through this server (limit %d)", l.inFlight, max), RetryAfter: l.retryAfter()}
	}
	if r := l.backlogRefusal(); r != nil {
		return nil, r
	}
	l.inFlight++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			l.inFlight--
			l.mu.Unlock()
		})
	}, nil
}

// backlogRefusal checks the cached backlog sample, refreshing it in the
// background at most every SampleEvery; l.mu is held. A missing or stale
// sample (older than 4 × SampleEvery: the probe fails) admits — the
// limiter never refuses on a guess.
func (l *Limiter) backlogRefusal() *Refusal {
	if l.probe == nil || (l.limits.MaxBacklog <= 0 && l.limits.MaxBacklogAge <= 0) {
		return nil
	}
	now := l.now()
	if !l.probing && !now.Before(l.next) {
		l.probing, l.next = true, now.Add(SampleEvery)
		go l.refresh()
	}
	if l.sampled.IsZero() || now.Sub(l.sampled) > 4*SampleEvery {
		return nil
	}
	s := l.sample
	if max := l.limits.MaxBacklog; max > 0 && s.Count > max {
		return &Refusal{Reason: fmt.Sprintf("%d tasks waiting for a worker (limit %d)", s.Count, max), RetryAfter: l.retryAfter()}
	}
	if max := l.limits.MaxBacklogAge; max > 0 && s.Age > max {
		return &Refusal{Reason: fmt.Sprintf("the oldest task has waited %s for a worker (limit %s)", s.Age.Round(time.Millisecond), max), RetryAfter: l.retryAfter()}
	}
	return nil
}

// refresh takes one backlog sample.
func (l *Limiter) refresh() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := l.probe(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.probing = false
	if err != nil {
		l.log.Warn("admission: backlog sample failed; admitting on the in-flight limit only", "error", err)
		return
	}
	l.sample, l.sampled = s, l.now()
}

// InFlight returns the turns holding a place.
func (l *Limiter) InFlight() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inFlight
}

// Refresh takes a backlog sample now and waits for it (tests, startup).
func (l *Limiter) Refresh(ctx context.Context) error {
	if l == nil || l.probe == nil {
		return nil
	}
	s, err := l.probe(ctx)
	if err != nil {
		return fmt.Errorf("admission: backlog sample: %w", err)
	}
	l.mu.Lock()
	l.sample, l.sampled = s, l.now()
	l.mu.Unlock()
	return nil
}
