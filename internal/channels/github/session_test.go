package github

import (
	"strings"
	"testing"

	"github.com/fastagent/fastagent/internal/channels"
)

// A rule's session template may not put text people write (title, body,
// comment, labels) into a session ID: whoever opens an issue or comments
// would choose the session — another channel's conversation, another
// agent's. The file stops loading, saying which fields may be used.
func TestSessionTemplateRefusesWrittenText(t *testing.T) {
	t.Parallel()
	for _, tmpl := range []string{"gh:{{.title}}", "gh:{{.comment}}", "{{.body}}", "team:{{.label}}", "gh:{{range .labels}}{{.}}{{end}}",
		"gh:{{if .pr}}{{.title}}{{end}}", "gh:{{with .comment}}{{.}}{{end}}", "gh:{{printf \"%s\" .title}}"} {
		var cfg Config
		if err := channels.Decode([]byte("rules: [{event: issues, action: opened, session: '"+tmpl+"'}]"), &cfg); err != nil {
			t.Fatal(err)
		}
		if _, err := cfg.compile(); err == nil || !strings.Contains(err.Error(), "session") || !strings.Contains(err.Error(), "repo, number") {
			t.Errorf("session %q: %v; want a load error naming the fields a session may use", tmpl, err)
		}
	}
	for _, tmpl := range []string{"", "triage:{{.repo}}#{{.number}}", "gh:{{.owner}}-{{.name}}-{{.number}}", "gh:{{.sender}}", "{{if .pr}}pr{{else}}issue{{end}}:{{.repo}}"} {
		var cfg Config
		_ = channels.Decode([]byte("rules: [{event: issues, action: opened, session: '"+tmpl+"'}]"), &cfg)
		if _, err := cfg.compile(); err != nil {
			t.Errorf("session %q: %v; want it loaded", tmpl, err)
		}
	}
}

// A session the policy makes may not name another agent's session
// ("<agent>/…": a repository owner can be named like an agent) nor a
// sub-agent's ("…/delegate-…"): the event starts nothing.
func TestIntentSessionsStayThisAgents(t *testing.T) {
	t.Parallel()
	ev := func(repo string) *Event {
		return &Event{Name: "issues", Action: "opened", Repo: repo, Number: 1, Association: "OWNER", Sender: "mallory"}
	}
	// Without a prefix, every repository's session is "<owner>/…": the
	// file stops loading.
	var cfg Config
	_ = channels.Decode([]byte(`rules: [{event: issues, session: "{{.repo}}#{{.number}}"}]`), &cfg)
	if _, err := cfg.compile(); err == nil || !strings.Contains(err.Error(), `"github:"`) {
		t.Errorf("session {{.repo}}#{{.number}}: %v; want a load error asking for a prefix", err)
	}
	if got, err := policy(t, `rules: [{event: issues, session: "github:{{.repo}}"}]`).Intents(ev("o/delegate-0123456789abcdef")); err == nil {
		t.Errorf("a sub-agent's session, by the repository's name: intents %+v; want refused", got)
	}
	for _, s := range []string{"ops/x", "a/b/delegate-0123456789abcdef", "github:o/r#1/delegate-0123456789abcdef"} {
		if err := checkIntent(Intent{Session: s, Prompt: "p"}); err == nil {
			t.Errorf("an executable policy's session %q: accepted; want refused", s)
		}
	}
	if got, err := policy(t, `rules: [{event: issues}]`).Intents(ev("ops/x")); err != nil || len(got) != 1 || got[0].Session != "github:ops/x#1" {
		t.Errorf("the default session of ops/x#1: %+v, %v", got, err)
	}
}
