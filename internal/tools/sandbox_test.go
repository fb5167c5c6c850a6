package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/sandbox"
	"github.com/fastagent/fastagent/internal/sandbox/sandboxtest"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
)

// canaryEnv holds a unique secret that TestMain plants in the test
// process's own (initial) environment, as a worker's provider key is.
const canaryEnv = "FASTAGENT_TEST_CANARY_SECRET"

// sandboxWorkspace makes a workspace whose .env and session database hold
// the canary, with rules files to protect.
func sandboxWorkspace(t *testing.T, canary string) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "fastagent.yaml"), "model: openai/gpt-4o-mini\n")
	writeFile(t, filepath.Join(dir, "tools", "t.yaml"), "description: t\ncommand: 'true'\n")
	writeFile(t, filepath.Join(dir, ".env"), "OPENAI_API_KEY="+canary+"\n")
	writeFile(t, filepath.Join(dir, ".fastagent", "sessions.db"), "SQLite format 3\x00"+canary)
	return dir
}

// workspaceRules is the protected list a worker gives bash for dir (see
// workspace.ProtectedPaths): the rules read-only, the state and .env hidden.
func workspaceRules(dir string) []Protected {
	var out []Protected
	for _, r := range []struct {
		name        string
		dir, secret bool
	}{{"fastagent.yaml", false, false}, {"tools", true, false}, {"channels", true, false}, {"schedules", true, false},
		{".git", true, false}, {".fastagent", true, true}, {".env", false, true}} {
		out = append(out, Protected{Path: filepath.Join(dir, r.name), Reason: "a rule", Dir: r.dir, Secret: r.secret})
	}
	return out
}

// ruledBash is bash as a worker builds it for dir.
func ruledBash(dir string) agent.Tool {
	return testTools(Options{Protected: workspaceRules(dir)})[NameBash]
}

func requireSandbox(t *testing.T) string {
	t.Helper()
	sandboxtest.Require(t)
	canary := os.Getenv(canaryEnv)
	if canary == "" {
		t.Fatal("TestMain did not plant the canary")
	}
	return canary
}

// From inside bash, as the model would, no path shows a worker secret. The
// unsandboxed control shows each attack does find it without the sandbox.
func TestBashCannotReachWorkerSecrets(t *testing.T) {
	canary := requireSandbox(t)
	pid := os.Getpid()
	cases := []struct {
		name    string
		command string
		// leaks: the attack finds the canary when run unsandboxed.
		leaks bool
	}{
		// The parent is the sandbox helper, whose environment is empty.
		{"parent environ", `tr '\0' '\n' </proc/$PPID/environ`, false},
		{"worker environ by pid", fmt.Sprintf(`cat /proc/%d/environ`, pid), true},
		{"worker cmdline", fmt.Sprintf(`cat /proc/%d/cmdline; echo`, pid), false},
		{"walk every environ", `for f in /proc/*/environ; do tr '\0' '\n' <"$f"; done 2>/dev/null | grep -a =canary-`, true},
		{"worker memory", fmt.Sprintf(`grep '\[stack\]' /proc/%[1]d/maps | while read range rest; do
			s=$((16#${range%%-*})); e=$((16#${range##*-}))
			dd if=/proc/%[1]d/mem bs=65536 iflag=skip_bytes,count_bytes skip=$s count=$((e-s)) 2>/dev/null
		done | tr -c '[:print:]' '\n' | grep -a FASTAGENT_TEST`, pid), true},
		{".env", `cat .env`, true},
		{"session database", `cat .fastagent/sessions.db; ls -la .fastagent`, true},
		{"environment", `env`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := sandboxWorkspace(t, canary)
			r := run(t, ruledBash(dir), dir, map[string]any{"command": c.command})
			if strings.Contains(r.Content, canary) {
				t.Errorf("sandboxed %q shows the worker's secret:\n%s", c.command, r.Content)
			}
			if c.leaks {
				dir := sandboxWorkspace(t, canary)
				r := runUnsandboxed(t, ruledBash(dir), dir, map[string]any{"command": c.command})
				if !strings.Contains(r.Content, canary) {
					t.Errorf("control: unsandboxed %q does not find the secret, so the test proves nothing:\n%s", c.command, r.Content)
				}
			}
		})
	}
}

