package github

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/sandbox/sandboxtest"
	"github.com/fastagent/fastagent/internal/workspace"
)

const testSecret = "It's a Secret to Everybody"

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func req(secret, event, delivery string, body []byte) channels.Request {
	return channels.Request{Header: Sign(secret, event, delivery, body), Body: body}
}

// GitHub's documented example: secret "It's a Secret to Everybody", body
// "Hello, World!".
func TestVerifySignature(t *testing.T) {
	t.Parallel()
	const docSig = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	body := []byte("Hello, World!")
	cases := []struct {
		name, secret, sig string
		body              []byte
		ok                bool
	}{
		{"github's example", testSecret, docSig, body, true},
		{"wrong secret", "other", docSig, body, false},
		{"body changed", testSecret, docSig, []byte("Hello, World?"), false},
		{"unsigned", testSecret, "", body, false},
		{"sha1 only", testSecret, "sha1=01dc10d0c83e72ed246219cdd91669667fe2ca59", body, false},
		{"not hex", testSecret, "sha256=zz", body, false},
		{"truncated", testSecret, docSig[:40], body, false},
	}
	for _, c := range cases {
		err := VerifySignature([]byte(c.secret), c.sig, c.body)
		if (err == nil) != c.ok {
			t.Errorf("%s: err %v, want ok=%v", c.name, err, c.ok)
		}
	}
	d := &Door{Secret: []byte(testSecret)}
	if err := d.Verify(channels.Request{Header: http.Header{HeaderSignature: {docSig}}, Body: body}); err != nil {
		t.Errorf("door: %v", err)
	}
	if err := (&Door{}).Verify(channels.Request{Header: http.Header{HeaderSignature: {docSig}}, Body: body}); err == nil {
		t.Error("a door without a secret accepted a request")
	}
}

const mentionRules = `
bot: fastagent-bot
rules:
  - event: issue_comment
    action: created
    mentions: "@fastagent-bot"
  - event: pull_request
    actions: [opened]
    session: "github:{{.repo}}#{{.number}}:review"
    prompt: "Review {{.url}}: {{.title}}"
    review: true
  - event: issues
    label: agent
    authorAssociation: [owner, member, contributor]
`

