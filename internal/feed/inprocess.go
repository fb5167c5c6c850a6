package feed

import (
	"context"
	"sync"
)

// InProcess is a Bus for a single process where workers and ingresses run
// together. Publish hands each message to the subscribers' unbounded queues
// and returns.
type InProcess struct {
	mu     sync.RWMutex
	subs   map[string]map[*inProcessSub]struct{}
	closed bool
}

var _ Bus = (*InProcess)(nil)

// NewInProcess returns an empty in-process bus.
func NewInProcess() *InProcess {
	return &InProcess{subs: make(map[string]map[*inProcessSub]struct{})}
}

// Publish queues m for every current subscriber of m.Session.
func (b *InProcess) Publish(_ context.Context, m Message) error {
	if err := checkSession(m.Session); err != nil {
		return err
	}
	if m.Event != nil {
		// Detach from the publisher's copy so later changes to it are not seen.
		ev := *m.Event
		m.Event = &ev
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return ErrClosed
	}
	for s := range b.subs[m.Session] {
		s.q.push(m)
	}
	return nil
}

// Flush is a no-op: published messages are already queued for subscribers.
func (b *InProcess) Flush(context.Context) error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return ErrClosed
	}
	return nil
}

// Subscribe registers a subscriber for session.
func (b *InProcess) Subscribe(_ context.Context, session string) (Subscription, error) {
	if err := checkSession(session); err != nil {
		return nil, err
	}
	s := &inProcessSub{bus: b, session: session, q: newQueue()}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		s.q.close()
		return nil, ErrClosed
	}
	set := b.subs[session]
	if set == nil {
		set = make(map[*inProcessSub]struct{})
		b.subs[session] = set
	}
	set[s] = struct{}{}
	return s, nil
}

// Close closes every subscription; later calls are no-ops.
func (b *InProcess) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	subs := b.subs
	b.subs = nil
	b.mu.Unlock()
	for _, set := range subs {
		for s := range set {
			s.q.close()
		}
	}
	return nil
}

func (b *InProcess) remove(s *inProcessSub) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if set := b.subs[s.session]; set != nil {
		delete(set, s)
		if len(set) == 0 {
			delete(b.subs, s.session)
		}
	}
}

type inProcessSub struct {
	bus     *InProcess
	session string
	q       *queue
}

func (s *inProcessSub) C() <-chan Message { return s.q.out }

func (s *inProcessSub) Close() error {
	s.bus.remove(s)
	s.q.close()
	return nil
}
