package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/wire"
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
	in := wire.StopInput{Session: "telegram:42", Reason: "stopped by @ada in the chat"}
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

// doneHandle is a completed update that answered an AbortResult.
type doneHandle struct{ turn string }

func (h doneHandle) WorkflowID() string { return "" }
func (h doneHandle) RunID() string      { return "" }
func (h doneHandle) UpdateID() string   { return "" }
func (h doneHandle) Get(_ context.Context, v interface{}) error {
	*(v.(*workflows.AbortResult)) = workflows.AbortResult{Turn: h.turn}
	return nil
}

// dropClient answers UpdateWorkflow with a completed update, or err.
type dropClient struct {
	stopClient
}

func (c *dropClient) UpdateWorkflow(_ context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	c.opts = append(c.opts, o)
	if c.err != nil {
		return nil, c.err
	}
	return doneHandle{turn: o.Args[0].(workflows.AbortRequest).Turn}, nil
}

// TestChatDrop: Chat.Drop aborts the turn of a deleted message only while
// it waits (AbortRequest.Queued); when it was dropped, a reply already
// mounted for it (a stored reference) is settled to a note, and nothing is
// posted when none was; a turn that runs or finished, or a session that
// does not exist, is left alone without an error.
func TestChatDrop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	noRun := temporal.NewApplicationErrorWithOptions("not waiting", agent.CodeNoActiveRun, temporal.ApplicationErrorOptions{NonRetryable: true})
	cases := []struct {
		name    string
		err     error
		mounted bool
		ok      bool
		want    []string
	}{
		{"dropped, reply mounted", nil, true, true, []string{"update m7 " + activities.DroppedText}},
		{"dropped, nothing mounted", nil, false, true, nil},
		{"running or finished", noRun, true, true, nil},
		{"no such session", serviceerror.NewNotFound("workflow not found"), true, true, nil},
		{"unavailable", serviceerror.NewUnavailable("down"), true, false, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			st, err := store.OpenSQLite(filepath.Join(t.TempDir(), "s.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			in := wire.DropInput{Session: "feishu:om_1", Turn: "feishu:om_2", Reason: "deleted",
				Reply: &wire.ReplyTarget{Kind: "fake", Data: json.RawMessage(`{"chat":"oc_1","message":"om_2"}`)}}
			if c.mounted {
				if err := st.SaveReply(ctx, in.Session, in.Turn, "m7"); err != nil {
					t.Fatal(err)
				}
			}
			rp := &fakeReplier{}
			cl := &dropClient{stopClient{err: c.err}}
			r := &activities.Replies{Starter: cl, Store: st, Repliers: map[string]channels.Replier{"fake": rp}}
			err = r.Drop(ctx, in)
			if (err == nil) != c.ok {
				t.Fatalf("Drop = %v, want ok=%v", err, c.ok)
			}
			if len(cl.opts) != 1 || cl.opts[0].WorkflowID != "session:feishu:om_1" || cl.opts[0].UpdateName != workflows.UpdateAbort {
				t.Fatalf("update %+v", cl.opts)
			}
			if req := cl.opts[0].Args[0].(workflows.AbortRequest); req.Turn != in.Turn || !req.Queued {
				t.Errorf("abort request %+v, want turn %s only while queued", req, in.Turn)
			}
			if fmt.Sprint(rp.log) != fmt.Sprint(c.want) {
				t.Errorf("platform calls %q, want %q", rp.log, c.want)
			}
		})
	}
}

// A stop is bound to the message that asked for it: every attempt of its
// Chat.Stop (a retry after a lost answer) sends the abort under one update
// ID derived from the message, so the session does it once — a retry never
// aborts the turn that runs next.
func TestChatStopBoundToItsMessage(t *testing.T) {
	t.Parallel()
	in := wire.StopInput{Session: "telegram:42", Reason: "stopped by @ada in the chat", Key: "telegram:42:77"}
	cl := &stopClient{err: serviceerror.NewUnavailable("answer lost")}
	r := &activities.Replies{Starter: cl}
	for range 2 {
		_ = r.Stop(context.Background(), in)
	}
	if len(cl.opts) != 2 || cl.opts[0].UpdateID == "" || cl.opts[0].UpdateID != cl.opts[1].UpdateID {
		t.Fatalf("update IDs %+v, want one ID, the same on every attempt", cl.opts)
	}
}