func door(t *testing.T, file string) *Door {
	t.Helper()
	ch, err := New([]byte(file), func(k string) string {
		return map[string]string{"GITHUB_WEBHOOK_SECRET": testSecret, "GITHUB_TOKEN": "ghp_test"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	return ch.Door.(*Door)
}

func TestDoorParse(t *testing.T) {
	t.Parallel()
	d := door(t, mentionRules)
	cases := []struct {
		name, event, fixture string
		status               int
		sessions             []string
		review               bool
	}{
		{"ping", "ping", "ping.json", http.StatusNoContent, nil, false},
		{"mention", "issue_comment", "issue_comment.json", http.StatusAccepted, []string{"github:Codertocat/Hello-World#1"}, false},
		{"pull request opened", "pull_request", "pull_request_opened.json", http.StatusAccepted, []string{"github:Codertocat/Hello-World#2:review"}, true},
		{"label added", "issues", "issues_labeled.json", http.StatusAccepted, []string{"github:Codertocat/Hello-World#3"}, false},
		{"own comment", "issue_comment", "bot_comment.json", http.StatusAccepted, nil, false},
		{"no rule", "star", "ping.json", http.StatusAccepted, nil, false},
	}
	for _, c := range cases {
		p, err := d.Parse(req(testSecret, c.event, "72d3162e-cc78-11e3-81ab-4c9367dc0958", fixture(t, c.fixture)))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if p.Answer.Status != c.status || len(p.Deliveries) != len(c.sessions) || len(p.Messages) != 0 {
			t.Errorf("%s: status %d, %d deliveries, want %d and %v", c.name, p.Answer.Status, len(p.Deliveries), c.status, c.sessions)
			continue
		}
		for i, dl := range p.Deliveries {
			if dl.Session != c.sessions[i] || dl.Kind != Kind || dl.ID != BodyID(fixture(t, c.fixture))+":0" ||
				dl.Reply == nil || dl.Reply.Chat != "Codertocat/Hello-World" || dl.Reply.Message != dl.Key() {
				t.Errorf("%s: delivery %+v", c.name, dl)
			}
			if got := strings.Contains(string(dl.Reply.Data), `"review":true`); got != c.review {
				t.Errorf("%s: reply data %s, review %v", c.name, dl.Reply.Data, c.review)
			}
		}
	}
	// The default prompt carries the comment and where it was made.
	p, _ := d.Parse(req(testSecret, "issue_comment", "d1", fixture(t, "issue_comment.json")))
	if pr := p.Deliveries[0].Prompt.Text; !strings.Contains(pr, "where is the typo") || !strings.Contains(pr, "#issuecomment-492700400") || !strings.Contains(pr, "Codertocat on Codertocat/Hello-World#1") {
		t.Errorf("prompt %q", pr)
	}
	if !strings.Contains(string(p.Deliveries[0].Reply.Data), `"installation":2311213`) {
		t.Errorf("reply data %s lacks the installation", p.Deliveries[0].Reply.Data)
	}
}

func TestDoorParseRefuses(t *testing.T) {
	t.Parallel()
	d := door(t, mentionRules)
	body := fixture(t, "issue_comment.json")
	cases := []struct {
		name    string
		headers map[string]string
		body    []byte
	}{
		{"no delivery", map[string]string{HeaderDelivery: ""}, body},
		{"no event", map[string]string{HeaderEvent: ""}, body},
		{"bad delivery", map[string]string{HeaderDelivery: "a b"}, body},
		{"not json", nil, []byte("nope")},
		{"wrong shape", nil, []byte(`{"issue": "nope"}`)},
	}
	for _, c := range cases {
		r := req(testSecret, "issue_comment", "d1", c.body)
		for k, v := range c.headers {
			http.Header(r.Header).Set(k, v)
		}
		p, err := d.Parse(r)
		if err == nil || p.Answer.Status != http.StatusBadRequest || len(p.Deliveries) != 0 {
			t.Errorf("%s: status %d, %d deliveries, err %v; want 400, none, an error", c.name, p.Answer.Status, len(p.Deliveries), err)
		}
	}
}

func TestNewChecksFile(t *testing.T) {
	t.Parallel()
	env := map[string]string{"GITHUB_WEBHOOK_SECRET": "s", "GITHUB_TOKEN": "t"}
	get := func(k string) string { return env[k] }
	cases := []struct {
		name, file, want string
	}{
		{"unknown event", "rules: [{event: issue}]", `event: "issue" is not one of`},
		{"unknown action", "rules: [{event: issues, action: created}]", `"created" is not an action of issues`},
		{"label on comments", "rules: [{event: issue_comment, label: x}]", "only issues and pull_request"},
		{"bad template", `rules: [{event: issues, prompt: "{{.title"}]`, "prompt:"},
		{"unknown field", `rules: [{event: issues, session: "gh:{{.nope}}"}]`, "session:"},
		{"bad mention", `rules: [{event: issues, mentions: "@"}]`, "mentions:"},
		{"unknown key", "rules: [{event: issues, foo: 1}]", "field foo not found"},
		{"nothing", "{}", "no rules and no policy"},
		{"both", "rules: [{event: issues}]\npolicy: {exec: ./p}", "exclude each other"},
		{"long timeout", "policy: {exec: ./p, timeout: 30s}", "policy.timeout"},
		{"unknown association", "rules: [{event: issues, authorAssociation: [MEMBERS]}]", `authorAssociation: "MEMBERS" is not one of`},
		{"any with others", "rules: [{event: issues, authorAssociation: [any, OWNER]}]", "authorAssociation: any"},
	}
	for _, c := range cases {
		_, err := New([]byte(c.file), get)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want it to say %q", c.name, err, c.want)
		}
	}
	for _, c := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"no secret", map[string]string{"GITHUB_TOKEN": "t"}, "GITHUB_WEBHOOK_SECRET is not set"},
		{"no auth", map[string]string{"GITHUB_WEBHOOK_SECRET": "s"}, "set GITHUB_TOKEN, or GITHUB_APP_ID"},
		{"bad app id", map[string]string{"GITHUB_WEBHOOK_SECRET": "s", "GITHUB_APP_ID": "x"}, "not a GitHub App ID"},
		{"no key", map[string]string{"GITHUB_WEBHOOK_SECRET": "s", "GITHUB_APP_ID": "1"}, "private key"},
		{"bad key", map[string]string{"GITHUB_WEBHOOK_SECRET": "s", "GITHUB_APP_ID": "1", "GITHUB_APP_PRIVATE_KEY": "nope"}, "private key"},
	} {
		_, err := New([]byte("rules: [{event: issues}]"), func(k string) string { return c.env[k] })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want it to say %q", c.name, err, c.want)
		}
	}
}

