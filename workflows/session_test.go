package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/transcript"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// ms is the mock time of a test's first update.
const ms = time.Millisecond

// TestSessionPlainTurn: one turn, no tools → completed; the model call
// carries the user entry (prompt text, images, source) below the leaf the
// session opened on.
func TestSessionPlainTurn(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	u := h.send(ms, workflows.UpdateTurn, "turn-1", workflows.TurnRequest{
		Prompt: agent.Prompt{Text: "hello there", Images: []agent.Image{{MimeType: "image/png", Data: "aGk="}}},
		Source: "http",
	})
	var view workflows.SessionView
	h.at(time.Hour, func() { view = h.state() })
	h.run(workflows.SessionInput{Session: "s1", ParentSession: "parent", BranchHints: []string{"b1", "b2"}})
	h.requireCancelled()

	out := h.outcome(u)
	requireOutcome(t, out, "turn-1", agent.TypeCompleted, "", false)
	equal(t, "outcome.Steps", out.Steps, 1)
	equal(t, "outcome.Details", out.Details, "")

	opens := h.openCalls()
	if len(opens) != 1 {
		t.Fatalf("Session.Open called %d times, want 1", len(opens))
	}
	equal(t, "open.Session", opens[0].Session, "s1")
	equal(t, "open.ParentSession", opens[0].ParentSession, "parent")
	equalSlice(t, "open.BranchHints", opens[0].BranchHints, []string{"b1", "b2"})
	if opens[0].IDPrefix == "" {
		t.Error("open.IDPrefix is empty")
	}
	prefix := opens[0].IDPrefix + "-"

	calls := h.modelCalls()
	if len(calls) != 1 {
		t.Fatalf("model called %d times, want 1", len(calls))
	}
	c := calls[0]
	equal(t, "call.Session", c.Session, "s1")
	equal(t, "call.Turn", c.Turn, "turn-1")
	equal(t, "call.Step", c.Step, 1)
	equal(t, "call.MaxAttempts", c.MaxAttempts, 6)
	// The prompt is stored once, by Turn.Begin; the model call refers to it.
	if len(c.Prepend) != 0 {
		t.Errorf("call.Prepend has %d entries, want 0 (Turn.Begin stored the user entry)", len(c.Prepend))
	}
	begins := h.beginCalls()
	if len(begins) != 1 {
		t.Fatalf("Turn.Begin called %d times, want 1", len(begins))
	}
	equal(t, "begin.Session", begins[0].Session, "s1")
	equal(t, "begin.Key", begins[0].Key, "turn-1")
	equal(t, "begin.Window", begins[0].Window, 24*time.Hour)
	e := begins[0].Entry
	equal(t, "call.Leaf", c.Leaf, e.ID)
	equal(t, "user.ParentID", e.ParentID, "leaf-0")
	equal(t, "user.Type", e.Type, transcript.TypeMessage)
	if e.Message == nil {
		t.Fatal("user entry has no message")
	}
	equal(t, "user.Role", e.Message.Role, transcript.RoleUser)
	equal(t, "user.Text", e.Message.Text, "hello there")
	equal(t, "user.Source", e.Message.Source, "http")
	if len(e.Message.Images) != 1 || e.Message.Images[0] != (transcript.Image{MimeType: "image/png", Data: "aGk="}) {
		t.Errorf("user.Images = %+v, want the prompt's image", e.Message.Images)
	}
	if e.Time.IsZero() {
		t.Error("user entry has no time")
	}
	if e.ID == c.EntryID || !strings.HasPrefix(e.ID, prefix) || !strings.HasPrefix(c.EntryID, prefix) {
		t.Errorf("entry IDs user=%q reply=%q: want distinct, prefixed %q", e.ID, c.EntryID, prefix)
	}
	equal(t, "outcome.Marker", out.Marker, "m-"+c.EntryID)
	equal(t, "outcome.First", out.First, e.ID)
	equal(t, "outcome.Leaf", out.Leaf, c.EntryID)
	if n := len(h.toolCalls()); n != 0 {
		t.Errorf("Tool.Execute called %d times, want 0", n)
	}
	if rec := h.recordCalls(); len(rec) != 1 || rec[0].Key != "turn-1" || rec[0].Outcome.Leaf != c.EntryID {
		t.Errorf("Turn.Record calls = %+v, want one for turn-1 with the outcome", rec)
	}

	equal(t, "view.Session", view.Session, "s1")
	equal(t, "view.Leaf", view.Leaf, c.EntryID)
	equal(t, "view.Turns", view.Turns, int64(1))
	equal(t, "view.Running", view.Running, "")
	equal(t, "len(view.Queued)", len(view.Queued), 0)
}

// TestSessionToolTurnChainsEntries: user → assistant → tool results (source
// order) → next assistant; every ID is fresh; activations reach the next
// model call and the state.
func TestSessionToolTurnChainsEntries(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		if call.Step == 1 {
			return reply(call, known("c1", "read"), known("c2", "search_tools")), nil
		}
		return reply(call), nil
	}
	h.tool = func(_ context.Context, call agentloop.ToolCall) (agentloop.ToolOutcome, error) {
		out := okTool(call)
		if call.Call.ID == "c2" {
			out.Activated = []string{"web_fetch"}
		}
		return out, nil
	}
	u := h.turn(ms, "t1", "look around")
	var view workflows.SessionView
	h.at(time.Hour, func() { view = h.state() })
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()

	out := h.outcome(u)
	requireOutcome(t, out, "t1", agent.TypeCompleted, "", false)
	equal(t, "outcome.Steps", out.Steps, 2)

	models := h.modelCalls()
	if len(models) != 2 {
		t.Fatalf("model called %d times, want 2", len(models))
	}
	m1, m2 := models[0], models[1]
	c1, c2 := h.toolCallsFor("c1"), h.toolCallsFor("c2")
	if len(c1) != 1 || len(c2) != 1 {
		t.Fatalf("tool calls c1=%d c2=%d, want 1 each", len(c1), len(c2))
	}
	for _, tc := range []agentloop.ToolCall{c1[0], c2[0]} {
		if tc.Synthetic != nil {
			t.Errorf("%s: Synthetic = %+v, want a real run", tc.Call.ID, tc.Synthetic)
		}
		equal(t, tc.Call.ID+".Session", tc.Session, "s1")
		equal(t, tc.Call.ID+".Turn", tc.Turn, "t1")
		equal(t, tc.Call.ID+".Step", tc.Step, 1)
		equal(t, tc.Call.ID+".AssistantEntryID", tc.AssistantEntryID, m1.EntryID)
	}
	equal(t, "c1.ParentID", c1[0].ParentID, m1.EntryID)
	equal(t, "c2.ParentID", c2[0].ParentID, c1[0].ResultEntryID)
	equal(t, "step2.Step", m2.Step, 2)
	equal(t, "step2.Leaf", m2.Leaf, c2[0].ResultEntryID)
	equal(t, "len(step2.Prepend)", len(m2.Prepend), 0)
	equalSlice(t, "step2.Activated", m2.Activated, []string{"web_fetch"})
	equal(t, "outcome.Marker", out.Marker, "m-"+m2.EntryID)

	ids := []string{m1.Leaf, m1.EntryID, c1[0].ResultEntryID, c2[0].ResultEntryID, m2.EntryID}
	seen := map[string]bool{}
	for _, id := range ids {
		if id == "" || seen[id] {
			t.Errorf("entry IDs %v: want unique and non-empty", ids)
			break
		}
		seen[id] = true
	}
	// IDs come from the workflow's counter, in allocation order, behind the
	// chain's prefix and the turn's nonce.
	prefix := ids[0][:strings.LastIndex(ids[0], "-")]
	for i, id := range ids {
		equal(t, fmt.Sprintf("ids[%d]", i), id, fmt.Sprintf("%s-%d", prefix, i+1))
	}

	equal(t, "view.Leaf", view.Leaf, m2.EntryID)
	equalSlice(t, "view.Activated", view.Activated, []string{"web_fetch"})
}

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
			time.Sleep(10 * ms) // room for an overlap, were there one
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

