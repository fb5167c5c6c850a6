package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// TestSessionContinueAsNew: after TurnsPerRun turns, with nothing waiting,
// the run continues as new carrying its snapshot.
func TestSessionContinueAsNew(t *testing.T) {
	t.Parallel()

	canInput := func(t *testing.T, h *harness) workflows.SessionInput {
		t.Helper()
		err := h.env.GetWorkflowError()
		if !workflow.IsContinueAsNewError(err) {
			t.Fatalf("workflow error = %v, want continue-as-new", err)
		}
		var can *workflow.ContinueAsNewError
		if !errors.As(err, &can) {
			t.Fatalf("cannot unwrap %T into a ContinueAsNewError", err)
		}
		equal(t, "next run type", can.WorkflowType.Name, workflows.SessionWorkflowType)
		var in workflows.SessionInput
		if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &in); err != nil {
			t.Fatalf("decode continue-as-new input: %v", err)
		}
		if in.Snapshot == nil {
			t.Fatal("continue-as-new input has no snapshot")
		}
		return in
	}
	recentKeys := func(t *testing.T, s *workflows.Snapshot) []string {
		t.Helper()
		var keys []string
		for _, r := range s.Recent {
			keys = append(keys, r.Key)
			equal(t, r.Key+" remembered status", r.Outcome.Status, agent.TypeCompleted)
			equal(t, r.Key+" remembered turn", r.Outcome.Turn, r.Key)
		}
		return keys
	}

	t.Run("after TurnsPerRun turns", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		u1 := h.turn(ms, "t1", "one")
		u2 := h.turn(time.Hour, "t2", "two")
		h.run(workflows.SessionInput{Session: "s1", TurnsPerRun: 2})

		in := canInput(t, h)
		requireOutcome(t, h.outcome(u1), "t1", agent.TypeCompleted, "", false)
		requireOutcome(t, h.outcome(u2), "t2", agent.TypeCompleted, "", false)
		models := h.modelCalls()
		if len(models) != 2 {
			t.Fatalf("model called %d times, want 2", len(models))
		}
		equal(t, "in.Session", in.Session, "s1")
		equal(t, "in.TurnsPerRun", in.TurnsPerRun, 2)
		s := in.Snapshot
		equal(t, "snapshot.Opened", s.Opened, true)
		equal(t, "snapshot.Loop.Leaf", s.Loop.Leaf, models[1].EntryID)
		equal(t, "snapshot.NextID", s.NextID, int64(4))
		equal(t, "snapshot.IDPrefix", s.IDPrefix, h.openCalls()[0].IDPrefix)
		equal(t, "snapshot.Turns", s.Turns, int64(2))
		equalSlice(t, "snapshot.Recent keys", recentKeys(t, s), []string{"t1", "t2"})
		// The run drained deliveries on demand (drain-deliveries) and
		// tells the next one, which then asks GetVersion no more.
		equal(t, "snapshot.DrainOnDemand", s.DrainOnDemand, true)
	})

	t.Run("not while turns wait", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		gate := make(chan struct{})
		h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
			if call.Turn == "t1" {
				if err := waitGate(gate); err != nil {
					return agentloop.ModelResult{}, err
				}
			}
			return reply(call), nil
		}
		us := []*update{h.turn(ms, "t1", "one"), {}, {}}
		h.when(func() bool { return h.modelStarted("t1", 1) }, func() {
			h.sendNow(us[1], workflows.UpdateTurn, "t2", workflows.TurnRequest{Prompt: agent.Prompt{Text: "two"}})
			h.sendNow(us[2], workflows.UpdateTurn, "t3", workflows.TurnRequest{Prompt: agent.Prompt{Text: "three"}})
		})
		h.when(us[2].isAccepted, func() { close(gate) })
		h.run(workflows.SessionInput{Session: "s1", TurnsPerRun: 2})

		in := canInput(t, h)
		for i, u := range us {
			requireOutcome(t, h.outcome(u), fmt.Sprintf("t%d", i+1), agent.TypeCompleted, "", false)
		}
		equalSlice(t, "prompts the model saw", h.prompts(), []string{"one", "two", "three"})
		equal(t, "snapshot.Turns", in.Snapshot.Turns, int64(3))
		equal(t, "snapshot.NextID", in.Snapshot.NextID, int64(6))
		equalSlice(t, "snapshot.Recent keys", recentKeys(t, in.Snapshot), []string{"t1", "t2", "t3"})
	})

	// The step that ends a turn records it and publishes its answer before
	// the workflow hears of that step: a client that sends its next turn on
	// the answer reaches a run still running the last turn it will take.
	// That turn is refused as continuing (the caller sends it again to the
	// next run), not as busy behind waiting turns.
	t.Run("a turn sent while the run's last turn may be ending is refused as continuing", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		gates := map[string]chan struct{}{"t1": make(chan struct{}), "t2": make(chan struct{})}
		h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
			if err := waitGate(gates[call.Turn]); err != nil {
				return agentloop.ModelResult{}, err
			}
			return reply(call), nil
		}
		u1, u2, u3 := h.turn(ms, "t1", "one"), &update{}, &update{}
		// t2 comes while t1 runs, before the run is due to end: it runs.
		h.when(func() bool { return h.modelStarted("t1", 1) }, func() {
			h.sendNow(u2, workflows.UpdateTurn, "t2", workflows.TurnRequest{Prompt: agent.Prompt{Text: "two"}})
		})
		h.when(u2.isAccepted, func() { close(gates["t1"]) })
		// t3 comes during t2's last step, the run due to end after t2.
		h.when(func() bool { return h.modelStarted("t2", 1) }, func() {
			h.sendNow(u3, workflows.UpdateTurn, "t3", workflows.TurnRequest{Prompt: agent.Prompt{Text: "three"}})
		})
		h.when(u3.finished, func() { close(gates["t2"]) })
		h.run(workflows.SessionInput{Session: "s1", TurnsPerRun: 1})

		in := canInput(t, h)
		requireOutcome(t, h.outcome(u1), "t1", agent.TypeCompleted, "", false)
		requireOutcome(t, h.outcome(u2), "t2", agent.TypeCompleted, "", false)
		app := h.requireRejected(u3, agent.CodeSessionBusy)
		var why string
		if !app.HasDetails() || app.Details(&why) != nil || why != workflows.RefusedContinuing {
			t.Errorf("t3 refused with %v (details %q), want the detail %q", app, why, workflows.RefusedContinuing)
		}
		equalSlice(t, "prompts the model saw", h.prompts(), []string{"one", "two"})
		equalSlice(t, "snapshot.Recent keys", recentKeys(t, in.Snapshot), []string{"t1", "t2"})
	})

	t.Run("when the server suggests it", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		h.env.SetContinueAsNewSuggested(true)
		u := h.turn(ms, "t1", "one")
		h.run(workflows.SessionInput{Session: "s1"})

		in := canInput(t, h)
		requireOutcome(t, h.outcome(u), "t1", agent.TypeCompleted, "", false)
		equal(t, "in.TurnsPerRun", in.TurnsPerRun, 0)
		equal(t, "snapshot.Turns", in.Snapshot.Turns, int64(1))
		equalSlice(t, "snapshot.Recent keys", recentKeys(t, in.Snapshot), []string{"t1"})
	})

	t.Run("Recent keeps every key of the window, the outcomes of the last 64", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		snap := &workflows.Snapshot{Opened: true, IDPrefix: "p", Loop: agentloop.State{Leaf: "L"}}
		for i := 0; i < 64; i++ {
			key := fmt.Sprintf("k%d", i)
			snap.Recent = append(snap.Recent, workflows.RecentTurn{Key: key, Outcome: agentloop.Outcome{Turn: key, Status: agent.TypeCompleted}, At: time.Now()})
		}
		h.turn(ms, "k64", "one more")
		h.run(workflows.SessionInput{Session: "s1", TurnsPerRun: 1, Snapshot: snap})

		recent := canInput(t, h).Snapshot.Recent
		if len(recent) != 65 {
			t.Fatalf("len(Recent) = %d, want 65", len(recent))
		}
		equal(t, "oldest kept", recent[0].Key, "k0")
		equal(t, "oldest's outcome dropped", recent[0].Outcome.Status, "")
		equal(t, "next's outcome kept", recent[1].Outcome.Status, agent.TypeCompleted)
		equal(t, "newest", recent[64].Key, "k64")
		if recent[0].At.IsZero() || recent[64].At.Before(recent[0].At) {
			t.Errorf("keys dated %v … %v, want dated in order", recent[0].At, recent[64].At)
		}
	})

	t.Run("carries a queued turn's abort in Recent", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		gate := make(chan struct{})
		h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
			if call.Turn == "t1" {
				if err := waitGate(gate); err != nil {
					return agentloop.ModelResult{}, err
				}
			}
			return reply(call), nil
		}
		h.turn(ms, "t1", "one")
		u2, ab := &update{}, &update{}
		h.when(func() bool { return h.modelStarted("t1", 1) }, func() {
			h.sendNow(u2, workflows.UpdateTurn, "t2", workflows.TurnRequest{Prompt: agent.Prompt{Text: "two"}})
			h.sendNow(ab, workflows.UpdateAbort, "abort-t2", workflows.AbortRequest{Turn: "t2", Reason: "not needed"})
		})
		h.when(ab.finished, func() { close(gate) })
		h.turn(time.Hour, "t3", "three")
		h.run(workflows.SessionInput{Session: "s1", TurnsPerRun: 2})

		in := canInput(t, h)
		requireOutcome(t, h.outcome(u2), "t2", agent.TypeFailed, agent.CodeAborted, false)
		var keys []string
		for _, r := range in.Snapshot.Recent {
			keys = append(keys, r.Key)
		}
		// The abort is remembered by its update ID too (a retried abort
		// does nothing more).
		equalSlice(t, "snapshot.Recent keys", keys, []string{"t2", workflows.InternalKeyPrefix + "abort:abort-t2", "t1", "t3"})
		equal(t, "remembered t2", fmt.Sprint(in.Snapshot.Recent[0].Outcome), fmt.Sprint(h.outcome(u2)))
		equal(t, "snapshot.Turns (aborted queued turns do not count)", in.Snapshot.Turns, int64(2))
	})
}

