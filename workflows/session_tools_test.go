package workflows_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// TestSessionToolBatch: a batch runs in parallel unless one of its calls is
// sequential; result entries chain in source order either way.
func TestSessionToolBatch(t *testing.T) {
	t.Parallel()

	t.Run("parallel", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
			if call.Step == 1 {
				return reply(call, known("c1", "a"), known("c2", "b"), known("c3", "c")), nil
			}
			return reply(call), nil
		}
		var started atomic.Int32
		all := make(chan struct{})
		h.tool = func(_ context.Context, call agentloop.ToolCall) (agentloop.ToolOutcome, error) {
			if started.Add(1) == 3 {
				close(all)
			}
			// A barrier: every call of the batch must be running at once.
			if err := waitGate(all); err != nil {
				return agentloop.ToolOutcome{}, err
			}
			// Finish in reverse source order: each waits for the next one.
			if next := map[string]string{"c1": "c2", "c2": "c3"}[call.Call.ID]; next != "" {
				if err := h.waitEvent("end run " + next); err != nil {
					return agentloop.ToolOutcome{}, err
				}
			}
			return okTool(call), nil
		}
		u := h.turn(ms, "t1", "fan out")
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()

		requireOutcome(t, h.outcome(u), "t1", agent.TypeCompleted, "", false)
		equal(t, "max concurrent tool activities", h.maxConcurrentTools(), 3)
		models := h.modelCalls()
		if len(models) != 2 {
			t.Fatalf("model called %d times, want 2", len(models))
		}
		parent := models[0].EntryID
		for _, id := range []string{"c1", "c2", "c3"} {
			calls := h.toolCallsFor(id)
			if len(calls) != 1 {
				t.Fatalf("%s executed %d times, want 1", id, len(calls))
			}
			equal(t, id+".ParentID", calls[0].ParentID, parent)
			parent = calls[0].ResultEntryID
		}
		equal(t, "step2.Leaf", models[1].Leaf, parent)
		var ends []string
		for _, e := range h.eventLog() {
			if strings.HasPrefix(e, "end ") {
				ends = append(ends, e)
			}
		}
		equalSlice(t, "completion order", ends, []string{"end run c3", "end run c2", "end run c1"})
	})

	t.Run("sequential call makes the whole batch sequential", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
			if call.Step == 1 {
				c2 := known("c2", "bash")
				c2.Sequential = true
				return reply(call, known("c1", "read"), c2, known("c3", "read")), nil
			}
			return reply(call), nil
		}
		h.tool = func(_ context.Context, call agentloop.ToolCall) (agentloop.ToolOutcome, error) {
			// Deliberate: each call lasts a while, so a second call started
			// meanwhile (an overlap) would show in maxConcurrentTools.
			time.Sleep(10 * ms)
			return okTool(call), nil
		}
		u := h.turn(ms, "t1", "one by one")
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()

		requireOutcome(t, h.outcome(u), "t1", agent.TypeCompleted, "", false)
		equal(t, "max concurrent tool activities", h.maxConcurrentTools(), 1)
		equalSlice(t, "events", h.eventLog(), []string{
			"model t1/1",
			"start run c1", "end run c1",
			"start run c2", "end run c2",
			"start run c3", "end run c3",
			"model t1/2",
		})
		models := h.modelCalls()
		parent := models[0].EntryID
		for _, id := range []string{"c1", "c2", "c3"} {
			c := h.toolCallsFor(id)[0]
			equal(t, id+".ParentID", c.ParentID, parent)
			parent = c.ResultEntryID
		}
		equal(t, "step2.Leaf", models[1].Leaf, parent)
	})
}

// TestSessionSyntheticResults: calls the loop answers itself (unknown tool,
// truncated reply) are recorded through Tool.Execute with Synthetic set, never
// run, and the next model call sees them.
func TestSessionSyntheticResults(t *testing.T) {
	t.Parallel()
	const reissue = "The reply hit the output length limit before this tool call was complete; re-issue the tool call."
	unknownApproval := agentloop.Call{ID: "c1", Name: "rm_rf", RequiresApproval: true}
	tests := []struct {
		name  string
		stop  string
		calls []agentloop.Call
		// want maps a call ID to its synthetic content ("" = a real run).
		want map[string]string
	}{
		{
			name:  "unknown tool",
			calls: []agentloop.Call{{ID: "c1", Name: "teleport"}},
			want:  map[string]string{"c1": "Tool teleport not found"},
		},
		{
			name:  "unknown tool needs no approval",
			calls: []agentloop.Call{unknownApproval},
			want:  map[string]string{"c1": "Tool rm_rf not found"},
		},
		{
			name:  "known and unknown in one batch",
			calls: []agentloop.Call{known("c1", "read"), {ID: "c2", Name: "nope"}},
			want:  map[string]string{"c1": "", "c2": "Tool nope not found"},
		},
		{
			name:  "stop reason length",
			stop:  transcript.StopLength,
			calls: []agentloop.Call{known("c1", "read"), known("c2", "write")},
			want:  map[string]string{"c1": reissue, "c2": reissue},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
				if call.Step == 1 {
					res := reply(call, tt.calls...)
					if tt.stop != "" {
						res.StopReason = tt.stop
					}
					return res, nil
				}
				return reply(call), nil
			}
			u := h.turn(ms, "t1", "go")
			h.run(workflows.SessionInput{Session: "s1"})
			h.requireCancelled()

			out := h.outcome(u)
			requireOutcome(t, out, "t1", agent.TypeCompleted, "", false)
			equal(t, "outcome.Steps", out.Steps, 2)
			if n := len(h.toolCalls()); n != len(tt.want) {
				t.Errorf("Tool.Execute called %d times, want %d", n, len(tt.want))
			}
			var last string
			for _, c := range tt.calls {
				got := h.toolCallsFor(c.ID)
				if len(got) != 1 {
					t.Fatalf("%s: Tool.Execute called %d times, want 1", c.ID, len(got))
				}
				want := tt.want[c.ID]
				switch {
				case want == "" && got[0].Synthetic != nil:
					t.Errorf("%s: Synthetic = %+v, want a real run", c.ID, got[0].Synthetic)
				case want != "" && got[0].Synthetic == nil:
					t.Errorf("%s: ran for real, want the synthetic result %q", c.ID, want)
				case want != "":
					equal(t, c.ID+".Synthetic.Content", got[0].Synthetic.Content, want)
					equal(t, c.ID+".Synthetic.IsError", got[0].Synthetic.IsError, true)
				}
				last = got[0].ResultEntryID
			}
			models := h.modelCalls()
			if len(models) != 2 {
				t.Fatalf("model called %d times, want 2", len(models))
			}
			equal(t, "step2.Leaf (the model sees the results)", models[1].Leaf, last)
		})
	}
}