// TestSessionMaxSteps: the bound read from the model's settings ends a turn
// whose model keeps calling tools.
func TestSessionMaxSteps(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		res := reply(call, known(fmt.Sprintf("c%d", call.Step), "bash"))
		res.Settings = agentloop.Settings{MaxSteps: 2}
		return res, nil
	}
	u := h.turn(ms, "t1", "loop forever")
	var view workflows.SessionView
	h.at(time.Hour, func() { view = h.state() })
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()

	out := h.outcome(u)
	requireOutcome(t, out, "t1", agent.TypeFailed, agent.CodeMaxSteps, false)
	equal(t, "outcome.Steps", out.Steps, 2)
	contains(t, "outcome.Details", out.Details, "after 2 model calls", "maxSteps")
	equal(t, "model calls", len(h.modelCalls()), 2)
	equal(t, "tool calls", len(h.toolCalls()), 2)
	equal(t, "view.Settings.MaxSteps", view.Settings.MaxSteps, 2)
	// Both batches' results were recorded before the bound hit.
	equal(t, "view.Leaf", view.Leaf, h.toolCallsFor("c2")[0].ResultEntryID)
}

// TestSessionModelFailure: how a failing model step becomes the outcome.
func TestSessionModelFailure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		snapshot      *workflows.Snapshot
		result        agentloop.ModelResult
		err           error
		stall         time.Duration // the fake stays silent this long (wall time)
		wantCalls     int
		wantAttempts  int
		wantDetails   string
		prefixOnly    bool
		wantRetryable bool
	}{
		{
			name:         "non-retryable",
			err:          temporal.NewApplicationErrorWithOptions("invalid API key", "ModelRejected", temporal.ApplicationErrorOptions{NonRetryable: true}),
			wantCalls:    1,
			wantAttempts: 6,
			wantDetails:  "invalid API key",
		},
		{
			name:          "retryable, exhausting the default attempts",
			err:           temporal.NewApplicationError("overloaded", "ModelUnavailable"),
			wantCalls:     6,
			wantAttempts:  6,
			wantDetails:   "the model call failed 6 times; last error: overloaded",
			wantRetryable: true,
		},
		{
			name:          "retryable, attempts from the settings",
			snapshot:      &workflows.Snapshot{Opened: true, IDPrefix: "p", Loop: agentloop.State{Leaf: "L", Settings: agentloop.Settings{ModelAttempts: 2}}},
			err:           temporal.NewApplicationError("overloaded", "ModelUnavailable"),
			wantCalls:     2,
			wantAttempts:  2,
			wantDetails:   "the model call failed 2 times; last error: overloaded",
			wantRetryable: true,
		},
		{
			name:      "heartbeat timeout",
			snapshot:  &workflows.Snapshot{Opened: true, IDPrefix: "p", Loop: agentloop.State{Leaf: "L", Settings: agentloop.Settings{ModelAttempts: 1, Heartbeat: 200 * ms}}},
			stall:     time.Second,
			wantCalls: 1, wantAttempts: 1,
			wantDetails:   "the model call timed out: ",
			prefixOnly:    true,
			wantRetryable: true,
		},
		{
			name:          "stop reason error",
			result:        agentloop.ModelResult{StopReason: transcript.StopError, ErrorMessage: "context overflow"},
			wantCalls:     1,
			wantAttempts:  6,
			wantDetails:   "model error: context overflow",
			wantRetryable: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
				if tt.err != nil {
					return agentloop.ModelResult{}, tt.err
				}
				time.Sleep(tt.stall)
				res := tt.result
				res.EntryID = call.EntryID
				return res, nil
			}
			u := h.turn(ms, "t1", "hi")
			h.run(workflows.SessionInput{Session: "s1", Snapshot: tt.snapshot})
			h.requireCancelled()

			out := h.outcome(u)
			requireOutcome(t, out, "t1", agent.TypeFailed, "", tt.wantRetryable)
			if tt.prefixOnly {
				if !strings.HasPrefix(out.Details, tt.wantDetails) {
					t.Errorf("outcome.Details = %q, want prefix %q", out.Details, tt.wantDetails)
				}
			} else {
				equal(t, "outcome.Details", out.Details, tt.wantDetails)
			}
			equal(t, "outcome.Steps", out.Steps, 1)
			calls := h.modelCalls()
			equal(t, "model attempts", len(calls), tt.wantCalls)
			for _, c := range calls {
				equal(t, "call.MaxAttempts", c.MaxAttempts, tt.wantAttempts)
				equal(t, "call.Step", c.Step, 1)
			}
			equal(t, "tool calls", len(h.toolCalls()), 0)
		})
	}
}

