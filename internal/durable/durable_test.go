package durable

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// flakyClient answers UpdateWithStartWorkflow with handles whose Get fails
// with the scripted errors first, then returns the outcome.
type flakyClient struct {
	client.Client
	mu    sync.Mutex
	errs  []error
	calls int
	keys  []string
}

func (c *flakyClient) NewWithStartWorkflowOperation(client.StartWorkflowOptions, interface{}, ...interface{}) client.WithStartWorkflowOperation {
	return nil
}

func (c *flakyClient) UpdateWithStartWorkflow(_ context.Context, o client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	c.keys = append(c.keys, o.UpdateOptions.UpdateID)
	var err error
	if len(c.errs) > 0 {
		err, c.errs = c.errs[0], c.errs[1:]
	}
	return handle{err: err, key: o.UpdateOptions.UpdateID}, nil
}

type handle struct {
	err error
	key string
}

func (h handle) WorkflowID() string { return "session:s" }
func (h handle) RunID() string      { return "" }
func (h handle) UpdateID() string   { return h.key }
func (h handle) Get(_ context.Context, v interface{}) error {
	if h.err != nil {
		return h.err
	}
	*(v.(*agentloop.Outcome)) = agentloop.Outcome{Turn: h.key, Status: agent.TypeCompleted}
	return nil
}

// A failed h.Get that says nothing about the turn (the connection dropped,
// the poll timed out) is not turned into a failed terminal: the update is
// asked again with the same key until its outcome is known.
func TestTurnRepollsInsteadOfGuessing(t *testing.T) {
	c := &flakyClient{errs: []error{
		serviceerror.NewUnavailable("connection reset"),
		context.DeadlineExceeded,
	}}
	bus := feed.NewInProcess()
	defer bus.Close()
	a := &Agent{Client: c, Feed: bus}
	ctx, cancel := context.WithTimeout(agent.WithIdempotencyKey(context.Background(), "k1"), 10*time.Second)
	defer cancel()
	res, err := agent.Collect(a.Invoke(ctx, agent.Scope{Session: "s"}, agent.Prompt{Text: "hi"}))
	if err != nil {
		t.Fatalf("the turn failed on a transient error instead of asking again: %v", err)
	}
	_ = res
	if c.calls != 3 {
		t.Fatalf("update sent %d times, want 3", c.calls)
	}
	for _, k := range c.keys {
		if k != "k1" {
			t.Fatalf("a re-poll used key %q, want the same key k1", k)
		}
	}
}

// The turn's own answer (a rejection, an application failure) is final.
func TestTurnSettledErrorIsFinal(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		code string
	}{
		{"busy", temporal.NewApplicationError("busy", "session_busy"), agent.CodeSessionBusy},
		{"exhausted", serviceerror.NewResourceExhausted(0, "too many updates"), agent.CodeSessionBusy},
		{"app", temporal.NewNonRetryableApplicationError("bad", "other", errors.New("x")), "other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &flakyClient{errs: []error{tc.err}}
			bus := feed.NewInProcess()
			defer bus.Close()
			a := &Agent{Client: c, Feed: bus}
			_, err := agent.Collect(a.Invoke(context.Background(), agent.Scope{Session: "s"}, agent.Prompt{Text: "hi"}))
			var f *agent.Failure
			if !errors.As(err, &f) || f.Code != tc.code {
				t.Fatalf("got %v, want a failure with code %q", err, tc.code)
			}
			if c.calls != 1 {
				t.Fatalf("update sent %d times, want 1", c.calls)
			}
		})
	}
}

// workflowClosing is the error the Temporal server answers an update with
// when the run it was sent to continues as new before accepting it: the
// update never reached the workflow, and the server expects it sent again
// (it then reaches the new run).
func workflowClosing() error {
	return &serviceerror.ResourceExhausted{
		Cause:   enumspb.RESOURCE_EXHAUSTED_CAUSE_BUSY_WORKFLOW,
		Scope:   enumspb.RESOURCE_EXHAUSTED_SCOPE_NAMESPACE,
		Message: "workflow operation can not be applied because workflow is closing",
	}
}

// A turn that reached the session while its run was continuing as new is
// sent again with the same key, not answered session_busy: the caller sent
// it after the previous turn had answered, and the new run takes it.
func TestTurnResentWhenTheRunContinuesAsNew(t *testing.T) {
	c := &flakyClient{errs: []error{workflowClosing(), workflowClosing()}}
	bus := feed.NewInProcess()
	defer bus.Close()
	a := &Agent{Client: c, Feed: bus}
	ctx, cancel := context.WithTimeout(agent.WithIdempotencyKey(context.Background(), "k1"), 10*time.Second)
	defer cancel()
	if _, err := agent.Collect(a.Invoke(ctx, agent.Scope{Session: "s"}, agent.Prompt{Text: "hi"})); err != nil {
		t.Fatalf("the turn failed while its session continued as new: %v", err)
	}
	if c.calls != 3 {
		t.Fatalf("update sent %d times, want 3", c.calls)
	}
	for _, k := range c.keys {
		if k != "k1" {
			t.Fatalf("the turn was sent again with key %q, want the same key k1", k)
		}
	}
}

// A turn the workflow refused because its run was about to continue as
// new, with nothing running or waiting (RefusedContinuing), is sent again
// with the same key and runs in the next run; a session_busy refusal
// without that detail (turns are waiting) is the turn's answer.
func TestTurnResentWhenRefusedForContinueAsNew(t *testing.T) {
	continuing := temporal.NewApplicationErrorWithOptions("session busy: moving to a fresh workflow history", agent.CodeSessionBusy,
		temporal.ApplicationErrorOptions{Details: []any{workflows.RefusedContinuing}})
	c := &flakyClient{errs: []error{continuing}}
	bus := feed.NewInProcess()
	defer bus.Close()
	a := &Agent{Client: c, Feed: bus}
	ctx, cancel := context.WithTimeout(agent.WithIdempotencyKey(context.Background(), "k1"), 10*time.Second)
	defer cancel()
	if _, err := agent.Collect(a.Invoke(ctx, agent.Scope{Session: "s"}, agent.Prompt{Text: "hi"})); err != nil {
		t.Fatalf("the turn failed while its session continued as new: %v", err)
	}
	if c.calls != 2 || c.keys[1] != "k1" {
		t.Fatalf("update sent %d times with keys %v, want twice with k1", c.calls, c.keys)
	}
}
