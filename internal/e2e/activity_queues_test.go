package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/agent/agenttest"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/workflows"
)

// fastagent.yaml places the tools group on a task queue of its own: the
// session's worker (in process here) runs the workflow and the model
// calls, and a tool call waits on that queue until `fastagent worker
// --activities tools` polls it; that process runs it, and the turn ends
// with the tool's result.
func TestToolsOnTheirOwnWorker(t *testing.T) {
	t.Parallel() // it mostly waits out a worker's timeouts: shards.sh runs it beside the others
	e := newProcessEnv(t)
	toolsQueue := e.queue + "-tools"
	e.writeConfig(fmt.Sprintf("retry:\n  heartbeat: 3s\nactivities:\n  tools: {taskQueue: %s}\n", toolsQueue))
	e.startWorker()
	side := filepath.Join(e.kit.Dir, "side-effect.txt")
	e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{
			ID: "call_gpu", Name: "bash", Args: fmt.Sprintf(`{"command":"sleep 1; echo ran >> %s"}`, side),
		}}},
		modelserver.Reply{Text: []string{"done on the ", "tools worker"}},
	)
	session := e.session("placed-tools")
	done := make(chan []agent.Event, 1)
	go func() { done <- collect(t, e.agent, context.Background(), session, "run it on the GPU box") }()

	// The call waits on the tools queue: no worker of the session's queue
	// takes it.
	waitFor(t, time.Minute, "the tool call scheduled on the tools queue", func() bool {
		d, err := e.client.DescribeWorkflowExecution(context.Background(), workflows.WorkflowID(session), "")
		if err != nil {
			return false
		}
		for _, pa := range d.GetPendingActivities() {
			if pa.GetActivityType().GetName() == workflows.ActivityToolExecute {
				return pa.GetLastWorkerIdentity() == ""
			}
		}
		return false
	})
	if _, err := os.Stat(side); err == nil {
		t.Fatal("the tool ran before a worker polled the tools queue")
	}

	p := e.startProcess(t, "worker", "--activities", "tools", "--task-queue", toolsQueue)
	if pid := e.runningWorkerPID(t, session); pid != p.cmd.Process.Pid {
		t.Errorf("the tool call runs in process %d, want the tools worker %d", pid, p.cmd.Process.Pid)
	}
	evs := <-done
	if term := agenttest.CheckTerminal(t, evs); term.Type != agent.TypeCompleted {
		t.Fatalf("turn: %s", describe(evs))
	}
	if got := agenttest.TextAfterLastRetry(evs); !strings.HasSuffix(got, "done on the tools worker") {
		t.Errorf("text %q", got)
	}
	if b, err := os.ReadFile(side); err != nil || string(b) != "ran\n" {
		t.Errorf("side effect %q (%v), want the tool run once", b, err)
	}
}