// TestSessionAbort: stopping the running turn (in the model, in a tool,
// waiting for approval), dropping a queued one, and the validator's refusals.
func TestSessionAbort(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct{ reason, want string }{
		{"user pressed stop", "user pressed stop"},
		{"", "the turn was aborted by the caller"},
	} {
		t.Run("running model, reason "+fmt.Sprintf("%q", tt.reason), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.model = func(ctx context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
				if call.Turn == "t1" {
					return agentloop.ModelResult{}, h.blockUntilCancelled(ctx)
				}
				return reply(call), nil
			}
			u := h.turn(ms, "t1", "write a novel")
			ab := &update{}
			h.when(func() bool { return h.modelStarted("t1", 1) }, func() {
				h.sendNow(ab, workflows.UpdateAbort, "abort-1", workflows.AbortRequest{Reason: tt.reason})
			})
			var view workflows.SessionView
			h.at(time.Hour, func() { view = h.state() })
			u2 := h.turn(2*time.Hour, "t2", "something else")
			h.run(workflows.SessionInput{Session: "s1"})
			h.requireCancelled()

			equal(t, "abort.Turn", h.abortResult(ab).Turn, "t1")
			out := h.outcome(u)
			requireOutcome(t, out, "t1", agent.TypeFailed, agent.CodeAborted, false)
			equal(t, "outcome.Details", out.Details, tt.want)
			equalSlice(t, "cancelled activities", h.cancelledTypes(), []string{workflows.ActivityModelGenerate})
			equal(t, "view.Running", view.Running, "")
			equal(t, "view.Leaf (an aborted model step moves nothing)", view.Leaf, "leaf-0")

			// The session goes on: the next turn hangs below the old leaf.
			requireOutcome(t, h.outcome(u2), "t2", agent.TypeCompleted, "", false)
			models := h.modelCalls()
			if len(models) != 2 {
				t.Fatalf("model called %d times, want 2", len(models))
			}
			user, ok := h.userEntry(models[1])
			if !ok {
				t.Fatalf("t2's model call hangs below %q, not below its user entry", models[1].Leaf)
			}
			equal(t, "t2 user.ParentID", user.ParentID, "leaf-0")
		})
	}

	t.Run("running tool in a sequential batch", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
			c1 := known("c1", "bash")
			c1.Sequential = true
			return reply(call, c1, known("c2", "write")), nil
		}
		h.tool = func(ctx context.Context, call agentloop.ToolCall) (agentloop.ToolOutcome, error) {
			if call.Synthetic == nil {
				return agentloop.ToolOutcome{}, h.blockUntilCancelled(ctx)
			}
			return okTool(call), nil
		}
		u := h.turn(ms, "t1", "build it")
		h.when(func() bool { return h.toolStarted("c1") }, func() {
			h.sendNow(&update{}, workflows.UpdateAbort, "abort-1", workflows.AbortRequest{Turn: "t1", Reason: "stop now"})
		})
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()

		out := h.outcome(u)
		requireOutcome(t, out, "t1", agent.TypeFailed, agent.CodeAborted, false)
		equal(t, "outcome.Details", out.Details, "stop now")
		equal(t, "outcome.Steps", out.Steps, 1)
		equal(t, "model calls", len(h.modelCalls()), 1)
		equalSlice(t, "cancelled activities", h.cancelledTypes(), []string{workflows.ActivityToolExecute})
		// Every call of the batch gets a stored result; c2 never runs.
		c1, c2 := h.toolCallsFor("c1"), h.toolCallsFor("c2")
		if len(c1) != 2 || c1[0].Synthetic != nil || c1[1].Synthetic == nil {
			t.Fatalf("c1 calls = %+v, want a run then a recorded result", c1)
		}
		if len(c2) != 1 || c2[0].Synthetic == nil {
			t.Fatalf("c2 calls = %+v, want one recorded result", c2)
		}
		for _, c := range []agentloop.ToolCall{c1[1], c2[0]} {
			equal(t, c.Call.ID+".Synthetic.Content", c.Synthetic.Content, "Tool call interrupted: stop now.")
			equal(t, c.Call.ID+".Synthetic.IsError", c.Synthetic.IsError, true)
		}
		equal(t, "c1 record ResultEntryID", c1[1].ResultEntryID, c1[0].ResultEntryID)
	})

	t.Run("running tool in a parallel batch", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
			return reply(call, known("c1", "bash"), known("c2", "read")), nil
		}
		c1Running := make(chan struct{})
		h.tool = func(ctx context.Context, call agentloop.ToolCall) (agentloop.ToolOutcome, error) {
			switch {
			case call.Call.ID == "c1" && call.Synthetic == nil:
				close(c1Running)
				return agentloop.ToolOutcome{}, h.blockUntilCancelled(ctx)
			case call.Call.ID == "c2":
				if err := waitGate(c1Running); err != nil {
					return agentloop.ToolOutcome{}, err
				}
			}
			return okTool(call), nil
		}
		u := h.turn(ms, "t1", "build it")
		var logAtOutcome []string
		u.then = func() { logAtOutcome = h.eventLog() }
		ab := &update{}
		// Abort once the workflow has c2's result (the listener runs on the
		// test environment's main loop) while c1 is running.
		sent := false
		h.env.SetOnActivityCompletedListener(func(info *activity.Info, _ converter.EncodedValue, _ error) {
			if !sent && info.ActivityType.Name == workflows.ActivityToolExecute && len(h.toolCallsFor("c2")) == 1 {
				sent = true
				h.sendNow(ab, workflows.UpdateAbort, "abort-1", workflows.AbortRequest{Reason: "stop now"})
			}
		})
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()

		equal(t, "abort.Turn", h.abortResult(ab).Turn, "t1")
		out := h.outcome(u)
		requireOutcome(t, out, "t1", agent.TypeFailed, agent.CodeAborted, false)
		equal(t, "outcome.Details", out.Details, "stop now")
		equal(t, "model calls", len(h.modelCalls()), 1)
		c1, c2 := h.toolCallsFor("c1"), h.toolCallsFor("c2")
		if len(c2) != 1 || c2[0].Synthetic != nil {
			t.Errorf("c2 calls = %+v, want one real run", c2)
		}
		if len(c1) != 2 || c1[0].Synthetic != nil || c1[1].Synthetic == nil {
			t.Fatalf("c1 calls = %+v, want a run then a recorded result", c1)
		}
		equal(t, "c1.Synthetic.Content", c1[1].Synthetic.Content, "Tool call interrupted: stop now.")
		equalSlice(t, "cancelled activities", h.cancelledTypes(), []string{workflows.ActivityToolExecute})
		// The turn ends only once every result of the batch is stored.
		if !strings.Contains(strings.Join(logAtOutcome, "|"), "end record c1") {
			t.Errorf("events when the outcome arrived = %v, want c1's interrupted result recorded first", logAtOutcome)
		}
	})

	t.Run("waiting for approval", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
			c1 := known("c1", "deploy")
			c1.RequiresApproval = true
			return reply(call, c1), nil
		}
		u := h.turn(ms, "t1", "ship it")
		h.send(time.Minute, workflows.UpdateAbort, "abort-1", workflows.AbortRequest{Reason: "changed my mind"})
		var view workflows.SessionView
		h.at(time.Hour, func() { view = h.state() })
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()

		out := h.outcome(u)
		requireOutcome(t, out, "t1", agent.TypeFailed, agent.CodeAborted, false)
		equal(t, "outcome.Details", out.Details, "changed my mind")
		c1 := h.toolCallsFor("c1")
		if len(c1) != 1 || c1[0].Synthetic == nil {
			t.Fatalf("c1 calls = %+v, want only a recorded result", c1)
		}
		equal(t, "c1.Synthetic.Content", c1[0].Synthetic.Content, "Tool call interrupted: changed my mind.")
		equal(t, "len(view.Approvals)", len(view.Approvals), 0)
		equal(t, "view.Leaf", view.Leaf, c1[0].ResultEntryID)
	})

	t.Run("queued turn", func(t *testing.T) {
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
		u1 := h.turn(ms, "t1", "first")
		u2, u3, ab := &update{}, &update{}, &update{}
		h.when(func() bool { return h.modelStarted("t1", 1) }, func() {
			h.sendNow(u2, workflows.UpdateTurn, "t2", workflows.TurnRequest{Prompt: agent.Prompt{Text: "second"}})
			h.sendNow(u3, workflows.UpdateTurn, "t3", workflows.TurnRequest{Prompt: agent.Prompt{Text: "third"}})
			h.sendNow(ab, workflows.UpdateAbort, "abort-t2", workflows.AbortRequest{Turn: "t2", Reason: "not needed"})
		})
		var view workflows.SessionView
		var t2DoneEarly bool
		h.when(ab.finished, func() {
			view = h.state()
			_, _, t2DoneEarly, _, _ = u2.snapshot()
			close(gate)
		})
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()

		equal(t, "abort.Turn", h.abortResult(ab).Turn, "t2")
		equal(t, "t2 completed while t1 still ran", t2DoneEarly, true)
		out2 := h.outcome(u2)
		requireOutcome(t, out2, "t2", agent.TypeFailed, agent.CodeAborted, false)
		equal(t, "t2.Details", out2.Details, "not needed")
		equal(t, "t2.Steps", out2.Steps, 0)
		equal(t, "view.Running", view.Running, "t1")
		equalSlice(t, "view.Queued", view.Queued, []string{"t3"})
		requireOutcome(t, h.outcome(u1), "t1", agent.TypeCompleted, "", false)
		requireOutcome(t, h.outcome(u3), "t3", agent.TypeCompleted, "", false)
		equalSlice(t, "prompts the model saw", h.prompts(), []string{"first", "third"})
		equal(t, "cancelled activities", len(h.cancelledTypes()), 0)
	})

	t.Run("nothing running is rejected", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		ab := h.send(ms, workflows.UpdateAbort, "abort-1", workflows.AbortRequest{})
		ab2 := h.send(2*ms, workflows.UpdateAbort, "abort-2", workflows.AbortRequest{Turn: "t-old"})
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		app := h.requireRejected(ab, workflows.ErrTypeNoActiveRun)
		equal(t, "NonRetryable", app.NonRetryable(), true)
		h.requireRejected(ab2, workflows.ErrTypeNoActiveRun)
	})

	t.Run("unknown turn is rejected, running turn unharmed", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		gate := make(chan struct{})
		h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
			if err := waitGate(gate); err != nil {
				return agentloop.ModelResult{}, err
			}
			return reply(call), nil
		}
		u := h.turn(ms, "t1", "hi")
		ab := &update{}
		h.when(func() bool { return h.modelStarted("t1", 1) }, func() {
			h.sendNow(ab, workflows.UpdateAbort, "abort-1", workflows.AbortRequest{Turn: "t-ghost"})
		})
		h.when(ab.finished, func() { close(gate) })
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		app := h.requireRejected(ab, workflows.ErrTypeNoActiveRun)
		contains(t, "rejection", app.Message(), "t-ghost")
		requireOutcome(t, h.outcome(u), "t1", agent.TypeCompleted, "", false)
	})
}

