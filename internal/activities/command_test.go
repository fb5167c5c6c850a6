package activities_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
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

// TestChatCommand: /stop aborts the running turn under an update ID bound
// to the command message (a stop button's to its turn) and says nothing
// when it stopped one; when nothing runs (a second /stop) it answers so,
// once however often it is retried; /new and /help answer; a failure to
// reach the session is retried.
func TestChatCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	noRun := temporal.NewApplicationErrorWithOptions("nothing to abort", agent.CodeNoActiveRun, temporal.ApplicationErrorOptions{NonRetryable: true})
	target := &wire.ReplyTarget{Kind: "fake", Data: json.RawMessage(`{"chat":"42","message":"7"}`)}
	cases := []struct {
		name    string
		in      wire.CommandInput
		err     error
		ok      bool
		updates int
		want    []string
	}{
		{"stop stops the running turn", wire.CommandInput{Command: wire.CommandStop, Session: "telegram:42", Key: "telegram:42:7", Reply: target},
			nil, true, 1, nil},
		{"a second stop finds nothing", wire.CommandInput{Command: wire.CommandStop, Session: "telegram:42", Key: "telegram:42:8", Reply: target},
			noRun, true, 1, []string{"post m1 " + activities.NothingRunningText}},
		{"stop of a session never started", wire.CommandInput{Command: wire.CommandStop, Session: "telegram:42", Key: "telegram:42:9", Reply: target},
			serviceerror.NewNotFound("workflow not found"), true, 1, []string{"post m1 " + activities.NothingRunningText}},
		{"stop without a session", wire.CommandInput{Command: wire.CommandStop, Key: "slack:T:C:1", Reply: target},
			nil, true, 0, []string{"post m1 " + activities.NothingRunningText}},
		{"stop, session unreachable", wire.CommandInput{Command: wire.CommandStop, Session: "telegram:42", Key: "telegram:42:10", Reply: target},
			serviceerror.NewUnavailable("down"), false, 1, nil},
		{"new", wire.CommandInput{Command: wire.CommandNew, Session: "telegram:42", Fresh: "telegram:42~1", Key: "telegram:42:11", Reply: target},
			nil, true, 0, []string{"post m1 " + activities.NewSessionText}},
		{"help", wire.CommandInput{Command: wire.CommandHelp, Key: "telegram:42:12", Reply: target},
			nil, true, 0, []string{"post m1 " + activities.HelpText}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			st, err := store.OpenSQLite(filepath.Join(t.TempDir(), "s.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			rp := &fakeReplier{}
			cl := &runningClient{stopClient{err: c.err}}
			r := &activities.Replies{Starter: cl, Store: st, Repliers: map[string]channels.Replier{"fake": rp}}
			for range 2 { // a retry answers nothing twice
				if err := r.Command(ctx, c.in); (err == nil) != c.ok {
					t.Fatalf("Command = %v, want ok=%v", err, c.ok)
				}
			}
			if len(cl.opts) != 2*c.updates {
				t.Fatalf("%d updates, want %d", len(cl.opts), 2*c.updates)
			}
			if c.updates > 0 {
				if cl.opts[0].UpdateID != "stop:"+c.in.Key || cl.opts[1].UpdateID != cl.opts[0].UpdateID || cl.opts[0].UpdateName != workflows.UpdateAbort {
					t.Errorf("updates %+v, want one ID stop:%s", cl.opts, c.in.Key)
				}
			}
			if fmt.Sprint(rp.log) != fmt.Sprint(c.want) {
				t.Errorf("platform calls %q, want %q", rp.log, c.want)
			}
		})
	}
}

// runningClient answers an abort as the session does when a turn runs:
// with that turn (or err).
type runningClient struct {
	stopClient
}

func (c *runningClient) UpdateWorkflow(_ context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	c.opts = append(c.opts, o)
	if c.err != nil {
		return nil, c.err
	}
	return doneHandle{turn: "telegram:42:5"}, nil
}

// A stop button stops only its own turn.
func TestChatCommandButtonStopsItsTurn(t *testing.T) {
	t.Parallel()
	cl := &dropClient{}
	r := &activities.Replies{Starter: cl}
	in := wire.CommandInput{Command: wire.CommandStop, Session: "telegram:42", Key: "telegram:42:stop-click:q1", Turn: "telegram:42:7"}
	if err := r.Command(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	if len(cl.opts) != 1 || cl.opts[0].Args[0].(workflows.AbortRequest).Turn != "telegram:42:7" {
		t.Fatalf("updates %+v, want an abort of turn telegram:42:7 only", cl.opts)
	}
}

// /status says what runs, waits and was spent.
func TestStatusText(t *testing.T) {
	t.Parallel()
	v := workflows.SessionView{Running: "telegram:42:7", Queued: []string{"a", "b"}, Turns: 5,
		Usage: agent.Usage{Input: 1200, Output: 300}, Today: workflows.DayUsage{Day: "2026-12-07", Usage: agent.Usage{Input: 100, Output: 20}}}
	got := activities.StatusText(v)
	for _, want := range []string{"turn telegram:42:7", "2 messages are waiting", "Turns: 5", "1200 in, 300 out", "today: 120"} {
		if !strings.Contains(got, want) {
			t.Errorf("status %q lacks %q", got, want)
		}
	}
	if got := activities.StatusText(workflows.SessionView{}); !strings.Contains(got, "Nothing is running. Nothing is waiting.") {
		t.Errorf("idle status %q", got)
	}
}

// reactingReplier is a fakeReplier with reactions.
type reactingReplier struct {
	fakeReplier
	reacted []string
}

func (f *reactingReplier) React(_ context.Context, t wire.Target, stage string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reacted = append(f.reacted, t.Message+" "+stage)
	return nil
}

// A settled answer marks the person's message answered once, however often
// Channel.Reply is retried; a busy notice does not.
func TestReplyReactsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := store.OpenSQLite(filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	rp := &reactingReplier{}
	r := &activities.Replies{Store: st, Repliers: map[string]channels.Replier{"fake": rp}}
	target := wire.ReplyTarget{Kind: "fake", Data: json.RawMessage(`{"chat":"42","message":"7"}`)}
	out := agent.TypeCompleted
	for range 2 {
		in := wire.ReplyInput{Session: "s1", Turn: "k1", Reply: target}
		in.Outcome.Status = out
		if err := r.Reply(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Reply(ctx, wire.ReplyInput{Session: "s1", Turn: "k2", Reply: target, Busy: true}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(rp.reacted) != "[7 answered]" {
		t.Errorf("reactions %q, want one answered", rp.reacted)
	}
}
