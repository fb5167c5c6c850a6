package worker

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/workflows"
)

// MoveToCurrent wakes every running session and chat workflow of the task
// queue with workflows.SignalUpgrade, after a new version of the Worker
// Deployment was made current. A workflow pinned to an older version then
// learns on that workflow task that its target moved, and continues as new
// onto the current version as soon as it is idle; one already on it ignores
// the signal. It returns how many workflows it signalled. Without it,
// sessions still move, at their next turn's end; with it, their next turn
// already runs on the new version and the old one drains.
func MoveToCurrent(ctx context.Context, c client.Client, taskQueue string) (int, error) {
	if taskQueue == "" {
		taskQueue = workflows.TaskQueue
	}
	query := fmt.Sprintf("TaskQueue = '%s' AND ExecutionStatus = 'Running' AND WorkflowType IN ('%s', '%s')",
		escapeQuery(taskQueue), workflows.SessionWorkflowType, workflows.ChatWorkflowType)
	n := 0
	var token []byte
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token})
		if err != nil {
			return n, fmt.Errorf("move to current: list workflows: %w", err)
		}
		for _, ex := range resp.GetExecutions() {
			id := ex.GetExecution().GetWorkflowId()
			// No run ID: a run that just continued as new is woken in its
			// successor, which ignores it.
			err := c.SignalWorkflow(ctx, id, "", workflows.SignalUpgrade, nil)
			var nf *serviceerror.NotFound
			switch {
			case errors.As(err, &nf):
				continue // finished in between: nothing to move
			case err != nil:
				return n, fmt.Errorf("move to current: signal %s: %w", id, err)
			}
			n++
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return n, nil
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
