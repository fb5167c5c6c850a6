package activities_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
	"github.com/fastagent/fastagent/workflows"
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
