package turnusage_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/turnusage"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

type sink struct {
	mu   sync.Mutex
	got  []turnusage.Report
	seen chan struct{}
}

func newSink() *sink { return &sink{seen: make(chan struct{}, 16)} }

func (s *sink) ctx() context.Context {
	return turnusage.WithSink(context.Background(), func(r turnusage.Report) {
		s.mu.Lock()
		s.got = append(s.got, r)
		s.mu.Unlock()
		s.seen <- struct{}{}
	})
}

func (s *sink) reports() []turnusage.Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]turnusage.Report(nil), s.got...)
}

func aborted(steps int, u *agent.Usage) agentloop.Outcome {
	return agentloop.Outcome{Status: agent.TypeFailed, Code: agent.CodeAborted, Steps: steps, First: "u1", Leaf: "a1", Usage: u}
}

// An aborted turn is charged its outcome's usage and, apart (its own
// report ID), the usage its stopped model call reported on the feed —
// before Send returns when the report is already there.
func TestSendChargesStoppedCall(t *testing.T) {
	bus := feed.NewInProcess()
	t.Cleanup(func() { _ = bus.Close() })
	ctx := context.Background()
	est := agent.Usage{Input: 900, Output: 250, Calls: 1}
	_ = bus.Publish(ctx, feed.Message{Session: "s", Turn: "k", Kind: feed.KindAttempt, Step: 1, Attempt: 1})
	_ = bus.Publish(ctx, feed.Message{Session: "s", Turn: "k", Kind: feed.KindEnd, Step: 1})
	_ = bus.Publish(ctx, feed.Message{Session: "s", Turn: "k", Kind: feed.KindAttempt, Step: 2, Attempt: 1})
	_ = bus.Publish(ctx, feed.Message{Session: "s", Turn: "k", Kind: feed.KindUsage, Step: 2, Attempt: 1, Usage: &est})

	s := newSink()
	turnusage.Send(s.ctx(), bus, "s", "k", aborted(2, &agent.Usage{Input: 500, Output: 100, Calls: 1}))
	got := s.reports()
	if len(got) != 2 || got[0].Stopped || got[0].Usage.Tokens() != 600 || !got[1].Stopped || got[1].Usage != est {
		t.Fatalf("reports %+v, want the outcome's 600 tokens, then the stopped call's estimate %+v", got, est)
	}
	if got[0].ID() == got[1].ID() {
		t.Error("the stopped call's report has the outcome's ID: a sink would charge only one of them")
	}
}

// The report may come after the outcome: it is charged when it comes.
func TestSendChargesLateStoppedCall(t *testing.T) {
	bus := feed.NewInProcess()
	t.Cleanup(func() { _ = bus.Close() })
	old := turnusage.StoppedWait
	turnusage.StoppedWait = 0
	t.Cleanup(func() { turnusage.StoppedWait = old })
	s := newSink()
	turnusage.Send(s.ctx(), bus, "s", "k", aborted(1, nil))
	if got := s.reports(); len(got) != 0 {
		t.Fatalf("charged %+v before the stopped call reported", got)
	}
	est := agent.Usage{Input: 10, Output: 5, Calls: 1}
	_ = bus.Publish(context.Background(), feed.Message{Session: "s", Turn: "k", Kind: feed.KindUsage, Step: 1, Usage: &est})
	select {
	case <-s.seen:
	case <-time.After(10 * time.Second):
		t.Fatal("the late report was never charged")
	}
	if got := s.reports(); len(got) != 1 || !got[0].Stopped || got[0].Usage != est {
		t.Errorf("reports %+v, want the stopped call's %+v", got, est)
	}
}

// Nothing is waited for when no model call can have been stopped: a turn
// that was not aborted, one aborted before its first step, or one whose
// last model call ended (aborted during its tools).
func TestSendNoStoppedCall(t *testing.T) {
	bus := feed.NewInProcess()
	t.Cleanup(func() { _ = bus.Close() })
	_ = bus.Publish(context.Background(), feed.Message{Session: "s", Turn: "tools", Kind: feed.KindEnd, Step: 1})
	old := turnusage.StoppedWait
	turnusage.StoppedWait = time.Minute
	t.Cleanup(func() { turnusage.StoppedWait = old })
	completed := agentloop.Outcome{Status: agent.TypeCompleted, Steps: 1, Usage: &agent.Usage{Input: 1, Output: 1}}
	for name, tc := range map[string]struct {
		key string
		out agentloop.Outcome
	}{
		"completed":            {"done", completed},
		"aborted before steps": {"early", aborted(0, nil)},
		"aborted during tools": {"tools", aborted(1, &agent.Usage{Input: 1, Output: 1})},
	} {
		s := newSink()
		start := time.Now()
		turnusage.Send(s.ctx(), bus, "s", tc.key, tc.out)
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("%s: Send waited %v", name, took)
		}
		for _, r := range s.reports() {
			if r.Stopped {
				t.Errorf("%s: charged a stopped call: %+v", name, r)
			}
		}
	}
}

// Asked again and again about one aborted turn (a client resuming it in a
// loop), Send follows its feed once: no goroutine or subscription per
// request, and the estimate is charged once.
func TestSendFollowsARunOnce(t *testing.T) {
	bus := feed.NewInProcess()
	t.Cleanup(func() { _ = bus.Close() })
	old := turnusage.StoppedWait
	turnusage.StoppedWait = 0
	t.Cleanup(func() { turnusage.StoppedWait = old })
	s := newSink()
	before := runtime.NumGoroutine()
	for range 200 {
		turnusage.Send(s.ctx(), bus, "s", "again", aborted(1, nil))
	}
	if n := runtime.NumGoroutine() - before; n > 20 {
		t.Errorf("%d goroutines more after 200 asks about one turn, want about one follower", n)
	}
	est := agent.Usage{Input: 10, Output: 5, Calls: 1}
	_ = bus.Publish(context.Background(), feed.Message{Session: "s", Turn: "again", Kind: feed.KindUsage, Step: 1, Usage: &est})
	select {
	case <-s.seen:
	case <-time.After(10 * time.Second):
		t.Fatal("the stopped call's estimate was never charged")
	}
	if got := s.reports(); len(got) != 1 {
		t.Errorf("charged %d times, want once: %+v", len(got), got)
	}
}
