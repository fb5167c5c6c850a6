package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/internal/workspace"
)

// execute runs the CLI with args and returns stdout, stderr as main would
// print it, and the exit code.
func execute(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	root := newRoot()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(args)
	err := root.Execute()
	code := 0
	if err != nil {
		code = exitUsageOr(err)
		errOut.WriteString("fastagent: " + err.Error() + "\n")
	}
	return out.String(), errOut.String(), code
}

// initWorkspace runs fastagent init into a new folder and returns it.
func initWorkspace(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "agent")
	if out, errOut, code := execute(t, "", "init", dir); code != 0 {
		t.Fatalf("init: exit %d\n%s%s", code, out, errOut)
	}
	return dir
}

func TestInitCreatesWorkingWorkspace(t *testing.T) {
	dir := initWorkspace(t)
	for _, f := range []string{"persona.md", "AGENTS.md", "fastagent.yaml", ".gitignore", "skills/summarize/SKILL.md", "tools/current_time.yaml", "tools/current_time.sh"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, ".gitignore")); !strings.Contains(string(b), ".fastagent/") || !strings.Contains(string(b), ".env\n") {
		t.Errorf(".gitignore does not ignore .fastagent/ and .env: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "fastagent.yaml")); !regexp.MustCompile(`(?m)^# model: `).Match(b) {
		t.Errorf("fastagent.yaml has no commented model line:\n%s", b)
	}

	l, err := workspace.NewLoader(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Getenv = func(string) string { return "" }
	def, err := l.Load(t.Context())
	if err != nil {
		t.Fatalf("the scaffold does not load: %v", err)
	}
	if len(def.Diagnostics) != 0 {
		t.Errorf("diagnostics: %v", def.Diagnostics)
	}
	if def.Persona == "" || len(def.ContextFiles) == 0 || len(def.Skills) != 1 {
		t.Errorf("persona %q, context %d, skills %v", def.Persona, len(def.ContextFiles), def.Skills)
	}
	if !strings.Contains(def.SystemPrompt(), "summarize") {
		t.Error("the example skill is not listed in the prompt")
	}
}

func TestToolCommand(t *testing.T) {
	dir := initWorkspace(t)
	writeFile(t, filepath.Join(dir, "tools", "fails.yaml"), "description: always fails\ncommand: echo 'no luck' >&2; exit 4\n")
	writeFile(t, filepath.Join(dir, "tools", "broken.yaml"), "description: no command\n")
	badCfg := t.TempDir()
	writeFile(t, filepath.Join(badCfg, "fastagent.yaml"), "thinkingLevel: max\n")

	dateLine := `^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC \(\w+\)\n$`
	cases := []struct {
		name    string
		stdin   string
		args    []string
		code    int
		stdout  string // regexp
		stderr  string // substring
		jsonOut bool
	}{
		{name: "example tool", args: []string{"-C", dir, "tool", "current_time", `{"timezone": "UTC"}`}, stdout: dateLine},
		{name: "default args", args: []string{"-C", dir, "tool", "current_time"}, stdout: dateLine},
		{name: "args from stdin", stdin: `{"timezone":"UTC"}`, args: []string{"-C", dir, "tool", "current_time", "-"}, stdout: dateLine},
		{name: "json result", args: []string{"-C", dir, "tool", "--json", "current_time", `{"timezone":"UTC"}`}, stdout: `^\{"content":"\d{4}-`, jsonOut: true},
		{name: "broken tool file is a warning", args: []string{"-C", dir, "tool", "current_time"}, stderr: "warning: " + filepath.Join(dir, "tools", "broken.yaml") + ": command: missing"},
		{name: "a built-in tool", args: []string{"-C", dir, "tool", "read", `{"path": "persona.md"}`}, stdout: `You are Scout`},
		{name: "invalid args", args: []string{"-C", dir, "tool", "current_time", `{"timezone": 5}`}, code: 2, stderr: `invalid arguments for current_time: field "timezone" must be a string, got number`},
		{name: "unexpected field", args: []string{"-C", dir, "tool", "current_time", `{"tz": "UTC"}`}, code: 2, stderr: `additional properties 'tz' not allowed`},
		{name: "invalid json", args: []string{"-C", dir, "tool", "current_time", `{oops`}, code: 2, stderr: "arguments are not valid JSON"},
		{name: "unknown tool", args: []string{"-C", dir, "tool", "nope"}, code: 2, stderr: `no tool named "nope" (tools: read, bash, edit, write, current_time, fails)`},
		{name: "no tool name", args: []string{"-C", dir, "tool"}, code: 2, stderr: "tool takes a tool name"},
		{name: "error result", args: []string{"-C", dir, "tool", "fails"}, code: 1, stdout: `failed with exit code 4`, stderr: "tool fails returned an error"},
		{name: "definition does not load", args: []string{"-C", badCfg, "tool", "read", `{"path": "x"}`}, code: 1, stderr: "thinkingLevel"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := execute(t, c.stdin, c.args...)
			if code != c.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, c.code, out, errOut)
			}
			if c.stdout != "" && !regexp.MustCompile(c.stdout).MatchString(out) {
				t.Errorf("stdout %q does not match %s", out, c.stdout)
			}
			if c.stderr != "" && !strings.Contains(errOut, c.stderr) {
				t.Errorf("stderr %q lacks %q", errOut, c.stderr)
			}
			if c.jsonOut {
				var res struct {
					Content string `json:"content"`
					IsError bool   `json:"isError"`
				}
				if err := json.Unmarshal([]byte(out), &res); err != nil || res.IsError || res.Content == "" {
					t.Errorf("--json output %q: %v", out, err)
				}
			}
		})
	}
}