// TestSessionSteer: a steering message reaches the next model call as a user
// entry with source "steer".
func TestSessionSteer(t *testing.T) {
	t.Parallel()

	t.Run("during a tool call", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		gate := make(chan struct{})
		h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
			if call.Step == 1 {
				return reply(call, known("c1", "bash")), nil
			}
			return reply(call), nil
		}
		h.tool = func(_ context.Context, call agentloop.ToolCall) (agentloop.ToolOutcome, error) {
			if err := waitGate(gate); err != nil {
				return agentloop.ToolOutcome{}, err
			}
			return okTool(call), nil
		}
		u := h.turn(ms, "t1", "do it in bash")
		st := &update{then: func() { close(gate) }}
		h.when(func() bool { return h.toolStarted("c1") }, func() {
			h.sendNow(st, workflows.UpdateSteer, "steer-1", workflows.SteerRequest{Text: "use python instead"})
		})
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()

		h.requireOK(st, "steer")
		out := h.outcome(u)
		requireOutcome(t, out, "t1", agent.TypeCompleted, "", false)
		equal(t, "outcome.Steps", out.Steps, 2)
		models := h.modelCalls()
		if len(models) != 2 {
			t.Fatalf("model called %d times, want 2", len(models))
		}
		result := h.toolCallsFor("c1")[0].ResultEntryID
		m2 := models[1]
		equal(t, "step2.Leaf", m2.Leaf, result)
		if len(m2.Prepend) != 1 || m2.Prepend[0].Message == nil {
			t.Fatalf("step2.Prepend = %+v, want one steering entry", m2.Prepend)
		}
		e := m2.Prepend[0]
		equal(t, "steer.ParentID", e.ParentID, result)
		equal(t, "steer.Role", e.Message.Role, transcript.RoleUser)
		equal(t, "steer.Text", e.Message.Text, "use python instead")
		equal(t, "steer.Source", e.Message.Source, "steer")
		if e.ID == m2.EntryID || e.ID == result {
			t.Errorf("steer entry ID %q is not fresh", e.ID)
		}
	})

	t.Run("during the last model call adds a step", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		gate := make(chan struct{})
		h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
			if call.Step == 1 {
				if err := waitGate(gate); err != nil {
					return agentloop.ModelResult{}, err
				}
			}
			return reply(call), nil
		}
		u := h.turn(ms, "t1", "tell me a joke")
		st := &update{then: func() { close(gate) }}
		h.when(func() bool { return h.modelStarted("t1", 1) }, func() {
			h.sendNow(st, workflows.UpdateSteer, "steer-1", workflows.SteerRequest{Text: "make it short"})
		})
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()

		out := h.outcome(u)
		requireOutcome(t, out, "t1", agent.TypeCompleted, "", false)
		equal(t, "outcome.Steps", out.Steps, 2)
		models := h.modelCalls()
		if len(models) != 2 {
			t.Fatalf("model called %d times, want 2", len(models))
		}
		m2 := models[1]
		equal(t, "step2.Leaf", m2.Leaf, models[0].EntryID)
		if len(m2.Prepend) != 1 || m2.Prepend[0].Message == nil {
			t.Fatalf("step2.Prepend = %+v, want one steering entry", m2.Prepend)
		}
		equal(t, "steer.Text", m2.Prepend[0].Message.Text, "make it short")
		equal(t, "steer.Source", m2.Prepend[0].Message.Source, "steer")
		equal(t, "steer.ParentID", m2.Prepend[0].ParentID, models[0].EntryID)
	})

	t.Run("runs as a follow-up turn when the turn fails", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		gate := make(chan struct{})
		h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
			if call.Turn == "t1" {
				if err := waitGate(gate); err != nil {
					return agentloop.ModelResult{}, err
				}
				return agentloop.ModelResult{EntryID: call.EntryID, StopReason: transcript.StopError, ErrorMessage: "boom"}, nil
			}
			return reply(call), nil
		}
		u1 := h.turn(ms, "t1", "first")
		st := &update{then: func() { close(gate) }}
		h.when(func() bool { return h.modelStarted("t1", 1) }, func() {
			h.sendNow(st, workflows.UpdateSteer, "steer-1", workflows.SteerRequest{Text: "late steer"})
		})
		u2 := h.turn(time.Hour, "t2", "second")
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()

		h.requireOK(st, "steer")
		out1 := h.outcome(u1)
		requireOutcome(t, out1, "t1", agent.TypeFailed, "", true)
		equal(t, "t1.Details", out1.Details, "model error: boom")
		requireOutcome(t, h.outcome(u2), "t2", agent.TypeCompleted, "", false)
		models := h.modelCalls()
		if len(models) != 3 {
			t.Fatalf("model called %d times, want 3 (t1, the steering follow-up, t2)", len(models))
		}
		if p, _ := h.userEntry(models[1]); p.Message == nil || p.Message.Text != "late steer" || p.Message.Source != "steer" || models[1].Turn != "t1-steer" || len(models[1].Prepend) != 0 {
			t.Errorf("follow-up turn %s user entry = %+v, want the accepted steering message", models[1].Turn, p)
		}
		if p, _ := h.userEntry(models[2]); p.Message == nil || p.Message.Text != "second" || len(models[2].Prepend) != 0 {
			t.Errorf("t2 user entry = %+v, want %q", p, "second")
		}
	})

	t.Run("no running turn is rejected", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		before := h.send(ms, workflows.UpdateSteer, "steer-1", workflows.SteerRequest{Text: "hello?"})
		u := h.turn(2*ms, "t1", "hi")
		after := h.send(time.Hour, workflows.UpdateSteer, "steer-2", workflows.SteerRequest{Text: "too late"})
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		h.requireRejected(before, workflows.ErrTypeNoActiveRun)
		h.requireRejected(after, workflows.ErrTypeNoActiveRun)
		requireOutcome(t, h.outcome(u), "t1", agent.TypeCompleted, "", false)
		equal(t, "model calls", len(h.modelCalls()), 1)
	})

	t.Run("empty text is rejected", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		gate := make(chan struct{})
		h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
			if err := waitGate(gate); err != nil {
				return agentloop.ModelResult{}, err
			}
			return reply(call), nil
		}
		u := h.turn(ms, "t1", "hi")
		st := &update{}
		h.when(func() bool { return h.modelStarted("t1", 1) }, func() {
			h.sendNow(st, workflows.UpdateSteer, "steer-1", workflows.SteerRequest{Text: "   "})
		})
		h.when(st.finished, func() { close(gate) })
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		h.requireRejected(st, workflows.ErrTypeInvalidInput)
		requireOutcome(t, h.outcome(u), "t1", agent.TypeCompleted, "", false)
		equal(t, "model calls", len(h.modelCalls()), 1)
	})
}

