package feed

import (
	"errors"
	"sync"
	"time"
)

// ErrStopped is the cause of a context that WatchStop cancelled: the
// workflow aborted the turn (or stopped its live reply), so the activity
// running for it must stop now.
var ErrStopped = errors.New("feed: the turn was stopped")

// StopMemory is how long a bus remembers a stop notice, so that an
// activity of the turn that starts (or registers its watch) just after
// the notice still stops at once.
const StopMemory = 10 * time.Minute

// maxRemembered bounds the remembered notices; the oldest go first.
const maxRemembered = 10_000

// stopBoard is a bus's side of stop notices: the running watches by turn,
// and the turns stopped recently. Both buses use it; they differ only in
// how a notice travels (a call in process, a core NATS subject between
// processes).
type stopBoard struct {
	mu      sync.Mutex
	watches map[turnKey]map[*stopWatch]struct{}
	stopped map[turnKey]time.Time
	order   []turnKey // stopped, oldest first
	now     func() time.Time
}

type stopWatch struct {
	c    chan struct{}
	once sync.Once
}

func (w *stopWatch) fire() { w.once.Do(func() { close(w.c) }) }

func (b *stopBoard) clock() time.Time {
	if b.now != nil {
		return b.now()
	}
	return time.Now()
}

// watch returns a channel closed when a stop for the turn arrives (at once
// if one arrived within StopMemory), and the function that releases it.
func (b *stopBoard) watch(session, turn string) (<-chan struct{}, func()) {
	k := turnKey{session, turn}
	w := &stopWatch{c: make(chan struct{})}
	b.mu.Lock()
	defer b.mu.Unlock()
	if at, ok := b.stopped[k]; ok && b.clock().Sub(at) < StopMemory {
		w.fire()
		return w.c, func() {}
	}
	if b.watches == nil {
		b.watches = make(map[turnKey]map[*stopWatch]struct{})
	}
	if b.watches[k] == nil {
		b.watches[k] = make(map[*stopWatch]struct{})
	}
	b.watches[k][w] = struct{}{}
	return w.c, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.watches[k], w)
		if len(b.watches[k]) == 0 {
			delete(b.watches, k)
		}
	}
}

// stop fires the turn's watches and remembers the notice for later ones.
func (b *stopBoard) stop(session, turn string) {
	k := turnKey{session, turn}
	b.mu.Lock()
	defer b.mu.Unlock()
	for w := range b.watches[k] {
		w.fire()
	}
	delete(b.watches, k)
	if b.stopped == nil {
		b.stopped = make(map[turnKey]time.Time)
	}
	now := b.clock()
	if _, seen := b.stopped[k]; !seen {
		b.order = append(b.order, k)
	}
	b.stopped[k] = now
	// Forget notices past their memory, and the oldest beyond the bound.
	for len(b.order) > 0 {
		first := b.order[0]
		if len(b.order) <= maxRemembered && now.Sub(b.stopped[first]) < StopMemory {
			break
		}
		delete(b.stopped, first)
		b.order = b.order[1:]
	}
}
