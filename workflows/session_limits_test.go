package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// limited answers a model call with usage and the definition's limits.
func limited(call agentloop.ModelCall, lim agentloop.Limits, tokens int64, calls ...agentloop.Call) agentloop.ModelResult {
	res := reply(call, calls...)
	res.Usage = &agent.Usage{Input: tokens / 2, Output: tokens - tokens/2, Calls: 1}
	res.Settings = agentloop.Settings{Limits: lim}
	return res
}

// TestSessionTurnTokenLimit: a turn whose model calls reach
// limits.turnTokens stops before its next model call with limit_exceeded
// (the tool the model asked for still ran and has its result), and the
// session's next turn runs normally.
func TestSessionTurnTokenLimit(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	lim := agentloop.Limits{TurnTokens: 100}
	h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		if call.Turn == "t1" {
			return limited(call, lim, 120, known("c"+call.EntryID, "read")), nil // would loop forever
		}
		return limited(call, lim, 10), nil
	}
	u1 := h.turn(ms, "t1", "read everything")
	u2 := h.turn(time.Minute, "t2", "just say hi")
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()

	out := h.outcome(u1)
	requireOutcome(t, out, "t1", agent.TypeFailed, agent.CodeLimitExceeded, false)
	contains(t, "details", out.Details, "limits.turnTokens", "120 tokens", "budget of 100")
	equal(t, "steps", out.Steps, 1)
	equal(t, "tool calls of t1", len(h.toolCalls()), 1)
	if out.Usage == nil || out.Usage.Tokens() != 120 {
		t.Errorf("t1 usage = %+v, want 120 tokens", out.Usage)
	}
	requireOutcome(t, h.outcome(u2), "t2", agent.TypeCompleted, "", false)
}

// TestSessionTurnTimeLimit: a turn running past limits.turnTime (here, a
// tool call that waited 2m for approval) stops before its next model call.
func TestSessionTurnTimeLimit(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	lim := agentloop.Limits{TurnTime: time.Minute}
	h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		if call.Turn == "t1" && call.Step == 1 {
			c1 := known("c1", "deploy")
			c1.RequiresApproval = true
			return limited(call, lim, 10, c1), nil
		}
		return limited(call, lim, 10), nil
	}
	u1 := h.turn(ms, "t1", "deploy")
	ap := h.send(2*time.Minute, workflows.UpdateApprove, "approve-1", workflows.ApproveRequest{Call: "c1", Approve: true})
	u2 := h.turn(time.Hour, "t2", "hi")
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()
	h.requireOK(ap, "approve")

	out := h.outcome(u1)
	requireOutcome(t, out, "t1", agent.TypeFailed, agent.CodeLimitExceeded, false)
	contains(t, "details", out.Details, "limits.turnTime", "budget of 1m0s")
	equal(t, "steps", out.Steps, 1)
	requireOutcome(t, h.outcome(u2), "t2", agent.TypeCompleted, "", false)
}

// TestSessionDayTokenLimit: once a session used limits.sessionTokensPerDay
// today (UTC), its next turn is refused with limit_exceeded without a model
// call; the next UTC day it runs again. The day's usage is in the state.
func TestSessionDayTokenLimit(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.env.SetStartTime(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
	lim := agentloop.Limits{SessionTokensPerDay: 100}
	h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		return limited(call, lim, 120), nil
	}
	u1 := h.turn(ms, "t1", "a long answer")
	u2 := h.turn(time.Minute, "t2", "more")
	var view workflows.SessionView
	h.at(2*time.Minute, func() { view = h.state() })
	u3 := h.turn(13*time.Hour, "t3", "tomorrow")
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()

	requireOutcome(t, h.outcome(u1), "t1", agent.TypeCompleted, "", false)
	out := h.outcome(u2)
	requireOutcome(t, out, "t2", agent.TypeFailed, agent.CodeLimitExceeded, false)
	contains(t, "details", out.Details, "limits.sessionTokensPerDay", "120 tokens today", "budget of 100")
	requireOutcome(t, h.outcome(u3), "t3", agent.TypeCompleted, "", false)
	for _, c := range h.modelCalls() {
		if c.Turn == "t2" {
			t.Errorf("the refused turn called the model (step %d)", c.Step)
		}
	}
	equal(t, "today.day", view.Today.Day, "2026-12-02")
	equal(t, "today.tokens", view.Today.Usage.Tokens(), int64(120))
}
