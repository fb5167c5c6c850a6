package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/agent/agenttest"
	"github.com/fastagent/fastagent/internal/plugin"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
	"github.com/fastagent/fastagent/worker"
	"github.com/fastagent/fastagent/workflows"
)

// runLog records every workflow run a worker instantiated, whether for a
// new run or to replay one it had not cached.
type runLog struct {
	interceptor.WorkerInterceptorBase
	mu   sync.Mutex
	runs map[string]string // run ID -> workflow ID
}

func newRunLog() *runLog { return &runLog{runs: map[string]string{}} }

func (l *runLog) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &runLogInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, log: l}
}

func (l *runLog) has(run string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.runs[run]
	return ok
}

func (l *runLog) all() map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]string, len(l.runs))
	for k, v := range l.runs {
		out[k] = v
	}
	return out
}

type runLogInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	log *runLog
}

func (i *runLogInbound) ExecuteWorkflow(ctx workflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	ex := workflow.GetInfo(ctx).WorkflowExecution
	i.log.mu.Lock()
	i.log.runs[ex.RunID] = ex.ID
	i.log.mu.Unlock()
	return i.Next.ExecuteWorkflow(ctx, in)
}

// startVersioned starts an in-process worker of build id in deployment on
// the env's task queue, logging the runs it instantiates.
func (e *env) startVersioned(deployment, build string) (sdkworker.Worker, *runLog) {
	e.t.Helper()
	log := newRunLog()
	w := e.startWorker(withInterceptors(log), func(c *serve.Config, _ *serve.Components) {
		c.Versioning = plugin.Versioning{Deployment: deployment, BuildID: build}
	})
	return w, log
}

// setCurrent makes build the deployment's current version, waiting for the
// server to have seen its worker poll.
func (e *env) setCurrent(deployment, build string) {
	e.t.Helper()
	h := e.client.WorkerDeploymentClient().GetHandle(deployment)
	var err error
	if !wait.Until(30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = h.SetCurrentVersion(ctx, client.WorkerDeploymentSetCurrentVersionOptions{BuildID: build})
		return err == nil
	}) {
		e.t.Fatalf("set current version %s:%s: %v", deployment, build, err)
	}
}

// runOn describes a session's current run: its run ID and the build ID of
// the version it is on.
func (e *env) runOn(session string) (run, build string) {
	e.t.Helper()
	d, err := e.client.DescribeWorkflowExecution(context.Background(), workflows.WorkflowID(session), "")
	if err != nil {
		e.t.Fatalf("describe %s: %v", session, err)
	}
	info := d.GetWorkflowExecutionInfo()
	return info.GetExecution().GetRunId(), info.GetVersioningInfo().GetDeploymentVersion().GetBuildId()
}

// workflowTaskBuilds lists, for one run, the build ID of every completed
// workflow task and whether any workflow task failed.
func (e *env) workflowTaskBuilds(session, run string) (builds []string, failed bool) {
	e.t.Helper()
	it := e.client.GetWorkflowHistory(context.Background(), workflows.WorkflowID(session), run, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			e.t.Fatalf("history of %s/%s: %v", session, run, err)
		}
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			builds = append(builds, ev.GetWorkflowTaskCompletedEventAttributes().GetDeploymentVersion().GetBuildId())
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED, enumspb.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
			failed = true
		}
	}
	return builds, failed
}