// TestSessionApproval: a call that requires approval waits durably for the
// "approve" update; approval runs it, denial records a refusal.
func TestSessionApproval(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		req         workflows.ApproveRequest
		wantContent string // "" = the tool runs
	}{
		{name: "approved", req: workflows.ApproveRequest{Call: "c1", Approve: true}},
		{name: "denied with a reason", req: workflows.ApproveRequest{Call: "c1", Reason: "too risky"},
			wantContent: "A human denied this tool call. Reason: too risky"},
		{name: "denied without a reason", req: workflows.ApproveRequest{Call: "c1"},
			wantContent: "A human denied this tool call."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
				if call.Step == 1 {
					c1 := known("c1", "deploy")
					c1.RequiresApproval = true
					c1.ArgsPreview = `{"env":"prod"}`
					return reply(call, c1), nil
				}
				return reply(call), nil
			}
			gate := make(chan struct{})
			h.tool = func(_ context.Context, call agentloop.ToolCall) (agentloop.ToolOutcome, error) {
				if err := waitGate(gate); err != nil {
					return agentloop.ToolOutcome{}, err
				}
				return okTool(call), nil
			}
			u := h.turn(ms, "t1", "ship it")
			var waiting, decided workflows.SessionView
			var toolsWhileWaiting int
			h.at(time.Minute, func() {
				waiting = h.state()
				toolsWhileWaiting = len(h.toolCalls())
			})
			wrong := h.send(time.Minute+time.Second, workflows.UpdateApprove, "approve-0", workflows.ApproveRequest{Call: "c-404", Approve: true})
			ap := h.send(2*time.Minute, workflows.UpdateApprove, "approve-1", tt.req)
			// The decided call's activity (run or record) holds at the gate.
			h.at(2*time.Minute+ms, func() {
				decided = h.state()
				close(gate)
			})
			late := h.send(time.Hour, workflows.UpdateApprove, "approve-2", workflows.ApproveRequest{Call: "c1", Approve: true})
			var after workflows.SessionView
			h.at(2*time.Hour, func() { after = h.state() })
			h.run(workflows.SessionInput{Session: "s1"})
			h.requireCancelled()

			equal(t, "Tool.Execute calls while waiting", toolsWhileWaiting, 0)
			equal(t, "waiting.Running", waiting.Running, "t1")
			if len(waiting.Approvals) != 1 || waiting.Approvals[0] != (workflows.PendingApproval{Turn: "t1", Call: "c1", Tool: "deploy", Args: `{"env":"prod"}`}) {
				t.Errorf("waiting.Approvals = %+v, want the deploy call", waiting.Approvals)
			}
			h.requireRejected(wrong, workflows.ErrTypeNotFound)
			h.requireOK(ap, "approve")
			h.requireRejected(late, workflows.ErrTypeNotFound)
			equal(t, "decided.Running", decided.Running, "t1")
			equal(t, "len(decided.Approvals) (a decided call is no longer pending)", len(decided.Approvals), 0)
			equal(t, "len(after.Approvals)", len(after.Approvals), 0)

			out := h.outcome(u)
			requireOutcome(t, out, "t1", agent.TypeCompleted, "", false)
			equal(t, "outcome.Steps", out.Steps, 2)
			c1 := h.toolCallsFor("c1")
			if len(c1) != 1 {
				t.Fatalf("c1: Tool.Execute called %d times, want 1", len(c1))
			}
			if tt.wantContent == "" {
				if c1[0].Synthetic != nil {
					t.Errorf("approved call recorded %+v instead of running", c1[0].Synthetic)
				}
			} else {
				if c1[0].Synthetic == nil {
					t.Fatal("denied call ran")
				}
				equal(t, "c1.Synthetic.Content", c1[0].Synthetic.Content, tt.wantContent)
				equal(t, "c1.Synthetic.IsError", c1[0].Synthetic.IsError, true)
			}
			equal(t, "step2.Leaf", h.modelCalls()[1].Leaf, c1[0].ResultEntryID)
		})
	}
}

