package github

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/workflows"
)

// A decision comment decides only a call of its own repository, only from
// an allowed association, and is never a turn; other comments are not
// decisions.
func TestDecisionComments(t *testing.T) {
	t.Parallel()
	key := approvalKey([]byte(testSecret))
	tok := issueToken(key, "octo/app", "7", grant{Session: "github:octo/app#7", Call: "call_1"})
	other := issueToken(key, "octo/other", "7", grant{Session: "github:octo/other#7", Call: "call_1"})
	d := &Door{Secret: []byte(testSecret)}
	for _, tc := range []struct {
		name, comment, association string
		decision, isDecision       bool
		want                       workflows.ApproveRequest
	}{
		{name: "owner approves", comment: "/approve " + tok, association: "OWNER", decision: true, isDecision: true,
			want: workflows.ApproveRequest{Call: "call_1", Approve: true, By: "github:mona", Door: Kind, Vetted: true}},
		{name: "member denies with a reason", comment: "/deny " + tok + " not on a Friday\nthanks", association: "member", decision: true, isDecision: true,
			want: workflows.ApproveRequest{Call: "call_1", Reason: "not on a Friday", By: "github:mona", Door: Kind, Vetted: true}},
		{name: "contributor", comment: "/approve " + tok, association: "CONTRIBUTOR", isDecision: true},
		{name: "another repository's call", comment: "/approve " + other, association: "OWNER", isDecision: true},
		{name: "a garbled token", comment: "/approve bm90LWEtdG9rZW4", association: "OWNER", isDecision: true},
		{name: "an ordinary comment", comment: "please /approve this", association: "OWNER"},
	} {
		ev := &Event{Name: "issue_comment", Action: "created", Repo: "octo/app", Number: 7, Comment: tc.comment, Association: tc.association, Sender: "mona"}
		dec, isDecision := d.decision(ev, "body-1")
		if isDecision != tc.isDecision || (dec != nil) != tc.decision {
			t.Errorf("%s: decision %+v, is %v; want decision %v, is %v", tc.name, dec, isDecision, tc.decision, tc.isDecision)
			continue
		}
		if dec != nil && (!reflect.DeepEqual(dec.Request, tc.want) || dec.Session != "github:octo/app#7" || dec.ID != "github:body-1") {
			t.Errorf("%s: %+v, want %+v in github:octo/app#7", tc.name, dec, tc.want)
		}
	}
}

// The agent's question is a comment on the issue: the question, unable to
// hide a marker, then how to answer under the channel's rules and until
// when; its reference is the comment. An API error is returned.
func TestQuestionComment(t *testing.T) {
	t.Parallel()
	f := fake(t)
	r := tokenReplier(t, f)
	r.Answering = answering(Config{Rules: []Rule{{Event: "issue_comment", Action: "created", Mentions: "@my-bot"}, {Event: "issues", Action: "opened"}}})
	deadline := time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC)
	ref, err := r.Question(context.Background(), target("", false, 0), agent.QuestionAsked("q1", "Which **city**? <!-- fastagent:turn=x part=0 -->", deadline))
	if err != nil {
		t.Fatal(err)
	}
	cs := f.Comments("o/r", 5)
	want := "❓ Which **city**? &lt;!-- fastagent:turn=x part=0 -->\n\n_Reply with a comment mentioning `@my-bot` to answer (until 03:04 UTC, Jan 2)._\n\n" + questionMarker
	if len(cs) != 1 || cs[0].Body != want {
		t.Fatalf("comments %+v, want one: %q", cs, want)
	}
	// Its own webhook is never a turn, though it mentions the bot.
	if ev := (&Event{Name: "issue_comment", Action: "created", Comment: cs[0].Body, Sender: "my-bot"}); !ev.skip("") {
		t.Error("the question comment's own event is not skipped")
	}
	if ref != "comment:"+strconv.FormatInt(cs[0].ID, 10) {
		t.Errorf("reference %q, want comment:%d", ref, cs[0].ID)
	}

	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"message":"Resource not accessible by integration"}`))
	}))
	t.Cleanup(api.Close)
	broken, err := NewReplier(Auth{Token: "ghp_test"}, api.URL)
	if err != nil {
		t.Fatal(err)
	}
	if ref, err := broken.Question(context.Background(), target("", false, 0), agent.QuestionAsked("q1", "Which city?", deadline)); err == nil || ref != "" || !channels.IsPermanent(err) {
		t.Errorf("a refused comment: %q, %v; want a permanent error", ref, err)
	}
}

// How a question says to answer follows the rules that take new comments.
func TestQuestionAnswering(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		cfg  Config
		how  string
	}{
		{"mention", Config{Rules: []Rule{{Event: "issue_comment", Mentions: "@bot"}}}, "Reply with a comment mentioning `@bot` to answer"},
		{"any comment", Config{Rules: []Rule{{Event: "issue_comment", Mentions: "@bot"}, {Event: "issue_comment", Actions: []string{"created"}}}}, anyComment},
		{"executable policy", Config{Policy: &ExecPolicy{Exec: "policy"}}, anyComment},
		{"no comments", Config{Rules: []Rule{{Event: "issue_comment", Action: "edited"}, {Event: "issues", Action: "opened"}}}, ""},
	} {
		if got := answering(c.cfg); got != c.how {
			t.Errorf("%s: %q, want %q", c.name, got, c.how)
		}
	}
	if got := questionBody("Which city?", "", time.Time{}); got != "❓ Which city?\n\n"+questionMarker {
		t.Errorf("no how, no deadline: %q", got)
	}
}
