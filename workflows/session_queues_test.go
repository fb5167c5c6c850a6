package workflows_test

import (
	"context"
	"testing"

	"go.temporal.io/sdk/activity"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// TestSessionActivityTaskQueues: with fastagent.yaml's activities.tools and
// activities.model task queues in the settings, the session schedules a
// real tool call on the tools queue and model calls, compactions and
// rewinds on the model queue; recorded results (an unknown tool's) and the
// turn's record stay on the session's own queue. Without them, everything
// runs on the session's queue (the other tests).
func TestSessionActivityTaskQueues(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.openSettings = agentloop.Settings{ToolTaskQueue: "gpu", ModelTaskQueue: "llm"}
	h.env.RegisterActivityWithOptions(func(ctx context.Context, in wire.RewindInput) (workflows.RewindResult, error) {
		h.mu.Lock()
		h.queues = append(h.queues, workflows.ActivityRewind+" "+activity.GetInfo(ctx).TaskQueue)
		h.mu.Unlock()
		return workflows.RewindResult{Leaf: in.EntryID}, nil
	}, activity.RegisterOptions{Name: workflows.ActivityRewind})
	h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		if call.Step == 1 && call.Turn == "t1" {
			return reply(call, known("c1", "bash"), agentloop.Call{ID: "c2", Name: "nosuch"}), nil
		}
		return reply(call), nil
	}
	first := h.turn(ms, "t1", "use the tools")
	// Compaction and rewind run between turns: sent once the turn answered
	// (not at fixed mock times, which a slow machine overtakes).
	comp, rew := &update{}, &update{}
	h.when(func() bool { _, _, done, _, _ := first.snapshot(); return done }, func() {
		h.sendNow(comp, workflows.UpdateCompact, "compact-1", workflows.CompactRequest{})
		h.when(func() bool { _, _, done, _, _ := comp.snapshot(); return done }, func() {
			h.sendNow(rew, workflows.UpdateRewind, "rewind-1", workflows.RewindRequest{Entry: "leaf-0"})
		})
	})
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()

	requireOutcome(t, h.outcome(first), "t1", agent.TypeCompleted, "", false)
	for name, u := range map[string]*update{"compact": comp, "rewind": rew} {
		if accepted, rejectErr, completed, _, err := u.snapshot(); !accepted || rejectErr != nil || !completed || err != nil {
			t.Errorf("%s update: accepted %v rejected %v completed %v err %v", name, accepted, rejectErr, completed, err)
		}
	}
	own := "default-test-taskqueue" // the session's own queue in the test environment
	got := map[string]bool{}
	for _, q := range h.queueLog() {
		got[q] = true
	}
	for _, want := range []string{
		"Model.Generate llm",
		"Tool.Execute run c1 gpu",
		"Tool.Execute record c2 " + own,
		"Turn.Record " + own,
		"Session.Compact llm",
		"Session.Rewind llm",
	} {
		if !got[want] {
			t.Errorf("no %q among the activities' task queues %v", want, h.queueLog())
		}
	}
	for q := range got {
		if q == "Model.Generate "+own || q == "Tool.Execute run c1 "+own {
			t.Errorf("%q: a placed activity ran on the session's own queue", q)
		}
	}
}
