package feed

import (
	"context"
	"sync"
	"time"
)

// DefaultMaxTurnMessages bounds one turn's in-process log; beyond it the
// oldest messages are dropped (a consumer then sees the gap in Seq and the
// relay fills the text in from the session store).
const DefaultMaxTurnMessages = 100_000

// InProcess is a Bus for a single process where workers and ingresses run
// together. Each turn is a log in memory, kept for Retention after its last
// message; Publish appends to it and hands the message to the turn's
// subscribers' unbounded queues.
type InProcess struct {
	// Retention is how long a turn's log outlives its last message
	// (default DefaultRetention). Set before first use.
	Retention time.Duration
	// MaxTurnMessages bounds one turn's log (default DefaultMaxTurnMessages).
	MaxTurnMessages int
	// now is the clock (tests).
	now func() time.Time

	stops stopBoard

	mu        sync.Mutex
	turns     map[turnKey]*turnLog
	closed    bool
	lastSweep time.Time
}

type turnKey struct{ session, turn string }

// turnLog is one turn's retained messages: msgs[i] has Seq first+i.
type turnLog struct {
	msgs  []Message
	first int64
	subs  map[*inProcessSub]struct{}
	last  time.Time
}

var _ Bus = (*InProcess)(nil)

// NewInProcess returns an empty in-process bus.
func NewInProcess() *InProcess {
	return &InProcess{turns: make(map[turnKey]*turnLog)}
}

func (b *InProcess) clock() time.Time {
	if b.now != nil {
		return b.now()
	}
	return time.Now()
}

func (b *InProcess) retention() time.Duration {
	if b.Retention > 0 {
		return b.Retention
	}
	return DefaultRetention
}

// Publish appends m to its turn's log and queues it for the turn's subscribers.
func (b *InProcess) Publish(_ context.Context, m Message) error {
	if err := checkTurn(m.Session, m.Turn); err != nil {
		return err
	}
	if m.Event != nil {
		// Detach from the publisher's copy so later changes to it are not seen.
		ev := *m.Event
		m.Event = &ev
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	now := b.clock()
	b.sweep(now)
	k := turnKey{m.Session, m.Turn}
	l := b.turns[k]
	if l == nil {
		l = &turnLog{first: 1, subs: map[*inProcessSub]struct{}{}}
		b.turns[k] = l
	}
	m.Seq = l.first + int64(len(l.msgs))
	l.msgs = append(l.msgs, m)
	max := b.MaxTurnMessages
	if max <= 0 {
		max = DefaultMaxTurnMessages
	}
	if n := len(l.msgs) - max; n > 0 {
		// Reslice rather than copy the whole log on every publish at the
		// cap (append reallocates, copying only the kept ones, once the
		// array's tail is reached); clear the dropped ones for the GC.
		clear(l.msgs[:n])
		l.msgs = l.msgs[n:]
		l.first += int64(n)
	}
	l.last = now
	for s := range l.subs {
		s.q.push(m)
	}
	return nil
}

// sweep drops the logs of turns quiet for longer than the retention and
// without subscribers; it runs at most once a second. b.mu is held.
func (b *InProcess) sweep(now time.Time) {
	if now.Sub(b.lastSweep) < time.Second {
		return
	}
	b.lastSweep = now
	cut := now.Add(-b.retention())
	for k, l := range b.turns {
		if len(l.subs) == 0 && l.last.Before(cut) {
			delete(b.turns, k)
		}
	}
}

// Flush is a no-op: published messages are already queued for subscribers.
func (b *InProcess) Flush(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	return nil
}

// Stop fires the turn's stop watches in this process.
func (b *InProcess) Stop(_ context.Context, session, turn string) error {
	if err := checkTurn(session, turn); err != nil {
		return err
	}
	b.stops.stop(session, turn)
	return nil
}

// WatchStop watches for a stop of the turn in this process.
func (b *InProcess) WatchStop(session, turn string) (<-chan struct{}, func()) {
	return b.stops.watch(session, turn)
}

// Subscribe queues the turn's retained messages and registers for new ones.
func (b *InProcess) Subscribe(_ context.Context, session, turn string) (Subscription, error) {
	if err := checkTurn(session, turn); err != nil {
		return nil, err
	}
	k := turnKey{session, turn}
	s := &inProcessSub{bus: b, key: k, q: newQueue()}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		s.q.close()
		return nil, ErrClosed
	}
	now := b.clock()
	b.sweep(now)
	l := b.turns[k]
	if l == nil {
		l = &turnLog{first: 1, subs: map[*inProcessSub]struct{}{}, last: now}
		b.turns[k] = l
	}
	for _, m := range l.msgs {
		s.q.push(m)
	}
	l.subs[s] = struct{}{}
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
	turns := b.turns
	b.turns = nil
	b.mu.Unlock()
	for _, l := range turns {
		for s := range l.subs {
			s.q.close()
		}
	}
	return nil
}

func (b *InProcess) remove(s *inProcessSub) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if l := b.turns[s.key]; l != nil {
		delete(l.subs, s)
		if len(l.subs) == 0 {
			// The log is kept for late consumers until it is swept.
			l.last = b.clock()
		}
	}
}

type inProcessSub struct {
	bus *InProcess
	key turnKey
	q   *queue
}

func (s *inProcessSub) C() <-chan Message { return s.q.out }

func (s *inProcessSub) Close() error {
	s.bus.remove(s)
	s.q.close()
	return nil
}