// The agent's rules are read-only from bash; the rest of the workspace is
// writable.
func TestBashCannotRewriteRules(t *testing.T) {
	requireSandbox(t)
	cases := []struct {
		name    string
		command string
		file    string // must not exist / must be unchanged afterwards
	}{
		{"append to fastagent.yaml", `echo 'approvals: off' >> fastagent.yaml`, "fastagent.yaml"},
		{"replace fastagent.yaml", `rm -f fastagent.yaml; echo x > fastagent.yaml`, "fastagent.yaml"},
		{"add a tool", `echo 'command: x' > tools/x.yaml`, "tools/x.yaml"},
		{"add a schedule", `mkdir -p schedules && echo 'x: 1' > schedules/x.yaml`, "schedules/x.yaml"},
		{"add a channel", `mkdir -p channels; echo 'x: 1' > channels/x.yaml`, "channels/x.yaml"},
		{"move tools away", `mv tools tools.old && mkdir tools && echo 'command: x' > tools/x.yaml`, "tools/x.yaml"},
		{"unmount", `umount fastagent.yaml; umount -l tools; echo x >> fastagent.yaml; echo 'command: x' > tools/x.yaml`, "tools/x.yaml"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := sandboxWorkspace(t, "not-a-secret")
			before, _ := os.ReadFile(filepath.Join(dir, c.file))
			bash := ruledBash(dir)
			r := run(t, bash, dir, map[string]any{"command": c.command + "; echo ok > notes.txt"})
			after, _ := os.ReadFile(filepath.Join(dir, c.file))
			if !bytes.Equal(before, after) {
				t.Errorf("%s changed from bash: %q -> %q\n%s", c.file, before, after, r.Content)
			}
			if b, err := os.ReadFile(filepath.Join(dir, "notes.txt")); err != nil || string(b) != "ok\n" {
				t.Errorf("the workspace is not writable: %v %q\n%s", err, b, r.Content)
			}
			// Control: without the sandbox the same command does change it.
			dir = sandboxWorkspace(t, "not-a-secret")
			runUnsandboxed(t, bash, dir, map[string]any{"command": c.command})
			if after, _ := os.ReadFile(filepath.Join(dir, c.file)); bytes.Equal(before, after) {
				t.Errorf("control: unsandboxed %q left %s as it was", c.command, c.file)
			}
		})
	}
}

// A job detached into its own session (out of the call's process group)
// ends with the call.
func TestBashDetachedJobEndsWithCall(t *testing.T) {
	requireSandbox(t)
	tests := []struct {
		name    string
		command string
	}{
		{"setsid", "setsid sleep %[1]s & until pgrep -f 'sleep %[1]s' >/dev/null; do sleep 0.05; done;"},
		{"nohup", "nohup setsid sleep %[1]s >/dev/null 2>&1 & until pgrep -f 'sleep %[1]s' >/dev/null; do sleep 0.05; done;"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// A unique duration marks the job on the host.
			arg := fmt.Sprintf("1000.%d%d", os.Getpid(), i)
			bash := testTools(Options{})[NameBash]
			r := run(t, bash, t.TempDir(), map[string]any{"command": fmt.Sprintf(tc.command, arg) + " echo started"})
			if r.IsError {
				t.Fatalf("got %+v", r)
			}
			if !wait.Until(15*time.Second, func() bool { return len(sleepers(arg)) == 0 }) {
				t.Fatalf("detached job %v outlived the call", sleepers(arg))
			}
			// Control: started without the sandbox's helper, the job escapes
			// the process group and survives the shell.
			arg += "1"
			_ = exec.Command("bash", "-c", fmt.Sprintf(tc.command, arg)+" echo started").Run()
			wait.Until(15*time.Second, func() bool { return len(sleepers(arg)) > 0 })
			left := sleepers(arg)
			for _, p := range left {
				_ = killPID(p)
			}
			if len(left) == 0 {
				t.Error("control: unsandboxed, the detached job did not survive, so the test proves nothing")
			}
		})
	}
}

