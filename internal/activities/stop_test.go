package activities_test

import (
	"context"
	"errors"
	"testing"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/workflows"
)

// stopClient answers UpdateWorkflow with err (after recording the call).
type stopClient struct {
	err  error
	opts []client.UpdateWorkflowOptions
}

func (c *stopClient) SignalWithStartWorkflow(context.Context, string, string, interface{}, client.StartWorkflowOptions,
	interface{}, ...interface{}) (client.WorkflowRun, error) {
	return nil, errors.New("unused")
}

func (c *stopClient) UpdateWorkflow(_ context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	c.opts = append(c.opts, o)
	return nil, c.err
}

// onlySignals has no UpdateWorkflow.
type onlySignals struct{}

func (onlySignals) SignalWithStartWorkflow(context.Context, string, string, interface{}, client.StartWorkflowOptions,
	interface{}, ...interface{}) (client.WorkflowRun, error) {
	return nil, errors.New("unused")
}

// TestChatStop: Chat.Stop sends the abort update to the session; a
// session that does not exist or runs nothing is not an error, other
// failures are, and a worker without an update-capable client fails for
// good.
func TestChatStop(t *testing.T) {
	t.Parallel()
	in := workflows.StopInput{Session: "telegram:42", Reason: "stopped by @ada in the chat"}
	noRun := temporal.NewApplicationErrorWithOptions("nothing to abort", agent.CodeNoActiveRun, temporal.ApplicationErrorOptions{NonRetryable: true})
	cases := []struct {
		name string
		err  error
		ok   bool
	}{
		{"no such session", serviceerror.NewNotFound("workflow not found"), true},
		{"nothing running", noRun, true},
		{"unavailable", serviceerror.NewUnavailable("down"), false},
	}
	for _, c := range cases {
		cl := &stopClient{err: c.err}
		r := &activities.Replies{Starter: cl}
		err := r.Stop(context.Background(), in)
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok=%v", c.name, err, c.ok)
		}
		if len(cl.opts) != 1 || cl.opts[0].WorkflowID != "session:telegram:42" || cl.opts[0].UpdateName != workflows.UpdateAbort {
			t.Errorf("%s: update %+v", c.name, cl.opts)
		}
	}
	err := (&activities.Replies{Starter: onlySignals{}}).Stop(context.Background(), in)
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || !app.NonRetryable() {
		t.Errorf("without an update client: %v, want a non-retryable error", err)
	}
}
