package channels

import (
	"context"
	"sync"
	"time"
)

// Identity is a bot's identity its door looks up on the platform (Feishu's
// open_id, Telegram's getMe): until it is known, the door refuses group
// messages with ErrRetryLater, so the platform delivers them again.
type Identity interface {
	// Lookup asks the platform once, bounded by ctx; nil when the identity
	// is known (then, or before: a known identity asks nothing).
	Lookup(ctx context.Context) error
}

// Pauses between the failed lookups of one identity: the first, doubling
// up to the last.
const (
	ResolveFirst = time.Second
	ResolveEvery = 30 * time.Second
)

// Resolver looks up the bot identities of a runtime's channels until each
// is known: one per runtime, started with the runtime's context and
// stopped with it (Close), so no lookup outlives the runtime. Identities
// added before Start wait for it; those added after start at once.
type Resolver struct {
	// First and Every bound the pause after a failed lookup (default
	// ResolveFirst doubling to ResolveEvery).
	First, Every time.Duration

	mu      sync.Mutex
	ctx     context.Context
	cancel  context.CancelFunc
	pending []Identity
	closed  bool
	wg      sync.WaitGroup
}

// Add resolves ids (nil ones are skipped): at once when the resolver runs,
// else from Start.
func (r *Resolver) Add(ids ...Identity) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		switch {
		case id == nil || r.closed:
		case r.ctx == nil:
			r.pending = append(r.pending, id)
		default:
			r.launch(r.ctx, id) //nolint:contextcheck // the lookups live with the resolver's context (Start), not with the caller's
		}
	}
}

// Start runs the lookups until ctx ends or Close; later calls are no-ops.
func (r *Resolver) Start(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx != nil || r.closed {
		return
	}
	rctx, cancel := context.WithCancel(ctx)
	r.ctx, r.cancel = rctx, cancel
	for _, id := range r.pending {
		r.launch(rctx, id)
	}
	r.pending = nil
}

// launch looks id up until it is known or ctx (the resolver's) ends;
// r.mu held.
func (r *Resolver) launch(ctx context.Context, id Identity) {
	first, every := r.First, r.Every
	if first <= 0 {
		first = ResolveFirst
	}
	if every < first {
		every = max(ResolveEvery, first)
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		pause := first
		for {
			if err := id.Lookup(ctx); err == nil || ctx.Err() != nil {
				return
			}
			t := time.NewTimer(pause)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
			pause = min(2*pause, every)
		}
	}()
}

// Close stops the lookups and waits for them; it is idempotent, and an
// identity added afterwards is not looked up.
func (r *Resolver) Close() {
	r.mu.Lock()
	r.closed = true
	if r.cancel != nil {
		r.cancel()
	}
	r.pending = nil
	r.mu.Unlock()
	r.wg.Wait()
}
