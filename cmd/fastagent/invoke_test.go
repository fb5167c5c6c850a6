package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/fastagent/fastagent/agent"
)

// Sub-agents' progress prints as whole "agent: line" lines per delegate
// call, a nested sub-agent named by its path, and the rest of a call's
// text when the call ends.
func TestSubAgentLines(t *testing.T) {
	var out bytes.Buffer
	l := subAgentLines{}
	text := func(d string) agent.Event { return agent.Event{Type: agent.TypeText, Delta: d} }
	l.print(&out, agent.Delegated("d1", "reviewer", text("looks ")))
	l.print(&out, agent.Delegated("d2", "self", text("other\n")))
	l.print(&out, agent.Delegated("d1", "reviewer", text("fine\nbut")))
	l.print(&out, agent.Delegated("d1", "reviewer", agent.ToolStarted("t1", "read", json.RawMessage(`{"path":"a.go"}`))))
	l.print(&out, agent.Delegated("d1", "reviewer", agent.Delegated("n1", "linter", text("nested\n"))))
	l.flush(&out, "d1")
	l.flush(&out, "d1")
	want := "  self: other\n  reviewer: looks fine\n  reviewer → read {\"path\":\"a.go\"}\n  reviewer/linter: nested\n  reviewer: but\n"
	if out.String() != want {
		t.Errorf("printed\n%s\nwant\n%s", out.String(), want)
	}
}

// --agent addresses one agent's routes under the ingress's address.
func TestAgentBase(t *testing.T) {
	for _, c := range []struct{ base, agent, want string }{
		{"http://127.0.0.1:8787", "", "http://127.0.0.1:8787"},
		{"http://127.0.0.1:8787/", "", "http://127.0.0.1:8787"},
		{"http://127.0.0.1:8787/", "reviewer", "http://127.0.0.1:8787/agents/reviewer"},
		{"https://a.example/x", "a b", "https://a.example/x/agents/a%20b"},
	} {
		if got := agentBase(c.base, c.agent); got != c.want {
			t.Errorf("agentBase(%q, %q) = %q, want %q", c.base, c.agent, got, c.want)
		}
	}
}

// A hook event prints as which hook, where, what it decided and why.
func TestHookLine(t *testing.T) {
	for _, c := range []struct {
		ev   agent.Event
		want string
	}{
		{agent.HookRan("guard", "before_tool", "b1", "deny", "no rm -rf", ""), "⚑ hook guard (before_tool b1): deny — no rm -rf"},
		{agent.HookRan("policy", "turn_end", "", "allow", "", "it timed out after 10s"), "⚑ hook policy (turn_end): allow (failed: it timed out after 10s)"},
		{agent.HookRan("", "after_tool", "c2", "deny", "", "the after_tool hooks could not run"), "⚑ hooks (after_tool c2): deny (failed: the after_tool hooks could not run)"},
	} {
		if got := hookLine(c.ev); got != c.want {
			t.Errorf("got  %q\nwant %q", got, c.want)
		}
	}
}
