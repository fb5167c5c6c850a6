package agent

import (
	"context"
	"errors"
)

type ctxKey int

const (
	keyIdempotency ctxKey = iota
	keySource
	keyPrincipal
	keyResume
	keyWhileBusy
)

// WithWhileBusy says what the turn does when its session is already busy
// with another: "queue" (the default: it runs next), "steer" (folded into
// the running turn), "interrupt" (the running turn is aborted and this one
// runs) or "reject" (refused with CodeTurnRunning). Engines that run one
// turn at a time per session may ignore it.
func WithWhileBusy(ctx context.Context, mode string) context.Context {
	return context.WithValue(ctx, keyWhileBusy, mode)
}

// WhileBusy returns the mode set by WithWhileBusy, or "".
func WhileBusy(ctx context.Context) string {
	s, _ := ctx.Value(keyWhileBusy).(string)
	return s
}

// WithIdempotencyKey attaches the caller's idempotency key to a turn: two
// Invokes with the same key on the same session are one turn, and the second
// caller receives the first one's outcome.
func WithIdempotencyKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyIdempotency, key)
}

// IdempotencyKey returns the key set by WithIdempotencyKey, or "".
func IdempotencyKey(ctx context.Context) string {
	s, _ := ctx.Value(keyIdempotency).(string)
	return s
}

// WithSource records who is calling (http, slack, schedule, wake…); engines
// keep it with the user's message.
func WithSource(ctx context.Context, source string) context.Context {
	return context.WithValue(ctx, keySource, source)
}

// Source returns the value set by WithSource, or "".
func Source(ctx context.Context) string {
	s, _ := ctx.Value(keySource).(string)
	return s
}

// WithPrincipal names the authenticated caller a turn acts for (an API
// token's principal); engines may record it with a session the turn
// creates, so that sessions can be found by who created them.
func WithPrincipal(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, keyPrincipal, name)
}

// Principal returns the value set by WithPrincipal, or "".
func Principal(ctx context.Context) string {
	s, _ := ctx.Value(keyPrincipal).(string)
	return s
}

// WithResumeAfter asks an engine that numbers its events (Event.Seq) to
// leave out the events of the turn up to and including seq: the consumer
// already has them and is re-attaching (SSE Last-Event-ID).
func WithResumeAfter(ctx context.Context, seq int64) context.Context {
	return context.WithValue(ctx, keyResume, seq)
}

// ResumeAfter returns the value set by WithResumeAfter, or 0.
func ResumeAfter(ctx context.Context) int64 {
	n, _ := ctx.Value(keyResume).(int64)
	return n
}

// ErrHandOff is the cause a consumer gives its context's cancellation when it
// hands the turn over to another consumer (a server draining for a restart
// tells its clients to reconnect elsewhere): engines that can keep the turn
// running without a consumer must not abort it.
var ErrHandOff = errors.New("agent: turn handed off to another consumer")
