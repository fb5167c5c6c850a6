package telegram

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/testsupport/faketelegram"
	"github.com/fastagent/fastagent/workflows"
)

// TestPollingConn: the connector deletes the webhook, is ready after the
// first poll, hands updates, retries a failed hand-off with the same
// updates, and returns when its context ends.
func TestPollingConn(t *testing.T) {
	t.Parallel()
	fake := faketelegram.New(testToken)
	t.Cleanup(fake.Close)
	api := NewAPI(fake.URL, testToken)
	door := &Door{Policy: workflows.ChatPolicy{GroupMode: workflows.GroupMentions}, Bot: NewBot("", api)}
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
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, hand, func() { close(ready) }) }()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("never ready")
	}
	fake.Push(fixture(t, "private.json"))
	fake.Push(fixture(t, "group_chatter.json")) // un-summoned in mentions mode: dropped
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
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
