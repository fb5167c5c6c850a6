package activities_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// routingConfig routes chat and tool steps to their own models and lists a
// fallback; the kit's FASTAGENT_MODEL takes models[0]'s place.
const routingConfig = "chatModel: openai/chat-m\ntoolModel: openai/tool-m\nmodels: [openai/primary, openai/backup]\nretry:\n  fallbackAfter: 5s\n"

// TestGenerateRoutesAndFallsBack: the step's model follows chatModel and
// toolModel, call.Fallback picks the chain's next model, and a retryable
// failure on the last attempt (or a long rate limit) hands the step on with
// ErrModelFallback and a retrying event naming the fallback.
func TestGenerateRoutesAndFallsBack(t *testing.T) {
	t.Parallel()
	const session, turn = "s1", "t1"
	tests := []struct {
		name       string
		afterTools bool
		fallback   int
		attempt    int // this model's attempt (1-based)
		script     modelserver.Reply
		wantModel  string
		wantErr    string // "" success; else the error type
		wantRetry  bool
		wantReason string // the retrying event's reason prefix, if any
	}{
		{name: "chat step", script: modelserver.Reply{Text: []string{"hi"}}, attempt: 1, wantModel: "chat-m"},
		{name: "step after tools", afterTools: true, script: modelserver.Reply{Text: []string{"hi"}}, attempt: 1, wantModel: "tool-m"},
		{name: "fallback model", fallback: 1, script: modelserver.Reply{Text: []string{"hi"}}, attempt: 1, wantModel: "backup"},
		{name: "500 before the last attempt: retried", script: modelserver.Reply{Status: 500, Message: "overloaded"}, attempt: 1,
			wantModel: "chat-m", wantErr: agent.CodeModel, wantRetry: true},
		{name: "500 on the last attempt: falls back", script: modelserver.Reply{Status: 500, Message: "overloaded"}, attempt: 3,
			wantModel: "chat-m", wantErr: wire.ErrModelFallback, wantReason: "falling back to openai/backup"},
		{name: "long rate limit: falls back at once", script: modelserver.Reply{Status: 429, Message: "slow down", RetryAfter: "60"}, attempt: 1,
			wantModel: "chat-m", wantErr: wire.ErrModelFallback, wantReason: "falling back to openai/backup"},
		{name: "short rate limit: retried", script: modelserver.Reply{Status: 429, Message: "slow down", RetryAfter: "1"}, attempt: 1,
			wantModel: "chat-m", wantErr: agent.CodeModel, wantRetry: true},
		{name: "last model of the chain: no fallback", fallback: 1, script: modelserver.Reply{Status: 500, Message: "overloaded"}, attempt: 3,
			wantModel: "backup", wantErr: agent.CodeModel, wantRetry: true},
		{name: "auth error: no fallback", script: modelserver.Reply{Status: 401, Message: "bad key"}, attempt: 3,
			wantModel: "chat-m", wantErr: agent.CodeModel},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			if err := e.kit.WriteConfig(routingConfig); err != nil {
				t.Fatal(err)
			}
			user := message("u1", "", transcript.Message{Role: transcript.RoleUser, Text: "hello"})
			call := agentloop.ModelCall{Session: session, Turn: turn, Step: 1, Prepend: []transcript.Entry{user}, EntryID: "a1",
				MaxAttempts: 3, AfterTools: tt.afterTools, Fallback: tt.fallback}
			e.kit.Model.Enqueue(tt.script)
			_, err := e.kit.Activities(e.bus).RunModel(context.Background(), call, tt.attempt)
			if reqs := e.kit.Model.Requests(); len(reqs) != 1 || reqs[0].Model != tt.wantModel {
				t.Fatalf("requests %+v, want one to %s", reqs, tt.wantModel)
			}
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Generate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Generate succeeded, want a %s error", tt.wantErr)
			}
			app := appError(t, err)
			if app.Type() != tt.wantErr || app.NonRetryable() == tt.wantRetry {
				t.Errorf("error type %q non-retryable=%v, want %q non-retryable=%v (%v)", app.Type(), app.NonRetryable(), tt.wantErr, !tt.wantRetry, err)
			}
			if tt.wantReason == "" {
				return
			}
			var reason string
			for _, m := range e.feedUntil(session, turn, feed.KindEvent) {
				if m.Event != nil && m.Event.Type == agent.TypeRetrying {
					reason = m.Event.Reason
				}
			}
			if !strings.HasPrefix(reason, tt.wantReason) {
				t.Errorf("retrying reason %q, want %q…", reason, tt.wantReason)
			}
		})
	}
}
