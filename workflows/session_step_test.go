package workflows_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
	"github.com/fastagent/fastagent/workflows/wakes"
)

// stepSettings are the settings of model workers that run Step.Run.
var stepSettings = agentloop.Settings{StepRun: true}

// toolSteps is a model fake whose first n steps each call one tool (made
// by call, for the step) and whose next step answers; every reply carries
// set.
func toolSteps(n int, set agentloop.Settings, call func(step int) agentloop.Call) func(context.Context, agentloop.ModelCall) (agentloop.ModelResult, error) {
	return func(_ context.Context, c agentloop.ModelCall) (agentloop.ModelResult, error) {
		res := reply(c)
		if c.Step <= n {
			res = reply(c, call(c.Step))
		}
		res.Settings = set
		return res, nil
	}
}

func bashCall(step int) agentloop.Call {
	return known("c"+string(rune('0'+step)), "bash")
}

// countQueue counts the entries of the harness's activity log that start
// with prefix.
func countQueue(h *harness, prefix string) int {
	n := 0
	for _, q := range h.queueLog() {
		if strings.HasPrefix(q, prefix) {
			n++
		}
	}
	return n
}

// TestStepRunEligible: a tool step whose calls need nothing from the
// workflow runs them and the next model call as one Step.Run activity —
// no Tool.Execute, one Model.Generate for the turn's first step only.
func TestStepRunEligible(t *testing.T) {
	t.Parallel()
	for _, steps := range []int{1, 3} {
		h := newHarness(t)
		h.model = toolSteps(steps, stepSettings, bashCall)
		u := h.turn(ms, "t1", "count")
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()

		out := h.outcome(u)
		requireOutcome(t, out, "t1", agent.TypeCompleted, "", false)
		equal(t, "outcome.Steps", out.Steps, steps+1)
		equal(t, "Step.Run activities", countQueue(h, workflows.ActivityStepRun), steps)
		equal(t, "Tool.Execute activities", countQueue(h, workflows.ActivityToolExecute), 0)
		equal(t, "Model.Generate activities", countQueue(h, workflows.ActivityModelGenerate), 1)
		st := h.stepCalls()
		for i, s := range st {
			if len(s.Tools) != 1 {
				t.Fatalf("step %d ran %d calls, want 1", i, len(s.Tools))
			}
			c := s.Tools[0]
			equal(t, "call.Step", c.Step, i+1)
			equal(t, "model.Step", s.Model.Step, i+2)
			equal(t, "model.Leaf (the call's result)", s.Model.Leaf, c.ResultEntryID)
			equal(t, "model.AfterTools", s.Model.AfterTools, true)
			equal(t, "model.CheckContext", s.Model.CheckContext, true)
			equal(t, "model.MaxAttempts", s.Model.MaxAttempts, 6)
			if s.Model.End == nil || s.Model.End.First == "" || s.Model.End.Started.IsZero() {
				t.Errorf("model.End = %+v, want the turn's first entry and start", s.Model.End)
			}
			if len(s.Model.Prepend) != 0 {
				t.Errorf("model.Prepend = %+v, want none", s.Model.Prepend)
			}
		}
		equal(t, "outcome.Leaf", out.Leaf, st[len(st)-1].Model.EntryID)
	}
}

