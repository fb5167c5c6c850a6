package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/sandbox/sandboxtest"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
)

// runTool loads the workspace and runs one call of the named tool in it.
func runTool(t *testing.T, d *Definition, name, args string) agent.ToolResult {
	t.Helper()
	return runToolCtx(t, t.Context(), d, name, args)
}

// runToolUnsandboxed runs the tool outside the tool sandbox, for tests that
// follow its processes by their host PIDs or need its exact wait status
// (the sandbox's namespace init reports a signal as exit code 128+n).
func runToolUnsandboxed(t *testing.T, d *Definition, name, args string) agent.ToolResult {
	t.Helper()
	l, err := NewLoader(d.Workspace.Dir, "")
	if err != nil {
		t.Fatal(err)
	}
	l.contextStop = d.Workspace.Dir
	l.Getenv = func(string) string { return "" }
	l.Sandbox = sandboxtest.Unconfined()
	open, err := l.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return runToolCtx(t, t.Context(), open, name, args)
}

func runToolCtx(t *testing.T, ctx context.Context, d *Definition, name, args string) agent.ToolResult {
	t.Helper()
	tool, ok := d.Tool(name)
	if !ok {
		t.Fatalf("tool %s not loaded; diagnostics:\n%s", name, diagText(d))
	}
	res, err := tool.Run(ctx, agent.ToolCall{ID: "c1", Name: name, Args: json.RawMessage(args), Session: "s1", Dir: d.Workspace.Dir})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

const upperScript = `#!/usr/bin/env bash
# Reads {"text": "..."} on stdin and prints it in upper case.
set -euo pipefail
input=$(cat)
text=$(printf '%s' "$input" | sed -n 's/.*"text":"\([^"]*\)".*/\1/p')
printf '%s\n' "${text^^}"
`

func TestWorkspaceToolRuns(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		manifest string
		args     string
		want     string // exact content, unless contains is set
		contains []string
		isError  bool
		details  bool
		// unsandboxed: the exact wait status is asserted, which the
		// sandbox's namespace init turns into exit code 128+n.
		unsandboxed bool
	}{
		{name: "stdin JSON to stdout", manifest: "command: cat\n", args: `{ "city" : "Paris" }`, want: `{"city":"Paris"}`},
		{name: "no args is an empty object", manifest: "command: [cat]\n", args: ``, want: `{}`},
		{name: "script relative to tools dir", manifest: "command: [./upper.sh]\n", args: `{"text":"hello"}`, want: "HELLO\n"},
		{name: "script through FASTAGENT_TOOL_DIR", manifest: "command: '\"$FASTAGENT_TOOL_DIR/upper.sh\"'\n", args: `{"text":"hi there"}`, want: "HI THERE\n"},
		{name: "runs in the working directory", manifest: "command: pwd -P; cat marker.txt\n", args: `{}`, contains: []string{"MARKER"}},
		{name: "argv with arguments", manifest: "command: [printf, '%s-%s', a, b]\n", args: `{}`, want: "a-b"},
		{name: "no output", manifest: "command: 'true'\n", args: `{}`, want: "(no output)"},
		{
			name: "non-zero exit reports stderr tail", manifest: "command: echo partial; echo first >&2; echo boom >&2; exit 3\n", args: `{}`,
			contains: []string{"failed with exit code 3", "stderr:\nfirst\nboom", "stdout:\npartial"}, isError: true,
		},
		{name: "killed by a signal", manifest: "command: kill -KILL $$\n", args: `{}`, contains: []string{"terminated by signal killed"}, isError: true, unsandboxed: true},
		{name: "missing program", manifest: "command: [./nope.sh]\n", args: `{}`, contains: []string{"could not start", "nope.sh"}, isError: true},
		{name: "not executable", manifest: "command: [./plain.txt]\n", args: `{}`, contains: []string{"could not start", "chmod +x"}, isError: true},
		{name: "json output", manifest: "output: json\ncommand: |\n  echo '{\"content\": \"it failed politely\", \"isError\": true}'\n", args: `{}`, want: "it failed politely", isError: true},
		{name: "json output ok", manifest: "output: json\ncommand: |\n  echo '{\"content\": \"done\", \"details\": {\"id\": 7}}'\n", args: `{}`, want: "done", details: true},
		{name: "bad json output", manifest: "output: json\ncommand: echo not json\n", args: `{}`, contains: []string{"declares output: json", "not json"}, isError: true},
		{name: "json output without content", manifest: "output: json\ncommand: |\n  echo '{\"text\": \"x\"}'\n", args: `{}`, contains: []string{"declares output: json", `unknown field "text"`}, isError: true},
		{name: "long output is truncated", manifest: "command: seq 1 5000\n", args: `{}`, contains: []string{"1\n2\n", "[Output truncated to its first 2000 of 5000 lines"}, details: true},
		{
			name: "invalid args are refused before running", manifest: "parameters: {properties: {n: {type: integer}}, required: [n]}\ncommand: touch ran.txt\n", args: `{}`,
			contains: []string{`missing required field "n"`}, isError: true,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := load(t, map[string]string{
				"tools/t.yaml":    "description: test tool\n" + c.manifest,
				"tools/upper.sh":  upperScript,
				"tools/plain.txt": "#!/bin/sh\necho hi\n",
				"marker.txt":      "MARKER\n",
			}, nil)
			run := runTool
			if c.unsandboxed {
				run = runToolUnsandboxed
			}
			res := run(t, d, "t", c.args)
			if res.IsError != c.isError {
				t.Fatalf("IsError = %v: %q", res.IsError, res.Content)
			}
			if c.contains == nil && res.Content != c.want {
				t.Fatalf("content %q, want %q", res.Content, c.want)
			}
			for _, w := range c.contains {
				if !strings.Contains(res.Content, w) {
					t.Errorf("content %q lacks %q", res.Content, w)
				}
			}
			if (len(res.Details) > 0) != c.details {
				t.Errorf("details %s", res.Details)
			}
			if _, err := os.Stat(filepath.Join(d.Workspace.Dir, "ran.txt")); err == nil {
				t.Error("the command ran despite invalid arguments")
			}
		})
	}
}

