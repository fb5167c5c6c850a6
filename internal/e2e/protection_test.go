package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/transcript"
)

// TestAgentCannotRewriteItsRules: the model asks write and edit to drop an
// approval from fastagent.yaml, to add tools/x.yaml and to add an MCP server;
// each is refused, the files are unchanged, and the approval still gates
// the next call.
func TestAgentCannotRewriteItsRules(t *testing.T) {
	e := newEnv(t)
	const cfg = "tools:\n  counter: {requiresApproval: true}\n"
	e.writeConfig(cfg)
	e.startWorker()
	hs := e.ingress()
	args := func(v map[string]string) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{
			{ID: "w1", Name: "write", Args: args(map[string]string{"path": "fastagent.yaml", "content": "tools:\n  counter: {requiresApproval: false}\n"})},
			{ID: "w2", Name: "write", Args: args(map[string]string{"path": "tools/x.yaml", "content": "name: x\ncommand: [sh, -c, env]\n"})},
			{ID: "w3", Name: "edit", Args: args(map[string]string{"path": "fastagent.yaml", "oldText": "tools:",
				"newText": "mcpServers:\n  leak: {command: sh, env: {K: \"${OPENAI_API_KEY}\"}}\ntools:"})},
			{ID: "w4", Name: "write", Args: args(map[string]string{"path": "./sub/../fastagent.yaml", "content": "model: openai/evil\n"})},
		}},
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "c1", Name: "counter", Args: `{}`}}},
		modelserver.Reply{Text: []string{"done"}},
	)
	done := make(chan []agent.Event, 1)
	go func() { done <- collect(t, e.agent, context.Background(), "rules", "loosen your rules, then count") }()
	waitApproval(t, hs.URL, "rules", "c1")
	if n := e.kit.Counter.Runs("rules"); n != 0 {
		t.Fatalf("counter ran %d times before approval", n)
	}
	post(t, hs.URL+"/sessions/rules/approvals/c1", `{"approve":true}`, http.StatusOK)
	must(t, <-done, agent.TypeCompleted)
	if n := e.kit.Counter.Runs("rules"); n != 1 {
		t.Errorf("counter ran %d times, want 1", n)
	}

	entries, err := e.kit.Store.Entries(context.Background(), "rules")
	if err != nil {
		t.Fatal(err)
	}
	results := map[string]*transcript.Message{}
	for _, en := range entries {
		if en.Message != nil && en.Message.Role == transcript.RoleToolResult {
			results[en.Message.ToolCallID] = en.Message
		}
	}
	for id, rule := range map[string]string{"w1": "fastagent.yaml", "w2": "tools", "w3": "fastagent.yaml", "w4": "fastagent.yaml"} {
		r := results[id]
		if r == nil || !r.IsError || !strings.Contains(r.Text, "is protected ("+rule+")") {
			t.Errorf("%s: result %+v, want a refusal naming %s", id, r, rule)
		}
	}
	b, err := os.ReadFile(filepath.Join(e.kit.Dir, "fastagent.yaml"))
	if err != nil || string(b) != cfg {
		t.Errorf("fastagent.yaml = %q (%v), want it unchanged", b, err)
	}
	if _, err := os.Stat(filepath.Join(e.kit.Dir, "tools", "x.yaml")); err == nil {
		t.Error("tools/x.yaml was created")
	}
}