// TestSessionToolFailure: a tool activity that fails is answered with an
// honest synthetic result; a non-idempotent tool is never re-run.
func TestSessionToolFailure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		call       agentloop.Call
		heartbeat  time.Duration
		fail       func() error
		wantRuns   int
		wantPhrase []string
	}{
		{
			name:       "non-idempotent, application error",
			call:       known("c1", "bash"),
			fail:       func() error { return temporal.NewApplicationError("exit status 137", "ToolCrashed") },
			wantRuns:   1,
			wantPhrase: []string{"The outcome of this bash call is unknown", "It was not re-run", "exit status 137"},
		},
		{
			// The test environment enforces heartbeat timeouts in wall time:
			// the fake stays silent past a short heartbeat from the settings.
			name:      "non-idempotent, heartbeat timeout",
			call:      known("c1", "bash"),
			heartbeat: 200 * ms,
			fail: func() error {
				// Deliberate: silent (no heartbeat) past the 200 ms heartbeat
				// timeout, which the environment enforces in wall time; it has
				// no mock clock for a running activity nor a sign that it fired.
				time.Sleep(time.Second)
				return nil
			},
			wantRuns:   1,
			wantPhrase: []string{"The outcome of this bash call is unknown", "It was not re-run", "timeout"},
		},
		{
			name: "idempotent, retried then reported",
			call: func() agentloop.Call {
				c := known("c1", "fetch")
				c.Idempotent, c.MaxAttempts = true, 2
				return c
			}(),
			fail:       func() error { return temporal.NewApplicationError("connection reset", "ToolFailed") },
			wantRuns:   2,
			wantPhrase: []string{"The fetch call failed 2 times", "connection reset"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
				if call.Step == 1 {
					res := reply(call, tt.call)
					res.Settings = agentloop.Settings{Heartbeat: tt.heartbeat}
					return res, nil
				}
				return reply(call), nil
			}
			h.tool = func(_ context.Context, call agentloop.ToolCall) (agentloop.ToolOutcome, error) {
				if call.Synthetic == nil {
					if err := tt.fail(); err != nil {
						return agentloop.ToolOutcome{}, err
					}
				}
				return okTool(call), nil
			}
			u := h.turn(ms, "t1", "run it")
			h.run(workflows.SessionInput{Session: "s1"})
			h.requireCancelled()

			requireOutcome(t, h.outcome(u), "t1", agent.TypeCompleted, "", false)
			calls := h.toolCallsFor("c1")
			if len(calls) != tt.wantRuns+1 {
				t.Fatalf("Tool.Execute called %d times for c1, want %d runs + 1 record", len(calls), tt.wantRuns)
			}
			for i, c := range calls[:tt.wantRuns] {
				if c.Synthetic != nil {
					t.Errorf("call %d: Synthetic = %+v, want a real run", i, c.Synthetic)
				}
			}
			rec := calls[tt.wantRuns]
			if rec.Synthetic == nil {
				t.Fatal("last call is not a recorded result")
			}
			equal(t, "record.IsError", rec.Synthetic.IsError, true)
			t.Logf("recorded result: %s", rec.Synthetic.Content)
			contains(t, "record.Content", rec.Synthetic.Content, tt.wantPhrase...)
			equal(t, "record.ResultEntryID", rec.ResultEntryID, calls[0].ResultEntryID)
			equal(t, "record.ParentID", rec.ParentID, calls[0].ParentID)
			models := h.modelCalls()
			if len(models) != 2 {
				t.Fatalf("model called %d times, want 2", len(models))
			}
			equal(t, "step2.Leaf", models[1].Leaf, rec.ResultEntryID)
		})
	}
}
