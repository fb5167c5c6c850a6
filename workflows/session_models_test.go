package workflows_test

import (
	"context"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// TestSessionModelRoutingFallbackUsage: the step after a tool step is marked
// AfterTools (the tool model serves it); a model that hands its step on
// (ErrModelFallback) is run again with the next Fallback; the turn's usage
// is summed into its outcome and the session's into its state.
func TestSessionModelRoutingFallbackUsage(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		if call.Step == 2 && call.Fallback == 0 {
			return agentloop.ModelResult{}, temporal.NewApplicationErrorWithOptions("falling back to openai/backup: 500",
				wire.ErrModelFallback, temporal.ApplicationErrorOptions{NonRetryable: true})
		}
		var res agentloop.ModelResult
		if call.Step == 1 {
			res = reply(call, known("c1", "read"))
		} else {
			res = reply(call)
		}
		res.Usage = &agent.Usage{Input: 100, Output: 10, CacheRead: 40, Calls: 1}
		return res, nil
	}
	u1 := h.turn(ms, "t1", "look around")
	u2 := h.turn(time.Minute, "t2", "again")
	var view workflows.SessionView
	h.at(time.Hour, func() { view = h.state() })
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()

	out := h.outcome(u1)
	requireOutcome(t, out, "t1", agent.TypeCompleted, "", false)
	models := h.modelCalls()
	type step struct {
		turn       string
		step       int
		afterTools bool
		fallback   int
	}
	var got []step
	for _, m := range models {
		got = append(got, step{m.Turn, m.Step, m.AfterTools, m.Fallback})
	}
	equalSlice(t, "model calls", got, []step{
		{"t1", 1, false, 0}, {"t1", 2, true, 0}, {"t1", 2, true, 1},
		{"t2", 1, false, 0}, {"t2", 2, true, 0}, {"t2", 2, true, 1},
	})
	equal(t, "turn usage", *out.Usage, agent.Usage{Input: 200, Output: 20, CacheRead: 80, Calls: 2})
	equal(t, "completed event usage", *out.Event().Usage, agent.Usage{Input: 200, Output: 20, CacheRead: 80, Calls: 2})
	requireOutcome(t, h.outcome(u2), "t2", agent.TypeCompleted, "", false)
	equal(t, "session usage", view.Usage, agent.Usage{Input: 400, Output: 40, CacheRead: 160, Calls: 4})
}

// TestSessionFallbackChainBounded: a model that keeps handing its step on
// fails the turn with model_error once the chain bound is reached.
func TestSessionFallbackChainBounded(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		return agentloop.ModelResult{}, temporal.NewApplicationErrorWithOptions("falling back",
			wire.ErrModelFallback, temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	u := h.turn(ms, "t1", "hi")
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()
	out := h.outcome(u)
	requireOutcome(t, out, "t1", agent.TypeFailed, agent.CodeModel, true)
	if n := len(h.modelCalls()); n != 9 {
		t.Errorf("model called %d times, want 9 (the primary and 8 fallbacks)", n)
	}
}
