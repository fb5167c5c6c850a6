package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/durable"
	"github.com/fastagent/fastagent/internal/ingress"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// TestDeleteSession: DELETE /sessions/{id} through a worker on the dev
// server. Refused requests (no token, another principal, a token without
// the control right, a running turn without force) change nothing; the
// owner's deletion ends the workflow and removes the transcript (404
// afterwards, gone from the list and the store); force ends a running
// turn with its session.
func TestDeleteSession(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(fastRetries)
	model := &branchModel{release: make(chan struct{}), slowAt: make(chan struct{})}
	e.kit.Model.Handle(model.handle)
	e.startWorker()
	hs := e.authIngress(func(s *ingress.Server) {
		s.Tokens.AddToken("invoker", "invoker-token", ingress.RightInvoke)
	})
	u := hs.URL
	req := func(method, path, tok string) (int, string) {
		t.Helper()
		st, b, _ := send(t, method, u+path, tok, "", nil)
		return st, b
	}
	invoke := func(session, text string) {
		t.Helper()
		st, b, _ := send(t, http.MethodPost, u+"/invoke", "alice-token", `{"session":"`+session+`","text":"`+text+`"}`, nil)
		if st != http.StatusOK || !strings.Contains(b, `"type":"completed"`) {
			t.Fatalf("invoke %s: %d %s", session, st, b)
		}
	}
	status := func(session string) enumspb.WorkflowExecutionStatus {
		t.Helper()
		d, err := e.client.DescribeWorkflowExecution(context.Background(), workflows.WorkflowID(session), "")
		if err != nil {
			t.Fatalf("describe %s: %v", session, err)
		}
		return d.GetWorkflowExecutionInfo().GetStatus()
	}
	entries := func(session string) int {
		t.Helper()
		es, err := e.kit.Store.Entries(context.Background(), session)
		if err != nil {
			t.Fatal(err)
		}
		return len(es)
	}
	invoke("gone", "first")
	invoke("gone", "second")
	invoke("kept", "hello")

	// Refused: nothing changes.
	for _, r := range []struct {
		tok  string
		want int
	}{{"", 401}, {"wrong-token", 401}, {"bob-token", 404}, {"invoker-token", 403}} {
		if st, b := req(http.MethodDelete, "/sessions/gone", r.tok); st != r.want {
			t.Errorf("delete with %q: %d %s, want %d", r.tok, st, b, r.want)
		}
	}
	if st, b := req(http.MethodGet, "/sessions/gone/transcript", "alice-token"); st != 200 || !strings.Contains(b, "second") {
		t.Fatalf("transcript after refused deletions: %d %s", st, b)
	}
	if s := status("gone"); s != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING || entries("gone") != 4 {
		t.Fatalf("after refused deletions: workflow %v, %d entries", s, entries("gone"))
	}

	// The owner deletes it: workflow closed, transcript gone.
	st, b := req(http.MethodDelete, "/sessions/gone", "alice-token")
	var d ingress.DeletedSession
	if st != 200 || json.Unmarshal([]byte(b), &d) != nil || d.Entries != 4 || len(d.Workflows) != 1 || d.Workflows[0] != workflows.WorkflowID("gone") {
		t.Fatalf("delete: %d %s", st, b)
	}
	if s := status("gone"); s != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
		t.Errorf("the deleted session's workflow is %v, want terminated", s)
	}
	for _, tok := range []string{"alice-token", "admin-token"} {
		if st, b := req(http.MethodGet, "/sessions/gone/transcript", tok); st != 404 || !strings.Contains(b, agent.CodeNoSuchSession) {
			t.Errorf("transcript of the deleted session (%s): %d %s, want 404", tok, st, b)
		}
	}
	if n := entries("gone"); n != 0 {
		t.Errorf("the store still holds %d entries of the deleted session", n)
	}
	if _, b := req(http.MethodGet, "/sessions", "admin-token"); strings.Contains(b, `"session":"gone"`) || !strings.Contains(b, `"session":"kept"`) {
		t.Errorf("the list after delete: %s", b)
	}
	if st, b := req(http.MethodDelete, "/sessions/gone", "admin-token"); st != 404 {
		t.Errorf("deleting it again: %d %s, want 404", st, b)
	}
	if st, b := req(http.MethodGet, "/sessions/kept/transcript", "alice-token"); st != 200 || !strings.Contains(b, "hello") {
		t.Errorf("another session after the delete: %d %s", st, b)
	}
	// The ID stays its owner's: another principal cannot take it; the
	// owner starts a fresh session under it, without the old history.
	if st, b, _ := send(t, http.MethodPost, u+"/invoke", "bob-token", `{"session":"gone","text":"mine now"}`, nil); st != 404 {
		t.Errorf("bob taking the deleted session's ID: %d %s, want 404", st, b)
	}
	invoke("gone", "anew")
	// Read at once: the answer is out when the turn's last model step has
	// recorded it, before the workflow hears of it.
	st, b = req(http.MethodGet, "/sessions/gone/transcript", "alice-token")
	if st != 200 || strings.Contains(b, "first") || !strings.Contains(b, "anew") {
		t.Errorf("the session ID used again: %d %s, want only the new turn", st, b)
	}
	if got := texts(model.lastTurnRequest(t)); strings.Contains(got, "first") || strings.Contains(got, "second") {
		t.Errorf("the new session's turn saw the deleted history: %s", got)
	}

	// A running turn refuses the deletion unless force.
	done := make(chan string, 1)
	go func() {
		_, b, _ := send(t, http.MethodPost, u+"/invoke", "alice-token", `{"session":"kept","text":"slow"}`, nil)
		done <- b
	}()
	select {
	case <-model.slowAt:
	case <-time.After(time.Minute):
		t.Fatal("the slow turn never reached the model")
	}
	if st, b := req(http.MethodDelete, "/sessions/kept", "alice-token"); st != http.StatusConflict || !strings.Contains(b, agent.CodeTurnRunning) || !strings.Contains(b, "force") {
		t.Errorf("delete during a turn: %d %s, want 409 turn_running", st, b)
	}
	if s := status("kept"); s != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING || entries("kept") < 2 {
		t.Fatalf("after the refused delete: workflow %v, %d entries", s, entries("kept"))
	}
	st, b = req(http.MethodDelete, "/sessions/kept?force=true", "alice-token")
	if st != 200 || json.Unmarshal([]byte(b), &d) != nil || d.Running == "" {
		t.Fatalf("forced delete: %d %s", st, b)
	}
	if s := status("kept"); s != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED || entries("kept") != 0 {
		t.Errorf("after the forced delete: workflow %v, %d entries", s, entries("kept"))
	}
	close(model.release)
	select {
	case b := <-done:
		if strings.Contains(b, `"type":"completed"`) {
			t.Errorf("the running turn completed after its session was deleted: %s", b)
		}
	case <-time.After(time.Minute):
		t.Error("the running turn's stream did not end after its session was deleted")
	}
}