// The turn key is made of the signed body, not of X-GitHub-Delivery (which
// the HMAC does not cover): the same signed body replayed with a fresh
// delivery ID is the same turn, and another body is another turn.
func TestDoorKeyIsSigned(t *testing.T) {
	t.Parallel()
	d := door(t, mentionRules)
	body := fixture(t, "issue_comment.json")
	keys := func(delivery string, body []byte) []string {
		t.Helper()
		p, err := d.Parse(req(testSecret, "issue_comment", delivery, body))
		if err != nil || len(p.Deliveries) != 1 {
			t.Fatalf("parse: %v, %d deliveries", err, len(p.Deliveries))
		}
		return []string{p.Deliveries[0].Key(), p.Deliveries[0].Reply.Message}
	}
	first := keys("72d3162e-cc78-11e3-81ab-4c9367dc0958", body)
	replayed := keys("ffffffff-0000-0000-0000-000000000000", body)
	if first[0] != replayed[0] || first[1] != replayed[1] {
		t.Errorf("a replayed body with a fresh delivery ID has key %v, the original %v", replayed, first)
	}
	if first[0] != Kind+":"+BodyID(body)+":0" {
		t.Errorf("key %q, want %s:<BodyID>:0", first[0], Kind)
	}
	edited := bytes.Replace(body, []byte("where is the typo"), []byte("where is the typo now"), 1)
	if other := keys("72d3162e-cc78-11e3-81ab-4c9367dc0958", edited); other[0] == first[0] {
		t.Errorf("another body under the same delivery ID has the same key %q", other[0])
	}
}

// Load resolves an executable policy next to the channel file and refuses
// one that is missing.
func TestLoadLocatesExecPolicy(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "github.yaml")
	if err := os.WriteFile(file, []byte("policy: {exec: ./policy.sh}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	get := func(k string) string { return map[string]string{"GITHUB_WEBHOOK_SECRET": "s", "GITHUB_TOKEN": "t"}[k] }
	files := []workspace.FileEntry{{Name: Kind, Path: file, Enabled: true}}
	if _, err := channels.Load(files, get); err == nil || !strings.Contains(err.Error(), "policy.exec") {
		t.Fatalf("missing policy: err %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "policy.sh"), []byte("#!/bin/sh\necho '[]'\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	chans, err := channels.Load(files, get)
	if err != nil {
		t.Fatal(err)
	}
	if got := chans[0].Door.(*Door).Policy.exec.Exec; got != filepath.Join(dir, "policy.sh") {
		t.Errorf("exec resolved to %s", got)
	}
}

// An executable policy sees any event; one without an issue or PR (push)
// is a turn answered nowhere.
func TestDoorEventWithoutIssue(t *testing.T) {
	t.Parallel()
	script := writeScript(t, `cat >/dev/null; echo '[{"session":"gh:push","prompt":"a push"}]'`)
	d := door(t, "policy: {exec: "+script+"}")
	d.Confine(sandboxtest.Require(t), nil)
	p, err := d.Parse(req(testSecret, "push", "p1", []byte(`{"ref":"refs/heads/main","repository":{"full_name":"o/r"},"sender":{"login":"a"}}`)))
	if err != nil || p.Answer.Status != http.StatusAccepted || len(p.Deliveries) != 1 || p.Deliveries[0].Reply != nil ||
		p.Deliveries[0].Session != "gh:push" || p.Deliveries[0].Prompt.Text != "a push" {
		t.Fatalf("parsed %+v, %v", p, err)
	}
}
