package workflows_test

import (
	"context"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// overflowErr is what Model.Generate returns for a provider's "context too long".
func overflowErr() error {
	return temporal.NewApplicationErrorWithOptions("the request is longer than the model's context window (HTTP 400): maximum context length is 4000 tokens",
		agent.CodeContextOverflow, temporal.ApplicationErrorOptions{NonRetryable: true})
}

// TestSessionCompactionDecision: every model call asks the activity to
// measure its context; a call over the threshold gets Compact instead of a
// reply, the workflow runs Session.Compact on the branch the call would
// have used and asks again below the compaction entry, with no pending
// entries left to store.
func TestSessionCompactionDecision(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	over := true
	h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		if over && call.Step == 2 {
			over = false
			return agentloop.ModelResult{Compact: &agentloop.ContextReport{Leaf: "branch-end", Tokens: 3500, Threshold: 3000, Window: 4000}}, nil
		}
		if call.Step == 1 {
			return reply(call, known("c1", "counter")), nil
		}
		return reply(call), nil
	}
	u := h.turn(ms, "turn-1", "count")
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()

	out := h.outcome(u)
	requireOutcome(t, out, "turn-1", agent.TypeCompleted, "", false)
	equal(t, "outcome.Steps", out.Steps, 2)
	calls := h.modelCalls()
	if len(calls) != 3 {
		t.Fatalf("model called %d times, want 3 (step 1, step 2 over budget, step 2 again)", len(calls))
	}
	for i, c := range calls {
		if !c.CheckContext {
			t.Errorf("model call %d: CheckContext not set", i)
		}
	}
	compacts := h.compactCalls()
	if len(compacts) != 1 {
		t.Fatalf("Session.Compact ran %d times, want 1", len(compacts))
	}
	c := compacts[0]
	equal(t, "compact.Session", c.Session, "s1")
	equal(t, "compact.Leaf", c.Leaf, "branch-end")
	equal(t, "compact.Reason", c.Reason, wire.CompactThreshold)
	equal(t, "compact.Force", c.Force, false)
	again := calls[2]
	equal(t, "retried call.Leaf", again.Leaf, c.EntryID)
	equal(t, "retried call.Step", again.Step, 2)
	equal(t, "retried call.Prepend", len(again.Prepend), 0)
	equal(t, "retried call.EntryID", again.EntryID, calls[1].EntryID)
	equalSlice(t, "events", h.eventLog(), []string{"model turn-1/1", "start run c1", "end run c1", "model turn-1/2", "compact threshold force=false", "model turn-1/2"})
}

// TestSessionOverflowRecovery: a provider overflow compacts (L1), a second
// one compacts with force (L2), a third fails with context_overflow; a
// compaction that cannot help ends the turn at once with its reason.
func TestSessionOverflowRecovery(t *testing.T) {
	t.Parallel()
	skipped := func(reason string) func(context.Context, wire.CompactInput) (workflows.CompactResult, error) {
		return func(context.Context, wire.CompactInput) (workflows.CompactResult, error) {
			return workflows.CompactResult{Skipped: reason}, nil
		}
	}
	cases := []struct {
		name string
		// overflows is how many model calls overflow before one succeeds.
		overflows int
		// overBudget is how many calls answer Compact before the overflows.
		overBudget int
		compactFn  func(context.Context, wire.CompactInput) (workflows.CompactResult, error)
		status     string
		code       string
		events     []string
		details    []string
	}{
		{
			name: "one overflow: L1 and retry", overflows: 1, status: agent.TypeCompleted,
			events: []string{"model turn-1/1", "compact overflow force=false", "model turn-1/1"},
		},
		{
			name: "two overflows: L1, L2 forced, retry", overflows: 2, status: agent.TypeCompleted,
			events: []string{"model turn-1/1", "compact overflow force=false", "model turn-1/1", "compact overflow force=true", "model turn-1/1"},
		},
		{
			name: "three overflows: fails", overflows: 3, status: agent.TypeFailed, code: agent.CodeContextOverflow,
			events:  []string{"model turn-1/1", "compact overflow force=false", "model turn-1/1", "compact overflow force=true", "model turn-1/1"},
			details: []string{"does not fit the model's context window", "after compacting it 2 times", "maximum context length", "contextWindow"},
		},
		{
			name: "over budget, then an overflow: L1 by threshold, L2 forced", overBudget: 1, overflows: 1, status: agent.TypeCompleted,
			events: []string{"model turn-1/1", "compact threshold force=false", "model turn-1/1", "compact overflow force=true", "model turn-1/1"},
		},
		{
			name: "over budget after L2: sent as is", overBudget: 3, status: agent.TypeCompleted,
			events: []string{"model turn-1/1", "compact threshold force=false", "model turn-1/1", "compact threshold force=true", "model turn-1/1", "model turn-1/1"},
		},
		{
			name: "overflow with compaction off", overflows: 1, compactFn: skipped("compaction is disabled (compaction.enabled: false in fastagent.yaml)"),
			status: agent.TypeFailed, code: agent.CodeContextOverflow,
			events:  []string{"model turn-1/1", "compact overflow force=false"},
			details: []string{"could not be compacted", "compaction.enabled: false"},
		},
		{
			name: "over budget with nothing to compact: sent as is", overBudget: 1, compactFn: skipped("nothing to compact"),
			status: agent.TypeCompleted,
			events: []string{"model turn-1/1", "compact threshold force=false", "model turn-1/1"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.compactFn = tc.compactFn
			n := 0
			h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
				n++
				switch {
				case n <= tc.overBudget && call.CheckContext:
					return agentloop.ModelResult{Compact: &agentloop.ContextReport{Leaf: call.Leaf, Tokens: 5000, Threshold: 3000, Window: 4000}}, nil
				case n <= tc.overBudget+tc.overflows:
					return agentloop.ModelResult{}, overflowErr()
				}
				return reply(call), nil
			}
			u := h.turn(ms, "turn-1", "hi")
			h.run(workflows.SessionInput{Session: "s1"})
			h.requireCancelled()
			out := h.outcome(u)
			requireOutcome(t, out, "turn-1", tc.status, tc.code, false)
			contains(t, "outcome.Details", out.Details, tc.details...)
			equalSlice(t, "events", h.eventLog(), tc.events)
			// Every compaction hangs its entry where the call left off and
			// every retry continues below it.
			calls := h.modelCalls()
			var compacted []string
			for _, c := range h.compactCalls() {
				compacted = append(compacted, c.EntryID)
			}
			j := 0
			for i, c := range calls[1:] {
				if c.Leaf == calls[i].Leaf {
					continue
				}
				if j >= len(compacted) || c.Leaf != compacted[j] {
					t.Errorf("a retried call hangs below %q, want the compaction entries %v in order", c.Leaf, compacted)
				}
				j++
			}
		})
	}
}

