package workspace

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/sandbox/sandboxtest"
)

// loadErr writes files into a new workspace and returns the load's error.
func loadErr(t *testing.T, files map[string]string) error {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, files)
	l, err := NewLoader(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	l.contextStop = dir
	l.Getenv = func(string) string { return "" }
	l.Sandbox = sandboxtest.Box()
	_, err = l.Load(context.Background())
	return err
}

const guardScript = "#!/bin/sh\ncat >/dev/null\necho '{\"decision\":\"allow\"}'\n"

// Hook files load with their defaults: onError deny for before_tool and
// allow otherwise, a 10 s timeout, match as alternatives or a list; the
// command is resolved in the agent folder; they are listed in file order.
func TestHooksLoad(t *testing.T) {
	t.Parallel()
	d := load(t, map[string]string{
		"hooks/guard.sh":    guardScript,
		"hooks/a-tool.yaml": "event: before_tool\nmatch: \"bash|write_*\"\ncommand: ./hooks/guard.sh\n",
		"hooks/b-end.yml":   "event: turn_end\ncommand: [./hooks/guard.sh, --strict]\ntimeout: 30s\nonError: deny\nnetwork: on\n",
		"hooks/c-list.yaml": "event: after_tool\nmatch: [read, edit]\ncommand: hooks/guard.sh\n",
		"hooks/notes.txt":   "not a hook",
	}, nil)
	if len(d.Hooks) != 3 {
		t.Fatalf("loaded %d hooks, want 3: %+v", len(d.Hooks), d.Hooks)
	}
	tool, end, list := d.Hooks[0], d.Hooks[1], d.Hooks[2]
	if tool.Name != "a-tool" || tool.File != "hooks/a-tool.yaml" || tool.Event != HookBeforeTool || tool.OnError != HookDeny ||
		tool.Timeout != DefaultHookTimeout || strings.Join(tool.Match, ",") != "bash,write_*" {
		t.Errorf("a-tool: %+v", tool)
	}
	if !filepath.IsAbs(tool.Command) || filepath.Base(tool.Command) != "guard.sh" {
		t.Errorf("a-tool command %q, want the absolute path of hooks/guard.sh", tool.Command)
	}
	if end.Event != HookTurnEnd || end.OnError != HookDeny || end.Timeout != 30*time.Second || !end.Network ||
		strings.Join(end.Args, " ") != "--strict" {
		t.Errorf("b-end: %+v", end)
	}
	if list.OnError != HookAllow || strings.Join(list.Match, ",") != "read,edit" {
		t.Errorf("c-list: %+v", list)
	}
	for tool, want := range map[string]bool{"bash": true, "write_file": true, "read": false, "writer": false} {
		if got := len(d.HooksFor(HookBeforeTool, tool)) == 1; got != want {
			t.Errorf("before_tool hooks for %s: matched %v, want %v", tool, got, want)
		}
	}
	if n := len(d.HooksFor(HookTurnEnd, "")); n != 1 {
		t.Errorf("turn_end hooks: %d, want 1", n)
	}
}

