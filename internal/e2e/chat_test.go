package e2e

import (
	"bytes"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
)

// terminal is `fastagent chat` on a pseudo-terminal.
type terminal struct {
	t   *testing.T
	cmd *exec.Cmd
	pty io.ReadWriter
	mu  sync.Mutex
	out bytes.Buffer
}

// expect waits until the output after the last match contains s.
func (tm *terminal) expect(s string, within time.Duration) {
	tm.t.Helper()
	if wait.Until(within, func() bool {
		tm.mu.Lock()
		defer tm.mu.Unlock()
		i := strings.Index(tm.out.String(), s)
		if i >= 0 {
			tm.out.Next(i + len(s)) // later expectations read what follows
		}
		return i >= 0
	}) {
		return
	}
	tm.mu.Lock()
	defer tm.mu.Unlock()
	tm.t.Fatalf("the terminal never showed %q; it shows:\n%s", s, tm.out.String())
}

// expectAll waits until the output after the last match contains every
// one of ss, in any order (a stream and a confirmation may interleave).
func (tm *terminal) expectAll(within time.Duration, ss ...string) {
	tm.t.Helper()
	if wait.Until(within, func() bool {
		tm.mu.Lock()
		defer tm.mu.Unlock()
		out, end := tm.out.String(), 0
		for _, s := range ss {
			i := strings.Index(out, s)
			if i < 0 {
				return false
			}
			end = max(end, i+len(s))
		}
		tm.out.Next(end)
		return true
	}) {
		return
	}
	tm.mu.Lock()
	defer tm.mu.Unlock()
	tm.t.Fatalf("the terminal never showed all of %q; it shows:\n%s", ss, tm.out.String())
}

// runOnPTY starts cmd on a pseudo-terminal and collects what it shows.
func runOnPTY(t *testing.T, cmd *exec.Cmd) *terminal {
	t.Helper()
	f, err := pty.Start(cmd)
	if err != nil {
		t.Fatalf("start %s on a pty: %v", cmd.Path, err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = f.Close() })
	tm := &terminal{t: t, pty: f, cmd: cmd}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := f.Read(buf)
			tm.mu.Lock()
			tm.out.Write(buf[:n])
			tm.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return tm
}

func (tm *terminal) typeLine(s string) {
	tm.t.Helper()
	if _, err := tm.pty.Write([]byte(s + "\r")); err != nil {
		tm.t.Fatalf("type %q: %v", s, err)
	}
}

// `fastagent chat` in a real terminal: a turn streams its answer; a tool
// call that needs approval is shown with its arguments and approved inline
// (the tool runs once); a question the agent asks is answered with the next
// line typed; /abort stops a running turn; /quit leaves.
func TestChatInATerminal(t *testing.T) {
	e := newEnv(t)
	e.writeConfig("askUser: true\ntools:\n  counter: {requiresApproval: true}\n")
	e.startWorker()
	hs := e.ingress()
	e.kit.Model.Enqueue(
		modelserver.Reply{Text: []string{"hello", " there"}},
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "call_c", Name: "counter", Args: `{"note":"from chat"}`}}},
		modelserver.Reply{Text: []string{"counted it"}},
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "call_q", Name: "ask_user", Args: `{"question":"Which colour do you like?"}`}}},
		modelserver.Reply{Text: []string{"noted, you like teal"}},
		modelserver.Reply{Text: []string{"thinking very slowly"}, Hang: true},
	)
	const session = "chat-e2e"
	tm := startChat(t, e, hs.URL, session)

	tm.expect("session "+session, 30*time.Second)
	tm.typeLine("hi")
	tm.expect("hello there", time.Minute)

	tm.typeLine("count this")
	tm.expect("needs your approval", time.Minute)
	tm.expect(`"note": "from chat"`, 5*time.Second)
	tm.expect("deadline:", 5*time.Second)
	tm.expect("approve counter? [y/n]", 5*time.Second)
	tm.typeLine("y")
	// The decision comes back on the stream (approval_resolved) before the
	// tool's own lines.
	tm.expectAll(time.Minute, "approved counter", "call call_c approved", "counted it")
	if n := e.kit.Counter.Runs(session); n != 1 {
		t.Errorf("the approved tool ran %d times, want 1", n)
	}

	// A question, answered with the next line typed.
	tm.typeLine("ask me something")
	tm.expect("the agent asks: Which colour do you like?", time.Minute)
	tm.expect("your answer (one line):", 5*time.Second)
	tm.typeLine("teal")
	tm.expect("noted, you like teal", time.Minute)
	if reqs := e.kit.Model.Requests(); len(reqs) < 5 || reqs[4].Messages[len(reqs[4].Messages)-1].Content != "teal" {
		t.Errorf("the model did not read the typed answer as the question's result")
	}

	tm.typeLine("take your time")
	tm.expect("thinking very slowly", time.Minute)
	tm.typeLine("/abort")
	tm.expect("aborted", 30*time.Second)

	tm.typeLine("/quit")
	done := make(chan error, 1)
	go func() { done <- tm.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("fastagent chat exited with %v after /quit", err)
		}
	case <-time.After(15 * time.Second):
		t.Error("fastagent chat did not exit after /quit")
	}
}
