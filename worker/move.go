package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/workflows"
)

// MoveOptions say which workflows MoveToCurrent moves and how long it waits.
type MoveOptions struct {
	// Deployment is the Worker Deployment whose current version the
	// workflows move to (required).
	Deployment string
	// TaskQueue defaults to workflows.TaskQueue.
	TaskQueue string
	// Wait is how long to keep waking workflows not yet on the current
	// version (a busy session moves only once idle); 0 wakes them once.
	Wait time.Duration
}

// MoveResult reports a MoveToCurrent.
type MoveResult struct {
	// Current is the version moved to, "<deployment>:<build>".
	Current string
	// Signals counts the upgrade signals sent.
	Signals int
	// Behind are the workflow IDs still on another version when it
	// returned; they move at their next idle point.
	Behind []string
}

// MoveToCurrent moves every running session and chat workflow of the task
// queue onto the deployment's current version, after a new one was made
// current. It wakes each workflow still on another version with
// workflows.SignalUpgrade: on that workflow task the server tells the pinned
// run that its target moved, and the run continues as new onto the current
// version as soon as it is idle. The server learns a new current version
// asynchronously, so a workflow that was woken too early is woken again
// until it moved or Wait passed. Without it, sessions still move, at the
// end of their next turn; with it, their next turn already runs on the new
// version and the old version drains.
func MoveToCurrent(ctx context.Context, c client.Client, o MoveOptions) (MoveResult, error) {
	var res MoveResult
	if o.Deployment == "" {
		return res, errors.New("move to current: a deployment name is required")
	}
	if o.TaskQueue == "" {
		o.TaskQueue = workflows.TaskQueue
	}
	d, err := c.WorkerDeploymentClient().GetHandle(o.Deployment).Describe(ctx, client.WorkerDeploymentDescribeOptions{})
	if err != nil {
		return res, fmt.Errorf("move to current: describe deployment %s: %w", o.Deployment, err)
	}
	cur := d.Info.RoutingConfig.CurrentVersion
	if cur == nil {
		return res, fmt.Errorf("move to current: deployment %s has no current version", o.Deployment)
	}
	res.Current = cur.DeploymentName + ":" + cur.BuildID
	pending, err := running(ctx, c, o.TaskQueue)
	if err != nil {
		return res, err
	}
	deadline := time.Now().Add(o.Wait)
	for {
		var behind []string
		for _, id := range pending {
			desc, err := c.DescribeWorkflow(ctx, id, "")
			var nf *serviceerror.NotFound
			if errors.As(err, &nf) {
				continue
			}
			if err != nil {
				return res, fmt.Errorf("move to current: describe %s: %w", id, err)
			}
			info := desc.RawResponse.GetWorkflowExecutionInfo()
			v := info.GetVersioningInfo().GetDeploymentVersion()
			if info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING || v == nil ||
				v.GetDeploymentName() == cur.DeploymentName && v.GetBuildId() == cur.BuildID {
				continue // finished, unversioned, or already there
			}
			// No run ID: a run that continued as new in between is woken
			// in its successor, which ignores it.
			err = c.SignalWorkflow(ctx, id, "", workflows.SignalUpgrade, nil)
			if err != nil && !errors.As(err, &nf) {
				return res, fmt.Errorf("move to current: signal %s: %w", id, err)
			}
			res.Signals++
			behind = append(behind, id)
		}
		res.Behind = behind
		if len(behind) == 0 || !time.Now().Before(deadline) {
			return res, nil
		}
		pending = behind
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// running lists the IDs of the task queue's running session and chat
// workflows.
func running(ctx context.Context, c client.Client, taskQueue string) ([]string, error) {
	query := fmt.Sprintf("TaskQueue = '%s' AND ExecutionStatus = 'Running' AND WorkflowType IN ('%s', '%s')",
		escapeQuery(taskQueue), workflows.SessionWorkflowType, workflows.ChatWorkflowType)
	var ids []string
	var token []byte
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token})
		if err != nil {
			return ids, fmt.Errorf("move to current: list workflows: %w", err)
		}
		for _, ex := range resp.GetExecutions() {
			ids = append(ids, ex.GetExecution().GetWorkflowId())
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return ids, nil
		}
	}
}

// escapeQuery quotes a value for a visibility query string literal.
func escapeQuery(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' || s[i] == '\\' {
			out = append(out, '\\')
		}
		out = append(out, s[i])
	}
	return string(out)
}
