package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/agent/agenttest"
	"github.com/fastagent/fastagent/internal/durable"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/transcript"
)

// A deploy SIGTERMs a worker process while a (non-idempotent) tool runs.
// The worker stops polling, lets the tool finish, reports its result and
// exits by itself; a new worker finishes the turn. The model gets the
// tool's real result (not "outcome unknown") and the tool ran once.
func TestWorkerSIGTERMDrainsRunningTool(t *testing.T) {
	e := newProcessEnv(t)
	dir := e.kit.Dir
	sideFile := filepath.Join(dir, "side-effect.txt")
	doneFile := filepath.Join(dir, "tool-done.txt")
	e.kit.Model.Enqueue(
		modelserver.Reply{Text: []string{"ready"}}, // warm-up turn: loads settings
		modelserver.Reply{Text: []string{"Running it."}, ToolCalls: []modelserver.ToolCall{{
			ID: "call_side", Name: "bash",
			Args: fmt.Sprintf(`{"command":"echo ran >> %s; sleep 3; echo finished; echo done > %s"}`, sideFile, doneFile),
		}}},
		modelserver.Reply{Text: []string{"all", " done"}},
	)
	const stopTimeout = 90 * time.Second
	w1 := e.startProcess(t, "worker", "--stop-timeout", stopTimeout.String())
	if term := agenttest.CheckTerminal(t, collect(t, e.agent, context.Background(), "drain", "warm up")); term.Type != agent.TypeCompleted {
		t.Fatalf("warm-up turn: %+v", term)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var evs []agent.Event
	signalled := false
	key := durable.NewKey() // the NATS feed outlives test runs
	for ev := range e.agent.Invoke(agent.WithIdempotencyKey(ctx, key), agent.Scope{Session: "drain"}, agent.Prompt{Text: "do the risky thing"}) {
		evs = append(evs, ev)
		if ev.Type != agent.TypeToolStarted || signalled {
			continue
		}
		signalled = true
		waitForFile(t, sideFile) // the tool is running
		if err := w1.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatalf("SIGTERM worker: %v", err)
		}
		exited := make(chan error, 1)
		go func() { exited <- w1.cmd.Wait() }()
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("the worker did not exit cleanly after SIGTERM: %v", err)
			}
		case <-time.After(stopTimeout + 30*time.Second):
			t.Fatalf("the worker did not exit within its stop timeout")
		}
		if _, err := os.Stat(doneFile); err != nil {
			t.Errorf("the worker left before its running tool finished: %v", err)
		}
		e.startWorkerProcess(t) // finishes the turn
	}
	if ctx.Err() != nil {
		t.Fatalf("turn did not finish: %s", describe(evs))
	}
	t.Logf("events: %s", describe(evs))
	if !signalled {
		t.Fatalf("the tool never started: %s", describe(evs))
	}
	if term := agenttest.CheckTerminal(t, evs); term.Type != agent.TypeCompleted {
		t.Fatalf("want completed, got %s", describe(evs))
	}
	// The whole answer: the client keeps exactly the text the store holds
	// for the turn, and that is what the model said.
	stored := recordedAnswer(t, e, "drain", key)
	if got := agenttest.TextAfterLastRetry(evs); got != stored {
		t.Errorf("text the client keeps differs from the turn's stored answer:\n got    %q\n stored %q", got, stored)
	}
	if stored != "Running it.all done" {
		t.Errorf("the turn's stored answer = %q, want %q", stored, "Running it.all done")
	}
	b, _ := os.ReadFile(sideFile)
	if n := strings.Count(string(b), "ran"); n != 1 {
		t.Errorf("the non-idempotent tool ran %d times, want 1", n)
	}

	entries, err := e.kit.Store.Entries(context.Background(), "drain")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	results := 0
	for _, en := range entries {
		kinds = append(kinds, en.Message.Role)
		if en.Message.Role != transcript.RoleToolResult {
			continue
		}
		results++
		if en.Message.IsError || !strings.Contains(en.Message.Text, "finished") {
			t.Errorf("the tool's real result should be used, got: %+v", en.Message)
		}
	}
	want := "user,assistant,user,assistant,toolResult,assistant"
	if got := strings.Join(kinds, ","); got != want || results != 1 {
		t.Errorf("entries = %s, want %s (none missing, none twice)", got, want)
	}
}
