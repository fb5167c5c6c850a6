package feed

import (
	"context"
	"sync"
)

// shared is the process's in-process bus. Open("inprocess") hands out
// references to it, so that parts assembled apart in one process — a
// worker (worker.Run) beside a mounted ingress (ingress.New), or the two
// roles of fastagent.Start — see the same turns: deltas a worker publishes
// reach the ingress's streams. It is closed with its last reference; the
// next Open starts an empty one.
var shared struct {
	mu   sync.Mutex
	bus  *InProcess
	refs int
}

// openShared returns a new reference to the process's in-process bus.
func openShared() Bus {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.bus == nil {
		shared.bus = NewInProcess()
	}
	shared.refs++
	return &sharedRef{bus: shared.bus, subs: map[*refSub]struct{}{}}
}

// IsInProcess reports whether b is an in-process bus (Open's, or one
// from NewInProcess).
func IsInProcess(b Bus) bool {
	switch b.(type) {
	case *InProcess, *sharedRef:
		return true
	}
	return false
}

// sharedRef is one opener's reference to the shared bus: its Close ends
// the subscriptions made through it and refuses its later publishing,
// and closes the bus when it was the last reference.
type sharedRef struct {
	bus *InProcess

	mu     sync.Mutex
	closed bool
	subs   map[*refSub]struct{}
}

var _ Bus = (*sharedRef)(nil)

func (r *sharedRef) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// Publish implements Bus.
func (r *sharedRef) Publish(ctx context.Context, m Message) error {
	if r.isClosed() {
		return ErrClosed
	}
	return r.bus.Publish(ctx, m)
}

// Flush implements Bus.
func (r *sharedRef) Flush(ctx context.Context) error { return r.bus.Flush(ctx) }

// Stop implements Bus.
func (r *sharedRef) Stop(ctx context.Context, session, turn string) error {
	if r.isClosed() {
		return ErrClosed
	}
	return r.bus.Stop(ctx, session, turn)
}

// WatchStop implements Bus.
func (r *sharedRef) WatchStop(session, turn string) (<-chan struct{}, func()) {
	return r.bus.WatchStop(session, turn)
}

// Subscribe implements Bus.
func (r *sharedRef) Subscribe(ctx context.Context, session, turn string) (Subscription, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	sub, err := r.bus.Subscribe(ctx, session, turn)
	if err != nil {
		return nil, err
	}
	s := &refSub{Subscription: sub, ref: r}
	r.subs[s] = struct{}{}
	return s, nil
}

// Close implements Bus; later calls are no-ops.
func (r *sharedRef) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	subs := r.subs
	r.subs = nil
	r.mu.Unlock()
	for s := range subs {
		_ = s.Subscription.Close()
	}
	shared.mu.Lock()
	defer shared.mu.Unlock()
	shared.refs--
	if shared.refs == 0 && shared.bus == r.bus {
		shared.bus = nil
		return r.bus.Close()
	}
	return nil
}

// refSub is a subscription made through a sharedRef.
type refSub struct {
	Subscription
	ref *sharedRef
}

// Close implements Subscription.
func (s *refSub) Close() error {
	s.ref.mu.Lock()
	delete(s.ref.subs, s)
	s.ref.mu.Unlock()
	return s.Subscription.Close()
}
