package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/agent/agenttest"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/testsupport/lab"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
	"github.com/fastagent/fastagent/transcript"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// fastagentBinary builds cmd/fastagent once per test run, without the
// embedded server (the worker does not need it, and linking is faster).
func fastagentBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fastagent-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "fastagent")
		cmd := exec.Command("go", "build", "-tags", "nodevserver", "-o", binPath, "../../cmd/fastagent")
		out, err := cmd.CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// natsURL is the NATS server the multi-process tests share a feed through.
func natsURL() string {
	if u := os.Getenv("FASTAGENT_TEST_NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

// proc is a fastagent process started by a test.
type proc struct {
	cmd *exec.Cmd
	out *bytes.Buffer
	mu  *sync.Mutex
}

// startProcess runs `fastagent <command>` against the embedded server, the
// env's SQLite store and NATS; its output is shown if the test fails.
func (e *env) startProcess(t *testing.T, command string, args ...string) *proc {
	t.Helper()
	args = append([]string{command,
		"--dir", e.kit.Dir,
		"--temporal-address", server.FrontendAddress(),
		"--namespace", server.Namespace(),
		"--task-queue", e.queue,
		"--store", filepath.Join(e.kit.Dir, ".fastagent", "sessions.db"),
		"--feed", natsURL(),
		"--log-level", "warn",
	}, args...)
	cmd := exec.Command(fastagentBinary(t), args...)
	cmd.Env = append(e.kit.ProcessEnv(), "TEMPORAL_API_KEY="+server.APIKey(), "TEMPORAL_TLS=false")
	cmd.Env = append(cmd.Env, e.extraEnv...)
	if !e.noProcessToken {
		cmd.Env = append(cmd.Env, "FASTAGENT_API_TOKEN="+e2eToken)
	}
	p := &proc{cmd: cmd, out: &bytes.Buffer{}, mu: &sync.Mutex{}}
	w := &lockedWriter{buf: p.out, mu: p.mu}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatalf("start fastagent %s: %v", command, err)
	}
	e.lastProc = p
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			p.mu.Lock()
			t.Logf("%s %d output:\n%s", command, cmd.Process.Pid, p.out.String())
			p.mu.Unlock()
		}
	})
	return p
}

// startWorkerProcess runs `fastagent worker` with the scripted model.
func (e *env) startWorkerProcess(t *testing.T) *proc {
	t.Helper()
	return e.startProcess(t, "worker")
}

func (p *proc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill worker: %v", err)
	}
	_ = p.cmd.Wait()
}

type lockedWriter struct {
	buf *bytes.Buffer
	mu  *sync.Mutex
}

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(b)
}

// newProcessEnv is an env whose workers run as separate processes: the feed
// is NATS and the store a SQLite file both sides open.
func newProcessEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t)
	processEnv(t, e)
	return e
}

// processEnv switches e to NATS and a heartbeat short enough for worker
// deaths to be noticed quickly (see newProcessEnv).
func processEnv(t *testing.T, e *env) {
	t.Helper()
	bus, err := feed.NewNATS(natsURL())
	testkit.RequireService(t, "nats", natsURL(), err)
	t.Cleanup(func() { _ = bus.Close() })
	e.bus = bus
	e.agent.Feed = bus
	e.writeConfig("retry:\n  heartbeat: 3s\n")
}

// A worker process is SIGKILLed in the middle of a model stream, then a new
// one in the middle of a (non-idempotent) tool call. The turn still ends
// with exactly one terminal; the client was told to drop the partial text;
// the store holds each entry once; the tool ran once and the model was told
// its outcome is unknown.
func TestCrashWorkerMidStreamAndMidTool(t *testing.T) {
	forProviders(t, func(t *testing.T, e *env) {
		processEnv(t, e)
		sideFile := filepath.Join(e.kit.Dir, "side-effect.txt")
		slow := make([]string, 20)
		for i := range slow {
			slow[i] = fmt.Sprintf("word%d ", i)
		}
		e.kit.Model.Enqueue(
			modelserver.Reply{Text: []string{"ready"}}, // warm-up turn: loads settings
			modelserver.Reply{Text: slow, ChunkDelay: 250 * time.Millisecond},
			modelserver.Reply{Text: []string{"Running it."}, ToolCalls: []modelserver.ToolCall{{
				ID: "call_side", Name: "bash",
				Args: fmt.Sprintf(`{"command":"echo ran >> %s; sleep 8; echo finished"}`, sideFile),
			}}},
			modelserver.Reply{Text: []string{"all", " done"}},
		)
		w1 := e.startWorkerProcess(t)
		if term := agenttest.CheckTerminal(t, collect(t, e.agent, context.Background(), e.session("crash"), "warm up")); term.Type != agent.TypeCompleted {
			t.Fatalf("warm-up turn: %+v", term)
		}

		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		var evs []agent.Event
		var w2 *proc
		killedInTool := false
		for ev := range e.agent.Invoke(ctx, agent.Scope{Session: e.session("crash")}, agent.Prompt{Text: "do the risky thing"}) {
			evs = append(evs, ev)
			switch {
			case ev.Type == agent.TypeText && w2 == nil && strings.HasPrefix(ev.Delta, "word"):
				w1.kill(t) // mid-stream
				w2 = e.startWorkerProcess(t)
			case ev.Type == agent.TypeToolStarted && !killedInTool:
				killedInTool = true
				waitForFile(t, sideFile)
				w2.kill(t) // mid-tool
				e.startWorkerProcess(t)
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("turn did not finish: %s", describe(evs))
		}
		t.Logf("events: %s", describe(evs))
		term := agenttest.CheckTerminal(t, evs)
		if term.Type != agent.TypeCompleted {
			t.Fatalf("want completed, got %s", describe(evs))
		}
		sawRetrying := false
		for _, ev := range evs {
			if ev.Type == agent.TypeRetrying {
				sawRetrying = true
			}
		}
		if !sawRetrying {
			t.Errorf("no retrying event after the worker died mid-stream: %s", describe(evs))
		}
		if got := agenttest.TextAfterLastRetry(evs); !strings.HasSuffix(got, "all done") || strings.Contains(got, "word") {
			t.Errorf("text the client keeps = %q", got)
		}
		b, _ := os.ReadFile(sideFile)
		if n := strings.Count(string(b), "ran"); n != 1 {
			t.Errorf("the non-idempotent tool ran %d times, want 1", n)
		}

		entries, err := e.kit.Store.Entries(context.Background(), e.session("crash"))
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]bool{}
		var kinds []string
		for _, en := range entries {
			if ids[en.ID] {
				t.Errorf("duplicate entry %s", en.ID)
			}
			ids[en.ID] = true
			kinds = append(kinds, en.Message.Role)
		}
		want := "user,assistant,user,assistant,toolResult,assistant"
		if got := strings.Join(kinds, ","); got != want {
			t.Errorf("entries = %s, want %s (none missing, none twice)", got, want)
		}
		branch, err := e.kit.Store.Branch(context.Background(), e.session("crash"), entries[len(entries)-1].ID)
		if err != nil || len(branch) != len(entries) {
			t.Errorf("the transcript is not one unbroken branch: %d of %d entries (%v)", len(branch), len(entries), err)
		}
		for _, en := range entries {
			if en.Message.Role == transcript.RoleToolResult {
				if !en.Message.IsError || !strings.Contains(en.Message.Text, "unknown") {
					t.Errorf("tool result after the crash should say the outcome is unknown: %+v", en.Message)
				}
			}
		}
	})
}

func waitForFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s never written", path)
}

func describe(evs []agent.Event) string { return lab.Describe(evs) }
