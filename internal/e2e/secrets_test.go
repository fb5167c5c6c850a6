package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/agent/agenttest"
	"github.com/fastagent/fastagent/internal/sandbox/sandboxtest"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/transcript"
)

// canaryVar is the worker variable that holds the planted secret. It is not
// on bash's environment allowlist, so only /proc or a file could show it.
const canaryVar = "FASTAGENT_CANARY_SECRET"

// startWorkerWithEnv is startWorkerProcess with extra variables in the
// worker's environment.
func (e *env) startWorkerWithEnv(t *testing.T, extra ...string) *proc {
	t.Helper()
	cmd := exec.Command(fastagentBinary(t), "worker",
		"--dir", e.kit.Dir,
		"--temporal-address", server.FrontendAddress(),
		"--namespace", server.Namespace(),
		"--task-queue", e.queue,
		"--store", filepath.Join(e.kit.Dir, ".fastagent", "sessions.db"),
		"--log-level", "warn",
	)
	cmd.Env = append(append(e.kit.ProcessEnv(), "FASTAGENT_API_TOKEN="+e2eToken,
		"TEMPORAL_API_KEY="+server.APIKey(), "TEMPORAL_TLS=false", "FASTAGENT_FEED="+natsURL()), extra...)
	p := &proc{cmd: cmd, out: &bytes.Buffer{}, mu: &sync.Mutex{}}
	w := &lockedWriter{buf: p.out, mu: p.mu}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatalf("start fastagent worker: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			p.mu.Lock()
			t.Logf("worker %d output:\n%s", cmd.Process.Pid, p.out.String())
			p.mu.Unlock()
		}
	})
	return p
}

// A real `fastagent worker` holds a unique canary in its environment, the
// workspace's .env and state dir hold it too, and the model has bash try
// every way to it: the parent's and the worker's /proc environ, every
// /proc/*/environ and cmdline, .env, its own environment, the state dir. The command
// runs, and the canary appears neither in the stored tool result nor in
// what the model is sent, nor in any event of the turn.
func TestBashInWorkerProcessCannotReachSecrets(t *testing.T) {
	sandboxtest.Require(t)
	for _, mode := range []string{"namespaces", "landlock"} {
		t.Run(mode, func(t *testing.T) { bashCannotReachSecrets(t, mode) })
	}
}

func bashCannotReachSecrets(t *testing.T, mode string) {
	e := newProcessEnv(t)
	canary := fmt.Sprintf("canary-%d-%d", os.Getpid(), time.Now().UnixNano())
	for name, content := range map[string]string{
		".env":                  canaryVar + "=" + canary + "\nOPENAI_API_KEY=" + canary + "\n",
		".fastagent/secret.txt": canary + "\n",
	} {
		path := filepath.Join(e.kit.Dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The feed URL carries the canary as its token (a NATS server without
	// authorization ignores it), given as the CLI accepts it: in the
	// environment, never on the command line, which every process can read.
	feedURL, err := url.Parse(natsURL())
	if err != nil {
		t.Fatal(err)
	}
	feedURL.User = url.User(canary)
	w := e.startWorkerWithEnv(t, canaryVar+"="+canary, "FASTAGENT_FEED="+feedURL.String(), "FASTAGENT_SANDBOX="+mode)

	// The marker is computed by the shell, so that finding it proves the
	// command ran to its end (the command's own text does not contain it).
	// The bulkiest reads come first: unsandboxed, the output is truncated
	// to its tail, which then still shows the worker's environ and .env.
	command := fmt.Sprintf(`{ cat .fastagent/*; for f in /proc/*/environ; do cat $f; done; `+
		`for f in /proc/*/cmdline; do tr '\0' ' ' <$f; echo; done; `+
		`cat /proc/%d/environ; cat /proc/$PPID/environ; cat .env; env; } 2>&1; echo probe-ran-$((6*7)); true`,
		w.cmd.Process.Pid)
	args, err := json.Marshal(map[string]string{"command": command})
	if err != nil {
		t.Fatal(err)
	}
	e.kit.Model.Enqueue(
		modelserver.Reply{Text: []string{"Looking."}, ToolCalls: []modelserver.ToolCall{{ID: "b1", Name: "bash", Args: string(args)}}},
		modelserver.Reply{Text: []string{"nothing", " found"}},
	)
	// A session of its own, so that -count=N does not reach the previous
	// run's workflow (on a task queue whose worker is gone).
	session := fmt.Sprintf("secrets-%d", time.Now().UnixNano())
	evs := collect(t, e.agent, context.Background(), session, "find the API key")
	if term := agenttest.CheckTerminal(t, evs); term.Type != agent.TypeCompleted {
		t.Fatalf("turn: %s", describe(evs))
	}
	for _, ev := range evs {
		if b, _ := json.Marshal(ev); bytes.Contains(b, []byte(canary)) {
			t.Errorf("an event of the turn shows the worker's secret: %s", around(b, canary))
		}
	}

	entries, err := e.kit.Store.Entries(context.Background(), session)
	if err != nil {
		t.Fatal(err)
	}
	var results []*transcript.Message
	for _, en := range entries {
		if en.Message.Role == transcript.RoleToolResult {
			results = append(results, en.Message)
		}
		if b, _ := json.Marshal(en); bytes.Contains(b, []byte(canary)) {
			t.Errorf("stored entry %s (%s) shows the worker's secret: %s", en.ID, en.Message.Role, around(b, canary))
		}
	}
	switch {
	case len(results) != 1:
		t.Errorf("tool results = %d, want 1", len(results))
	case !strings.Contains(results[0].Text, "probe-ran-42"):
		t.Errorf("the bash call did not run to its end: %s", around([]byte(results[0].Text), "probe"))
	case mode == "landlock" && !strings.Contains(results[0].Text, "--task-queue "+e.queue):
		// Landlock mode shares the worker's PID namespace: the tool does
		// see the worker's command line, which therefore holds no secret.
		t.Errorf("landlock mode: the worker's command line is not among what the tool read: %s", around([]byte(results[0].Text), "worker"))
	default:
		t.Logf("bash output:\n%s", results[0].Text)
	}

	reqs := e.kit.Model.Requests()
	if len(reqs) != 2 {
		t.Fatalf("model requests = %d, want 2", len(reqs))
	}
	var toolMsg *modelserver.Message
	for i, m := range reqs[1].Messages {
		if m.Role == "tool" && m.ToolCallID == "b1" {
			toolMsg = &reqs[1].Messages[i]
		}
	}
	switch {
	case toolMsg == nil:
		t.Errorf("the model was not sent the bash result: %d messages", len(reqs[1].Messages))
	case !strings.Contains(toolMsg.Content, "probe-ran-42"):
		t.Errorf("the model was not sent the bash output: %s", around([]byte(toolMsg.Content), "probe"))
	}
	for _, r := range reqs {
		if bytes.Contains(r.Raw, []byte(canary)) {
			t.Errorf("model request %d shows the worker's secret: %s", r.Seq, around(r.Raw, canary))
		}
	}
}

// around returns the text of b around the first occurrence of s, so that a
// failure quotes the leak, not the whole (possibly huge) output.
func around(b []byte, s string) string {
	i := bytes.Index(b, []byte(s))
	if i < 0 {
		i = 0
	}
	return fmt.Sprintf("…%q…", b[max(0, i-200):min(len(b), i+len(s)+200)])
}
