package github

import (
	"bytes"
	"context"
	"encoding/base64"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/testsupport/fakegithub"
)

// channelWith builds the GitHub channel as a deployment does (door and
// replier from the same file and environment) against fake f, with
// webhook secret secret.
func channelWith(t *testing.T, f *fakegithub.Server, secret string) (*Door, *Replier) {
	t.Helper()
	ch, err := New([]byte("rules:\n  - event: issue_comment\n    mentions: \"@fastagent-bot\"\n"), func(k string) string {
		return map[string]string{"GITHUB_WEBHOOK_SECRET": secret, "GITHUB_TOKEN": "ghp_test", APIURLEnv: f.URL}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	return ch.Door.(*Door), ch.Replier.(*Replier)
}

var askTokenRE = regexp.MustCompile("`/approve ([A-Za-z0-9_-]+)`")

// askToken posts the approval comment of call in session on o/r#5 and
// returns the token it tells people to write.
func askToken(t *testing.T, f *fakegithub.Server, r *Replier, session string, ev agent.Event) string {
	t.Helper()
	if _, err := r.Ask(context.Background(), target("", false, 0), session, ev); err != nil {
		t.Fatal(err)
	}
	cs := f.Comments("o/r", 5)
	m := askTokenRE.FindStringSubmatch(cs[len(cs)-1].Body)
	if m == nil {
		t.Fatalf("approval comment %q has no /approve token", cs[len(cs)-1].Body)
	}
	return m[1]
}

// An approval token is bound, under a key only the deployment has, to the
// repository, the issue, the session, the call and the hashes of what the
// comment showed: the decision it makes carries those hashes (so the
// session refuses it if the call changed), and a token copied to another
// issue, another repository, or written by hand to name another session or
// call decides nothing; the door's answer says why.
func TestApprovalTokenBound(t *testing.T) {
	t.Parallel()
	f := fake(t)
	d, r := channelWith(t, f, testSecret)
	const session = "github:o/r#5"
	ev := agent.ApprovalRequested("call_1", "deploy", []byte(`{"env":"prod"}`), "sha256:"+strings.Repeat("a", 64), "sha256:"+strings.Repeat("d", 64), nil, time.Time{})
	tok := askToken(t, f, r, session, ev)

	comment := func(repo string, number int, body string) *Event {
		return &Event{Name: "issue_comment", Action: "created", Repo: repo, Number: number, Comment: body, Association: "OWNER", Sender: "mona"}
	}
	dec, isDecision := d.decision(comment("o/r", 5, "/approve "+tok), "body-1")
	if !isDecision || dec == nil {
		t.Fatalf("the issued token on its own issue: %+v, %v; want a decision", dec, isDecision)
	}
	if dec.Session != session || dec.Request.Call != "call_1" || !dec.Request.Approve ||
		dec.Request.ArgsHash != ev.ArgsHash || dec.Request.DefinitionHash != ev.DefinitionHash {
		t.Errorf("decision %+v, want call_1 of %s approved, bound to the shown hashes", dec, session)
	}

	// Hand-written tokens in today's readable form, naming another
	// session (another channel's, a sub-agent's, another agent's) or call.
	plain := func(repo, session, call string) string {
		return base64.RawURLEncoding.EncodeToString([]byte(repo + "\n" + session + "\n" + call))
	}
	f2 := fake(t)
	_, r2 := channelWith(t, f2, "another deployment's secret")
	foreign := askToken(t, f2, r2, session, ev)
	for name, c := range map[string]*Event{
		"copied to another issue":        comment("o/r", 6, "/approve "+tok),
		"copied to another repository":   comment("o/other", 5, "/approve "+tok),
		"forged: a Slack session's call": comment("o/r", 5, "/approve "+plain("o/r", "slack:T1:C1", "call_1")),
		"forged: a sub-agent's call":     comment("o/r", 5, "/approve "+plain("o/r", session+"/delegate-0123456789abcdef", "call_1")),
		"forged: another agent's call":   comment("o/r", 5, "/approve "+plain("o/r", "ops/github:o/r#5", "call_1")),
		"forged: another call":           comment("o/r", 5, "/approve "+plain("o/r", session, "call_2")),
		"issued by another deployment":   comment("o/r", 5, "/approve "+foreign),
		"one character changed":          comment("o/r", 5, "/approve "+flip(tok)),
	} {
		dec, isDecision := d.decision(c, "body-2")
		if !isDecision || dec != nil {
			t.Errorf("%s: decision %+v (is a decision: %v); want a decision comment that decides nothing", name, dec, isDecision)
		}
	}

	// Through the door: the refusal is answered 202 (GitHub must not
	// retry it) with a body saying why, and nothing is handed off.
	body := bytes.ReplaceAll(fixture(t, "issue_comment.json"), []byte("@fastagent-bot where is the typo, exactly?"), []byte("/approve "+tok))
	p, err := d.Parse(req(testSecret, "issue_comment", "dlv-1", body))
	if err != nil || len(p.Decisions) != 0 || len(p.Deliveries) != 0 || !strings.Contains(string(p.Answer.Body), "not issued for") {
		t.Errorf("a copied token through the door: %+v, %v; want no decision and an answer saying the token was not issued for this issue", p, err)
	}
}

// flip changes one character of a token, keeping it well-formed.
func flip(tok string) string {
	b := []byte(tok)
	i := len(b) / 2
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}
