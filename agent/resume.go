package agent

import (
	"context"
	"sync"
	"time"
)

type resumeKey int

const (
	keyResumeWithin resumeKey = iota
	keyTurnEnd
)

// WithResumeWithin asks the engine to keep the turn running for up to d
// after its consumer goes away, so that the consumer can come back (resend
// the turn's key with the last event's Seq) and miss nothing. Engines cap d
// by their own limit. Without it (or with d <= 0) a consumer that stops
// consuming cancels the turn's in-flight work at once: the contract's
// consumer break.
func WithResumeWithin(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, keyResumeWithin, d)
}

// ResumeWithin returns the value set by WithResumeWithin, or 0.
func ResumeWithin(ctx context.Context) time.Duration {
	d, _ := ctx.Value(keyResumeWithin).(time.Duration)
	return max(d, 0)
}

type turnEnd struct {
	mu    sync.Mutex
	f     func()
	taken bool
}

// WithTurnEnd hands f to the engine running the turn: an engine that can
// tell when the turn's in-flight work is over — which may be after Invoke's
// iteration stopped, for a turn kept running for a returning consumer —
// takes f (TakeTurnEnd) and calls it then. taken reports whether an engine
// took it; when none did, the caller calls f itself after Invoke returns.
func WithTurnEnd(ctx context.Context, f func()) (_ context.Context, taken func() bool) {
	te := &turnEnd{f: f}
	return context.WithValue(ctx, keyTurnEnd, te), func() bool {
		te.mu.Lock()
		defer te.mu.Unlock()
		return te.taken
	}
}

// TakeTurnEnd takes the function set by WithTurnEnd (nil when there is none,
// or it was taken already); the engine must call it once the turn ends.
func TakeTurnEnd(ctx context.Context) func() {
	te, _ := ctx.Value(keyTurnEnd).(*turnEnd)
	if te == nil {
		return nil
	}
	te.mu.Lock()
	defer te.mu.Unlock()
	if te.taken {
		return nil
	}
	te.taken = true
	return te.f
}
