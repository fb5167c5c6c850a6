package agent

import "context"

type ctxKey int

const (
	keyIdempotency ctxKey = iota
	keySource
)

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