// Once continue-as-new is due, new turns are refused (session_busy) until
// the queue drains, so a busy session still rolls over.
func TestSessionRolloverRefusesNewTurns(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	gate1, gate2 := make(chan struct{}), make(chan struct{})
	h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		gate := gate1
		if call.Turn == "t2" {
			gate = gate2
		}
		if err := waitGate(gate); err != nil {
			return agentloop.ModelResult{}, err
		}
		return reply(call), nil
	}
	h.turn(ms, "t1", "one")
	t2 := &update{}
	h.when(func() bool { return h.modelStarted("t1", 1) }, func() {
		// queued behind t1; after t1 the rollover is due (TurnsPerRun 1)
		h.sendNow(t2, workflows.UpdateTurn, "t2", workflows.TurnRequest{Prompt: agent.Prompt{Text: "two"}})
		h.at(0, func() { close(gate1) })
	})
	late := &update{}
	h.when(func() bool { return h.modelStarted("t2", 1) }, func() {
		h.sendNow(late, workflows.UpdateTurn, "t3", workflows.TurnRequest{Prompt: agent.Prompt{Text: "three"}})
		h.at(0, func() { close(gate2) })
	})
	h.run(workflows.SessionInput{Session: "s1", TurnsPerRun: 1})
	requireOutcome(t, h.outcome(t2), "t2", agent.TypeCompleted, "", false)
	h.requireRejected(late, agent.CodeSessionBusy)
	if err := h.env.GetWorkflowError(); !workflow.IsContinueAsNewError(err) {
		t.Fatalf("want continue-as-new after the queue drained, got %v", err)
	}
}
