package activities_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// env runs the real activities (over testkit's SQLite store, workspace,
// counter tool and scripted model server) in the SDK's test activity
// environment.
type env struct {
	t   *testing.T
	kit *testkit.Kit
	bus *feed.InProcess
	act *testsuite.TestActivityEnvironment
}

func newEnv(t *testing.T) *env {
	t.Helper()
	kit := testkit.New(t)
	bus := feed.NewInProcess()
	t.Cleanup(func() { _ = bus.Close() })
	var suite testsuite.WorkflowTestSuite
	act := suite.NewTestActivityEnvironment()
	kit.Activities(bus).Register(act)
	return &env{t: t, kit: kit, bus: bus, act: act}
}

func (e *env) generate(call agentloop.ModelCall) (agentloop.ModelResult, error) {
	e.t.Helper()
	var res agentloop.ModelResult
	v, err := e.act.ExecuteActivity(workflows.ActivityModelGenerate, call)
	if err != nil {
		return res, err
	}
	if err := v.Get(&res); err != nil {
		e.t.Fatalf("decode model result: %v", err)
	}
	return res, nil
}

func (e *env) execute(call agentloop.ToolCall) (agentloop.ToolOutcome, error) {
	e.t.Helper()
	var out agentloop.ToolOutcome
	v, err := e.act.ExecuteActivity(workflows.ActivityToolExecute, call)
	if err != nil {
		return out, err
	}
	if err := v.Get(&out); err != nil {
		e.t.Fatalf("decode tool outcome: %v", err)
	}
	return out, nil
}

// store appends entries to session, failing the test on error.
func (e *env) store(session string, entries ...transcript.Entry) {
	e.t.Helper()
	if err := e.kit.Store.Append(context.Background(), session, entries...); err != nil {
		e.t.Fatalf("append: %v", err)
	}
}

// stored returns the entry id of session, or ok=false when there is none.
func (e *env) stored(session, id string) (transcript.Entry, bool) {
	e.t.Helper()
	got, err := e.kit.Store.Get(context.Background(), session, id)
	if errors.Is(err, store.ErrNotFound) {
		return got, false
	}
	if err != nil {
		e.t.Fatalf("get %s: %v", id, err)
	}
	return got, true
}

// feedUntil returns the turn's feed messages up to the first of kind last,
// failing the test if none arrives within a generous bound.
func (e *env) feedUntil(session, turn, last string) []feed.Message {
	e.t.Helper()
	return e.feedUntilN(session, turn, last, 1)
}

// feedUntilN is feedUntil up to the n-th message of kind last.
func (e *env) feedUntilN(session, turn, last string, n int) []feed.Message {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub, err := e.bus.Subscribe(ctx, session, turn)
	if err != nil {
		e.t.Fatalf("subscribe: %v", err)
	}
	defer sub.Close()
	var out []feed.Message
	for {
		select {
		case m := <-sub.C():
			out = append(out, m)
			if m.Kind == last {
				if n--; n == 0 {
					return out
				}
			}
		case <-ctx.Done():
			e.t.Fatalf("%d more %q messages missing on the feed of turn %s; got %+v", n, last, turn, out)
		}
	}
}

// message builds a stored message entry.
func message(id, parent string, msg transcript.Message) transcript.Entry {
	return transcript.Entry{ID: id, ParentID: parent, Type: transcript.TypeMessage, Time: time.Now().UTC(), Message: &msg}
}

// appError returns err's application error, failing the test if it is not one.
func appError(t *testing.T, err error) *temporal.ApplicationError {
	t.Helper()
	var app *temporal.ApplicationError
	if !errors.As(err, &app) {
		t.Fatalf("error %v (%T) is not an application error", err, err)
	}
	return app
}
