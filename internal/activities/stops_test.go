package activities_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// A stop notice for the turn ends a running tool at once with a
// non-retryable "stopped" error; the workflow's record of the aborted call
// (a synthetic result of the same turn, after the notice) still runs.
func TestStopNoticeStopsRunningCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.kit.Counter.Delay = time.Minute
	const session = "s-stop"
	call := toolSetup(e, session, testkit.CounterName, `{}`)
	go func() {
		// The notice comes while the tool runs (one that came before the
		// call watched would be remembered all the same).
		if !wait.Until(30*time.Second, func() bool { return e.kit.Counter.Started(session) == 1 }) {
			t.Error("the tool never started")
		}
		if err := e.bus.Stop(context.Background(), session, call.Turn); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	start := time.Now()
	_, err := e.execute(call)
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != workflows.ErrStopped || !app.NonRetryable() {
		t.Fatalf("Tool.Execute after the stop notice: %v, want a non-retryable %q error", err, workflows.ErrStopped)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the call ran %v after the notice", took)
	}
	if n := e.kit.Counter.Interrupted(session); n != 1 {
		t.Errorf("the tool saw %d interruptions, want 1", n)
	}
	call.Synthetic = &agent.ToolResult{IsError: true, Content: "interrupted: the turn was aborted"}
	out, err := e.execute(call)
	if err != nil || !out.IsError {
		t.Errorf("recording the aborted call's result after the notice: %+v, %v", out, err)
	}
	if _, ok := e.stored(session, call.ResultEntryID); !ok {
		t.Error("the aborted call's result was not stored")
	}
}

// StoppedUsage: the request's size in, the streamed characters / 4 out
// (rounded up), one call.
func TestStoppedUsage(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		input, chars int
		want         agent.Usage
	}{
		{0, 0, agent.Usage{Calls: 1}},
		{1200, 0, agent.Usage{Input: 1200, Calls: 1}},
		{1200, 1, agent.Usage{Input: 1200, Output: 1, Calls: 1}},
		{1200, 4000, agent.Usage{Input: 1200, Output: 1000, Calls: 1}},
		{1200, 4001, agent.Usage{Input: 1200, Output: 1001, Calls: 1}},
		{-5, -3, agent.Usage{Calls: 1}},
	} {
		if got := activities.StoppedUsage(tt.input, tt.chars); got != tt.want {
			t.Errorf("StoppedUsage(%d, %d) = %+v, want %+v", tt.input, tt.chars, got, tt.want)
		}
	}
}

// A model call stopped while it streams reports, on the turn's feed, an
// estimate of what it used (the workflow never hears of it): the
// request's size in and the streamed characters / 4 out.
func TestStoppedModelCallReportsUsage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const session, turn = "s-stopped", "t1"
	e.store(session, message("root", "", transcript.Message{Role: transcript.RoleUser, Text: "earlier"}))
	user := message("u1", "root", transcript.Message{Role: transcript.RoleUser, Text: "write a lot"})
	e.kit.Model.Enqueue(modelserver.Reply{Text: []string{strings.Repeat("x", 1000), strings.Repeat("y", 1000)}, Hang: true})
	call := agentloop.ModelCall{Session: session, Turn: turn, Step: 1, Leaf: "root", Prepend: []transcript.Entry{user}, EntryID: "a1", MaxAttempts: 3}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		sub, err := e.bus.Subscribe(ctx, session, turn)
		if err != nil {
			t.Errorf("subscribe: %v", err)
			return
		}
		defer sub.Close()
		var streamed int
		for streamed < 2000 {
			select {
			case m := <-sub.C():
				if m.Kind == feed.KindEvent && m.Event != nil {
					streamed += len(m.Event.Delta)
				}
			case <-ctx.Done():
				t.Error("the reply's text never streamed")
				return
			}
		}
		if err := e.bus.Stop(context.Background(), session, turn); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	_, err := e.generate(call)
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != workflows.ErrStopped {
		t.Fatalf("Model.Generate after the stop notice: %v, want a %q error", err, workflows.ErrStopped)
	}
	msgs := e.feedUntil(session, turn, feed.KindUsage)
	u := msgs[len(msgs)-1]
	if u.Step != 1 || u.Usage == nil {
		t.Fatalf("usage message %+v, want step 1 with a usage", u)
	}
	if u.Usage.Output != 500 || u.Usage.Input <= 0 || u.Usage.Calls != 1 {
		t.Errorf("stopped call's usage %+v, want output 500 (2000 characters / 4), input > 0, 1 call", *u.Usage)
	}
	if _, ok := e.stored(session, "a1"); ok {
		t.Error("the stopped call stored a reply")
	}
}
