package channels_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/channels"
)

// identity fails its first fails lookups, then is known; a lookup in
// progress while the resolver stops returns the context's error.
type identity struct {
	fails   int32
	lookups atomic.Int32
	known   chan struct{}
	running atomic.Int32
}

func (id *identity) Lookup(ctx context.Context) error {
	id.running.Add(1)
	defer id.running.Add(-1)
	if n := id.lookups.Add(1); n <= id.fails {
		return errors.New("platform down")
	}
	select {
	case <-id.known:
	default:
		close(id.known)
	}
	return ctx.Err()
}

// An identity added before Start is looked up from Start, retried until
// known; one added after Close is never looked up, and Close waits for
// the lookups: none runs once it returned.
func TestResolver(t *testing.T) {
	t.Parallel()
	r := &channels.Resolver{First: time.Millisecond, Every: 4 * time.Millisecond}
	flaky := &identity{fails: 3, known: make(chan struct{})}
	down := &identity{fails: 1 << 30, known: make(chan struct{})}
	r.Add(flaky, nil, down)
	if n := flaky.lookups.Load(); n != 0 {
		t.Fatalf("%d lookups before Start", n)
	}
	r.Start(context.Background())
	select {
	case <-flaky.known:
	case <-time.After(10 * time.Second): // a guard only
		t.Fatal("the identity failing three times was never resolved")
	}
	r.Close()
	seen := down.lookups.Load()
	if seen == 0 {
		t.Error("the identity that stays unknown was never looked up")
	}
	if n := down.running.Load(); n != 0 {
		t.Errorf("%d lookups still running after Close", n)
	}
	late := &identity{known: make(chan struct{})}
	r.Add(late)
	r.Start(context.Background())
	r.Close()
	if n := late.lookups.Load(); n != 0 {
		t.Errorf("an identity added after Close was looked up %d times", n)
	}
	if n := down.lookups.Load(); n != seen {
		t.Errorf("lookups went on after Close: %d, then %d", seen, n)
	}
}

// The resolver stops when its context ends, as it does on Close.
func TestResolverStopsWithItsContext(t *testing.T) {
	t.Parallel()
	r := &channels.Resolver{First: time.Millisecond}
	down := &identity{fails: 1 << 30, known: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	r.Add(down)
	r.Start(ctx)
	cancel()
	done := make(chan struct{})
	go func() { r.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second): // a guard only
		t.Fatal("Close did not return after the context ended")
	}
}
