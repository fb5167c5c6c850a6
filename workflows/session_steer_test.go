package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// TestSessionSteer: a steering message reaches the next model call as a user
// entry with source "steer".
func TestSessionSteer(t *testing.T) {
	t.Parallel()

	t.Run("during a tool call", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		gate := make(chan struct{})
		h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
			if call.Step == 1 {
				return reply(call, known("c1", "bash")), nil
			}
			return reply(call), nil
		}
		h.tool = func(_ context.Context, call agentloop.ToolCall) (agentloop.ToolOutcome, error) {
			if err := waitGate(gate); err != nil {
				return agentloop.ToolOutcome{}, err
			}
			return okTool(call), nil
		}
		u := h.turn(ms, "t1", "do it in bash")
		st := &update{then: func() { close(gate) }}
		h.when(func() bool { return h.toolStarted("c1") }, func() {
			h.sendNow(st, workflows.UpdateSteer, "steer-1", workflows.SteerRequest{Text: "use python instead"})
		})
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()

		h.requireOK(st, "steer")
		out := h.outcome(u)
		requireOutcome(t, out, "t1", agent.TypeCompleted, "", false)
		equal(t, "outcome.Steps", out.Steps, 2)
		models := h.modelCalls()
		if len(models) != 2 {
			t.Fatalf("model called %d times, want 2", len(models))
		}
		result := h.toolCallsFor("c1")[0].ResultEntryID
		m2 := models[1]
		equal(t, "step2.Leaf", m2.Leaf, result)
		if len(m2.Prepend) != 1 || m2.Prepend[0].Message == nil {
			t.Fatalf("step2.Prepend = %+v, want one steering entry", m2.Prepend)
		}
		e := m2.Prepend[0]
		equal(t, "steer.ParentID", e.ParentID, result)
		equal(t, "steer.Role", e.Message.Role, transcript.RoleUser)
		equal(t, "steer.Text", e.Message.Text, "use python instead")
		equal(t, "steer.Source", e.Message.Source, "steer")
		if e.ID == m2.EntryID || e.ID == result {
			t.Errorf("steer entry ID %q is not fresh", e.ID)
		}
	})

	t.Run("during a model step that may end the turn is refused as too late", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		gate := make(chan struct{})
		h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
			if call.Step == 1 {
				if err := waitGate(gate); err != nil {
					return agentloop.ModelResult{}, err
				}
			}
			return reply(call), nil
		}
		u := h.turn(ms, "t1", "tell me a joke")
		st := &update{}
		h.when(func() bool { return h.modelStarted("t1", 1) }, func() {
			h.sendNow(st, workflows.UpdateSteer, "steer-1", workflows.SteerRequest{Text: "make it short"})
		})
		h.when(st.finished, func() { close(gate) })
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()

		app := h.requireRejected(st, agent.CodeNoActiveRun)
		var why string
		if !app.HasDetails() || app.Details(&why) != nil || why != workflows.RefusedSteerLate {
			t.Errorf("steer refused with %v (details %q), want the detail %q", app, why, workflows.RefusedSteerLate)
		}
		out := h.outcome(u)
		requireOutcome(t, out, "t1", agent.TypeCompleted, "", false)
		equal(t, "outcome.Steps", out.Steps, 1)
		equal(t, "model calls", len(h.modelCalls()), 1)
	})

	t.Run("runs as a follow-up turn when the turn fails", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		gate := make(chan struct{})
		h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
			res := reply(call)
			if call.Turn == "t1" {
				res = reply(call, known("c1", "bash"))
			}
			res.Settings = agentloop.Settings{MaxSteps: 1}
			return res, nil
		}
		h.tool = func(_ context.Context, call agentloop.ToolCall) (agentloop.ToolOutcome, error) {
			if err := waitGate(gate); err != nil {
				return agentloop.ToolOutcome{}, err
			}
			return okTool(call), nil
		}
		u1 := h.turn(ms, "t1", "first")
		st := &update{then: func() { close(gate) }}
		h.when(func() bool { return h.toolStarted("c1") }, func() {
			h.sendNow(st, workflows.UpdateSteer, "steer-1", workflows.SteerRequest{Text: "late steer"})
		})
		u2 := h.turn(time.Hour, "t2", "second")
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()

		h.requireOK(st, "steer")
		out1 := h.outcome(u1)
		requireOutcome(t, out1, "t1", agent.TypeFailed, agent.CodeMaxSteps, false)
		requireOutcome(t, h.outcome(u2), "t2", agent.TypeCompleted, "", false)
		models := h.modelCalls()
		if len(models) != 3 {
			t.Fatalf("model called %d times, want 3 (t1, the steering follow-up, t2)", len(models))
		}
		if p, _ := h.userEntry(models[1]); p.Message == nil || p.Message.Text != "late steer" || p.Message.Source != "steer" || models[1].Turn != "@steer:t1" || len(models[1].Prepend) != 0 {
			t.Errorf("follow-up turn %s user entry = %+v, want the accepted steering message", models[1].Turn, p)
		}
		if p, _ := h.userEntry(models[2]); p.Message == nil || p.Message.Text != "second" || len(models[2].Prepend) != 0 {
			t.Errorf("t2 user entry = %+v, want %q", p, "second")
		}
	})

	t.Run("no running turn is rejected", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		before := h.send(ms, workflows.UpdateSteer, "steer-1", workflows.SteerRequest{Text: "hello?"})
		u := h.turn(2*ms, "t1", "hi")
		after := h.send(time.Hour, workflows.UpdateSteer, "steer-2", workflows.SteerRequest{Text: "too late"})
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		h.requireRejected(before, agent.CodeNoActiveRun)
		h.requireRejected(after, agent.CodeNoActiveRun)
		requireOutcome(t, h.outcome(u), "t1", agent.TypeCompleted, "", false)
		equal(t, "model calls", len(h.modelCalls()), 1)
	})

	t.Run("empty text is rejected", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		gate := make(chan struct{})
		h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
			if err := waitGate(gate); err != nil {
				return agentloop.ModelResult{}, err
			}
			return reply(call), nil
		}
		u := h.turn(ms, "t1", "hi")
		st := &update{}
		h.when(func() bool { return h.modelStarted("t1", 1) }, func() {
			h.sendNow(st, workflows.UpdateSteer, "steer-1", workflows.SteerRequest{Text: "   "})
		})
		h.when(st.finished, func() { close(gate) })
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		h.requireRejected(st, agent.CodeInvalidCommand)
		requireOutcome(t, h.outcome(u), "t1", agent.TypeCompleted, "", false)
		equal(t, "model calls", len(h.modelCalls()), 1)
	})
}