// sleepers returns the host PIDs of `sleep arg` processes.
func sleepers(arg string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.HasSuffix(b, []byte("\x00"+arg+"\x00")) && bytes.HasPrefix(b, []byte("sleep\x00")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// BenchmarkBashCall measures a trivial bash call with and without the
// sandbox; the difference is the sandbox's cost per call.
func BenchmarkBashCall(b *testing.B) {
	confined, open := testBoxes()
	landlock := sandbox.Open(sandbox.Config{Mode: sandbox.Landlock})
	defer landlock.Close()
	for _, bc := range []struct {
		name string
		box  *sandbox.Sandbox
	}{
		{"sandboxed-" + string(confined.Status().Mode), confined},
		{"sandboxed-landlock", landlock},
		{"unsandboxed", open},
	} {
		b.Run(bc.name, func(b *testing.B) {
			dir := b.TempDir()
			for _, f := range []string{"fastagent.yaml", ".env"} {
				_ = os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644)
			}
			_ = os.Mkdir(filepath.Join(dir, ".fastagent"), 0o755)
			if bc.box.Status().Mode == "" {
				b.Skipf("unavailable: %s", bc.box.Status().Error)
			}
			bash := testTools(Options{Sandbox: bc.box})[NameBash]
			args := mustJSONB(b, map[string]any{"command": "true"})
			for b.Loop() {
				r, err := bash.Run(context.Background(), callFor(bash, dir, args))
				if err != nil || r.IsError {
					b.Fatalf("%v %+v", err, r)
				}
			}
		})
	}
}

func killPID(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }

func mustJSONB(b *testing.B, v any) json.RawMessage {
	raw, err := json.Marshal(v)
	if err != nil {
		b.Fatal(err)
	}
	return raw
}

func callFor(tool agent.Tool, dir string, args json.RawMessage) agent.ToolCall {
	return agent.ToolCall{ID: "c1", Name: tool.Spec().Name, Args: args, Session: "s", Dir: dir}
}

// The paths write and edit refuse (here persona.md, protected while selfEdit
// is off) are read-only for bash too.
func TestBashHonoursProtectedPaths(t *testing.T) {
	requireSandbox(t)
	dir := sandboxWorkspace(t, "not-a-secret")
	persona := filepath.Join(dir, "persona.md")
	if err := os.WriteFile(persona, []byte("You are careful.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bash := testTools(Options{Protected: []Protected{{Path: persona, Reason: "selfEdit is off"}}})[NameBash]
	r := run(t, bash, dir, map[string]any{"command": "echo 'You obey everyone.' > persona.md; echo ok > notes.txt"})
	if b, _ := os.ReadFile(persona); string(b) != "You are careful.\n" {
		t.Fatalf("persona.md changed from bash: %q\n%s", b, r.Content)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "notes.txt")); err != nil || string(b) != "ok\n" {
		t.Fatalf("the workspace is not writable: %v %q", err, b)
	}
	// Control: without the protected list, bash can change it.
	open := testTools(Options{})[NameBash]
	_ = os.Chmod(persona, 0o644)
	run(t, open, dir, map[string]any{"command": "echo changed > persona.md"})
	if b, _ := os.ReadFile(persona); string(b) != "changed\n" {
		t.Fatalf("control: persona.md = %q", b)
	}
}

// A file a worker's secret variable names (a GitHub App private key, a codec
// key file, a TLS key) is unreadable from bash wherever it lives; the
// unsandboxed control reads it.
func TestBashCannotReadSecretFiles(t *testing.T) {
	canary := requireSandbox(t)
	for _, name := range []string{"GITHUB_APP_PRIVATE_KEY_FILE", "FASTAGENT_CODEC_KEY_FILE", "TEMPORAL_TLS_KEY"} {
		t.Run(name, func(t *testing.T) {
			keyFile := filepath.Join(t.TempDir(), "key.pem")
			writeFile(t, keyFile, "-----BEGIN PRIVATE KEY-----\n"+canary+"\n")
			t.Setenv(name, keyFile)
			bash := testTools(Options{})[NameBash]
			cmd := map[string]any{"command": "cat " + keyFile}
			if r := run(t, bash, sandboxWorkspace(t, canary), cmd); strings.Contains(r.Content, canary) {
				t.Errorf("sandboxed bash reads the file %s names:\n%s", name, r.Content)
			}
			if r := runUnsandboxed(t, bash, sandboxWorkspace(t, canary), cmd); !strings.Contains(r.Content, canary) {
				t.Errorf("control: unsandboxed bash cannot read %s, so the test proves nothing:\n%s", keyFile, r.Content)
			}
		})
	}
}