// TestSessionQueueBound: behind a running turn, MaxQueuedTurns turns wait and
// the next is refused as busy; the waiting ones run in arrival order.
func TestSessionQueueBound(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	gate := make(chan struct{})
	h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		if call.Turn == "t0" {
			if err := waitGate(gate); err != nil {
				return agentloop.ModelResult{}, err
			}
		}
		return reply(call), nil
	}
	n := workflows.MaxQueuedTurns + 2 // running + queued + one too many
	us := make([]*update, n)
	for i := range us {
		us[i] = &update{}
	}
	req := func(i int) workflows.TurnRequest {
		return workflows.TurnRequest{Prompt: agent.Prompt{Text: fmt.Sprintf("p%d", i)}}
	}
	h.at(ms, func() { h.sendNow(us[0], workflows.UpdateTurn, "t0", req(0)) })
	h.when(func() bool { return h.modelStarted("t0", 1) }, func() {
		for i := 1; i < n; i++ {
			h.sendNow(us[i], workflows.UpdateTurn, fmt.Sprintf("t%d", i), req(i))
		}
	})
	var view workflows.SessionView
	h.when(us[n-1].finished, func() {
		view = h.state()
		close(gate)
	})
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()

	app := h.requireRejected(us[n-1], workflows.ErrTypeSessionBusy)
	equal(t, "busy.NonRetryable", app.NonRetryable(), false)
	equal(t, "view.Running", view.Running, "t0")
	var wantQueued, wantPrompts []string
	for i := 0; i < n-1; i++ {
		if i > 0 {
			wantQueued = append(wantQueued, fmt.Sprintf("t%d", i))
		}
		wantPrompts = append(wantPrompts, fmt.Sprintf("p%d", i))
		requireOutcome(t, h.outcome(us[i]), fmt.Sprintf("t%d", i), agent.TypeCompleted, "", false)
	}
	equalSlice(t, "view.Queued", view.Queued, wantQueued)
	equalSlice(t, "prompts the model saw", h.prompts(), wantPrompts)
}