// TestStepRunFallsBack: whatever needs the workflow between a step's calls
// and the next model call keeps the two activities, Tool.Execute and
// Model.Generate, as before.
func TestStepRunFallsBack(t *testing.T) {
	t.Parallel()
	withSet := func(f func(*agentloop.Settings)) agentloop.Settings {
		s := stepSettings
		f(&s)
		return s
	}
	for _, tt := range []struct {
		name string
		set  agentloop.Settings
		call func(step int) agentloop.Call
		// outcome's status and code
		status, code string
	}{
		{name: "model workers without Step.Run", set: agentloop.Settings{}, call: bashCall},
		{name: "tools on a task queue of their own", set: withSet(func(s *agentloop.Settings) { s.ToolTaskQueue = "gpu" }), call: bashCall},
		{name: "model on a task queue of its own", set: withSet(func(s *agentloop.Settings) { s.ModelTaskQueue = "llm" }), call: bashCall},
		{name: "maxSteps reached", set: withSet(func(s *agentloop.Settings) { s.MaxSteps = 1 }), call: bashCall,
			status: agent.TypeFailed, code: agent.CodeMaxSteps},
		{name: "approval required", set: stepSettings, call: func(step int) agentloop.Call {
			c := bashCall(step)
			c.RequiresApproval = true
			c.Args = []byte(`{"x":1}`)
			return c
		}},
		{name: "ask_user", set: stepSettings, call: func(step int) agentloop.Call {
			c := known("c1", "ask_user")
			c.Ask, c.Args = true, []byte(`{"question":"which?"}`)
			return c
		}},
		{name: "unknown tool", set: stepSettings, call: func(int) agentloop.Call { return agentloop.Call{ID: "c1", Name: "nope"} }},
		{name: "refused call", set: stepSettings, call: func(step int) agentloop.Call {
			c := bashCall(step)
			c.Refused = "no"
			return c
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.model = toolSteps(1, tt.set, tt.call)
			u := h.turn(ms, "t1", "count")
			h.run(workflows.SessionInput{Session: "s1"})
			h.requireCancelled()

			out := h.outcome(u)
			status := tt.status
			if status == "" {
				status = agent.TypeCompleted
			}
			requireOutcome(t, out, "t1", status, tt.code, false)
			equal(t, "Step.Run activities", countQueue(h, workflows.ActivityStepRun), 0)
			equal(t, "Tool.Execute activities", countQueue(h, workflows.ActivityToolExecute), 1)
			wantModels := 2
			if tt.code == agent.CodeMaxSteps {
				wantModels = 1
			}
			equal(t, "Model.Generate activities", countQueue(h, workflows.ActivityModelGenerate), wantModels)
		})
	}

	t.Run("turn token budget reached", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		set := withSet(func(s *agentloop.Settings) { s.Limits.TurnTokens = 10 })
		inner := toolSteps(1, set, bashCall)
		h.model = func(ctx context.Context, c agentloop.ModelCall) (agentloop.ModelResult, error) {
			res, err := inner(ctx, c)
			res.Usage = &agent.Usage{Input: 100, Output: 5, Calls: 1}
			return res, err
		}
		u := h.turn(ms, "t1", "count")
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		requireOutcome(t, h.outcome(u), "t1", agent.TypeFailed, agent.CodeLimitExceeded, false)
		equal(t, "Step.Run activities", countQueue(h, workflows.ActivityStepRun), 0)
		equal(t, "Tool.Execute activities", countQueue(h, workflows.ActivityToolExecute), 1)
	})

	t.Run("sequential batch of two calls", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		h.model = func(_ context.Context, c agentloop.ModelCall) (agentloop.ModelResult, error) {
			res := reply(c)
			if c.Step == 1 {
				c1, c2 := known("c1", "bash"), known("c2", "bash")
				c1.Sequential = true
				res = reply(c, c1, c2)
			}
			res.Settings = stepSettings
			return res, nil
		}
		u := h.turn(ms, "t1", "count")
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		requireOutcome(t, h.outcome(u), "t1", agent.TypeCompleted, "", false)
		equal(t, "Step.Run activities", countQueue(h, workflows.ActivityStepRun), 0)
		equal(t, "Tool.Execute activities", countQueue(h, workflows.ActivityToolExecute), 2)
	})

	t.Run("context over the compaction threshold", func(t *testing.T) {
		// Step.Run measured the context and did not call the model: the
		// model call runs as Model.Generate (which compacts first).
		t.Parallel()
		h := newHarness(t)
		h.model = toolSteps(1, stepSettings, bashCall)
		h.stepFn = func(ctx context.Context, in agentloop.StepCall) (agentloop.StepResult, error) {
			res, err := h.stepThrough(ctx, in)
			res.Model = &agentloop.ModelResult{Compact: &agentloop.ContextReport{Leaf: in.Model.Leaf, Tokens: 900, Threshold: 800}}
			res.ModelAttempts = 2 // its second attempt measured the context
			return res, err
		}
		u := h.turn(ms, "t1", "count")
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		out := h.outcome(u)
		requireOutcome(t, out, "t1", agent.TypeCompleted, "", false)
		equal(t, "outcome.Steps", out.Steps, 2)
		equal(t, "Step.Run activities", countQueue(h, workflows.ActivityStepRun), 1)
		equal(t, "Model.Generate activities", countQueue(h, workflows.ActivityModelGenerate), 2)
		// Its attempts follow those the step may have begun on the feed.
		models := h.modelCalls()
		last := models[len(models)-1]
		equal(t, "step 2's model call", last.Step, 2)
		equal(t, "model.AttemptBase", last.AttemptBase, 2)
	})
}

