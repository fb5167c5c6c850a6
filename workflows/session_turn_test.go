package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

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
	equal(t, "begin.Window (left to the worker's configuration)", begins[0].Window, time.Duration(0))
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
	// The prompt's ID is a digest of key, parent and prompt; the reply's
	// carries the chain's prefix.
	if e.ID == c.EntryID || !strings.HasPrefix(e.ID, wire.PromptIDPrefix) || !strings.HasPrefix(c.EntryID, prefix) {
		t.Errorf("entry IDs user=%q reply=%q: want distinct, the reply prefixed %q", e.ID, c.EntryID, prefix)
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
	// The prompt's ID comes from the turn key and its parent, behind the
	// chain's prefix; the others from the workflow's counter, in allocation
	// order, behind the chain's prefix and the turn's nonce.
	prefix := ids[1][:strings.LastIndex(ids[1], "-")]
	if !strings.HasPrefix(ids[0], wire.PromptIDPrefix) {
		t.Errorf("prompt ID %q, want p<digest of key, parent and prompt>", ids[0])
	}
	for i, id := range ids[1:] {
		equal(t, fmt.Sprintf("ids[%d]", i+1), id, fmt.Sprintf("%s-%d", prefix, i+2))
	}

	equal(t, "view.Leaf", view.Leaf, m2.EntryID)
	equalSlice(t, "view.Activated", view.Activated, []string{"web_fetch"})
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
				// Deliberate: silent past the heartbeat timeout (wall time, as
				// in TestSessionToolFailure's heartbeat case).
				time.Sleep(tt.stall)
				res := tt.result
				res.EntryID = call.EntryID
				return res, nil
			}
			u := h.turn(ms, "t1", "hi")
			h.run(workflows.SessionInput{Session: "s1", Snapshot: tt.snapshot})
			h.requireCancelled()

			out := h.outcome(u)
			// A failed model activity's error type is a contract code the
			// failed event carries.
			wantCode := ""
			var app *temporal.ApplicationError
			if errors.As(tt.err, &app) {
				wantCode = app.Type()
			}
			requireOutcome(t, out, "t1", agent.TypeFailed, wantCode, tt.wantRetryable)
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

// TestSessionInvalidTurn: a turn with neither text nor images is refused.
func TestSessionInvalidTurn(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	u := h.turn(ms, "t1", "  \n")
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()
	app := h.requireRejected(u, agent.CodeInvalidCommand)
	equal(t, "NonRetryable", app.NonRetryable(), true)
	equal(t, "model calls", len(h.modelCalls()), 0)
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

	app := h.requireRejected(us[n-1], agent.CodeSessionBusy)
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

// TestSessionRecordHeartbeats: a turn's record runs with a heartbeat
// timeout of a few seconds, so that a worker that dies while recording a
// turn that has answered (the next turn waits for the record) is noticed
// in seconds, not after the record's one-minute start-to-close timeout.
func TestSessionRecordHeartbeats(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	u := h.turn(ms, "t1", "hello")
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()
	requireOutcome(t, h.outcome(u), "t1", agent.TypeCompleted, "", false)
	h.mu.Lock()
	hbs := append([]time.Duration(nil), h.recordHeartbeats...)
	h.mu.Unlock()
	if len(hbs) != 1 {
		t.Fatalf("Turn.Record ran %d times, want 1", len(hbs))
	}
	if hbs[0] <= 0 || hbs[0] > 10*time.Second {
		t.Errorf("Turn.Record heartbeat timeout = %s, want a few seconds (at most 10 s)", hbs[0])
	}
}
