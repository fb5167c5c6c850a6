package workflows_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// TestSessionAbort: stopping the running turn (in the model, in a tool,
// waiting for approval), dropping a queued one, and the validator's refusals.
func TestSessionAbort(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct{ reason, want string }{
		{"user pressed stop", "user pressed stop"},
		{"", "the turn was aborted by the caller"},
	} {
		t.Run("running model, reason "+fmt.Sprintf("%q", tt.reason), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.model = func(ctx context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
				if call.Turn == "t1" {
					return agentloop.ModelResult{}, h.blockUntilCancelled(ctx)
				}
				return reply(call), nil
			}
			u := h.turn(ms, "t1", "write a novel")
			ab := &update{}
			h.when(func() bool { return h.modelStarted("t1", 1) }, func() {
				h.sendNow(ab, workflows.UpdateAbort, "abort-1", workflows.AbortRequest{Reason: tt.reason})
			})
			var view workflows.SessionView
			h.at(time.Hour, func() { view = h.state() })
			u2 := h.turn(2*time.Hour, "t2", "something else")
			h.run(workflows.SessionInput{Session: "s1"})
			h.requireCancelled()

			equal(t, "abort.Turn", h.abortResult(ab).Turn, "t1")
			out := h.outcome(u)
			requireOutcome(t, out, "t1", agent.TypeFailed, agent.CodeAborted, false)
			equal(t, "outcome.Details", out.Details, tt.want)
			equalSlice(t, "cancelled activities", h.cancelledTypes(), []string{workflows.ActivityModelGenerate})
			equal(t, "view.Running", view.Running, "")
			equal(t, "view.Leaf (an aborted model step moves nothing)", view.Leaf, "leaf-0")

			// The session goes on: the next turn hangs below the old leaf.
			requireOutcome(t, h.outcome(u2), "t2", agent.TypeCompleted, "", false)
			models := h.modelCalls()
			if len(models) != 2 {
				t.Fatalf("model called %d times, want 2", len(models))
			}
			user, ok := h.userEntry(models[1])
			if !ok {
				t.Fatalf("t2's model call hangs below %q, not below its user entry", models[1].Leaf)
			}
			equal(t, "t2 user.ParentID", user.ParentID, "leaf-0")
		})
	}

	t.Run("running tool in a sequential batch", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
			c1 := known("c1", "bash")
			c1.Sequential = true
			return reply(call, c1, known("c2", "write")), nil
		}
		h.tool = func(ctx context.Context, call agentloop.ToolCall) (agentloop.ToolOutcome, error) {
			if call.Synthetic == nil {
				return agentloop.ToolOutcome{}, h.blockUntilCancelled(ctx)
			}
			return okTool(call), nil
		}
		u := h.turn(ms, "t1", "build it")
		h.when(func() bool { return h.toolStarted("c1") }, func() {
			h.sendNow(&update{}, workflows.UpdateAbort, "abort-1", workflows.AbortRequest{Turn: "t1", Reason: "stop now"})
		})
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()

		out := h.outcome(u)
		requireOutcome(t, out, "t1", agent.TypeFailed, agent.CodeAborted, false)
		equal(t, "outcome.Details", out.Details, "stop now")
		equal(t, "outcome.Steps", out.Steps, 1)
		equal(t, "model calls", len(h.modelCalls()), 1)
		equalSlice(t, "cancelled activities", h.cancelledTypes(), []string{workflows.ActivityToolExecute})
		// Every call of the batch gets a stored result; c2 never runs.
		c1, c2 := h.toolCallsFor("c1"), h.toolCallsFor("c2")
		if len(c1) != 2 || c1[0].Synthetic != nil || c1[1].Synthetic == nil {
			t.Fatalf("c1 calls = %+v, want a run then a recorded result", c1)
		}
		if len(c2) != 1 || c2[0].Synthetic == nil {
			t.Fatalf("c2 calls = %+v, want one recorded result", c2)
		}
		for _, c := range []agentloop.ToolCall{c1[1], c2[0]} {
			equal(t, c.Call.ID+".Synthetic.Content", c.Synthetic.Content, "Tool call interrupted: stop now.")
			equal(t, c.Call.ID+".Synthetic.IsError", c.Synthetic.IsError, true)
		}
		equal(t, "c1 record ResultEntryID", c1[1].ResultEntryID, c1[0].ResultEntryID)
	})

	t.Run("running tool in a parallel batch", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
			return reply(call, known("c1", "bash"), known("c2", "read")), nil
		}
		c1Running := make(chan struct{})
		h.tool = func(ctx context.Context, call agentloop.ToolCall) (agentloop.ToolOutcome, error) {
			switch {
			case call.Call.ID == "c1" && call.Synthetic == nil:
				close(c1Running)
				return agentloop.ToolOutcome{}, h.blockUntilCancelled(ctx)
			case call.Call.ID == "c2":
				if err := waitGate(c1Running); err != nil {
					return agentloop.ToolOutcome{}, err
				}
			}
			return okTool(call), nil
		}
		u := h.turn(ms, "t1", "build it")
		var logAtOutcome []string
		u.then = func() { logAtOutcome = h.eventLog() }
		ab := &update{}
		// Abort once the workflow has c2's result (the listener runs on the
		// test environment's main loop) while c1 is running.
		sent := false
		h.env.SetOnActivityCompletedListener(func(info *activity.Info, _ converter.EncodedValue, _ error) {
			if !sent && info.ActivityType.Name == workflows.ActivityToolExecute && len(h.toolCallsFor("c2")) == 1 {
				sent = true
				h.sendNow(ab, workflows.UpdateAbort, "abort-1", workflows.AbortRequest{Reason: "stop now"})
			}
		})
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()

		equal(t, "abort.Turn", h.abortResult(ab).Turn, "t1")
		out := h.outcome(u)
		requireOutcome(t, out, "t1", agent.TypeFailed, agent.CodeAborted, false)
		equal(t, "outcome.Details", out.Details, "stop now")
		equal(t, "model calls", len(h.modelCalls()), 1)
		c1, c2 := h.toolCallsFor("c1"), h.toolCallsFor("c2")
		if len(c2) != 1 || c2[0].Synthetic != nil {
			t.Errorf("c2 calls = %+v, want one real run", c2)
		}
		if len(c1) != 2 || c1[0].Synthetic != nil || c1[1].Synthetic == nil {
			t.Fatalf("c1 calls = %+v, want a run then a recorded result", c1)
		}
		equal(t, "c1.Synthetic.Content", c1[1].Synthetic.Content, "Tool call interrupted: stop now.")
		equalSlice(t, "cancelled activities", h.cancelledTypes(), []string{workflows.ActivityToolExecute})
		// The turn ends only once every result of the batch is stored.
		if !strings.Contains(strings.Join(logAtOutcome, "|"), "end record c1") {
			t.Errorf("events when the outcome arrived = %v, want c1's interrupted result recorded first", logAtOutcome)
		}
	})

	t.Run("waiting for approval", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
			c1 := known("c1", "deploy")
			c1.RequiresApproval = true
			return reply(call, c1), nil
		}
		u := h.turn(ms, "t1", "ship it")
		h.send(time.Minute, workflows.UpdateAbort, "abort-1", workflows.AbortRequest{Reason: "changed my mind"})
		var view workflows.SessionView
		h.at(time.Hour, func() { view = h.state() })
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()

		out := h.outcome(u)
		requireOutcome(t, out, "t1", agent.TypeFailed, agent.CodeAborted, false)
		equal(t, "outcome.Details", out.Details, "changed my mind")
		c1 := h.toolCallsFor("c1")
		if len(c1) != 1 || c1[0].Synthetic == nil {
			t.Fatalf("c1 calls = %+v, want only a recorded result", c1)
		}
		equal(t, "c1.Synthetic.Content", c1[0].Synthetic.Content, "Tool call interrupted: changed my mind.")
		equal(t, "len(view.Approvals)", len(view.Approvals), 0)
		equal(t, "view.Leaf", view.Leaf, c1[0].ResultEntryID)
	})

	t.Run("queued turn", func(t *testing.T) {
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
		u1 := h.turn(ms, "t1", "first")
		u2, u3, ab := &update{}, &update{}, &update{}
		h.when(func() bool { return h.modelStarted("t1", 1) }, func() {
			h.sendNow(u2, workflows.UpdateTurn, "t2", workflows.TurnRequest{Prompt: agent.Prompt{Text: "second"}})
			h.sendNow(u3, workflows.UpdateTurn, "t3", workflows.TurnRequest{Prompt: agent.Prompt{Text: "third"}})
			h.sendNow(ab, workflows.UpdateAbort, "abort-t2", workflows.AbortRequest{Turn: "t2", Reason: "not needed"})
		})
		var view workflows.SessionView
		var t2DoneEarly bool
		h.when(ab.finished, func() {
			view = h.state()
			_, _, t2DoneEarly, _, _ = u2.snapshot()
			close(gate)
		})
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()

		equal(t, "abort.Turn", h.abortResult(ab).Turn, "t2")
		equal(t, "t2 completed while t1 still ran", t2DoneEarly, true)
		out2 := h.outcome(u2)
		requireOutcome(t, out2, "t2", agent.TypeFailed, agent.CodeAborted, false)
		equal(t, "t2.Details", out2.Details, "not needed")
		equal(t, "t2.Steps", out2.Steps, 0)
		equal(t, "view.Running", view.Running, "t1")
		equalSlice(t, "view.Queued", view.Queued, []string{"t3"})
		requireOutcome(t, h.outcome(u1), "t1", agent.TypeCompleted, "", false)
		requireOutcome(t, h.outcome(u3), "t3", agent.TypeCompleted, "", false)
		equalSlice(t, "prompts the model saw", h.prompts(), []string{"first", "third"})
		equal(t, "cancelled activities", len(h.cancelledTypes()), 0)
	})

	t.Run("queued only: the running turn is left, a waiting one dropped", func(t *testing.T) {
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
		u1 := h.turn(ms, "t1", "first")
		u2, ab1, ab2 := &update{}, &update{}, &update{}
		h.when(func() bool { return h.modelStarted("t1", 1) }, func() {
			h.sendNow(u2, workflows.UpdateTurn, "t2", workflows.TurnRequest{Prompt: agent.Prompt{Text: "second"}})
			h.sendNow(ab1, workflows.UpdateAbort, "drop-t1", workflows.AbortRequest{Turn: "t1", Queued: true, Reason: "deleted"})
			h.sendNow(ab2, workflows.UpdateAbort, "drop-t2", workflows.AbortRequest{Turn: "t2", Queued: true, Reason: "deleted"})
		})
		h.when(func() bool { return ab1.finished() && ab2.finished() }, func() { close(gate) })
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()

		h.requireRejected(ab1, agent.CodeNoActiveRun)
		equal(t, "abort.Turn", h.abortResult(ab2).Turn, "t2")
		requireOutcome(t, h.outcome(u1), "t1", agent.TypeCompleted, "", false)
		requireOutcome(t, h.outcome(u2), "t2", agent.TypeFailed, agent.CodeAborted, false)
		equalSlice(t, "prompts the model saw", h.prompts(), []string{"first"})
	})

	t.Run("nothing running is rejected", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		ab := h.send(ms, workflows.UpdateAbort, "abort-1", workflows.AbortRequest{})
		ab2 := h.send(2*ms, workflows.UpdateAbort, "abort-2", workflows.AbortRequest{Turn: "t-old"})
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		app := h.requireRejected(ab, agent.CodeNoActiveRun)
		equal(t, "NonRetryable", app.NonRetryable(), true)
		h.requireRejected(ab2, agent.CodeNoActiveRun)
	})

	t.Run("unknown turn is rejected, running turn unharmed", func(t *testing.T) {
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
		ab := &update{}
		h.when(func() bool { return h.modelStarted("t1", 1) }, func() {
			h.sendNow(ab, workflows.UpdateAbort, "abort-1", workflows.AbortRequest{Turn: "t-ghost"})
		})
		h.when(ab.finished, func() { close(gate) })
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		app := h.requireRejected(ab, agent.CodeNoActiveRun)
		contains(t, "rejection", app.Message(), "t-ghost")
		requireOutcome(t, h.outcome(u), "t1", agent.TypeCompleted, "", false)
	})
}