func TestInitRefusesNonEmpty(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "notes.txt"), "mine")
	out, errOut, code := execute(t, "", "init", dir)
	if code != 2 {
		t.Fatalf("exit %d, want 2\n%s%s", code, out, errOut)
	}
	if !strings.Contains(errOut, dir+" is not empty (it has notes.txt)") {
		t.Errorf("message %q", errOut)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("init wrote into a non-empty folder: %v", entries)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "notes.txt")); string(b) != "mine" {
		t.Error("init touched an existing file")
	}

	// An empty folder, or one holding only .git, is fine; so is -C.
	gitOnly := t.TempDir()
	if err := os.Mkdir(filepath.Join(gitOnly, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := execute(t, "", "-C", gitOnly, "init"); code != 0 {
		t.Fatalf("init into a folder with only .git: exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(gitOnly, "fastagent.yaml")); err != nil {
		t.Error("init -C did not write into the -C folder")
	}
	if _, errOut, code := execute(t, "", "init", "a", "b"); code != 2 || !strings.Contains(errOut, "at most one argument") {
		t.Errorf("two arguments: exit %d: %s", code, errOut)
	}
}

func TestInfoJSON(t *testing.T) {
	dir := initWorkspace(t)
	writeFile(t, filepath.Join(dir, "channels", "slack.yaml"), "x")
	writeFile(t, filepath.Join(dir, "channels", "telegram.yaml.disabled"), "x")
	writeFile(t, filepath.Join(dir, "schedules", "daily.yaml"), "x")
	writeFile(t, filepath.Join(dir, "tools", "read.yaml"), "description: shadowed\ncommand: cat\n")
	t.Setenv("FASTAGENT_MODEL", "")

	out, errOut, code := execute(t, "", "-C", dir, "info", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r infoReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("info --json is not JSON: %v\n%s", err, out)
	}
	if r.Dir != dir || r.AgentDir != dir || r.ConfigFile != filepath.Join(dir, "fastagent.yaml") {
		t.Errorf("dirs %q %q config %q", r.Dir, r.AgentDir, r.ConfigFile)
	}
	if r.Model.Source != "unset" || r.Model.Name != "" {
		t.Errorf("model %+v", r.Model)
	}
	origin := map[string]string{}
	for _, tl := range r.Tools {
		origin[tl.Name] = tl.Origin
	}
	if origin["current_time"] != "workspace:tools/current_time.yaml" || origin["read"] != "builtin" {
		t.Errorf("tools %+v", r.Tools)
	}
	if len(r.Collisions) != 1 || r.Collisions[0] != (workspace.Collision{Name: "read", Kept: "builtin", Skipped: "workspace:tools/read.yaml"}) {
		t.Errorf("collisions %+v", r.Collisions)
	}
	if len(r.Skills) != 1 || r.Skills[0].Name != "summarize" {
		t.Errorf("skills %+v", r.Skills)
	}
	if len(r.ContextFiles) == 0 || r.ContextFiles[0] != filepath.Join(dir, "AGENTS.md") {
		t.Errorf("context files %v", r.ContextFiles)
	}
	if len(r.Channels) != 2 || !r.Channels[0].Enabled || r.Channels[1].Enabled || r.Channels[1].Name != "telegram" {
		t.Errorf("channels %+v", r.Channels)
	}
	// info shows the real state: slack.yaml ("x") would stop the server.
	if len(r.Channels) == 2 && (r.Channels[0].State != "broken" || r.Channels[0].Problem == "" || r.Channels[1].State != "off") {
		t.Errorf("channel states %+v", r.Channels)
	}
	if len(r.Schedules) != 1 || r.Schedules[0].Name != "daily" {
		t.Errorf("schedules %+v", r.Schedules)
	}
	if len(r.Diagnostics) != 1 || !strings.Contains(r.Diagnostics[0].Message, `tool "read" is already defined`) {
		t.Errorf("diagnostics %+v", r.Diagnostics)
	}

	// The model's source: the environment wins over the file.
	writeFile(t, filepath.Join(dir, "fastagent.yaml"), "model: openai/gpt-4o-mini\n")
	for _, c := range []struct{ env, name, source string }{
		{"", "openai/gpt-4o-mini", "file"},
		{"anthropic/claude-sonnet-4-5", "anthropic/claude-sonnet-4-5", "env"},
	} {
		t.Setenv("FASTAGENT_MODEL", c.env)
		out, _, _ := execute(t, "", "-C", dir, "info", "--json")
		var r infoReport
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		if r.Model.Name != c.name || r.Model.Source != c.source {
			t.Errorf("FASTAGENT_MODEL=%q: model %+v", c.env, r.Model)
		}
	}
}

func TestInfoText(t *testing.T) {
	dir := initWorkspace(t)
	t.Setenv("FASTAGENT_MODEL", "")
	out, errOut, code := execute(t, "", "-C", dir, "info")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"working dir  " + dir, "current_time  workspace:tools/current_time.yaml (idempotent)", "summarize", "problems     (none)"} {
		if !strings.Contains(out, want) {
			t.Errorf("info lacks %q:\n%s", want, out)
		}
	}
}

// info lists the hooks it loaded: name, event, match, command, timeout,
// onError.
func TestInfoListsHooks(t *testing.T) {
	dir := initWorkspace(t)
	t.Setenv("FASTAGENT_MODEL", "")
	writeFile(t, filepath.Join(dir, "hooks", "guard.yaml"), "event: before_tool\nmatch: bash|write\ncommand: ./hooks/guard.sh\n")
	writeFile(t, filepath.Join(dir, "hooks", "guard.sh"), "#!/bin/sh\necho '{}'\n")
	if err := os.Chmod(filepath.Join(dir, "hooks", "guard.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := execute(t, "", "-C", dir, "info")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if want := "before_tool bash|write → ./hooks/guard.sh (timeout 10s, onError deny)"; !strings.Contains(out, want) || !strings.Contains(out, "guard ") {
		t.Errorf("info lacks %q:\n%s", want, out)
	}
	out, _, _ = execute(t, "", "-C", dir, "info", "--json")
	var r infoReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Hooks) != 1 || r.Hooks[0].Event != "before_tool" || r.Hooks[0].File != "hooks/guard.yaml" || r.Hooks[0].OnError != "deny" {
		t.Errorf("hooks %+v", r.Hooks)
	}
}

func TestInfoFailsOnBrokenDefinition(t *testing.T) {
	cases := []struct {
		name   string
		files  map[string]string
		args   []string
		stderr string
	}{
		{name: "bad config", files: map[string]string{"fastagent.yaml": "codingTools: [read, grep]\n"}, stderr: `codingTools: unknown coding tool "grep"`},
		{name: "missing agent dir", args: []string{"--agent-dir", "nowhere"}, stderr: "--agent-dir"},
		{name: "bad hook", files: map[string]string{"hooks/guard.yaml": "event: before_tool\ncommand: /bin/sh\n"},
			stderr: "hooks/guard.yaml:2: command: /bin/sh is outside the agent folder"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, content := range c.files {
				writeFile(t, filepath.Join(dir, name), content)
			}
			args := append([]string{"-C", dir}, c.args...)
			out, errOut, code := execute(t, "", append(args, "info", "--json")...)
			if code != 1 {
				t.Fatalf("exit %d, want 1\n%s%s", code, out, errOut)
			}
			if !strings.Contains(errOut, c.stderr) || !strings.Contains(errOut, "does not load") {
				t.Errorf("stderr %q lacks %q", errOut, c.stderr)
			}
			if out != "" {
				t.Errorf("stdout %q, want nothing", out)
			}
		})
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A channel file that the server would accept shows as on, with its route;
// one missing its secret shows as broken, saying which.
func TestInfoChannelState(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "channels", "slack.yaml"), "signingSecretEnv: INFO_TEST_SLACK_SECRET\nbotTokenEnv: INFO_TEST_SLACK_TOKEN\n")
	t.Setenv("INFO_TEST_SLACK_TOKEN", "xoxb-test")
	read := func() infoChannel {
		out, errOut, code := execute(t, "", "-C", dir, "info", "--json")
		if code != 0 {
			t.Fatalf("info: %d %s", code, errOut)
		}
		var r infoReport
		if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Channels) != 1 {
			t.Fatalf("info --json: %v %s", err, out)
		}
		return r.Channels[0]
	}
	if c := read(); c.State != "broken" || !strings.Contains(c.Problem, "INFO_TEST_SLACK_SECRET") {
		t.Errorf("without the signing secret: %+v", c)
	}
	t.Setenv("INFO_TEST_SLACK_SECRET", "sec")
	if c := read(); c.State != "on" || c.Route != "POST /slack" {
		t.Errorf("with both secrets: %+v", c)
	}
}