// TestSessionIdempotency: a key already answered is answered again, not run.
func TestSessionIdempotency(t *testing.T) {
	t.Parallel()
	remembered := agentloop.Outcome{Turn: "k-old", Status: agent.TypeCompleted, Steps: 3, Marker: "m-old"}
	snapshot := func() *workflows.Snapshot {
		return &workflows.Snapshot{
			Opened:   true,
			IDPrefix: "snap",
			NextID:   10,
			Loop:     agentloop.State{Leaf: "L9"},
			Recent:   []workflows.RecentTurn{{Key: "k-old", Outcome: remembered}},
			Turns:    5,
		}
	}

	t.Run("same update ID after completion (test environment dedupe)", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		first := h.turn(ms, "k1", "hi")
		second := h.turn(time.Hour, "k1", "hi")
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		out1, out2 := h.outcome(first), h.outcome(second)
		requireOutcome(t, out1, "k1", agent.TypeCompleted, "", false)
		if fmt.Sprint(out1) != fmt.Sprint(out2) {
			t.Errorf("second outcome %+v, want %+v", out2, out1)
		}
		equal(t, "model calls", len(h.modelCalls()), 1)
	})

	t.Run("key remembered in Snapshot.Recent", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		old := h.turn(ms, "k-old", "hi again")
		fresh := h.turn(time.Hour, "k-new", "something new")
		var view workflows.SessionView
		h.at(2*time.Hour, func() { view = h.state() })
		h.run(workflows.SessionInput{Session: "s1", Snapshot: snapshot()})
		h.requireCancelled()

		got := h.outcome(old)
		if fmt.Sprint(got) != fmt.Sprint(remembered) {
			t.Errorf("outcome = %+v, want the remembered %+v", got, remembered)
		}
		equal(t, "Session.Open calls (snapshot is opened)", len(h.openCalls()), 0)
		requireOutcome(t, h.outcome(fresh), "k-new", agent.TypeCompleted, "", false)
		models := h.modelCalls()
		if len(models) != 1 {
			t.Fatalf("model called %d times, want 1 (only k-new)", len(models))
		}
		m := models[0]
		equal(t, "call.Turn", m.Turn, "k-new")
		user, ok := h.userEntry(m)
		if !ok {
			t.Fatalf("call.Leaf %q is not the turn's user entry", m.Leaf)
		}
		// prefix-nonce-counter: the chain's prefix and counter carry over.
		if !strings.HasPrefix(user.ID, "snap-") || !strings.HasSuffix(user.ID, "-11") {
			t.Errorf("user.ID = %q, want snap-<nonce>-11", user.ID)
		}
		equal(t, "user.ParentID", user.ParentID, "L9")
		equal(t, "call.EntryID", m.EntryID, strings.TrimSuffix(user.ID, "-11")+"-12")
		equal(t, "view.Turns", view.Turns, int64(6))
	})

	t.Run("remembered key is answered even when the queue is full", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		gate := make(chan struct{})
		h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
			if call.Turn == "t0" {
				if err := waitGate(gate); err != nil {
					return agentloop.ModelResult{}, err
				}
			}
			return reply(call), nil
		}
		h.turn(ms, "t0", "p0")
		old, busy := &update{}, &update{}
		h.when(func() bool { return h.modelStarted("t0", 1) }, func() {
			for i := 1; i <= workflows.MaxQueuedTurns; i++ {
				h.sendNow(&update{}, workflows.UpdateTurn, fmt.Sprintf("t%d", i), workflows.TurnRequest{Prompt: agent.Prompt{Text: "p"}})
			}
			h.sendNow(old, workflows.UpdateTurn, "k-old", workflows.TurnRequest{Prompt: agent.Prompt{Text: "again"}})
			h.sendNow(busy, workflows.UpdateTurn, "t-extra", workflows.TurnRequest{Prompt: agent.Prompt{Text: "one more"}})
		})
		var oldDoneEarly bool
		h.when(busy.finished, func() {
			_, _, oldDoneEarly, _, _ = old.snapshot()
			close(gate)
		})
		h.run(workflows.SessionInput{Session: "s1", Snapshot: snapshot()})
		h.requireCancelled()

		got := h.outcome(old)
		if fmt.Sprint(got) != fmt.Sprint(remembered) {
			t.Errorf("outcome = %+v, want the remembered %+v", got, remembered)
		}
		equal(t, "k-old answered while t0 still ran", oldDoneEarly, true)
		h.requireRejected(busy, workflows.ErrTypeSessionBusy)
		equal(t, "model calls", len(h.modelCalls()), 1+workflows.MaxQueuedTurns)
	})
}

// TestSessionInvalidTurn: a turn with neither text nor images is refused.
func TestSessionInvalidTurn(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	u := h.turn(ms, "t1", "  \n")
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()
	app := h.requireRejected(u, workflows.ErrTypeInvalidInput)
	equal(t, "NonRetryable", app.NonRetryable(), true)
	equal(t, "model calls", len(h.modelCalls()), 0)
}

// TestSessionContinueAsNew: after TurnsPerRun turns, with nothing waiting,
// the run continues as new carrying its snapshot.
func TestSessionContinueAsNew(t *testing.T) {
	t.Parallel()

	canInput := func(t *testing.T, h *harness) workflows.SessionInput {
		t.Helper()
		err := h.env.GetWorkflowError()
		if !workflow.IsContinueAsNewError(err) {
			t.Fatalf("workflow error = %v, want continue-as-new", err)
		}
		var can *workflow.ContinueAsNewError
		if !errors.As(err, &can) {
			t.Fatalf("cannot unwrap %T into a ContinueAsNewError", err)
		}
		equal(t, "next run type", can.WorkflowType.Name, workflows.SessionWorkflowType)
		var in workflows.SessionInput
		if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &in); err != nil {
			t.Fatalf("decode continue-as-new input: %v", err)
		}
		if in.Snapshot == nil {
			t.Fatal("continue-as-new input has no snapshot")
		}
		return in
	}
	recentKeys := func(t *testing.T, s *workflows.Snapshot) []string {
		t.Helper()
		var keys []string
		for _, r := range s.Recent {
			keys = append(keys, r.Key)
			equal(t, r.Key+" remembered status", r.Outcome.Status, agent.TypeCompleted)
			equal(t, r.Key+" remembered turn", r.Outcome.Turn, r.Key)
		}
		return keys
	}

	t.Run("after TurnsPerRun turns", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		u1 := h.turn(ms, "t1", "one")
		u2 := h.turn(time.Hour, "t2", "two")
		h.run(workflows.SessionInput{Session: "s1", TurnsPerRun: 2})

		in := canInput(t, h)
		requireOutcome(t, h.outcome(u1), "t1", agent.TypeCompleted, "", false)
		requireOutcome(t, h.outcome(u2), "t2", agent.TypeCompleted, "", false)
		models := h.modelCalls()
		if len(models) != 2 {
			t.Fatalf("model called %d times, want 2", len(models))
		}
		equal(t, "in.Session", in.Session, "s1")
		equal(t, "in.TurnsPerRun", in.TurnsPerRun, 2)
		s := in.Snapshot
		equal(t, "snapshot.Opened", s.Opened, true)
		equal(t, "snapshot.Loop.Leaf", s.Loop.Leaf, models[1].EntryID)
		equal(t, "snapshot.NextID", s.NextID, int64(4))
		equal(t, "snapshot.IDPrefix", s.IDPrefix, h.openCalls()[0].IDPrefix)
		equal(t, "snapshot.Turns", s.Turns, int64(2))
		equalSlice(t, "snapshot.Recent keys", recentKeys(t, s), []string{"t1", "t2"})
	})

	t.Run("not while turns wait", func(t *testing.T) {
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
		us := []*update{h.turn(ms, "t1", "one"), {}, {}}
		h.when(func() bool { return h.modelStarted("t1", 1) }, func() {
			h.sendNow(us[1], workflows.UpdateTurn, "t2", workflows.TurnRequest{Prompt: agent.Prompt{Text: "two"}})
			h.sendNow(us[2], workflows.UpdateTurn, "t3", workflows.TurnRequest{Prompt: agent.Prompt{Text: "three"}})
		})
		h.when(us[2].isAccepted, func() { close(gate) })
		h.run(workflows.SessionInput{Session: "s1", TurnsPerRun: 2})

		in := canInput(t, h)
		for i, u := range us {
			requireOutcome(t, h.outcome(u), fmt.Sprintf("t%d", i+1), agent.TypeCompleted, "", false)
		}
		equalSlice(t, "prompts the model saw", h.prompts(), []string{"one", "two", "three"})
		equal(t, "snapshot.Turns", in.Snapshot.Turns, int64(3))
		equal(t, "snapshot.NextID", in.Snapshot.NextID, int64(6))
		equalSlice(t, "snapshot.Recent keys", recentKeys(t, in.Snapshot), []string{"t1", "t2", "t3"})
	})

	t.Run("when the server suggests it", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		h.env.SetContinueAsNewSuggested(true)
		u := h.turn(ms, "t1", "one")
		h.run(workflows.SessionInput{Session: "s1"})

		in := canInput(t, h)
		requireOutcome(t, h.outcome(u), "t1", agent.TypeCompleted, "", false)
		equal(t, "in.TurnsPerRun", in.TurnsPerRun, 0)
		equal(t, "snapshot.Turns", in.Snapshot.Turns, int64(1))
		equalSlice(t, "snapshot.Recent keys", recentKeys(t, in.Snapshot), []string{"t1"})
	})

	t.Run("Recent keeps the last 64 outcomes", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		snap := &workflows.Snapshot{Opened: true, IDPrefix: "p", Loop: agentloop.State{Leaf: "L"}}
		for i := 0; i < 64; i++ {
			key := fmt.Sprintf("k%d", i)
			snap.Recent = append(snap.Recent, workflows.RecentTurn{Key: key, Outcome: agentloop.Outcome{Turn: key, Status: agent.TypeCompleted}})
		}
		h.turn(ms, "k64", "one more")
		h.run(workflows.SessionInput{Session: "s1", TurnsPerRun: 1, Snapshot: snap})

		recent := canInput(t, h).Snapshot.Recent
		if len(recent) != 64 {
			t.Fatalf("len(Recent) = %d, want 64", len(recent))
		}
		equal(t, "oldest kept", recent[0].Key, "k1")
		equal(t, "newest", recent[63].Key, "k64")
	})

	t.Run("carries a queued turn's abort in Recent", func(t *testing.T) {
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
		h.turn(ms, "t1", "one")
		u2, ab := &update{}, &update{}
		h.when(func() bool { return h.modelStarted("t1", 1) }, func() {
			h.sendNow(u2, workflows.UpdateTurn, "t2", workflows.TurnRequest{Prompt: agent.Prompt{Text: "two"}})
			h.sendNow(ab, workflows.UpdateAbort, "abort-t2", workflows.AbortRequest{Turn: "t2", Reason: "not needed"})
		})
		h.when(ab.finished, func() { close(gate) })
		h.turn(time.Hour, "t3", "three")
		h.run(workflows.SessionInput{Session: "s1", TurnsPerRun: 2})

		in := canInput(t, h)
		requireOutcome(t, h.outcome(u2), "t2", agent.TypeFailed, agent.CodeAborted, false)
		var keys []string
		for _, r := range in.Snapshot.Recent {
			keys = append(keys, r.Key)
		}
		equalSlice(t, "snapshot.Recent keys", keys, []string{"t2", "t1", "t3"})
		equal(t, "remembered t2", fmt.Sprint(in.Snapshot.Recent[0].Outcome), fmt.Sprint(h.outcome(u2)))
		equal(t, "snapshot.Turns (aborted queued turns do not count)", in.Snapshot.Turns, int64(2))
	})
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

