package agentloop_test

import (
	"testing"

	"github.com/fastagent/fastagent/workflows/agentloop"
)

// Every session a delegation derives has a sub-agent's shape; sessions
// clients name do not (unless they take that shape on purpose).
func TestIsSubAgentSession(t *testing.T) {
	named, _ := agentloop.DelegateStore("s", "t", "c", "reviewer", "notes")
	for _, id := range []string{agentloop.DelegateSession("s", "t", "c"), named, agentloop.DelegateSession(named, agentloop.DelegateTurn, "c2"),
		agentloop.DelegateSession("slack:T1:C1:1700000000.0001", "k", "c")} {
		if !agentloop.IsSubAgentSession(id) {
			t.Errorf("IsSubAgentSession(%q) = false", id)
		}
	}
	for _, id := range []string{"s", "team/notes", "slack:T1:C1:1700000000.0001", "github:o/r#1", "s/delegate-xyz", "s/Self:Notes", "reviewer/my-session"} {
		if agentloop.IsSubAgentSession(id) {
			t.Errorf("IsSubAgentSession(%q) = true", id)
		}
	}
}
