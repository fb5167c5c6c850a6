package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/github"
)

// add github writes a channel file the channel loads, prints the webhook
// and credential steps, and refuses a bad login or an existing file,
// writing nothing.
func TestAddGitHub(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		wantOut []string
	}{
		{"token", []string{"--bot", "my-bot", "--url", "https://agent.example.com/"}, []string{"Payload URL: https://agent.example.com/github", "GITHUB_TOKEN", "GITHUB_WEBHOOK_SECRET"}},
		{"app", []string{"--bot", "my-app[bot]", "--app"}, []string{"GitHub App", "GITHUB_APP_PRIVATE_KEY", "https://<your ingress>/github"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			out, errOut, code := execute(t, "", append([]string{"-C", dir, "add", "github"}, c.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			for _, w := range c.wantOut {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			b, err := os.ReadFile(filepath.Join(dir, "channels", "github.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := github.New(b, func(k string) string {
				return map[string]string{"GITHUB_WEBHOOK_SECRET": "s", "GITHUB_TOKEN": "t"}[k]
			}); err != nil {
				t.Errorf("the written file does not load: %v\n%s", err, b)
			}
			if !strings.Contains(string(b), `mentions: "@my-`) {
				t.Errorf("file lacks the mention rule:\n%s", b)
			}
			// Again: refused, unchanged.
			if _, _, code := execute(t, "", "-C", dir, "add", "github"); code == 0 {
				t.Error("an existing channel file was overwritten without --force")
			}
		})
	}
	dir := t.TempDir()
	if _, errOut, code := execute(t, "", "-C", dir, "add", "github", "--bot", "not a login"); code == 0 || !strings.Contains(errOut, "not a GitHub login") {
		t.Errorf("bad login: exit %d, %q", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "channels")); err == nil {
		t.Error("a refused add wrote something")
	}
}

// The channel file add github writes starts turns only for the repository's
// owner, members and collaborators: a mention by anyone else on a public
// repository, or an outsider's issue labelled, is no turn.
func TestAddGitHubTrustedAuthorsOnly(t *testing.T) {
	dir := t.TempDir()
	if _, errOut, code := execute(t, "", "-C", dir, "add", "github"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	file, err := os.ReadFile(filepath.Join(dir, "channels", "github.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ch, err := github.New(file, func(k string) string {
		return map[string]string{"GITHUB_WEBHOOK_SECRET": "s", "GITHUB_TOKEN": "t"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ event, fixture string }{{"issue_comment", "issue_comment.json"}, {"issues", "issues_labeled.json"}} {
		fixture, err := os.ReadFile(filepath.Join("..", "..", "internal", "channels", "github", "testdata", c.fixture))
		if err != nil {
			t.Fatal(err)
		}
		for assoc, want := range map[string]int{"OWNER": 1, "MEMBER": 1, "COLLABORATOR": 1, "CONTRIBUTOR": 0, "NONE": 0} {
			body := []byte(strings.NewReplacer(`"OWNER"`, `"`+assoc+`"`, `"CONTRIBUTOR"`, `"`+assoc+`"`).Replace(string(fixture)))
			p, err := ch.Door.Parse(channels.Request{Header: github.Sign("s", c.event, "d-1", body), Body: body})
			if err != nil {
				t.Fatalf("%s by %s: %v", c.event, assoc, err)
			}
			if len(p.Deliveries) != want {
				t.Errorf("%s by %s: %d turns, want %d", c.event, assoc, len(p.Deliveries), want)
			}
		}
	}
	if !strings.Contains(string(file), "authorAssociation: [OWNER, MEMBER, COLLABORATOR]") {
		t.Errorf("the file does not show the association it requires:\n%s", file)
	}
}