func TestWorkspaceToolTimeoutKillsGroup(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		files map[string]string
	}{
		{name: "manifest timeout", files: map[string]string{"tools/slow.yaml": "description: slow\ntimeout: 300ms\ncommand: sleep 30 & echo $! > bg.pid; wait\n"}},
		{name: "config timeout", files: map[string]string{
			"tools/slow.yaml": "description: slow\ntimeout: 1h\ncommand: sleep 30 & echo $! > bg.pid; wait\n",
			"fastagent.yaml":  "tools:\n  slow:\n    timeout: 300ms\n",
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := load(t, c.files, nil)
			start := time.Now()
			res := runToolUnsandboxed(t, d, "slow", `{}`)
			if elapsed := time.Since(start); elapsed > 5*time.Second {
				t.Fatalf("took %v; the timeout did not stop it", elapsed)
			}
			if !res.IsError || !strings.Contains(res.Content, "timed out after 300ms; its process group was killed") {
				t.Fatalf("result %+v", res)
			}
			b, err := os.ReadFile(filepath.Join(d.Workspace.Dir, "bg.pid"))
			if err != nil {
				t.Fatal(err)
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			if !wait.Until(3*time.Second, func() bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				t.Fatalf("background child %d survived the timeout", pid)
			}
		})
	}
}

func TestWorkspaceToolAbort(t *testing.T) {
	t.Parallel()
	d := load(t, map[string]string{"tools/slow.yaml": "description: slow\ncommand: sleep 30\n"}, nil)
	tool, _ := d.Tool("slow")
	ctx, cancel := contextWithTimeout(t, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	res, err := tool.Run(ctx, agent.ToolCall{Args: json.RawMessage(`{}`), Dir: d.Workspace.Dir})
	if err != nil || !res.IsError || !strings.Contains(res.Content, "was aborted") || time.Since(start) > 5*time.Second {
		t.Fatalf("res %+v err %v after %v", res, err, time.Since(start))
	}
}

// TestWorkspaceToolEnv: a workspace tool sees the allowlist and the config's
// env names, never the rest of the worker's environment.
func TestWorkspaceToolEnv(t *testing.T) {
	t.Setenv("FASTAGENT_TEST_SECRET", "hunter2-secret")
	t.Setenv("FASTAGENT_TEST_SHARED", "shared-value")
	d := load(t, map[string]string{
		"tools/env.yaml": "description: print env\ncommand: [env]\n",
		"fastagent.yaml": "env: [FASTAGENT_TEST_SHARED]\n",
	}, nil)
	res := runTool(t, d, "env", `{}`)
	if res.IsError {
		t.Fatal(res.Content)
	}
	if strings.Contains(res.Content, "hunter2-secret") {
		t.Errorf("the worker's secret leaked into the tool env:\n%s", res.Content)
	}
	for _, want := range []string{"PATH=", "FASTAGENT_TEST_SHARED=shared-value", "FASTAGENT_TOOL_NAME=env", "FASTAGENT_SESSION=s1", "FASTAGENT_TOOL_DIR=" + filepath.Join(d.Workspace.AgentDir, "tools")} {
		if !strings.Contains(res.Content, want) {
			t.Errorf("env lacks %q:\n%s", want, res.Content)
		}
	}
}

func TestWorkspaceToolNeedsWorkDir(t *testing.T) {
	t.Parallel()
	d := load(t, map[string]string{"tools/x.yaml": "description: x\ncommand: cat\n"}, nil)
	tool, _ := d.Tool("x")
	if _, err := tool.Run(t.Context(), agent.ToolCall{Args: json.RawMessage(`{}`)}); err == nil {
		t.Fatal("no error without a working directory")
	}
}

// A background job a tool leaves behind is killed when the call returns.
func TestWorkspaceToolBackgroundJobGone(t *testing.T) {
	t.Parallel()
	d := load(t, map[string]string{"tools/bg.yaml": "description: bg\ncommand: sleep 100 & echo $! > bg.pid; echo ok\n"}, nil)
	res := runToolUnsandboxed(t, d, "bg", `{}`)
	if res.IsError || strings.TrimSpace(res.Content) != "ok" {
		t.Fatalf("result %+v", res)
	}
	b, err := os.ReadFile(filepath.Join(d.Workspace.Dir, "bg.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	running := func() bool {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
		}
		i := strings.LastIndexByte(string(stat), ')')
		return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
	}
	if !wait.Until(10*time.Second, func() bool { return !running() }) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("background job %d outlived the call", pid)
	}
}