// A steering message that arrives during the last allowed step does not turn
// a finished answer into max_steps; it runs as the next turn instead.
func TestSessionSteerAtLastStepBecomesFollowUp(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	gate := make(chan struct{})
	h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		res := reply(call)
		res.Settings = agentloop.Settings{MaxSteps: 1}
		if call.Turn == "t1" {
			if err := waitGate(gate); err != nil {
				return agentloop.ModelResult{}, err
			}
		}
		return res, nil
	}
	u1 := h.turn(ms, "t1", "first")
	st := &update{then: func() { close(gate) }}
	h.when(func() bool { return h.modelStarted("t1", 1) }, func() {
		h.sendNow(st, workflows.UpdateSteer, "steer-1", workflows.SteerRequest{Text: "one more thing"})
	})
	h.at(time.Hour, func() { h.env.CancelWorkflow() })
	h.run(workflows.SessionInput{Session: "s1", Snapshot: &workflows.Snapshot{Opened: true, IDPrefix: "p",
		Loop: agentloop.State{Settings: agentloop.Settings{MaxSteps: 1}}}})
	h.requireOK(st, "steer")
	requireOutcome(t, h.outcome(u1), "t1", agent.TypeCompleted, "", false)
	models := h.modelCalls()
	if p, _ := h.userEntry(models[len(models)-1]); len(models) != 2 || models[1].Turn != "t1-steer" || p.Message == nil || p.Message.Text != "one more thing" {
		t.Fatalf("model calls = %+v, want t1 then the follow-up with the steering text", models)
	}
}

// Once continue-as-new is due, new turns are refused (session_busy) until
// the queue drains, so a busy session still rolls over.
func TestSessionRolloverRefusesNewTurns(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	gate1, gate2 := make(chan struct{}), make(chan struct{})
	h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		gate := gate1
		if call.Turn == "t2" {
			gate = gate2
		}
		if err := waitGate(gate); err != nil {
			return agentloop.ModelResult{}, err
		}
		return reply(call), nil
	}
	h.turn(ms, "t1", "one")
	t2 := &update{}
	h.when(func() bool { return h.modelStarted("t1", 1) }, func() {
		// queued behind t1; after t1 the rollover is due (TurnsPerRun 1)
		h.sendNow(t2, workflows.UpdateTurn, "t2", workflows.TurnRequest{Prompt: agent.Prompt{Text: "two"}})
		h.at(0, func() { close(gate1) })
	})
	late := &update{}
	h.when(func() bool { return h.modelStarted("t2", 1) }, func() {
		h.sendNow(late, workflows.UpdateTurn, "t3", workflows.TurnRequest{Prompt: agent.Prompt{Text: "three"}})
		h.at(0, func() { close(gate2) })
	})
	h.run(workflows.SessionInput{Session: "s1", TurnsPerRun: 1})
	requireOutcome(t, h.outcome(t2), "t2", agent.TypeCompleted, "", false)
	h.requireRejected(late, workflows.ErrTypeSessionBusy)
	if err := h.env.GetWorkflowError(); !workflow.IsContinueAsNewError(err) {
		t.Fatalf("want continue-as-new after the queue drained, got %v", err)
	}
}
