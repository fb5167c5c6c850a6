package github

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/sandbox/sandboxtest"
)

func policy(t *testing.T, file string) *Policy {
	t.Helper()
	var cfg Config
	if err := channels.Decode([]byte(file), &cfg); err != nil {
		t.Fatal(err)
	}
	p, err := cfg.compile()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRules(t *testing.T) {
	t.Parallel()
	comment := func(body, assoc string) *Event {
		return &Event{Name: "issue_comment", Action: "created", Repo: "o/r", Number: 7, Title: "T", Comment: body, Association: assoc, Sender: "alice"}
	}
	cases := []struct {
		name  string
		rules string
		ev    *Event
		want  []Intent
	}{
		{"mention", `rules: [{event: issue_comment, mentions: "@bot"}]`, comment("hey @bot, help", "OWNER"),
			[]Intent{{Session: "github:o/r#7", Prompt: "alice on o/r#7 (T), :\n\nhey @bot, help"}}},
		{"mention is a word", `rules: [{event: issue_comment, mentions: "@bot"}]`, comment("hey @bot-two and me@bot.com", "NONE"), nil},
		{"mention any case, at the end", `rules: [{event: issue_comment, mentions: "@Bot"}]`, comment("ask @bot", "MEMBER"),
			[]Intent{{Session: "github:o/r#7", Prompt: "alice on o/r#7 (T), :\n\nask @bot"}}},
		{"other action", `rules: [{event: issue_comment, action: edited}]`, comment("x", "NONE"), nil},
		{"association refused", `rules: [{event: issue_comment, authorAssociation: [MEMBER]}]`, comment("x", "NONE"), nil},
		{"association accepted", `rules: [{event: issue_comment, authorAssociation: [member], prompt: "{{.comment}}"}]`, comment("x", "MEMBER"),
			[]Intent{{Session: "github:o/r#7", Prompt: "x"}}},
		{"label added", `rules: [{event: issues, label: agent, prompt: "{{.title}} {{range .labels}}[{{.}}]{{end}}"}]`,
			&Event{Name: "issues", Action: "labeled", Repo: "o/r", Number: 3, Title: "Crash", Label: "agent", Labels: []string{"agent", "bug"}, Association: "COLLABORATOR"},
			[]Intent{{Session: "github:o/r#3", Prompt: "Crash [agent][bug]"}}},
		{"other label", `rules: [{event: issues, label: agent}]`, &Event{Name: "issues", Action: "labeled", Repo: "o/r", Number: 3, Label: "bug"}, nil},
		{"label removed is not added", `rules: [{event: issues, label: agent}]`, &Event{Name: "issues", Action: "unlabeled", Repo: "o/r", Number: 3, Label: "agent"}, nil},
		{"two rules, two intents", "rules:\n- {event: issue_comment, prompt: a, session: 's1'}\n- {event: issue_comment, prompt: b, session: 's2', review: true}",
			comment("x", "OWNER"), []Intent{{Session: "s1", Prompt: "a"}, {Session: "s2", Prompt: "b", Review: true}}},
		{"templated session", `rules: [{event: issue_comment, session: "{{.owner}}-{{.name}}-{{.number}}", prompt: "{{.action}} {{.event}} {{.pr}}"}]`,
			comment("x", "OWNER"), []Intent{{Session: "o-r-7", Prompt: "created issue_comment false"}}},
	}
	for _, c := range cases {
		got, err := policy(t, c.rules).Intents(c.ev)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if len(got) != len(c.want) {
			t.Errorf("%s: intents %+v, want %+v", c.name, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%s: intent %d = %+v, want %+v", c.name, i, got[i], c.want[i])
			}
		}
	}
	// A template that renders no session gives no intent at all.
	if _, err := policy(t, `rules: [{event: issue_comment, session: "{{if .pr}}pr{{end}}"}]`).Intents(comment("x", "OWNER")); err == nil {
		t.Error("an empty session was accepted")
	}
}

// A rule without authorAssociation accepts only the repository's owner,
// members and collaborators: on a public repository anybody else could
// otherwise start the agent. An explicit list replaces that default, and
// [any] opens the rule to everyone.
func TestRulesAuthorAssociationDefault(t *testing.T) {
	t.Parallel()
	comment := func(assoc string) *Event {
		return &Event{Name: "issue_comment", Action: "created", Repo: "o/r", Number: 7, Comment: "@bot help", Association: assoc, Sender: "alice"}
	}
	cases := []struct {
		rules string
		want  map[string]bool // association → an intent
	}{
		{`rules: [{event: issue_comment, mentions: "@bot"}]`, map[string]bool{
			"OWNER": true, "MEMBER": true, "COLLABORATOR": true,
			"CONTRIBUTOR": false, "FIRST_TIME_CONTRIBUTOR": false, "FIRST_TIMER": false, "NONE": false, "": false}},
		{`rules: [{event: issue_comment, authorAssociation: [OWNER, MEMBER, COLLABORATOR, contributor]}]`, map[string]bool{
			"OWNER": true, "CONTRIBUTOR": true, "NONE": false}},
		{`rules: [{event: issue_comment, authorAssociation: [member]}]`, map[string]bool{
			"MEMBER": true, "OWNER": false, "COLLABORATOR": false}},
		{`rules: [{event: issue_comment, authorAssociation: [any]}]`, map[string]bool{
			"OWNER": true, "CONTRIBUTOR": true, "NONE": true, "": true}},
	}
	for _, c := range cases {
		p := policy(t, c.rules)
		for assoc, want := range c.want {
			got, err := p.Intents(comment(assoc))
			if err != nil {
				t.Fatalf("%s: %v", c.rules, err)
			}
			if (len(got) == 1) != want {
				t.Errorf("%s, association %q: %d intents, want an intent: %v", c.rules, assoc, len(got), want)
			}
		}
	}
	// The default applies to every rule without a list, whatever its event.
	labeled := &Event{Name: "issues", Action: "labeled", Repo: "o/r", Number: 3, Label: "agent", Association: "NONE"}
	if got, _ := policy(t, `rules: [{event: issues, label: agent}]`).Intents(labeled); len(got) != 0 {
		t.Errorf("a labelled issue by an outsider gave %d intents under the default", len(got))
	}
}

func writeScript(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policy.sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExecPolicy(t *testing.T) {
	t.Setenv("GITHUB_TOKEN", "ghp_must_not_leak")
	ev, err := NewEvent("issue_comment", fixture(t, "issue_comment.json"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, script, timeout string
		want                  []Intent
		errWant               string
	}{
		{"intents from the event", `
in=$(cat)
case "$in" in *'"number":1'*'"repo":"Codertocat/Hello-World"'*) ;; *) echo "bad input: $in" >&2; exit 3;; esac
case "$in" in *'"delivery":"d-1"'*'"payload":{"action":"created"'*) ;; *) echo "no payload: $in" >&2; exit 4;; esac
echo '[{"session":"gh:one","prompt":"first"},{"session":"gh:two","prompt":"second","review":true}]'`, "",
			[]Intent{{Session: "gh:one", Prompt: "first"}, {Session: "gh:two", Prompt: "second", Review: true}}, ""},
		{"no intents", `cat >/dev/null; echo '[]'`, "", nil, ""},
		{"silence is no intents", `cat >/dev/null`, "", nil, ""},
		{"no secrets in its environment", `cat >/dev/null; if env | grep -q GITHUB_TOKEN; then echo leaked >&2; exit 1; fi; echo '[]'`, "", nil, ""},
		{"failure", `echo boom >&2; exit 2`, "", nil, "boom"},
		{"bad output", `echo '{"session":"x"}'`, "", nil, "not a JSON array"},
		{"unknown field", `echo '[{"session":"x","prompt":"y","extra":1}]'`, "", nil, "not a JSON array"},
		{"empty session", `echo '[{"prompt":"y"}]'`, "", nil, "empty session"},
		{"timeout kills the group", `sleep 30 & sleep 30`, "300ms", nil, "timed out after 300ms"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := "policy: {exec: " + writeScript(t, c.script)
			if c.timeout != "" {
				file += ", timeout: " + c.timeout
			}
			p := policy(t, file+"}")
			p.box = sandboxtest.Require(t)
			start := time.Now()
			got, err := p.IntentsContext(context.Background(), ev, "d-1")
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("the policy took %s", took)
			}
			if c.errWant != "" {
				if err == nil || !strings.Contains(err.Error(), c.errWant) {
					t.Fatalf("err %v, want it to say %q", err, c.errWant)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(c.want) {
				t.Fatalf("intents %+v, want %+v", got, c.want)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Errorf("intent %d = %+v, want %+v", i, got[i], c.want[i])
				}
			}
		})
	}
}

// Without a tool sandbox (Door.Confine) an executable policy does not run:
// the event gets no intents and an error that says why.
func TestExecPolicyNeedsASandbox(t *testing.T) {
	t.Parallel()
	marker := filepath.Join(t.TempDir(), "ran")
	d := door(t, "policy: {exec: "+writeScript(t, "touch "+marker+"; echo '[]'")+"}")
	if !d.NeedsSandbox() {
		t.Fatal("a door with an executable policy does not ask for the sandbox")
	}
	if door(t, mentionRules).NeedsSandbox() {
		t.Error("a door with rules asks for the sandbox")
	}
	ev, err := NewEvent("issue_comment", fixture(t, "issue_comment.json"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.Policy.IntentsContext(context.Background(), ev, "d-1")
	if err == nil || !strings.Contains(err.Error(), "never run unconfined") {
		t.Errorf("err %v, want a refusal", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the policy ran unconfined")
	}
}
