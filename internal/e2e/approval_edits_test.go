package e2e

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/httpagent"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
)

// Conditional approvals and approval with edits, through the dev server:
//   - bash requires approval unless the command is git status, git diff
//     or ls: `git status` runs at once (no approval_requested, never
//     pending) while `ls; rm x` waits;
//   - an edit of a call that is not waiting (the git status call) is
//     refused 404 and changes nothing; bob (may approve, not the session's
//     owner, not listed) cannot edit alice's call;
//   - alice approves with edits over HTTP: the tool runs the edited
//     command once (x survives), and the model reads what was changed.
func TestApprovalWithEditsAndUnless(t *testing.T) {
	e := newEnv(t)
	e.writeConfig("tools:\n  bash:\n    requiresApproval:\n      unless:\n        command: \"^(git status|git diff|ls)( |$)\"\n")
	if err := os.WriteFile(filepath.Join(e.kit.Dir, "x"), []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.startWorker()
	hs := e.authIngress(nil)
	const session = "approve-edits"
	e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "g1", Name: "bash", Args: `{"command":"git status"}`}}},
		modelserver.Reply{Text: []string{"looked"}},
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "e1", Name: "bash", Args: `{"command":"ls; rm x"}`}}},
		modelserver.Reply{Text: []string{"done"}},
	)
	client := &httpagent.Agent{BaseURL: hs.URL, Token: "alice-token"}
	approve := func(token, call, body string) (int, string) {
		t.Helper()
		st, b, _ := send(t, http.MethodPost, hs.URL+"/sessions/"+session+"/approvals/"+call, token, body, nil)
		return st, b
	}

	// git status matches unless: it runs without waiting for anyone.
	evs := collect(t, client, context.Background(), session, "look around")
	must(t, evs, agent.TypeCompleted)
	ended := false
	for _, ev := range evs {
		if ev.Type == agent.TypeApprovalRequested {
			t.Fatalf("git status waited for approval: %+v", ev)
		}
		ended = ended || (ev.Type == agent.TypeToolEnded && ev.ID == "g1")
	}
	if !ended {
		t.Fatalf("git status did not run: %+v", evs)
	}
	// An edit of a call that is not waiting is refused.
	if st, b := approve("alice-token", "g1", `{"decision":"approve","args":{"command":"rm x"}}`); st != http.StatusNotFound || !strings.Contains(b, "waiting") {
		t.Errorf("edit of a call not waiting: %d %s, want 404 saying nothing waits", st, b)
	}

	// ls; rm x chains a command: it waits.
	type result struct {
		evs []agent.Event
	}
	done := make(chan result, 1)
	go func() { done <- result{collect(t, client, context.Background(), session, "clean up")} }()
	waitApprovalAuth(t, hs.URL, "alice-token", session, "e1")
	if st, b := approve("bob-token", "e1", `{"decision":"approve","args":{"command":"rm x"}}`); st == http.StatusOK {
		t.Errorf("bob, not an approver of alice's session, edited her call: %d %s", st, b)
	}
	if st, b := approve("alice-token", "e1", `{"decision":"approve","args":{"command":"ls","bogus":`); st != http.StatusBadRequest {
		t.Errorf("malformed edit: %d %s, want 400", st, b)
	}
	if st, b := approve("alice-token", "e1", `{"decision":"approve","args":{"command":"echo edited-run"}}`); st != http.StatusOK || !strings.Contains(b, `"edited":true`) {
		t.Fatalf("approve with edits: %d %s", st, b)
	}
	r := <-done
	must(t, r.evs, agent.TypeCompleted)
	if b, err := os.ReadFile(filepath.Join(e.kit.Dir, "x")); err != nil || string(b) != "keep me" {
		t.Errorf("x after the edited call: %q %v, want it untouched (rm x was edited away)", b, err)
	}
	runs := 0
	for _, ev := range r.evs {
		if ev.Type == agent.TypeToolStarted && ev.ID == "e1" {
			runs++
			if !strings.Contains(string(ev.Args), "echo edited-run") {
				t.Errorf("e1 started with %s, want the edited command", ev.Args)
			}
		}
	}
	if runs != 1 {
		t.Errorf("e1 started %d times, want once", runs)
	}
	reqs := e.kit.Model.Requests()
	last := reqs[len(reqs)-1].Messages
	tr := last[len(last)-1]
	if !strings.Contains(tr.Content, `Approved with edits by alice: command changed from "ls; rm x" to "echo edited-run"`) ||
		!strings.Contains(tr.Content, "edited-run") || strings.Count(tr.Content, "edited-run") < 2 {
		t.Errorf("the model read %q, want the edit note and the edited command's output", tr.Content)
	}
}

// waitApprovalAuth is waitApproval with a token.
func waitApprovalAuth(t *testing.T, base, token, session, call string) {
	t.Helper()
	waitFor(t, 30*time.Second, "call "+call+" to wait for approval", func() bool {
		st, b, _ := send(t, http.MethodGet, base+"/sessions/"+session, token, "", nil)
		return st == http.StatusOK && strings.Contains(b, `"call":"`+call+`"`)
	})
}