// PlainCall: what the loop never hands to a combined step.
func TestPlainCall(t *testing.T) {
	t.Parallel()
	plain := agentloop.ToolCall{Call: known("c1", "bash")}
	if !agentloop.PlainCall(plain) {
		t.Fatal("a known call with nothing to decide is not plain")
	}
	for name, f := range map[string]func(*agentloop.ToolCall){
		"before_tool hook": func(c *agentloop.ToolCall) { c.Call.BeforeHook = agentloop.HookAllow },
		"after_tool hook":  func(c *agentloop.ToolCall) { c.Call.AfterHook = agentloop.HookAllow },
		"delegate":         func(c *agentloop.ToolCall) { c.Call.Delegate = &agentloop.Delegation{} },
		"ask_user":         func(c *agentloop.ToolCall) { c.Call.Ask = true },
		"approval":         func(c *agentloop.ToolCall) { c.Call.RequiresApproval = true },
		"reused ID":        func(c *agentloop.ToolCall) { c.Call.Reused = "reused" },
		"refused":          func(c *agentloop.ToolCall) { c.Call.Refused = "refused" },
		"unknown tool":     func(c *agentloop.ToolCall) { c.Call.Known = false },
		"synthetic":        func(c *agentloop.ToolCall) { c.Synthetic = &agent.ToolResult{} },
	} {
		c := plain
		f(&c)
		if agentloop.PlainCall(c) {
			t.Errorf("a call with %s is plain", name)
		}
	}
}

// TestStepRunFailed: a Step.Run that fails for good records each call's
// result as a lost Tool.Execute would (Tool.Execute keeps a stored one),
// then runs the model call as Model.Generate — the fallback model's when
// the primary handed the call on — or fails as the model call did.
func TestStepRunFailed(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		err    error
		status string
		// wantFallback is the Model.Generate's Fallback (-1: none runs).
		wantFallback int
	}{
		{"the primary model handed on", temporal.NewNonRetryableApplicationError("rate limited", wire.ErrModelFallback, nil), agent.TypeCompleted, 1},
		{"the model failed", temporal.NewNonRetryableApplicationError("bad request", agent.CodeModel, nil), agent.TypeFailed, -1},
		{"a worker lost", errors.New("panic: lost"), agent.TypeCompleted, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.model = toolSteps(1, stepSettings, bashCall)
			h.stepFn = func(context.Context, agentloop.StepCall) (agentloop.StepResult, error) {
				return agentloop.StepResult{}, tt.err
			}
			u := h.turn(ms, "t1", "count")
			h.run(workflows.SessionInput{Session: "s1"})
			h.requireCancelled()
			out := h.outcome(u)
			equal(t, "outcome.Status", out.Status, tt.status)
			recorded := h.toolCallsFor("c1")
			if len(recorded) != 1 || recorded[0].Synthetic == nil ||
				!strings.Contains(recorded[0].Synthetic.Content, "The outcome of this bash call is unknown") {
				t.Fatalf("c1's Tool.Execute calls = %+v, want one recording the unknown outcome", recorded)
			}
			models := h.modelCalls()
			if tt.wantFallback < 0 {
				equal(t, "model calls", len(models), 1)
				return
			}
			if len(models) != 2 {
				t.Fatalf("model called %d times, want 2", len(models))
			}
			equal(t, "model.Fallback", models[1].Fallback, tt.wantFallback)
			equal(t, "model.AttemptBase (after the step's attempts)", models[1].AttemptBase, 6)
			equal(t, "model.EntryID (the step's own)", models[1].EntryID, h.stepCalls()[0].Model.EntryID)
		})
	}
}

// TestStepRunAbort: an abort while Step.Run runs stops it and records the
// call's result as aborted (a stored result stays), as for Tool.Execute.
func TestStepRunAbort(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.model = toolSteps(1, stepSettings, bashCall)
	h.stepFn = func(ctx context.Context, _ agentloop.StepCall) (agentloop.StepResult, error) {
		return agentloop.StepResult{}, h.blockUntilCancelled(ctx)
	}
	u := h.turn(ms, "t1", "count")
	ab := &update{}
	h.when(func() bool { return len(h.stepCalls()) > 0 }, func() {
		h.sendNow(ab, workflows.UpdateAbort, "abort-1", workflows.AbortRequest{Reason: "stop"})
	})
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()
	out := h.outcome(u)
	requireOutcome(t, out, "t1", agent.TypeFailed, agent.CodeAborted, false)
	equalSlice(t, "cancelled activities", h.cancelledTypes(), []string{workflows.ActivityStepRun})
	recorded := h.toolCallsFor("c1")
	if len(recorded) != 1 || recorded[0].Synthetic == nil || !strings.Contains(recorded[0].Synthetic.Content, "interrupted") {
		t.Fatalf("c1's Tool.Execute calls = %+v, want one recording the interruption", recorded)
	}
}

