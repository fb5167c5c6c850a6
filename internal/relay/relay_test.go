package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/relay"
)

type sub struct{ c chan feed.Message }

func (s sub) C() <-chan feed.Message { return s.c }
func (s sub) Close() error           { return nil }

func ev(e agent.Event) *agent.Event { return &e }

func run(t *testing.T, msgs []feed.Message, term relay.Terminal, grace time.Duration) []agent.Event {
	t.Helper()
	s := sub{c: make(chan feed.Message, len(msgs))}
	for _, m := range msgs {
		s.c <- m
	}
	out := make(chan relay.Terminal, 1)
	// The outcome arrives after the feed delivered the turn's messages, as
	// it does for a live turn.
	go func() {
		for len(s.c) > 0 {
			time.Sleep(time.Millisecond)
		}
		out <- term
	}()
	var got []agent.Event
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !relay.Run(ctx, s, "t1", out, grace, func(e agent.Event) bool { got = append(got, e); return true }) {
		t.Fatal("relay did not finish")
	}
	return got
}

func types(evs []agent.Event) []string {
	var out []string
	for _, e := range evs {
		s := e.Type
		if e.Delta != "" {
			s += ":" + e.Delta
		}
		out = append(out, s)
	}
	return out
}

func TestRelaySynthesizesRetryingAfterPartialText(t *testing.T) {
	t.Parallel()
	msgs := []feed.Message{
		{Turn: "t1", Kind: feed.KindAttempt, Step: 1, Attempt: 1, MaxAttempts: 6},
		{Turn: "t1", Kind: feed.KindEvent, Step: 1, Attempt: 1, Event: ev(agent.Text("part"))},
		{Turn: "other", Kind: feed.KindEvent, Step: 1, Attempt: 1, Event: ev(agent.Text("not mine"))},
		{Turn: "t1", Kind: feed.KindAttempt, Step: 1, Attempt: 2, MaxAttempts: 6},
		{Turn: "t1", Kind: feed.KindEvent, Step: 1, Attempt: 1, Event: ev(agent.Text("late"))}, // superseded attempt
		{Turn: "t1", Kind: feed.KindEvent, Step: 1, Attempt: 2, Event: ev(agent.Text("whole"))},
		{Turn: "t1", Kind: feed.KindEnd, Marker: "t1/m1"},
	}
	got := types(run(t, msgs, relay.Terminal{Event: agent.Completed(nil), Marker: "t1/m1"}, time.Second))
	want := []string{"text:part", "retrying", "text:whole", "completed"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

func TestRelayNoRetryingWithoutPartialText(t *testing.T) {
	t.Parallel()
	msgs := []feed.Message{
		{Turn: "t1", Kind: feed.KindAttempt, Step: 1, Attempt: 1},
		{Turn: "t1", Kind: feed.KindAttempt, Step: 1, Attempt: 2},
		{Turn: "t1", Kind: feed.KindEvent, Step: 1, Attempt: 2, Event: ev(agent.Text("ok"))},
		{Turn: "t1", Kind: feed.KindEnd, Marker: "m"},
	}
	got := types(run(t, msgs, relay.Terminal{Event: agent.Completed(nil), Marker: "m"}, time.Second))
	if len(got) != 2 || got[0] != "text:ok" {
		t.Fatalf("got %v", got)
	}
}

func TestRelayDedupesToolEventsAndAnnouncedRetries(t *testing.T) {
	t.Parallel()
	retry := agent.Event{Type: agent.TypeRetrying, Attempt: 2, MaxAttempts: 6, Reason: "429"}
	msgs := []feed.Message{
		{Turn: "t1", Kind: feed.KindAttempt, Step: 1, Attempt: 1},
		{Turn: "t1", Kind: feed.KindEvent, Step: 1, Attempt: 1, Event: ev(agent.Text("a"))},
		{Turn: "t1", Kind: feed.KindEvent, Step: 1, Attempt: 1, Event: &retry},
		{Turn: "t1", Kind: feed.KindAttempt, Step: 1, Attempt: 2}, // already announced: no second retrying
		{Turn: "t1", Kind: feed.KindEvent, Step: 1, Event: ev(agent.ToolStarted("c", "bash", nil))},
		{Turn: "t1", Kind: feed.KindEvent, Step: 1, Event: ev(agent.ToolStarted("c", "bash", nil))},
		{Turn: "t1", Kind: feed.KindEvent, Step: 1, Event: ev(agent.ToolEnded("c", false, "x"))},
		{Turn: "t1", Kind: feed.KindEvent, Step: 1, Event: ev(agent.ToolEnded("c", false, "x"))},
		{Turn: "t1", Kind: feed.KindEvent, Step: 1, Event: ev(agent.Completed(nil))}, // terminals only come from the outcome
		{Turn: "t1", Kind: feed.KindEnd, Marker: "m"},
	}
	got := types(run(t, msgs, relay.Terminal{Event: agent.Failed("x", false, ""), Marker: "m"}, time.Second))
	want := []string{"text:a", "retrying", "tool_started", "tool_ended", "failed"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

func TestRelayLostMarkerStillEndsWithTerminal(t *testing.T) {
	t.Parallel()
	msgs := []feed.Message{{Turn: "t1", Kind: feed.KindEvent, Step: 1, Attempt: 1, Event: ev(agent.Text("a"))}}
	start := time.Now()
	got := run(t, msgs, relay.Terminal{Event: agent.Completed(nil), Marker: "never"}, 200*time.Millisecond)
	if len(got) != 2 || got[1].Type != agent.TypeCompleted {
		t.Fatalf("got %v", types(got))
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("terminal after %s: the relay should wait for the marker up to the grace", d)
	}
}

func TestRelayConsumerStop(t *testing.T) {
	t.Parallel()
	s := sub{c: make(chan feed.Message, 1)}
	s.c <- feed.Message{Turn: "t1", Kind: feed.KindEvent, Event: ev(agent.Text("a"))}
	out := make(chan relay.Terminal)
	if relay.Run(context.Background(), s, "t1", out, time.Second, func(agent.Event) bool { return false }) {
		t.Fatal("Run should report that the consumer stopped")
	}
}
