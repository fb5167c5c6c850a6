package localagent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/hooks"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/localagent"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
)

// Go hooks registered on the worker: before-agent-start adds to the system
// prompt, the context transform rewrites what the model sees, before-tool-call
// blocks a call with a reason, after-tool-call patches a result.
func TestHooks(t *testing.T) {
	k := testkit.New(t)
	bus := feed.NewInProcess()
	defer bus.Close()
	acts := k.Activities(bus)
	acts.Hooks = hooks.Hooks{
		BeforeAgentStart: func(_ context.Context, turn hooks.TurnInfo) (string, error) {
			return "Hook says: be brief.", nil
		},
		TransformContext: func(_ context.Context, _ hooks.TurnInfo, msgs []hooks.Message) ([]hooks.Message, error) {
			for i := range msgs {
				msgs[i].Text = strings.ReplaceAll(msgs[i].Text, "s3cr3t", "[redacted]")
			}
			return msgs, nil
		},
		BeforeToolCall: func(_ context.Context, call agent.ToolCall) (bool, string) {
			return strings.Contains(string(call.Args), "forbidden"), "no forbidden notes"
		},
		AfterToolCall: func(_ context.Context, call agent.ToolCall, res agent.ToolResult) agent.ToolResult {
			res.Content = "patched: " + res.Content
			return res
		},
	}
	a := &localagent.Agent{Acts: acts, MaxRetryDelay: 100 * time.Millisecond}
	k.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{
			{ID: "h1", Name: "counter", Args: `{"note":"fine"}`},
			{ID: "h2", Name: "counter", Args: `{"note":"forbidden"}`},
		}},
		modelserver.Reply{Text: []string{"done"}},
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var ended = map[string]agent.Event{}
	var term agent.Event
	for ev := range a.Invoke(ctx, agent.Scope{Session: "hooks"}, agent.Prompt{Text: "my password is s3cr3t"}) {
		if ev.Type == agent.TypeToolEnded {
			ended[ev.ID] = ev
		}
		if ev.IsTerminal() {
			term = ev
		}
	}
	if term.Type != agent.TypeCompleted {
		t.Fatalf("turn: %+v", term)
	}
	if k.Counter.Runs("hooks") != 1 {
		t.Errorf("counter ran %d times, want 1 (the forbidden call is blocked)", k.Counter.Runs("hooks"))
	}
	if got := ended["h1"]; got.IsError || got.Content != "patched: count=1" {
		t.Errorf("h1 result = %+v, want the after-tool-call patch", got)
	}
	if got := ended["h2"]; !got.IsError || !strings.Contains(got.Content, "no forbidden notes") {
		t.Errorf("h2 result = %+v, want blocked with the reason", got)
	}
	reqs := k.Model.Requests()
	first := reqs[0]
	if sys := first.Messages[0]; sys.Role != "system" || !strings.Contains(sys.Content, "Hook says: be brief.") {
		t.Errorf("system prompt lacks the before-agent-start text: %.200q", sys.Content)
	}
	if strings.Contains(string(first.Raw), "s3cr3t") || !strings.Contains(first.LastUserText(), "[redacted]") {
		t.Errorf("context transform not applied: %q", first.LastUserText())
	}
	entries, _ := k.Store.Entries(ctx, "hooks")
	if !strings.Contains(entries[0].Message.Text, "s3cr3t") {
		t.Error("the transform must not change the stored transcript")
	}
}
