package activities_test

import (
	"encoding/json"
	"testing"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// TestGenerate: Model.Generate stores the step's entries and the reply under
// the IDs the workflow chose, calls the model only when no reply is stored
// yet, and classifies model errors for Temporal's retry policy.
func TestGenerate(t *testing.T) {
	t.Parallel()
	const session, turn = "s1", "t1"
	user := message("u1", "root", transcript.Message{Role: transcript.RoleUser, Text: "what is 2+2?"})
	tests := []struct {
		name string
		// stored is a reply already stored under the call's EntryID.
		stored *transcript.Message
		script []modelserver.Reply
		// wantRequests is how many requests the model server sees.
		wantRequests int
		// wantErrType, when set, is the activity's error type; wantRetry
		// whether Temporal may retry it.
		wantErrType string
		wantRetry   bool
		check       func(t *testing.T, e *env, res agentloop.ModelResult)
	}{
		{
			name:         "new reply: the model is called once and its reply stored",
			script:       []modelserver.Reply{{Text: []string{"fo", "ur"}}},
			wantRequests: 1,
			check: func(t *testing.T, e *env, res agentloop.ModelResult) {
				reqs := e.kit.Model.Requests()
				if got := reqs[0].LastUserText(); got != "what is 2+2?" {
					t.Errorf("model saw last user text %q, want the prepended prompt", got)
				}
				if _, ok := e.stored(session, "u1"); !ok {
					t.Error("the prepended user entry was not stored")
				}
				got, ok := e.stored(session, "a1")
				if !ok {
					t.Fatal("the reply was not stored under the call's EntryID")
				}
				if got.ParentID != "u1" || got.Message.Role != transcript.RoleAssistant || got.Message.Text != "four" {
					t.Errorf("stored reply = parent %q, %+v; want below u1, assistant text %q", got.ParentID, got.Message, "four")
				}
				if res.StopReason != transcript.StopEnd || len(res.Calls) != 0 {
					t.Errorf("result = %+v, want a final answer", res)
				}
				msgs := e.feedUntil(session, turn, feed.KindEnd)
				var text string
				for _, m := range msgs {
					if m.Kind == feed.KindEvent && m.Event.Type == agent.TypeText {
						text += m.Event.Delta
					}
				}
				if text != "four" {
					t.Errorf("feed deltas = %q, want %q", text, "four")
				}
				if last := msgs[len(msgs)-1]; last.Marker != activities.ModelMarker(turn, 1) {
					t.Errorf("end marker = %q, want %q", last.Marker, activities.ModelMarker(turn, 1))
				}
			},
		},
		{
			name: "reply already stored: the model is not called again",
			stored: &transcript.Message{Role: transcript.RoleAssistant, StopReason: transcript.StopToolUse, ToolCalls: []transcript.ToolCall{
				{ID: "c1", Name: testkit.CounterName, Args: json.RawMessage(`{"note": "once"}`)},
				{ID: "c2", Name: "no_such_tool", Args: json.RawMessage(`{}`)},
			}},
			// A scripted reply the activity must not consume.
			script:       []modelserver.Reply{{Text: []string{"a second answer"}}},
			wantRequests: 0,
			check: func(t *testing.T, e *env, res agentloop.ModelResult) {
				if res.StopReason != transcript.StopToolUse || len(res.Calls) != 2 {
					t.Fatalf("result = %+v, want the stored reply's two calls", res)
				}
				c1, c2 := res.Calls[0], res.Calls[1]
				if c1.ID != "c1" || !c1.Known || c1.Idempotent || c1.ArgsPreview != `{"note":"once"}` {
					t.Errorf("call 1 = %+v, want the known, non-idempotent counter call", c1)
				}
				if c2.ID != "c2" || c2.Known {
					t.Errorf("call 2 = %+v, want an unknown tool", c2)
				}
				e.feedUntil(session, turn, feed.KindEnd)
			},
		},
		{
			name:         "refused request (401): not retried",
			script:       []modelserver.Reply{{Status: 401, Message: "Incorrect API key provided"}},
			wantRequests: 1,
			wantErrType:  agent.CodeModel,
			wantRetry:    false,
		},
		{
			name:         "context too long (400 context_length_exceeded): context_overflow, not retried",
			script:       []modelserver.Reply{modelserver.ContextLengthExceeded(4000, 5000)},
			wantRequests: 1,
			wantErrType:  agent.CodeContextOverflow,
			wantRetry:    false,
		},
		{
			name:         "overloaded model (500): retried",
			script:       []modelserver.Reply{{Status: 500, Message: "upstream overloaded"}},
			wantRequests: 1,
			wantErrType:  agent.CodeModel,
			wantRetry:    true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.store(session, message("root", "", transcript.Message{Role: transcript.RoleUser, Text: "earlier"}))
			call := agentloop.ModelCall{Session: session, Turn: turn, Step: 1, Leaf: "root", Prepend: []transcript.Entry{user}, EntryID: "a1", MaxAttempts: 3}
			if tt.stored != nil {
				e.store(session, user, message("a1", "u1", *tt.stored))
			}
			e.kit.Model.Enqueue(tt.script...)
			res, err := e.generate(call)
			if got := e.kit.Model.Count(); got != tt.wantRequests {
				t.Errorf("model server saw %d requests, want %d", got, tt.wantRequests)
			}
			if tt.wantErrType != "" {
				if err == nil {
					t.Fatalf("Generate succeeded with %+v, want a %s error", res, tt.wantErrType)
				}
				app := appError(t, err)
				if app.Type() != tt.wantErrType || app.NonRetryable() == tt.wantRetry {
					t.Errorf("error type %q non-retryable=%v, want %q non-retryable=%v (%v)", app.Type(), app.NonRetryable(), tt.wantErrType, !tt.wantRetry, err)
				}
				if _, ok := e.stored(session, "a1"); ok {
					t.Error("a failed call stored a reply")
				}
				return
			}
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			if res.EntryID != "a1" || res.Marker != activities.ModelMarker(turn, 1) {
				t.Errorf("result EntryID %q Marker %q, want a1 and %q", res.EntryID, res.Marker, activities.ModelMarker(turn, 1))
			}
			if tt.check != nil {
				tt.check(t, e, res)
			}
		})
	}
}
