package feed

import "sync"

// queue is a subscription's unbounded buffer: push never blocks, and one
// goroutine moves the buffered messages to the channel in order.
type queue struct {
	out  chan Message
	stop chan struct{} // closed by close to abandon a pending send
	done chan struct{} // closed when the pump goroutine has exited

	mu      sync.Mutex
	cond    *sync.Cond
	pending []Message
	closed  bool
}

func newQueue() *queue {
	q := &queue{
		out:  make(chan Message),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	q.cond = sync.NewCond(&q.mu)
	go q.pump()
	return q
}

// push appends m; it is a no-op after close.
func (q *queue) push(m Message) {
	q.mu.Lock()
	if !q.closed {
		q.pending = append(q.pending, m)
		q.cond.Signal()
	}
	q.mu.Unlock()
}

func (q *queue) pump() {
	defer close(q.done)
	defer close(q.out)
	var batch []Message
	for {
		q.mu.Lock()
		for len(q.pending) == 0 && !q.closed {
			q.cond.Wait()
		}
		if q.closed {
			q.mu.Unlock()
			return
		}
		// Swap buffers so publishers append to a fresh slice while the
		// batch is delivered without holding the lock.
		batch, q.pending = q.pending, batch[:0]
		q.mu.Unlock()
		for i := range batch {
			select {
			case q.out <- batch[i]:
				batch[i] = Message{}
			case <-q.stop:
				return
			}
		}
	}
}

// close stops the pump, closes out and waits for the pump to exit. It is
// safe to call more than once.
func (q *queue) close() {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		<-q.done
		return
	}
	q.closed = true
	q.pending = nil
	q.cond.Broadcast()
	q.mu.Unlock()
	close(q.stop)
	<-q.done
}
