package workflows_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// recordingStep makes h's model steps record the turns they end, as
// Model.Generate does (agentloop.ModelCall.End): the outcome goes into the
// fake store; what they recorded is returned by the func.
func recordingStep(h *harness, answer func(agentloop.ModelCall) (agentloop.ModelResult, error)) func() map[string]agentloop.Outcome {
	byStep := map[string]agentloop.Outcome{}
	h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		res, err := answer(call)
		if err != nil || call.End == nil || !res.EndsTurn() {
			return res, err
		}
		out := call.End.Ended(call, res)
		h.mu.Lock()
		if _, ok := h.stored[call.Turn]; !ok {
			h.stored[call.Turn] = out
		}
		byStep[call.Turn] = out
		h.mu.Unlock()
		res.Recorded = true
		return res, nil
	}
	return func() map[string]agentloop.Outcome {
		h.mu.Lock()
		defer h.mu.Unlock()
		m := map[string]agentloop.Outcome{}
		for k, v := range byStep {
			m[k] = v
		}
		return m
	}
}

// The model step that ends a turn records it: a text turn and a turn with
// a tool step run no Turn.Record, the outcome the step recorded is the one
// the update answers, and every step carries what recording needs (the
// turn's first entry, its usage so far, when it began).
func TestTurnRecordedByItsLastStep(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	recorded := recordingStep(h, func(call agentloop.ModelCall) (agentloop.ModelResult, error) {
		res := reply(call)
		if call.Turn == "tools" && call.Step == 1 {
			res = reply(call, known("c1", "bash"))
		}
		res.Usage = &agent.Usage{Input: 10, Output: 1, Calls: 1}
		return res, nil
	})
	text := h.turn(ms, "text", "hello")
	tools := h.turn(time.Minute, "tools", "run it")
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()

	if n := len(h.recordCalls()); n != 0 {
		t.Errorf("Turn.Record ran %d times, want none: the last steps recorded the turns (%+v)", n, h.recordCalls())
	}
	for _, tc := range []struct {
		u     *update
		key   string
		steps int
	}{{text, "text", 1}, {tools, "tools", 2}} {
		out := h.outcome(tc.u)
		requireOutcome(t, out, tc.key, agent.TypeCompleted, "", false)
		equal(t, tc.key+" steps", out.Steps, tc.steps)
		rec, ok := recorded()[tc.key]
		if !ok {
			t.Fatalf("%s: no step recorded it", tc.key)
		}
		if rec.Turn != out.Turn || rec.Status != out.Status || rec.Steps != out.Steps || rec.First != out.First ||
			rec.Leaf != out.Leaf || rec.Marker != out.Marker || rec.Usage == nil || out.Usage == nil || *rec.Usage != *out.Usage {
			t.Errorf("%s: the step recorded %+v, the update answered %+v", tc.key, rec, out)
		}
		equal(t, tc.key+" usage", out.Usage.Input, int64(10*tc.steps))
	}
	var last agentloop.ModelCall
	for _, c := range h.modelCalls() {
		if c.End == nil || c.End.Started.IsZero() {
			t.Fatalf("model call %s/%d carries End %+v, want the turn's first entry and start", c.Turn, c.Step, c.End)
		}
		last = c
	}
	if last.End.Usage == nil || last.End.Usage.Input != 10 {
		t.Errorf("the tool turn's second step carries usage %+v, want the first step's", last.End.Usage)
	}
}

// A steering message that arrives while the step that may end the turn
// runs is refused as too late (the outcome may be recorded and published
// already): its sender sends it as a turn of its own, so it is answered,
// never folded into an answer that is out.
func TestSteerDuringARecordingStepIsRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	gate := make(chan struct{})
	recordingStep(h, func(call agentloop.ModelCall) (agentloop.ModelResult, error) {
		if call.Turn == "t1" {
			if err := waitGate(gate); err != nil {
				return agentloop.ModelResult{}, err
			}
		}
		return reply(call), nil
	})
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
	equal(t, "t1 steps", out.Steps, 1)
	equal(t, "model calls", len(h.modelCalls()), 1)
}

// A turn whose last step failed is recorded by Turn.Record, over anything
// a step of it recorded (Override): the workflow's outcome is the truth.
func TestFailedTurnRecordOverridesItsSteps(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	recordingStep(h, func(call agentloop.ModelCall) (agentloop.ModelResult, error) {
		return agentloop.ModelResult{}, temporal.NewApplicationErrorWithOptions("bad key", agent.CodeModelConfig,
			temporal.ApplicationErrorOptions{NonRetryable: true, Cause: errors.New("401")})
	})
	u := h.turn(ms, "t1", "hello")
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()

	out := h.outcome(u)
	equal(t, "status", out.Status, agent.TypeFailed)
	recs := h.recordCalls()
	if len(recs) != 1 || recs[0].Key != "t1" || !recs[0].Override || recs[0].Outcome.Status != agent.TypeFailed {
		t.Fatalf("Turn.Record received %+v, want t1's failure once, overriding", recs)
	}
}
