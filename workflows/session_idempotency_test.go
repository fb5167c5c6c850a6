package workflows_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// TestSessionIdempotency: a key already answered is answered again, not run.
func TestSessionIdempotency(t *testing.T) {
	t.Parallel()
	remembered := agentloop.Outcome{Turn: "k-old", Status: agent.TypeCompleted, Steps: 3, Marker: "m-old"}
	snapshot := func() *workflows.Snapshot {
		return &workflows.Snapshot{
			Opened:   true,
			IDPrefix: "snap",
			NextID:   10,
			Loop:     agentloop.State{Leaf: "L9"},
			// Remembered now: the test environment's clock starts at the
			// wall clock, within the idempotency window.
			Recent: []workflows.RecentTurn{{Key: "k-old", Outcome: remembered, At: time.Now()}},
			Turns:  5,
		}
	}

	t.Run("same update ID after completion (test environment dedupe)", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		first := h.turn(ms, "k1", "hi")
		second := h.turn(time.Hour, "k1", "hi")
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		out1, out2 := h.outcome(first), h.outcome(second)
		requireOutcome(t, out1, "k1", agent.TypeCompleted, "", false)
		if fmt.Sprint(out1) != fmt.Sprint(out2) {
			t.Errorf("second outcome %+v, want %+v", out2, out1)
		}
		equal(t, "model calls", len(h.modelCalls()), 1)
	})

	t.Run("key remembered in Snapshot.Recent", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		old := h.turn(ms, "k-old", "hi again")
		fresh := h.turn(time.Hour, "k-new", "something new")
		var view workflows.SessionView
		h.at(2*time.Hour, func() { view = h.state() })
		h.run(workflows.SessionInput{Session: "s1", Snapshot: snapshot()})
		h.requireCancelled()

		got := h.outcome(old)
		if fmt.Sprint(got) != fmt.Sprint(remembered) {
			t.Errorf("outcome = %+v, want the remembered %+v", got, remembered)
		}
		equal(t, "Session.Open calls (snapshot is opened)", len(h.openCalls()), 0)
		requireOutcome(t, h.outcome(fresh), "k-new", agent.TypeCompleted, "", false)
		models := h.modelCalls()
		if len(models) != 1 {
			t.Fatalf("model called %d times, want 1 (only k-new)", len(models))
		}
		m := models[0]
		equal(t, "call.Turn", m.Turn, "k-new")
		user, ok := h.userEntry(m)
		if !ok {
			t.Fatalf("call.Leaf %q is not the turn's user entry", m.Leaf)
		}
		// The chain's prefix and counter carry over: the prompt is
		// p<digest> (taking number 11), the reply prefix-nonce-12.
		if !strings.HasPrefix(user.ID, wire.PromptIDPrefix) {
			t.Errorf("user.ID = %q, want p<digest>", user.ID)
		}
		equal(t, "user.ParentID", user.ParentID, "L9")
		if !strings.HasPrefix(m.EntryID, "snap-") || !strings.HasSuffix(m.EntryID, "-12") {
			t.Errorf("call.EntryID = %q, want snap-<nonce>-12", m.EntryID)
		}
		equal(t, "view.Turns", view.Turns, int64(6))
	})

	t.Run("remembered key is answered even when the queue is full", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		gate := make(chan struct{})
		h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
			if call.Turn == "t0" {
				if err := waitGate(gate); err != nil {
					return agentloop.ModelResult{}, err
				}
			}
			return reply(call), nil
		}
		h.turn(ms, "t0", "p0")
		old, busy := &update{}, &update{}
		h.when(func() bool { return h.modelStarted("t0", 1) }, func() {
			for i := 1; i <= workflows.MaxQueuedTurns; i++ {
				h.sendNow(&update{}, workflows.UpdateTurn, fmt.Sprintf("t%d", i), workflows.TurnRequest{Prompt: agent.Prompt{Text: "p"}})
			}
			h.sendNow(old, workflows.UpdateTurn, "k-old", workflows.TurnRequest{Prompt: agent.Prompt{Text: "again"}})
			h.sendNow(busy, workflows.UpdateTurn, "t-extra", workflows.TurnRequest{Prompt: agent.Prompt{Text: "one more"}})
		})
		var oldDoneEarly bool
		h.when(busy.finished, func() {
			_, _, oldDoneEarly, _, _ = old.snapshot()
			close(gate)
		})
		h.run(workflows.SessionInput{Session: "s1", Snapshot: snapshot()})
		h.requireCancelled()

		got := h.outcome(old)
		if fmt.Sprint(got) != fmt.Sprint(remembered) {
			t.Errorf("outcome = %+v, want the remembered %+v", got, remembered)
		}
		equal(t, "k-old answered while t0 still ran", oldDoneEarly, true)
		h.requireRejected(busy, agent.CodeSessionBusy)
		equal(t, "model calls", len(h.modelCalls()), 1+workflows.MaxQueuedTurns)
	})
}