// A hook file that is wrong fails the load (a guard that silently did not
// load would let what it guards run), and the error names the file, the
// line and the key.
func TestBrokenHookFailsTheLoad(t *testing.T) {
	t.Parallel()
	outside := filepath.Join(t.TempDir(), "outside.sh")
	if err := os.WriteFile(outside, []byte(guardScript), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		files map[string]string
		want  []string
	}{
		{"unknown event", map[string]string{"hooks/x.yaml": "event: before_everything\ncommand: ./hooks/guard.sh\n"},
			[]string{"hooks/x.yaml:1: event:", `"before_everything" is not an event`}},
		{"missing event", map[string]string{"hooks/x.yaml": "command: ./hooks/guard.sh\n"},
			[]string{"hooks/x.yaml", "event: missing"}},
		{"unknown key", map[string]string{"hooks/x.yaml": "event: turn_end\ncommand: ./hooks/guard.sh\nretries: 2\n"},
			[]string{"hooks/x.yaml:3: retries: unknown key"}},
		{"missing command", map[string]string{"hooks/x.yaml": "event: turn_end\n"},
			[]string{"hooks/x.yaml", "command: missing"}},
		{"command outside the agent folder", map[string]string{"hooks/x.yaml": "event: turn_end\ncommand: " + outside + "\n"},
			[]string{"hooks/x.yaml:2: command:", "outside the agent folder"}},
		{"command escaping with ..", map[string]string{"hooks/x.yaml": "event: turn_end\ncommand: ../../etc/passwd\n"},
			[]string{"hooks/x.yaml:2: command:"}},
		{"shell line", map[string]string{"hooks/x.yaml": "event: turn_end\ncommand: echo hi | sh\n"},
			[]string{"hooks/x.yaml:2: command:", "not a path"}},
		{"missing script", map[string]string{"hooks/x.yaml": "event: turn_end\ncommand: ./hooks/nope.sh\n"},
			[]string{"hooks/x.yaml:2: command:", "no such file"}},
		{"not executable", map[string]string{"hooks/x.yaml": "event: turn_end\ncommand: ./hooks/guard.txt\n", "hooks/guard.txt": "x"},
			[]string{"hooks/x.yaml:2: command:", "not executable"}},
		{"timeout too long", map[string]string{"hooks/x.yaml": "event: turn_end\ncommand: ./hooks/guard.sh\ntimeout: 5m\n"},
			[]string{"hooks/x.yaml:3: timeout:", "at most 1m0s"}},
		{"bad timeout", map[string]string{"hooks/x.yaml": "event: turn_end\ncommand: ./hooks/guard.sh\ntimeout: soon\n"},
			[]string{"hooks/x.yaml:3: timeout:"}},
		{"bad onError", map[string]string{"hooks/x.yaml": "event: turn_end\ncommand: ./hooks/guard.sh\nonError: ignore\n"},
			[]string{"hooks/x.yaml:3: onError:", `"ignore" is not deny or allow`}},
		{"match on a turn event", map[string]string{"hooks/x.yaml": "event: turn_end\nmatch: bash\ncommand: ./hooks/guard.sh\n"},
			[]string{"hooks/x.yaml:2: match:", "only before_tool and after_tool"}},
		{"bad glob", map[string]string{"hooks/x.yaml": "event: before_tool\nmatch: \"bash|[\"\ncommand: ./hooks/guard.sh\n"},
			[]string{"hooks/x.yaml:2: match:", "not a valid glob"}},
		{"bad yaml", map[string]string{"hooks/x.yaml": "event: [oops\n"},
			[]string{"hooks/x.yaml", "not valid YAML"}},
		{"bad name", map[string]string{"hooks/my hook.yaml": "event: turn_end\ncommand: ./hooks/guard.sh\n"},
			[]string{"my hook.yaml", "not a valid hook name"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.files["hooks/guard.sh"] = guardScript
			err := loadErr(t, c.files)
			if err == nil {
				t.Fatal("the load succeeded")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// hooks/ and every hook's command are out of the agent's tools' reach: a
// tool that rewrote its guard would lift it.
func TestHooksAreProtected(t *testing.T) {
	t.Parallel()
	d := load(t, map[string]string{
		"scripts/guard.sh": guardScript,
		"hooks/g.yaml":     "event: before_tool\ncommand: ./scripts/guard.sh\n",
	}, nil)
	l, err := NewLoader(d.Workspace.Dir, "")
	if err != nil {
		t.Fatal(err)
	}
	var dirProtected, cmdProtected bool
	for _, p := range l.protected(d) {
		dirProtected = dirProtected || (p.Path == filepath.Join(d.Workspace.AgentDir, HooksDir) && p.Dir)
		cmdProtected = cmdProtected || p.Path == d.Hooks[0].Command
	}
	if !dirProtected || !cmdProtected {
		t.Errorf("hooks/ protected: %v, the hook's command protected: %v; want both", dirProtected, cmdProtected)
	}
}

// tamperScript tries to change its own script and add a hook file, and
// writes into the workspace.
const tamperScript = "#!/bin/sh\necho '# more' >> hooks/tamper.sh\necho '{}' > hooks/new.yaml\necho ok > scratch.txt\n"

// A hook runs confined, in the workspace, with its input on stdin; a
// failing or slow one reports why.
func TestHookRun(t *testing.T) {
	t.Parallel()
	d := load(t, map[string]string{
		"hooks/echo.sh":     "#!/bin/sh\nread line\necho \"{\\\"context\\\":\\\"got $line in $(pwd)\\\"}\"\n",
		"hooks/fail.sh":     "#!/bin/sh\necho nope >&2\nexit 3\n",
		"hooks/slow.sh":     "#!/bin/sh\nsleep 30\n",
		"hooks/echo.yaml":   "event: turn_end\ncommand: ./hooks/echo.sh\n",
		"hooks/fail.yaml":   "event: turn_end\ncommand: ./hooks/fail.sh\n",
		"hooks/slow.yaml":   "event: turn_end\ncommand: ./hooks/slow.sh\ntimeout: 1s\n",
		"hooks/tamper.sh":   tamperScript,
		"hooks/tamper.yaml": "event: turn_end\ncommand: ./hooks/tamper.sh\n",
	}, nil)
	byName := map[string]Hook{}
	for _, h := range d.Hooks {
		byName[h.Name] = h
	}
	ctx := context.Background()
	run, err := byName["echo"].Run(ctx, d.Workspace.Dir, "s1", "c1", []byte("hello\n"))
	if err != nil || run.Failed != "" || !strings.Contains(run.Stdout, "got hello in ") {
		t.Errorf("echo: %+v, %v", run, err)
	}
	run, err = byName["fail"].Run(ctx, d.Workspace.Dir, "s1", "c1", nil)
	if err != nil || !strings.Contains(run.Failed, "exit code 3") || !strings.Contains(run.Failed, "nope") {
		t.Errorf("fail: %+v, %v", run, err)
	}
	run, err = byName["slow"].Run(ctx, d.Workspace.Dir, "s1", "c1", nil)
	if err != nil || !strings.Contains(run.Failed, "timed out after 1s") {
		t.Errorf("slow: %+v, %v", run, err)
	}
	// Confined like a tool: the workspace is writable, hooks/ is not.
	if _, err := byName["tamper"].Run(ctx, d.Workspace.Dir, "s1", "c1", nil); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(d.Workspace.Dir, "hooks", "tamper.sh")); string(b) != tamperScript {
		t.Error("a hook rewrote its own script")
	}
	if _, err := os.Stat(filepath.Join(d.Workspace.Dir, "hooks", "new.yaml")); err == nil {
		t.Error("a hook created a hook file")
	}
	if b, _ := os.ReadFile(filepath.Join(d.Workspace.Dir, "scratch.txt")); string(b) != "ok\n" {
		t.Errorf("the workspace is not writable to a hook: scratch.txt %q", b)
	}
}

// The example agent's guard loads and refuses rm -rf (run from a copy:
// the sandbox makes the protected folders a tool run needs).
func TestExampleGuardedAgent(t *testing.T) {
	t.Parallel()
	src := filepath.Join("..", "..", "examples", "guarded-agent")
	files := map[string]string{}
	for _, rel := range []string{"fastagent.yaml", "persona.md", "hooks/guard.yaml", "hooks/guard.sh"} {
		b, err := os.ReadFile(filepath.Join(src, rel))
		if err != nil {
			t.Fatal(err)
		}
		files[rel] = string(b)
	}
	d := load(t, files, nil)
	if len(d.Hooks) != 1 || d.Hooks[0].Event != HookBeforeTool || len(d.HooksFor(HookBeforeTool, "bash")) != 1 {
		t.Fatalf("hooks %+v", d.Hooks)
	}
	for cmd, want := range map[string]string{"rm -rf build": `"decision":"deny"`, "ls -la": `"decision":"allow"`} {
		in := `{"event":"before_tool","tool":{"id":"c1","name":"bash","args":{"command":"` + cmd + `"}}}`
		run, err := d.Hooks[0].Run(context.Background(), d.Workspace.Dir, "s1", "c1", []byte(in))
		if err != nil || run.Failed != "" || !strings.Contains(run.Stdout, want) {
			t.Errorf("%s: %+v, %v; want %s", cmd, run, err, want)
		}
	}
}
