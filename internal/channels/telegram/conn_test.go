package telegram

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/testsupport/faketelegram"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
	"github.com/fastagent/fastagent/internal/wire"
)

// TestPollingConn: the connector deletes the webhook, is ready after the
// first poll, hands updates, retries a failed hand-off with the same
// updates, and returns when its context ends.
func TestPollingConn(t *testing.T) {
	t.Parallel()
	fake := faketelegram.New(testToken)
	t.Cleanup(fake.Close)
	api := NewAPI(fake.URL, testToken)
	door := &Door{Policy: wire.ChatPolicy{GroupMode: wire.GroupMentions}, Bot: NewBot("", api)}
	c := &Conn{Door: door, API: api, PollTimeout: time.Second, Backoff: 50 * time.Millisecond}
	var mu sync.Mutex
	var got []string
	failOnce := true
	hand := func(_ context.Context, p channels.Parsed) error {
		mu.Lock()
		defer mu.Unlock()
		if failOnce {
			failOnce = false
			return context.DeadlineExceeded
		}
		for _, m := range p.Messages {
			got = append(got, m.Event+":"+m.Text)
		}
		return nil
	}
	ready := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, hand, func() { close(ready) }) }()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("never ready")
	}
	fake.Push(fixture(t, "private.json"))
	fake.Push(fixture(t, "group_chatter.json")) // un-summoned in mentions mode: dropped
	wait.For(t, 10*time.Second, "a message handed off", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) > 0
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != "815000101:what is the capital of France?" {
		t.Errorf("handed %q", got)
	}
	if len(fake.Calls("deleteWebhook")) != 1 || len(fake.Calls("getMe")) != 1 {
		t.Errorf("calls %+v", fake.Calls(""))
	}
}

// TestPacer: a Retry-After longer than the backoff is waited once (at
// most a minute), then the backoff again; a shorter one changes nothing.
func TestPacer(t *testing.T) {
	t.Parallel()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		retryAfter, want time.Duration
	}{
		{0, 2 * time.Second},
		{time.Second, 2 * time.Second},
		{5 * time.Second, 5 * time.Second},
		{2 * time.Hour, time.Minute},
	}
	for _, c := range cases {
		p := &pacer{backoff: 2 * time.Second, pause: 2 * time.Second}
		p.retryAfter(c.retryAfter)
		if p.pause != c.want {
			t.Errorf("retryAfter(%s): pause %s, want %s", c.retryAfter, p.pause, c.want)
		}
		if p.wait(cancelled) {
			t.Errorf("wait on an ended context = true, want false")
		}
		if p.pause != p.backoff {
			t.Errorf("after a wait: pause %s, want the backoff %s", p.pause, p.backoff)
		}
	}
}

// TestNextOffset: the offset moves past the highest update of a batch,
// never back.
func TestNextOffset(t *testing.T) {
	t.Parallel()
	ups := func(ids ...int64) []Update {
		var out []Update
		for _, id := range ids {
			out = append(out, Update{UpdateID: id})
		}
		return out
	}
	for _, c := range []struct {
		offset int64
		ups    []Update
		want   int64
	}{
		{0, ups(5, 3, 9), 10},
		{12, ups(5), 12},
		{7, nil, 7},
		{7, ups(7), 8},
	} {
		if got := nextOffset(c.offset, c.ups); got != c.want {
			t.Errorf("nextOffset(%d, %+v) = %d, want %d", c.offset, c.ups, got, c.want)
		}
	}
}
