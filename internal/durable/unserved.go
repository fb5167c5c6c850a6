package durable

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/workflows"
)

// DefaultPinnedCheck is how long a turn's workflow task waits for a worker
// before the agent looks for the reason (Agent.PinnedCheck).
const DefaultPinnedCheck = 15 * time.Second

// watchUnserved returns ctx cancelled, with an *agent.Error coded
// no_worker as its cause, when session's run turns out to be pinned to a
// Worker Deployment version that no worker serves: Temporal would hold the
// turn's update until one does, and the caller would wait forever. It
// checks once the turn has waited PinnedCheck, and then as often.
func (a *Agent) watchUnserved(ctx context.Context, session string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	every := a.PinnedCheck
	if every <= 0 {
		every = DefaultPinnedCheck
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if err := a.unserved(ctx, session, every); err != nil {
				cancel(err)
				return
			}
		}
	}()
	return ctx, func() { close(done); cancel(nil) }
}

// unservedCause is the no_worker error that cancelled ctx, or nil.
func unservedCause(ctx context.Context) *agent.Error {
	var e *agent.Error
	if ctx.Err() != nil && errors.As(context.Cause(ctx), &e) && e.Code == agent.CodeNoWorker {
		return e
	}
	return nil
}

// unserved says whether session is stuck on a retired build: its run is
// pinned to a version, a workflow task has waited longer than waited for a
// worker to pick it up, and that version is not the deployment's current
// one (a current version is served by the workers being deployed). Any
// error reading that state reads as "not stuck".
func (a *Agent) unserved(ctx context.Context, session string, waited time.Duration) error {
	id := workflows.WorkflowID(session)
	d, err := a.Client.DescribeWorkflow(ctx, id, "")
	if err != nil {
		return nil //nolint:nilerr // unknown reads as "not stuck": the turn goes on waiting
	}
	vi := d.RawResponse.GetWorkflowExecutionInfo().GetVersioningInfo()
	pinned := vi.GetDeploymentVersion()
	if ov := vi.GetVersioningOverride(); ov.GetPinned().GetVersion() != nil {
		pinned = ov.GetPinned().GetVersion()
	}
	if vi.GetBehavior() != enumspb.VERSIONING_BEHAVIOR_PINNED || pinned.GetBuildId() == "" {
		return nil
	}
	task := d.RawResponse.GetPendingWorkflowTask()
	if task == nil || task.GetState() != enumspb.PENDING_WORKFLOW_TASK_STATE_SCHEDULED ||
		time.Since(task.GetScheduledTime().AsTime()) < waited {
		return nil
	}
	deployment, build := pinned.GetDeploymentName(), pinned.GetBuildId()
	desc, err := a.Client.WorkerDeploymentClient().GetHandle(deployment).Describe(ctx, client.WorkerDeploymentDescribeOptions{})
	if err != nil {
		return nil //nolint:nilerr // unknown reads as "not stuck": the turn goes on waiting
	}
	current, ramping := desc.Info.RoutingConfig.CurrentVersion, desc.Info.RoutingConfig.RampingVersion
	if (current != nil && current.BuildID == build) || (ramping != nil && ramping.BuildID == build) {
		return nil
	}
	now := "no current build"
	if current != nil {
		now = fmt.Sprintf("the current build is %q", current.BuildID)
	}
	return agent.NewError(agent.CodeNoWorker, fmt.Sprintf(
		"session %q is pinned to build %q of Worker Deployment %q, and no worker has picked up its turn for %s (%s): "+
			"the turn waits for a worker of that build. Either start a worker with "+
			"FASTAGENT_DEPLOYMENT=%s FASTAGENT_BUILD_ID=%s (then `fastagent rollout` moves the session when idle), "+
			"or let the current build take the run over: temporal workflow update-options --workflow-id %s "+
			"--versioning-override-behavior auto_upgrade (safe when the workflow changes since %s are behind workflow.GetVersion). "+
			"Once a worker serves it, send the turn again with the same key to get its answer: it runs once "+
			"(re-attaching by key works too while Temporal still holds the waiting turn).",
		session, build, deployment, waited, now, deployment, build, id, build))
}