// Sessions live on version A; version B is deployed and made current, the
// sessions are woken (worker.MoveToCurrent) and A is stopped. Every
// session's next turn runs on B, no turn fails, and B never instantiates a
// run that A started: runs move at continue-as-new, so no history written by
// A is ever replayed by B.
func TestRolloutMovesSessionsAtContinueAsNew(t *testing.T) {
	e := newEnv(t)
	deployment := fmt.Sprintf("e2e-rollout-%d", time.Now().UnixNano())
	wA, logA := e.startVersioned(deployment, "build-a")
	e.setCurrent(deployment, "build-a")

	sessions := []string{"roll-1", "roll-2", "roll-3"}
	runsA := map[string]string{}
	for _, s := range sessions {
		for i := 1; i <= 2; i++ {
			evs := collect(t, e.agent, context.Background(), s, fmt.Sprintf("turn %d on A", i))
			if term := agenttest.CheckTerminal(t, evs); term.Type != agent.TypeCompleted {
				t.Fatalf("%s turn %d on A: %s", s, i, describe(evs))
			}
		}
		run, build := e.runOn(s)
		if build != "build-a" || !logA.has(run) {
			t.Fatalf("%s: run %s is on %q (worker A ran it: %v), want build-a", s, run, build, logA.has(run))
		}
		runsA[s] = run
	}

	_, logB := e.startVersioned(deployment, "build-b")
	e.setCurrent(deployment, "build-b")
	res, err := worker.MoveToCurrent(context.Background(), e.client, worker.MoveOptions{Deployment: deployment, TaskQueue: e.queue, Wait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("move: %+v", res)
	if res.Current != deployment+":build-b" || len(res.Behind) != 0 || res.Signals < len(sessions) {
		t.Fatalf("MoveToCurrent = %+v, want every session on build-b", res)
	}
	// Every session continued as new onto B while idle: A is drained.
	// (A new run names its version once its first workflow task completed.)
	for _, s := range sessions {
		var run, build string
		if !wait.Until(30*time.Second, func() bool {
			run, build = e.runOn(s)
			return run != runsA[s] && build == "build-b"
		}) {
			t.Fatalf("%s did not move to build-b: run %s on %q", s, run, build)
		}
	}
	wA.Stop()

	for _, s := range sessions {
		evs := collect(t, e.agent, context.Background(), s, "turn 3 on B")
		if term := agenttest.CheckTerminal(t, evs); term.Type != agent.TypeCompleted {
			t.Fatalf("%s turn on B: %s", s, describe(evs))
		}
		if got := agenttest.TextAfterLastRetry(evs); got == "" {
			t.Errorf("%s: the turn on B answered nothing", s)
		}
		run, build := e.runOn(s)
		if build != "build-b" || !logB.has(run) {
			t.Errorf("%s: turn 3 ran in run %s on %q (worker B ran it: %v), want build-b", s, run, build, logB.has(run))
		}
		// Every workflow task of the new run was B's; A's run ended on A.
		builds, failed := e.workflowTaskBuilds(s, run)
		for _, b := range builds {
			if b != "build-b" {
				t.Errorf("%s: a workflow task of run %s completed on %q: %v", s, run, b, builds)
				break
			}
		}
		oldBuilds, oldFailed := e.workflowTaskBuilds(s, runsA[s])
		for _, b := range oldBuilds {
			if b != "build-a" {
				t.Errorf("%s: a workflow task of A's run completed on %q: %v", s, b, oldBuilds)
				break
			}
		}
		if failed || oldFailed {
			t.Errorf("%s: a workflow task failed or timed out (A's run: %v, B's run: %v)", s, oldFailed, failed)
		}
		t.Logf("%s: run on A %s tasks %v; run on B %s tasks %v", s, runsA[s], oldBuilds, run, builds)
	}
	for run, id := range logB.all() {
		if logA.has(run) {
			t.Errorf("worker B replayed %s run %s, which worker A started", id, run)
		}
	}
}

// A session pinned to a build no worker runs any more (its workers were
// stopped before the session moved) does not hang its next turn: the turn
// fails with no_worker naming the build and the recovery, and once a worker
// of that build runs again the turn sent again with its key completes,
// once.
func TestTurnOnRetiredVersionFailsClearly(t *testing.T) {
	e := newEnv(t)
	e.agent.PinnedCheck = 2 * time.Second
	deployment := fmt.Sprintf("e2e-retired-%d", time.Now().UnixNano())
	wA, _ := e.startVersioned(deployment, "build-a")
	e.setCurrent(deployment, "build-a")
	if term := agenttest.CheckTerminal(t, collect(t, e.agent, context.Background(), "retired", "on A")); term.Type != agent.TypeCompleted {
		t.Fatalf("turn on A: %+v", term)
	}
	wA.Stop()
	e.startVersioned(deployment, "build-b")
	e.setCurrent(deployment, "build-b")

	ctx, cancel := context.WithTimeout(agent.WithIdempotencyKey(context.Background(), "retired-turn-2"), 90*time.Second)
	defer cancel()
	start := time.Now()
	evs := collect(t, e.agent, ctx, "retired", "after A was stopped")
	term := agenttest.CheckTerminal(t, evs)
	t.Logf("answered after %s: %+v", time.Since(start).Round(time.Millisecond), term)
	if term.Type != agent.TypeFailed || term.Code != agent.CodeNoWorker {
		t.Fatalf("turn on the retired build: %s, want failed{%s}", describe(evs), agent.CodeNoWorker)
	}
	for _, want := range []string{"build-a", "update-options", "FASTAGENT_BUILD_ID=build-a"} {
		if !strings.Contains(term.Details, want) {
			t.Errorf("the failure does not say %q: %s", want, term.Details)
		}
	}

	e.startVersioned(deployment, "build-a") // the first recovery: a worker of the pinned build
	// The client sends the turn again with its key, as the failure says: it
	// gets the answer, and the turn runs once (a turn update Temporal still
	// held is the same update; one it had dropped before a worker took it
	// runs now).
	ctx2, cancel2 := context.WithTimeout(agent.WithIdempotencyKey(context.Background(), "retired-turn-2"), 90*time.Second)
	defer cancel2()
	again := collect(t, e.agent, ctx2, "retired", "after A was stopped")
	if n := e.kit.Model.Count(); n != 2 {
		t.Errorf("model calls %d, want 2 (the turn on A, then the queued turn once)", n)
	}
	if term := agenttest.CheckTerminal(t, again); term.Type != agent.TypeCompleted {
		t.Fatalf("the queued turn after build-a came back: %s", describe(again))
	}
}
