package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/workflows"
)

// An approval over HTTP binds to what the approver saw: GET /sessions/{id}
// shows the pending call's arguments with their hash and the tool
// definition's hash; an approve request whose hashes differ is refused
// (409 call_changed) and the call stays pending; matching hashes approve
// it; a request without hashes approves as before.
func TestApprovalBoundToWhatWasShown(t *testing.T) {
	e := newEnv(t)
	e.writeConfig("tools:\n  counter: {requiresApproval: true}\n")
	e.startWorker()
	hs := e.ingress()
	const session = "approve-bound"
	e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "b1", Name: "counter", Args: `{"note":"shown"}`}}},
		modelserver.Reply{Text: []string{"counted"}},
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "b2", Name: "counter", Args: `{}`}}},
		modelserver.Reply{Text: []string{"counted again"}},
	)
	done := make(chan []agent.Event, 1)
	go func() { done <- collect(t, e.agent, context.Background(), session, "count once") }()
	waitApproval(t, hs.URL, session, "b1")
	pending := func() []workflows.PendingApproval {
		t.Helper()
		st, b, _ := send(t, http.MethodGet, hs.URL+"/sessions/"+session, "", "", nil)
		var v workflows.SessionView
		if err := json.Unmarshal([]byte(b), &v); st != http.StatusOK || err != nil {
			t.Fatalf("state: %d %s", st, b)
		}
		return v.Approvals
	}
	shown := pending()
	if len(shown) != 1 || string(shown[0].Args) != `{"note":"shown"}` || shown[0].ArgsHash != activities.ArgsHash(shown[0].Args) ||
		!strings.HasPrefix(shown[0].DefinitionHash, "sha256:") {
		t.Fatalf("pending approvals %+v, want b1 with its arguments and both hashes", shown)
	}
	approve := func(call, body string) (int, string) {
		t.Helper()
		st, b, _ := send(t, http.MethodPost, hs.URL+"/sessions/"+session+"/approvals/"+call, "", body, nil)
		return st, b
	}
	other := activities.ArgsHash(json.RawMessage(`{"note":"other"}`))
	for name, body := range map[string]string{
		"other arguments":           `{"approve":true,"argsHash":"` + other + `","definitionHash":"` + shown[0].DefinitionHash + `"}`,
		"other definition":          `{"approve":true,"argsHash":"` + shown[0].ArgsHash + `","definitionHash":"sha256:0000"}`,
		"other arguments only sent": `{"approve":true,"argsHash":"` + other + `"}`,
	} {
		st, b := approve("b1", body)
		if st != http.StatusConflict || !strings.Contains(b, agent.CodeCallChanged) || !strings.Contains(b, "changed") {
			t.Errorf("%s: %d %s, want 409 %s saying the call changed", name, st, b, agent.CodeCallChanged)
		}
	}
	if now := pending(); len(now) != 1 || now[0].Call != "b1" {
		t.Fatalf("after refused approvals: pending %+v, want b1 still waiting", now)
	}
	if n := e.kit.Counter.Runs(session); n != 0 {
		t.Fatalf("the counter ran %d times before its approval", n)
	}
	if st, b := approve("b1", `{"approve":true,"argsHash":"`+shown[0].ArgsHash+`","definitionHash":"`+shown[0].DefinitionHash+`"}`); st != http.StatusOK {
		t.Fatalf("approve with the hashes shown: %d %s", st, b)
	}
	must(t, <-done, agent.TypeCompleted)
	if n := e.kit.Counter.Runs(session); n != 1 {
		t.Errorf("approved call ran %d times, want 1", n)
	}

	// Without hashes: approved as before.
	go func() { done <- collect(t, e.agent, context.Background(), session, "count again") }()
	waitApproval(t, hs.URL, session, "b2")
	if st, b := approve("b2", `{"approve":true}`); st != http.StatusOK {
		t.Fatalf("approve without hashes: %d %s", st, b)
	}
	must(t, <-done, agent.TypeCompleted)
	if n := e.kit.Counter.Runs(session); n != 2 {
		t.Errorf("counter ran %d times, want 2", n)
	}
}
