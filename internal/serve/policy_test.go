package serve

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/github"
	"github.com/fastagent/fastagent/internal/sandbox"
	"github.com/fastagent/fastagent/internal/sandbox/sandboxtest"
)

// GitHub's executable policy runs in the ingress, on every signed event
// (from anyone who may comment), before the ACK. It runs in the tool
// sandbox: it reads no secret of the agent or the worker (.env, the state
// dir), writes nothing, and when no mechanism can confine it, it does not
// run at all.
func TestGitHubExecPolicyIsConfined(t *testing.T) {
	for _, m := range []sandbox.Mode{sandbox.Namespaces, sandbox.Landlock} {
		t.Run(string(m), func(t *testing.T) {
			if st := sandbox.Open(sandbox.Config{Mode: m}); st.Status().Mode != m {
				_ = st.Close()
				if sandboxtest.Required() {
					t.Fatalf("%s unavailable: %s", m, st.Status().Error)
				}
				t.Skipf("%s unavailable here: %s", m, st.Status().Error)
			} else {
				_ = st.Close()
			}
			// Outside /tmp, which a sandboxed process gets a private copy
			// of anyway: what it could see, but must not.
			cache, err := os.UserCacheDir()
			if err != nil {
				t.Skip(err)
			}
			if err := os.MkdirAll(cache, 0o700); err != nil {
				t.Fatal(err)
			}
			dir, err := os.MkdirTemp(cache, "fastagent-policy-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(dir) })
			script := "#!/bin/sh\ncat >/dev/null\n" +
				"s=$(cat " + dir + "/.env " + dir + "/.fastagent/token 2>&1 | tr -d '\\n\"\\\\')\n" +
				"w=$(echo x 2>/dev/null > " + dir + "/written.txt && echo wrote)\n" +
				"printf '[{\"session\":\"gh:probe\",\"prompt\":\"read:%s write:%s\"}]\\n' \"$s\" \"$w\"\n"
			files := map[string]string{
				"fastagent.yaml":            "model: openai/gpt-4o-mini\n",
				"channels/github.yaml":      "policy: {exec: ./github-policy.sh}\n",
				"channels/github-policy.sh": script,
				".env":                      "OPENAI_API_KEY=canary-env\n",
				".fastagent/token":          "canary-state\n",
			}
			for p, body := range files {
				full := filepath.Join(dir, p)
				if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
					t.Fatal(err)
				}
				mode := os.FileMode(0o600)
				if strings.HasSuffix(p, ".sh") {
					mode = 0o755
				}
				if err := os.WriteFile(full, []byte(body), mode); err != nil {
					t.Fatal(err)
				}
			}
			env := map[string]string{"GITHUB_WEBHOOK_SECRET": "s3cret", "GITHUB_TOKEN": "ghp_x", "FASTAGENT_SANDBOX": string(m)}
			p, err := Open(context.Background(), Config{Dir: dir, Store: filepath.Join(t.TempDir(), "s.db"), Getenv: func(k string) string { return env[k] }})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			if len(p.Channels) != 1 {
				t.Fatalf("channels: %+v", p.Channels)
			}
			body, err := os.ReadFile(filepath.Join("..", "channels", "github", "testdata", "issue_comment.json"))
			if err != nil {
				t.Fatal(err)
			}
			parsed, err := p.Channels[0].Door.Parse(channels.Request{Header: github.Sign("s3cret", "issue_comment", "d-1", body), Body: body})
			if err != nil {
				t.Fatalf("the policy did not run: %v", err)
			}
			if len(parsed.Deliveries) != 1 {
				t.Fatalf("deliveries: %+v", parsed.Deliveries)
			}
			got := parsed.Deliveries[0].Prompt.Text
			if strings.Contains(got, "canary") || strings.Contains(got, "wrote") {
				t.Errorf("%s: the policy read a secret or wrote into the workspace: %q", m, got)
			}
			if !strings.Contains(got, "read:") {
				t.Errorf("%s: the policy's answer is %q", m, got)
			}
			if _, err := os.Stat(filepath.Join(dir, "written.txt")); err == nil {
				t.Errorf("%s: the policy wrote into the workspace", m)
			}
		})
	}
}

// GitHub's executable policy decides who starts a turn and with what
// prompt. Where the agent's own tools can rewrite it — in the workspace,
// outside the rule folders — a turn steered by a comment could make it
// let anyone in: the load refuses it and says where to put it.
func TestGitHubExecPolicyOutsideTheRulesRefused(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"fastagent.yaml":       "model: openai/gpt-4o-mini\n",
		"channels/github.yaml": "policy: {exec: ../policies/github.sh}\n",
		"policies/github.sh":   "#!/bin/sh\necho '[]'\n",
	}
	for p, body := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"GITHUB_WEBHOOK_SECRET": "s3cret", "GITHUB_TOKEN": "ghp_x", "FASTAGENT_SANDBOX": "off"}
	p, err := Open(context.Background(), Config{Dir: dir, Store: filepath.Join(t.TempDir(), "s.db"), Getenv: func(k string) string { return env[k] }})
	if err == nil {
		p.Close()
		t.Fatal("a policy.exec the agent's tools can rewrite was accepted")
	}
	for _, want := range []string{"policy.exec", "policies/github.sh", "channels/"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	// In channels/, where no tool writes, it loads.
	if err := os.Rename(filepath.Join(dir, "policies", "github.sh"), filepath.Join(dir, "channels", "github-policy.sh")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "channels", "github.yaml"), []byte("policy: {exec: ./github-policy.sh}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err = Open(context.Background(), Config{Dir: dir, Store: filepath.Join(t.TempDir(), "s.db"), Getenv: func(k string) string { return env[k] }})
	if err != nil {
		t.Fatalf("a policy.exec in channels/: %v", err)
	}
	p.Close()
}