// A steering message that arrives during the last allowed step does not turn
// a finished answer into max_steps: it is refused as too late (its sender
// sends it as a turn of its own), and the answer stays completed.
func TestSessionSteerAtLastStepIsRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	gate := make(chan struct{})
	h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		res := reply(call)
		res.Settings = agentloop.Settings{MaxSteps: 1}
		if call.Turn == "t1" {
			if err := waitGate(gate); err != nil {
				return agentloop.ModelResult{}, err
			}
		}
		return res, nil
	}
	u1 := h.turn(ms, "t1", "first")
	st := &update{}
	h.when(func() bool { return h.modelStarted("t1", 1) }, func() {
		h.sendNow(st, workflows.UpdateSteer, "steer-1", workflows.SteerRequest{Text: "one more thing"})
	})
	h.when(st.finished, func() { close(gate) })
	h.at(time.Hour, func() { h.env.CancelWorkflow() })
	h.run(workflows.SessionInput{Session: "s1", Snapshot: &workflows.Snapshot{Opened: true, IDPrefix: "p",
		Loop: agentloop.State{Settings: agentloop.Settings{MaxSteps: 1}}}})
	h.requireRejected(st, agent.CodeNoActiveRun)
	requireOutcome(t, h.outcome(u1), "t1", agent.TypeCompleted, "", false)
	if models := h.modelCalls(); len(models) != 1 {
		t.Fatalf("model calls = %+v, want t1's only", models)
	}
}
