package e2e

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
)

// A gated tool in a GitHub issue is decided by a comment: the agent posts
// the call with its arguments and the "/approve <token>" that answers it; a
// CONTRIBUTOR's /approve decides nothing (and is no turn); an OWNER's
// decides, once though GitHub delivers it twice; the tool runs once, the
// approval comment shows who approved, and the answer is posted.
func TestGitHubApprovalComment(t *testing.T) {
	e := newEnv(t)
	e.writeConfig("tools:\n  counter: {requiresApproval: true}\n")
	s := newGitHubStack(t, e)
	s.startWorker()
	session := s.session(7)
	t.Cleanup(func() { (&slackStack{e: s.e}).terminate(session) })
	e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "gh1", Name: testkit.CounterName, Args: `{"note":"from github"}`}}},
		modelserver.Reply{Text: []string{"counted on github"}},
	)
	if code := s.post("issue_comment", "d-ask", githubSecret, s.payload("issue_comment.json", 7)); code != http.StatusAccepted {
		t.Fatalf("mention: %d", code)
	}
	tokRE := regexp.MustCompile("`/approve ([A-Za-z0-9_-]+)`")
	var ask struct {
		id  int64
		tok string
	}
	waitFor(t, 90*time.Second, "the approval comment", func() bool {
		for _, c := range s.fake.Comments(s.repo, 7) {
			if m := tokRE.FindStringSubmatch(c.Body); m != nil {
				ask.id, ask.tok = c.ID, m[1]
				if !strings.Contains(c.Body, "**counter**") || !strings.Contains(c.Body, `"note": "from github"`) {
					t.Fatalf("approval comment %q, want the tool and its arguments", c.Body)
				}
				return true
			}
		}
		return false
	})
	decide := func(delivery, association, body string) {
		t.Helper()
		var p map[string]any
		if err := json.Unmarshal(s.payload("issue_comment.json", 7), &p); err != nil {
			t.Fatal(err)
		}
		c := p["comment"].(map[string]any)
		c["body"], c["author_association"], c["id"] = body, association, float64(time.Now().UnixNano()%1e9)
		b, _ := json.Marshal(p)
		if code := s.post("issue_comment", delivery, githubSecret, b); code != http.StatusAccepted {
			t.Fatalf("decision %s: %d", delivery, code)
		}
	}
	decide("d-contributor", "CONTRIBUTOR", "/approve "+ask.tok)
	// Deliberate: a wrongly accepted approval would have run the call by now
	// (the refused one leaves no sign to wait for).
	time.Sleep(2 * time.Second)
	if st, err := e.agent.State(t.Context(), session); err != nil || len(st.Approvals) != 1 || st.Running == "" {
		t.Fatalf("after a CONTRIBUTOR's /approve: %+v, %v; want the call still waiting and no other turn", st, err)
	}
	if n := e.kit.Counter.Runs(session); n != 0 {
		t.Fatalf("the counter ran %d times before an allowed approval", n)
	}
	var p map[string]any
	_ = json.Unmarshal(s.payload("issue_comment.json", 7), &p)
	c := p["comment"].(map[string]any)
	c["body"], c["id"] = "/approve "+ask.tok+"\nlooks fine", float64(4242)
	owner, _ := json.Marshal(p)
	for _, d := range []string{"d-owner", "d-owner-redelivered"} {
		if code := s.post("issue_comment", d, githubSecret, owner); code != http.StatusAccepted {
			t.Fatalf("owner's decision %s: %d", d, code)
		}
	}
	waitFor(t, 90*time.Second, "the answer", func() bool {
		for _, c := range s.fake.Comments(s.repo, 7) {
			if strings.Contains(c.Body, "counted on github") {
				return true
			}
		}
		return false
	})
	if n := e.kit.Counter.Runs(session); n != 1 {
		t.Errorf("the approved counter ran %d times, want 1", n)
	}
	if n := e.kit.Model.Count(); n != 2 {
		t.Errorf("model calls %d, want 2 (no decision comment became a turn)", n)
	}
	waitFor(t, 30*time.Second, "the approval comment settled", func() bool {
		for _, c := range s.fake.Comments(s.repo, 7) {
			if c.ID == ask.id {
				return strings.Contains(c.Body, "Approved by @Codertocat")
			}
		}
		return false
	})
}

// ask_user in a GitHub issue: the question is a comment on the issue
// saying how to answer; the asker's next comment that reaches the agent
// (here: one mentioning the bot) is the answer — the tool's result, read
// by the model's next step — not a turn of its own; GitHub delivering it
// twice changes nothing; one answer is posted.
func TestGitHubAskUser(t *testing.T) {
	e := newEnv(t)
	e.writeConfig("askUser: true\n")
	s := newGitHubStack(t, e)
	s.startWorker()
	session := s.session(7)
	t.Cleanup(func() { (&slackStack{e: s.e}).terminate(session) })
	e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "tq1", Name: "ask_user", Args: `{"question":"Which city?"}`}}},
		modelserver.Reply{Text: []string{"Booked in Lisbon."}},
	)
	if code := s.post("issue_comment", "d-question", githubSecret, s.payload("issue_comment.json", 7)); code != http.StatusAccepted {
		t.Fatalf("mention: %d", code)
	}
	waitFor(t, 90*time.Second, "the question comment", func() bool {
		for _, c := range s.fake.Comments(s.repo, 7) {
			if strings.HasPrefix(c.Body, "❓ Which city?") && strings.Contains(c.Body, "Reply with a comment mentioning `@fastagent-bot` to answer (until ") {
				return true
			}
		}
		return false
	})
	var p map[string]any
	if err := json.Unmarshal(s.payload("issue_comment.json", 7), &p); err != nil {
		t.Fatal(err)
	}
	c := p["comment"].(map[string]any)
	c["body"], c["id"] = "@fastagent-bot Lisbon", float64(4343)
	answer, _ := json.Marshal(p)
	for i := 0; i < 2; i++ { // GitHub delivers it twice
		if code := s.post("issue_comment", "d-answer", githubSecret, answer); code != http.StatusAccepted {
			t.Fatalf("answer %d: %d", i, code)
		}
	}
	waitFor(t, 90*time.Second, "the answer", func() bool {
		for _, c := range s.fake.Comments(s.repo, 7) {
			if strings.HasPrefix(c.Body, "Booked in Lisbon.") {
				return true
			}
		}
		return false
	})
	// The comment's own words, not the rule's prompt around them, nor the
	// mention that addressed the bot.
	checkAnsweredInTurn(t, e, session, "tq1", "Lisbon")
}
