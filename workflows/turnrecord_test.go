package workflows_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// A key the session store has recorded (long gone from the snapshot's
// Recent) is answered with the recorded outcome: no model call, no new
// record, the session's leaf unchanged; the next new key runs as usual.
func TestSessionRecordedKeyIsAnswered(t *testing.T) {
	t.Parallel()
	recorded := agentloop.Outcome{Turn: "old-key", Status: agent.TypeCompleted, Steps: 2, First: "x-1", Leaf: "x-4", Marker: "m-x-4",
		Leftover: []string{"a steer that was already followed up"}}
	cases := []struct {
		name  string
		turns []string // keys sent one after the other
		runs  []string // turns the model saw, in order
	}{
		{"recorded key alone", []string{"old-key"}, nil},
		{"recorded key then a new one", []string{"old-key", "new-key"}, []string{"new-key"}},
		{"new key then the recorded one", []string{"new-key", "old-key"}, []string{"new-key"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.stored["old-key"] = recorded
			var ups []*update
			for i, k := range tc.turns {
				ups = append(ups, h.turn(time.Duration(i+1)*time.Minute, k, "prompt "+k))
			}
			var view workflows.SessionView
			h.at(time.Hour, func() { view = h.state() })
			h.run(workflows.SessionInput{Session: "s1"})
			h.requireCancelled()

			for i, k := range tc.turns {
				out := h.outcome(ups[i])
				if k == "old-key" {
					want := recorded
					want.Leftover = nil
					if out.Turn != want.Turn || out.Leaf != want.Leaf || out.First != want.First || out.Steps != want.Steps || out.Marker != want.Marker || len(out.Leftover) != 0 {
						t.Errorf("old-key outcome = %+v, want the recorded %+v (without leftovers)", out, want)
					}
					continue
				}
				requireOutcome(t, out, k, agent.TypeCompleted, "", false)
			}
			var ran []string
			for _, c := range h.modelCalls() {
				ran = append(ran, c.Turn)
			}
			equalSlice(t, "turns the model saw", ran, tc.runs)
			for _, r := range h.recordCalls() {
				if r.Key == "old-key" {
					t.Errorf("Turn.Record called again for the recorded key: %+v", r)
				}
			}
			if len(tc.runs) == 0 {
				equal(t, "view.Leaf (an answered key moves nothing)", view.Leaf, "leaf-0")
			}
			// Every key went through Turn.Begin, the window left to the
			// worker's configuration.
			var begun []string
			for _, b := range h.beginCalls() {
				begun = append(begun, b.Key)
				equal(t, "begin.Window", b.Window, time.Duration(0))
			}
			equalSlice(t, "Turn.Begin keys", begun, tc.turns)
		})
	}
}

// Turn.Begin is retried until the store answers; the turn then runs once,
// hanging below the user entry that the successful attempt stored.
func TestSessionTurnBeginRetriedUntilStoreAnswers(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var attempts atomic.Int32
	h.begin = func(_ context.Context, in wire.BeginTurnInput) (wire.BeginTurnResult, error) {
		if attempts.Add(1) <= 3 {
			return wire.BeginTurnResult{}, temporal.NewApplicationError("session store: connection refused", "store")
		}
		return wire.BeginTurnResult{}, nil
	}
	u := h.turn(ms, "t1", "hello")
	// Before the one-hour window's run ends (a run that took a turn update
	// continues as new before it leaves the window).
	h.runUntil(workflows.SessionInput{Session: "s1", IdempotencyWindow: time.Hour}, 30*time.Minute)
	h.requireCancelled()

	requireOutcome(t, h.outcome(u), "t1", agent.TypeCompleted, "", false)
	equal(t, "Turn.Begin attempts", int(attempts.Load()), 4)
	begins := h.beginCalls()
	for _, b := range begins {
		if b.Entry.ID != begins[0].Entry.ID {
			t.Errorf("a retried Turn.Begin carries entry %q, want the same %q", b.Entry.ID, begins[0].Entry.ID)
		}
		equal(t, "begin.Window", b.Window, time.Hour)
	}
	models := h.modelCalls()
	if len(models) != 1 {
		t.Fatalf("model called %d times, want 1", len(models))
	}
	equal(t, "call.Leaf", models[0].Leaf, begins[0].Entry.ID)
	if rec := h.recordCalls(); len(rec) != 1 || rec[0].Key != "t1" {
		t.Errorf("Turn.Record calls = %+v, want one for t1", rec)
	}
}