// TestDeleteSessionEndsSubAgents: deleting (with force) a session whose
// turn waits on a sub-agent ends the sub-agent's workflow too and removes
// the sub-agent's stored session with the session's own.
func TestDeleteSessionEndsSubAgents(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(fastRetries + "delegation:\n  agents:\n    self: {}\n")
	e.startWorker()
	m := e.kit.Model
	hold := make(chan struct{})
	defer close(hold)
	m.EnqueueFor("delegate it", modelserver.Reply{ToolCalls: []modelserver.ToolCall{delegateCall("d1", "self", "work on HOLDKEY")}},
		modelserver.Reply{Text: []string{"done"}})
	m.EnqueueFor("HOLDKEY", modelserver.Reply{Text: []string{"never"}, Hold: hold})
	session := e.session("parent")
	ctx, cancel := context.WithCancel(agent.WithIdempotencyKey(context.Background(), "turn-1"))
	defer cancel()
	go func() {
		for range e.agent.Invoke(ctx, agent.Scope{Session: session}, agent.Prompt{Text: "delegate it"}) {
		}
	}()
	child := agentloop.DelegateSession(session, "turn-1", "d1")
	if !wait.Until(time.Minute, func() bool {
		for _, r := range m.Requests() {
			if strings.Contains(r.LastUserText(), "HOLDKEY") {
				return true
			}
		}
		return false
	}) {
		t.Fatal("the sub-agent never called the model")
	}
	if es, _ := e.kit.Store.Entries(context.Background(), child); len(es) == 0 {
		t.Fatalf("the sub-agent's session %q has no stored entries", child)
	}
	if _, err := e.agent.Delete(context.Background(), session, durable.DeleteOptions{}); agent.CodeOf(err) != agent.CodeTurnRunning {
		t.Fatalf("delete without force while delegating: %v, want turn_running", err)
	}
	d, err := e.agent.Delete(context.Background(), session, durable.DeleteOptions{Force: true})
	if err != nil {
		t.Fatalf("forced delete: %v", err)
	}
	if len(d.Workflows) != 2 || d.Workflows[1] != workflows.WorkflowID(child) || len(d.SubSessions) != 1 || d.SubSessions[0] != child {
		t.Errorf("deleted %+v, want the session's and the sub-agent's workflows and the sub-agent's session", d)
	}
	for _, id := range []string{workflows.WorkflowID(session), workflows.WorkflowID(child)} {
		var st enumspb.WorkflowExecutionStatus
		// A child asked to cancel may close as canceled just before its
		// termination; either way it is closed, not running.
		wait.Until(30*time.Second, func() bool {
			desc, err := e.client.DescribeWorkflowExecution(context.Background(), id, "")
			if err != nil {
				t.Fatalf("describe %s: %v", id, err)
			}
			st = desc.GetWorkflowExecutionInfo().GetStatus()
			return st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
		})
		if st != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED && st != enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED {
			t.Errorf("%s is %v after the delete, want closed", id, st)
		}
	}
	for _, s := range []string{session, child} {
		if es, _ := e.kit.Store.Entries(context.Background(), s); len(es) != 0 {
			t.Errorf("the store still holds %d entries of %s", len(es), s)
		}
	}
}
