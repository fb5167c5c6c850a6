package workflows_test

import (
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// A turn update that reaches a run in its first workflow task — the usual
// case for a session just continued as new, or started by the update —
// is handled by the run's versions: a redelivered key whose outcome the
// snapshot shed (only the newest keys keep theirs) is answered from the
// store's record of the turn, never with an empty outcome.
func TestSessionFirstTaskUpdateAnsweredFromTheRecord(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	start := time.Date(2030, 1, 2, 12, 0, 0, 0, time.UTC)
	h.env.SetStartTime(start)
	done := agentloop.Outcome{Turn: "k0", Status: agent.TypeCompleted, Steps: 1, First: "p0", Leaf: "l0", Marker: "k0/m1"}
	h.stored["k0"] = done
	snap := &workflows.Snapshot{Opened: true, IDPrefix: "p", Loop: agentloop.State{Leaf: "L"}, Recent: []workflows.RecentTurn{
		{Key: "k0", At: start.Add(-time.Hour)}, // its outcome shed
		{Key: "k1", Outcome: agentloop.Outcome{Turn: "k1", Status: agent.TypeCompleted, Details: "from memory"}, At: start.Add(-time.Hour)},
	}}
	again := h.turn(0, "k0", "prompt 0")
	h.run(workflows.SessionInput{Session: "s1", Snapshot: snap})
	h.requireCancelled()
	got := h.outcome(again)
	if got.Turn != "k0" || got.Status != agent.TypeCompleted || got.Leaf != "l0" || got.First != "p0" {
		t.Fatalf("redelivered k0 in the run's first workflow task = %+v, want the recorded %+v", got, done)
	}
	equalSlice(t, "prompts the model saw", h.prompts(), nil)
}

// A session started by its first turn (Update-with-Start: the update comes
// with the first workflow task) ends its run before that turn's key leaves
// the definition's idempotency window — read when the session opens, after
// the update arrived — so that the key sent again after the window reaches
// a run that runs it. Before, the first task's update armed nothing and
// Temporal answered the key from the run's history for as long as it ran.
func TestSessionFirstTaskUpdateEndsTheRunWithinTheWindow(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.openSettings = agentloop.Settings{IdempotencyWindow: 2 * time.Hour}
	first := h.turn(0, "k1", "hello")
	h.runUntil(workflows.SessionInput{Session: "s1"}, 3*time.Hour)
	requireOutcome(t, h.outcome(first), "k1", agent.TypeCompleted, "", false)
	in := continued(t, h)
	if len(in.Snapshot.Recent) != 1 || in.Snapshot.Recent[0].Key != "k1" {
		t.Fatalf("carried keys = %+v, want k1", in.Snapshot.Recent)
	}
	if end := h.env.Now().Sub(in.Snapshot.Recent[0].At); end >= 2*time.Hour {
		t.Fatalf("the run ended %s after it answered k1, not within the 2h idempotency window", end)
	}
}

// Turns the previous run carried were accepted before a turn update that
// comes with the next run's first workflow task: they run first.
func TestSessionFirstTaskUpdateQueuesBehindCarriedTurns(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	start := time.Date(2030, 1, 2, 12, 0, 0, 0, time.UTC)
	h.env.SetStartTime(start)
	snap := &workflows.Snapshot{Opened: true, IDPrefix: "p", Loop: agentloop.State{Leaf: "L"}, Queue: []workflows.QueuedTurn{
		{Delivery: delivery("d1", "carried"), At: start.Add(-time.Minute), Ref: wire.ReplyRef("d1", start.Add(-time.Minute))},
	}}
	u := h.turn(0, "u1", "new")
	h.run(workflows.SessionInput{Session: "s1", Snapshot: snap})
	h.requireCancelled()
	requireOutcome(t, h.outcome(u), "u1", agent.TypeCompleted, "", false)
	equalSlice(t, "prompts the model saw", h.prompts(), []string{"carried", "new"})
}