// TestSessionManualCompaction: UpdateCompact runs between turns, at the
// session's leaf, even while a turn is queued; the next turn continues
// below the compaction entry.
func TestSessionManualCompaction(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	first := h.turn(ms, "turn-1", "one")
	comp := h.send(2*ms, workflows.UpdateCompact, "compact-1", workflows.CompactRequest{})
	second := h.turn(3*ms, "turn-2", "two")
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()

	requireOutcome(t, h.outcome(first), "turn-1", agent.TypeCompleted, "", false)
	out := h.outcome(second)
	requireOutcome(t, out, "turn-2", agent.TypeCompleted, "", false)
	accepted, rejectErr, completed, value, err := comp.snapshot()
	if !accepted || rejectErr != nil || !completed || err != nil {
		t.Fatalf("compact update: accepted %v rejected %v completed %v err %v", accepted, rejectErr, completed, err)
	}
	var res workflows.CompactResult
	convert(t, value, &res)
	compacts := h.compactCalls()
	if len(compacts) != 1 {
		t.Fatalf("Session.Compact ran %d times, want 1", len(compacts))
	}
	equal(t, "compact.Reason", compacts[0].Reason, wire.CompactManual)
	equal(t, "result.EntryID", res.EntryID, compacts[0].EntryID)
	calls := h.modelCalls()
	equal(t, "compacted leaf (turn-1's reply)", compacts[0].Leaf, calls[0].EntryID)
	begins := h.beginCalls()
	equal(t, "turn-2's user entry parent", begins[1].Entry.ParentID, res.EntryID)
	equalSlice(t, "events", h.eventLog(), []string{"model turn-1/1", "compact manual force=false", "model turn-2/1"})
}

// TestSessionManualCompactionRefused: a session whose queue is full answers
// session_busy; an empty session has nothing to compact.
func TestSessionManualCompactionRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.openLeaf = ""
	u := h.send(ms, workflows.UpdateCompact, "compact-1", workflows.CompactRequest{})
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()
	_, _, completed, value, err := u.snapshot()
	if !completed || err != nil {
		t.Fatalf("compact: completed %v err %v", completed, err)
	}
	var res workflows.CompactResult
	convert(t, value, &res)
	if res.EntryID != "" || !strings.Contains(res.Skipped, "no messages") {
		t.Errorf("result %+v, want skipped: no messages", res)
	}
	equal(t, "Session.Compact calls", len(h.compactCalls()), 0)

	h2 := newHarness(t)
	gate := make(chan struct{})
	h2.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		if err := waitGate(gate); err != nil {
			return agentloop.ModelResult{}, err
		}
		return reply(call), nil
	}
	h2.turn(ms, "running", "hold")
	// The queue fills once the first turn runs (its Turn.Begin is a local
	// activity: on a busy machine it may still be waiting at any fixed time).
	busy := &update{}
	h2.when(func() bool { return h2.state().Running == "running" }, func() {
		for i := 0; i < workflows.MaxQueuedTurns; i++ {
			h2.sendNow(&update{}, workflows.UpdateTurn, "queued-"+string(rune('a'+i)),
				workflows.TurnRequest{Prompt: agent.Prompt{Text: "wait"}, Source: "test"})
		}
		h2.sendNow(busy, workflows.UpdateCompact, "compact-busy", workflows.CompactRequest{})
		h2.at(ms, func() { close(gate) })
	})
	h2.run(workflows.SessionInput{Session: "s2"})
	h2.requireRejected(busy, agent.CodeSessionBusy)
}