// TestStepRunAbortInModelCall: an abort while Step.Run runs, once the
// call's own result was stored (its record finds it: the activity was in
// its model call), ends the turn with the model step counted in its
// steps, as an abort that stops Model.Generate does: the usage the stopped
// call reports for that step is found and charged to the principal. An
// abort while the call runs (nothing stored) counts the tool step's only.
func TestStepRunAbortInModelCall(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		stored bool // the call's own result was stored before the abort
		begun  bool // the activity had reached its model call
		steps  int
	}{
		{"in the model call", true, true, 2},
		{"in the tool call", false, false, 1},
		{"in the tool call, the stopped tool answered", true, false, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.model = toolSteps(1, stepSettings, bashCall)
			h.stepFn = func(ctx context.Context, _ agentloop.StepCall) (agentloop.StepResult, error) {
				return agentloop.StepResult{}, h.blockUntilCancelled(ctx)
			}
			// The call's stored result (its own, recorded before the abort)
			// set a wake-up: the session keeps it, as on the two-activity path.
			wake := &wakes.Wake{ID: "w1", Prompt: "check later", FireAt: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
			h.tool = func(_ context.Context, call agentloop.ToolCall) (agentloop.ToolOutcome, error) {
				out := agentloop.ToolOutcome{IsError: call.Synthetic != nil && !tt.stored, Recorded: tt.stored}
				if tt.stored {
					out.Wake = wake
					out.ModelBegun = tt.begun && call.StepModel != ""
				}
				return out, nil
			}
			u := h.turn(ms, "t1", "count")
			ab := &update{}
			h.when(func() bool { return len(h.stepCalls()) > 0 }, func() {
				h.sendNow(ab, workflows.UpdateAbort, "abort-1", workflows.AbortRequest{Reason: "stop"})
			})
			var view workflows.SessionView
			h.at(time.Hour, func() { view = h.state() })
			h.run(workflows.SessionInput{Session: "s1"})
			h.requireCancelled()
			out := h.outcome(u)
			requireOutcome(t, out, "t1", agent.TypeFailed, agent.CodeAborted, false)
			equal(t, "outcome.Steps", out.Steps, tt.steps)
			steps := h.stepCalls()
			records := h.toolCallsFor(bashCall(1).ID)
			if len(steps) != 1 || len(records) != 1 || records[0].StepModel == "" || records[0].StepModel != steps[0].Model.EntryID {
				t.Errorf("the abort's records %+v did not ask about the Step.Run's model call (%d Step.Run)", records, len(steps))
			}
			wantWakes := 0
			if tt.stored {
				wantWakes = 1
			}
			if len(view.Wakes) != wantWakes || (wantWakes == 1 && view.Wakes[0].ID != "w1") {
				t.Errorf("pending wake-ups after the abort = %+v, want %d (w1)", view.Wakes, wantWakes)
			}
		})
	}
}

// TestStepRunSteer: a steering message that comes while Step.Run runs
// its calls is taken, and the step is told to leave its model call to the
// workflow, which makes it with the message (Model.Generate), as after any
// batch.
func TestStepRunSteer(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.model = toolSteps(2, stepSettings, bashCall)
	gate := make(chan struct{})
	h.stepFn = func(ctx context.Context, in agentloop.StepCall) (agentloop.StepResult, error) {
		if in.Model.Step == 2 {
			if err := waitGate(gate); err != nil {
				return agentloop.StepResult{}, err
			}
		}
		return h.stepThrough(ctx, in)
	}
	u := h.turn(ms, "t1", "count")
	st := &update{then: func() { close(gate) }}
	h.when(func() bool { return len(h.stepCalls()) > 0 }, func() {
		h.sendNow(st, workflows.UpdateSteer, "steer-1", workflows.SteerRequest{Text: "use python"})
	})
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()
	h.requireOK(st, "steer")
	out := h.outcome(u)
	requireOutcome(t, out, "t1", agent.TypeCompleted, "", false)
	equal(t, "outcome.Steps", out.Steps, 3)

	steps := h.stepCalls()
	equal(t, "Step.Run activities", len(steps), 2)
	yield := workflows.StepYieldKey("t1", 2)
	h.mu.Lock()
	stops := append([]string(nil), h.stops...)
	h.mu.Unlock()
	equalSlice(t, "notices", stops, []string{yield})
	// Step 2's model call ran as Model.Generate, reading the message
	// below c1's result; c2 and step 3 ran as one Step.Run again.
	models := h.modelCalls()
	if len(models) != 3 {
		t.Fatalf("model called %d times, want 3", len(models))
	}
	m2 := models[1]
	if m2.Step != 2 || m2.Leaf != steps[0].Tools[0].ResultEntryID || len(m2.Prepend) != 1 || m2.Prepend[0].Message.Text != "use python" {
		t.Fatalf("step 2's model call = step %d below %q, prepend %+v; want the steering message below c1's result", m2.Step, m2.Leaf, m2.Prepend)
	}
	equal(t, "Model.Generate activities", countQueue(h, workflows.ActivityModelGenerate), 2)
	equal(t, "second Step.Run's model step", steps[1].Model.Step, 3)
}
