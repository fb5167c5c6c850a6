package workflows_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// A recorded turn that was begun from the session's current leaf (a reset
// replayed the session to before it ran) moves the leaf to the turn's end,
// so the next model request sees it; one begun elsewhere (a key redelivered
// long after) moves nothing.
func TestSessionRecordedTurnExtendingTheLeafMovesIt(t *testing.T) {
	t.Parallel()
	for _, extends := range []bool{true, false} {
		name := "begun here"
		want := "k-leaf"
		if !extends {
			name, want = "begun elsewhere", "leaf-0"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.begin = func(_ context.Context, in wire.BeginTurnInput) (wire.BeginTurnResult, error) {
				if in.Key == "k" {
					return wire.BeginTurnResult{Extends: extends, Outcome: &agentloop.Outcome{
						Turn: "k", Status: agent.TypeCompleted, Steps: 1, First: "k-first", Leaf: "k-leaf"}}, nil
				}
				return wire.BeginTurnResult{}, nil
			}
			h.turn(ms, "k", "queued before the reset")
			u := h.turn(time.Minute, "n", "next")
			h.run(workflows.SessionInput{Session: "s1"})
			h.requireCancelled()

			requireOutcome(t, h.outcome(u), "n", agent.TypeCompleted, "", false)
			models := h.modelCalls()
			if len(models) != 1 {
				t.Fatalf("model called %d times, want 1 (for n)", len(models))
			}
			user, ok := h.userEntry(models[0])
			if !ok {
				t.Fatal("n's model call does not hang below its user entry")
			}
			equal(t, "n's prompt hangs below", user.ParentID, want)
		})
	}
}

// The prompt's entry ID is a function of the turn key, the leaf it extends
// and the prompt, not of a random draw: a workflow task retried after
// Turn.Begin stored the prompt (its worker died) draws new randomness —
// for a new session even a new chain prefix — but stores the same entry, so
// nothing is stored twice. Two executions of a new session stand for the
// lost task and its retry; another prompt under the key is another entry.
func TestSessionPromptIDIsTheKeys(t *testing.T) {
	t.Parallel()
	ids := make([]string, 3)
	for i := range ids {
		h := newHarness(t)
		h.openLeaf = ""
		text := "hello"
		if i == 2 {
			text = "something else"
		}
		u := h.turn(ms, "k1", text)
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		requireOutcome(t, h.outcome(u), "k1", agent.TypeCompleted, "", false)
		begins := h.beginCalls()
		if len(begins) != 1 {
			t.Fatalf("Turn.Begin called %d times, want 1", len(begins))
		}
		ids[i] = begins[0].Entry.ID
	}
	if ids[0] != ids[1] {
		t.Errorf("the prompt of key k1 was stored as %q, then as %q: a retried workflow task stores it twice", ids[0], ids[1])
	}
	if ids[2] == ids[0] {
		t.Errorf("another prompt under the same key got the same entry ID %q", ids[2])
	}
}

// An aborted queued turn is recorded like any finished turn (Turn.Record
// with the aborted outcome), so the key is answered "aborted" after
// continue-as-new and attaching to it gets the terminal.
func TestSessionAbortedQueuedTurnIsRecorded(t *testing.T) {
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
	h.turn(ms, "t1", "first")
	u2, ab := &update{}, &update{}
	h.when(func() bool { return h.modelStarted("t1", 1) }, func() {
		h.sendNow(u2, workflows.UpdateTurn, "t2", workflows.TurnRequest{Prompt: agent.Prompt{Text: "second"}})
		h.sendNow(ab, workflows.UpdateAbort, "abort-t2", workflows.AbortRequest{Turn: "t2", Reason: "not needed"})
	})
	h.when(ab.finished, func() { close(gate) })
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()

	equal(t, "abort.Turn", h.abortResult(ab).Turn, "t2")
	requireOutcome(t, h.outcome(u2), "t2", agent.TypeFailed, agent.CodeAborted, false)
	var got *wire.RecordTurnInput
	for _, r := range h.recordCalls() {
		if r.Key == "t2" {
			got = &r
		}
	}
	if got == nil {
		t.Fatalf("the aborted queued turn t2 was not recorded; records: %+v", h.recordCalls())
	}
	requireOutcome(t, got.Outcome, "t2", agent.TypeFailed, agent.CodeAborted, false)
}

// The session's own turns live in a namespace callers cannot use: a
// late-steering follow-up is "@steer:<key>" (so a caller key "t1-steer"
// is just another turn), a caller key starting with "@" is refused, and a
// finished turn's record says when the turn started, so that a record older
// than the window is replaced.
func TestSessionOwnTurnIDsAreReserved(t *testing.T) {
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
	// The steer comes while t1's tool runs; t1 then stops (maxSteps), so
	// the steering runs as its follow-up.
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
	caller := h.turn(time.Hour, "t1-steer", "a caller's own key")
	bad := h.turn(2*time.Hour, "@mine", "a caller using the reserved prefix")
	h.run(workflows.SessionInput{Session: "s1", Snapshot: &workflows.Snapshot{Opened: true, IDPrefix: "chain",
		Loop: agentloop.State{Leaf: "leaf-0", Settings: agentloop.Settings{MaxSteps: 1}}}})
	h.requireCancelled()

	requireOutcome(t, h.outcome(u1), "t1", agent.TypeFailed, agent.CodeMaxSteps, false)
	requireOutcome(t, h.outcome(caller), "t1-steer", agent.TypeCompleted, "", false)
	var ran []string
	for _, c := range h.modelCalls() {
		ran = append(ran, c.Turn)
	}
	equalSlice(t, "turns the model saw", ran, []string{"t1", "@steer:t1", "t1-steer"})
	var appErr *temporal.ApplicationError
	if _, rejected, _, _, _ := bad.snapshot(); !errors.As(rejected, &appErr) || appErr.Type() != agent.CodeInvalidCommand {
		t.Errorf("a caller key starting with @ was not refused as %s: %v", agent.CodeInvalidCommand, rejected)
	}
	for _, r := range h.recordCalls() {
		if r.Started.IsZero() || r.Started.After(r.Finished) {
			t.Errorf("record of %s: started %v, finished %v; want a start before the end", r.Key, r.Started, r.Finished)
		}
	}
}
