package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAddSlack(t *testing.T) {
	cases := []struct {
		name string
		args []string
		// wantFile is a line channels/slack.yaml must have.
		wantFile string
		// wantOut are parts of stdout.
		wantOut []string
	}{
		{"socket", []string{"--socket"}, "transport: socket",
			[]string{"socket_mode_enabled: true", "SLACK_APP_TOKEN=xapp-", "SLACK_BOT_TOKEN=xoxb-", "connections:write", "- app_mentions:read", "- message.im"}},
		{"http with url", []string{"--url", "https://bot.example.com"}, "# transport: http",
			[]string{"request_url: https://bot.example.com/slack", "socket_mode_enabled: false", "SLACK_SIGNING_SECRET=", "- assistant:write"}},
		{"http placeholder", nil, "# signingSecretEnv: SLACK_SIGNING_SECRET",
			[]string{"request_url: https://YOUR-PUBLIC-HOST/slack", "placeholder"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			out, errOut, code := execute(t, "", append([]string{"-C", dir, "add", "slack"}, c.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			b, err := os.ReadFile(filepath.Join(dir, "channels", "slack.yaml"))
			if err != nil || !strings.Contains(string(b), c.wantFile) {
				t.Errorf("channels/slack.yaml = %q, %v; want a line %q", b, err, c.wantFile)
			}
			for _, w := range c.wantOut {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// add slack refuses to overwrite, and refuses bad flags, writing nothing;
// --force overwrites; --write-manifest writes the manifest file.
func TestAddSlackRefuses(t *testing.T) {
	dir := t.TempDir()
	chanFile := filepath.Join(dir, "channels", "slack.yaml")
	for _, bad := range [][]string{
		{"--url", "http://insecure.example.com"},
		{"--socket", "--url", "https://example.com"},
		{"--url", "https://example.com/?x=1"},
	} {
		_, errOut, code := execute(t, "", append([]string{"-C", dir, "add", "slack"}, bad...)...)
		if code != 2 || errOut == "" {
			t.Errorf("%v: exit %d %q, want a usage error", bad, code, errOut)
		}
		if _, err := os.Stat(chanFile); err == nil {
			t.Fatalf("%v: wrote %s", bad, chanFile)
		}
	}

	writeFile(t, chanFile, "mine: true\n")
	_, errOut, code := execute(t, "", "-C", dir, "add", "slack", "--socket")
	if code != 2 || !strings.Contains(errOut, "already exists") || !strings.Contains(errOut, "--force") {
		t.Errorf("over an existing file: exit %d %q", code, errOut)
	}
	if b, _ := os.ReadFile(chanFile); string(b) != "mine: true\n" {
		t.Errorf("existing file changed: %q", b)
	}

	out, errOut, code := execute(t, "", "-C", dir, "add", "slack", "--socket", "--force", "--write-manifest")
	if code != 0 {
		t.Fatalf("--force: exit %d %s", code, errOut)
	}
	if b, _ := os.ReadFile(chanFile); !strings.Contains(string(b), "transport: socket") {
		t.Errorf("--force did not overwrite: %q", b)
	}
	mf, err := os.ReadFile(filepath.Join(dir, manifestFile))
	if err != nil || !strings.Contains(string(mf), "socket_mode_enabled: true") {
		t.Errorf("manifest file %q, %v", mf, err)
	}
	if strings.Contains(out, "oauth_config") || !strings.Contains(out, manifestFile) {
		t.Errorf("with --write-manifest the output should name the file, not print it:\n%s", out)
	}
	// The manifest file is not overwritten without --force either.
	if err := os.Remove(chanFile); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := execute(t, "", "-C", dir, "add", "slack", "--write-manifest"); code != 2 || !strings.Contains(errOut, manifestFile) {
		t.Errorf("over an existing manifest: exit %d %q", code, errOut)
	}
	if _, err := os.Stat(chanFile); err == nil {
		t.Error("a refused add still wrote channels/slack.yaml")
	}
}

// The file add slack writes goes to the agent dir, and info reports the
// Socket Mode channel as on once its secrets are set.
func TestAddSlackAgentDirAndInfo(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "fastagent.yaml"), "agentDir: agent\n")
	if err := os.Mkdir(filepath.Join(dir, "agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := execute(t, "", "-C", dir, "add", "slack", "--socket"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "agent", "channels", "slack.yaml")); err != nil {
		t.Fatalf("not in the agent dir: %v", err)
	}
	t.Setenv("SLACK_BOT_TOKEN", "xoxb-test")
	t.Setenv("SLACK_APP_TOKEN", "xapp-test")
	out, errOut, code := execute(t, "", "-C", dir, "info", "--json")
	if code != 0 {
		t.Fatalf("info: %d %s", code, errOut)
	}
	var r infoReport
	if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Channels) != 1 {
		t.Fatalf("info --json: %v %s", err, out)
	}
	if c := r.Channels[0]; c.State != "on" || c.Route != "long connection" {
		t.Errorf("channel %+v, want on over a long connection", c)
	}
}
