package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
	"github.com/fastagent/fastagent/internal/tracing"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
	"github.com/fastagent/fastagent/workflows/wakes"
)

// stepSetup is toolSetup with the next model call: the step after the
// call's, below its result.
func stepSetup(e *env, session string) agentloop.StepCall {
	call := toolSetup(e, session, testkit.CounterName, `{"note":"once"}`)
	return agentloop.StepCall{
		Tools: []agentloop.ToolCall{call},
		Model: agentloop.ModelCall{Session: session, Turn: "t1", Step: 2, Leaf: "r1", EntryID: "a2",
			MaxAttempts: 6, AfterTools: true},
	}
}

// TestStepRunsToolsThenModel: Step.Run runs the call, stores its result,
// then calls the model below it; the feed carries the call's events and
// the model step's, in that order, as Tool.Execute and Model.Generate
// publish them.
func TestStepRunsToolsThenModel(t *testing.T) {
	t.Parallel()
	const session = "s1"
	e := newEnv(t)
	in := stepSetup(e, session)
	e.kit.Model.Enqueue(modelserver.Reply{Text: []string{"counted"}})

	res, err := e.kit.Activities(e.bus).RunStep(context.Background(), in, 1)
	if err != nil {
		t.Fatalf("RunStep: %v", err)
	}
	if got := e.kit.Counter.Runs(session); got != 1 {
		t.Errorf("counter ran %d times, want 1", got)
	}
	if len(res.Tools) != 1 || res.Tools[0].IsError || res.Tools[0].Marker != activities.ToolMarker("t1", "c1") {
		t.Errorf("tool outcomes = %+v", res.Tools)
	}
	if res.Model == nil || res.Model.EntryID != "a2" || len(res.Model.Calls) != 0 {
		t.Fatalf("model result = %+v, want the reply a2", res.Model)
	}
	reply, ok := e.stored(session, "a2")
	if !ok || reply.ParentID != "r1" || reply.Message.Text != "counted" {
		t.Errorf("stored reply = %+v (found %v), want \"counted\" below r1", reply, ok)
	}
	var seq []string
	for _, m := range e.feedUntilN(session, "t1", feed.KindEnd, 2) {
		switch m.Kind {
		case feed.KindEvent:
			seq = append(seq, m.Event.Type)
		case feed.KindEnd:
			seq = append(seq, "end "+m.Marker)
		default:
			seq = append(seq, m.Kind)
		}
	}
	want := []string{agent.TypeToolStarted, agent.TypeToolEnded, "end " + activities.ToolMarker("t1", "c1"),
		feed.KindAttempt, agent.TypeText, "end " + activities.ModelMarker("t1", 2)}
	if strings.Join(seq, " | ") != strings.Join(want, " | ") {
		t.Errorf("feed = %q, want %q", seq, want)
	}
}

// TestStepRetryReadsStoredResult: an attempt whose model call failed after
// the tool ran is retried; the retry reads the call's stored result and
// does not run the tool again.
func TestStepRetryReadsStoredResult(t *testing.T) {
	t.Parallel()
	const session = "s1"
	e := newEnv(t)
	in := stepSetup(e, session)
	e.kit.Model.Enqueue(
		modelserver.Reply{Status: 500, Message: "upstream down"},
		modelserver.Reply{Text: []string{"counted"}},
	)
	acts := e.kit.Activities(e.bus)
	if _, err := acts.RunStep(context.Background(), in, 1); err == nil {
		t.Fatal("the first attempt succeeded, want the model's failure")
	}
	if got := e.kit.Counter.Runs(session); got != 1 {
		t.Fatalf("counter ran %d times in the first attempt, want 1", got)
	}
	res, err := acts.RunStep(context.Background(), in, 2)
	if err != nil {
		t.Fatalf("the retry: %v", err)
	}
	if got := e.kit.Counter.Runs(session); got != 1 {
		t.Errorf("counter ran %d times, want 1: the retry ran the tool again", got)
	}
	if len(res.Tools) != 1 || !res.Tools[0].Recorded || res.Tools[0].IsError {
		t.Errorf("retry's tool outcome = %+v, want the stored result (Recorded)", res.Tools)
	}
	if res.Model == nil || res.Model.EntryID != "a2" || res.ModelAttempts != 2 {
		t.Errorf("model result = %+v (attempts %d), want the reply a2 of attempt 2", res.Model, res.ModelAttempts)
	}
	if r, ok := e.stored(session, "r1"); !ok || !strings.Contains(r.Message.Text, "count=1") {
		t.Errorf("stored result = %+v, want count=1", r.Message)
	}
}

// TestStepStartedUnfinishedIsUnknown: a non-idempotent call an attempt
// started and whose result was never stored is not run by the retry: its
// outcome is recorded as unknown (as for a lost Tool.Execute), and the
// model call goes on with that result.
func TestStepStartedUnfinishedIsUnknown(t *testing.T) {
	t.Parallel()
	const session = "s1"
	e := newEnv(t)
	in := stepSetup(e, session)
	e.kit.Faults.LoseToolResult(session, testkit.CounterName)
	e.kit.Model.Enqueue(modelserver.Reply{Text: []string{"I could not tell"}})
	acts := e.kit.Activities(e.bus)
	if _, err := acts.RunStep(context.Background(), in, 1); err == nil {
		t.Fatal("the attempt whose result was lost succeeded")
	}
	if got := e.kit.Counter.Runs(session); got != 1 {
		t.Fatalf("counter ran %d times, want 1", got)
	}
	res, err := acts.RunStep(context.Background(), in, 2)
	if err != nil {
		t.Fatalf("the retry: %v", err)
	}
	if got := e.kit.Counter.Runs(session); got != 1 {
		t.Errorf("counter ran %d times, want 1: the retry re-ran a non-idempotent tool", got)
	}
	r, ok := e.stored(session, "r1")
	if !ok || !r.Message.IsError || !strings.Contains(r.Message.Text, "The outcome of this counter call is unknown") {
		t.Fatalf("stored result = %+v (found %v), want the unknown outcome", r.Message, ok)
	}
	if len(res.Tools) != 1 || !res.Tools[0].IsError {
		t.Errorf("tool outcome = %+v, want an error", res.Tools)
	}
	if res.Model == nil || res.Model.EntryID != "a2" {
		t.Errorf("model result = %+v, want the reply a2 after the unknown outcome", res.Model)
	}
	// The first attempt never reached the model call: the second one's is
	// its attempt 1 on the feed (the step begins there, as with
	// Model.Generate), with the attempts left.
	if res.ModelAttempts != 1 {
		t.Errorf("model attempts = %d, want 1", res.ModelAttempts)
	}
	for _, m := range e.feedUntilN(session, "t1", feed.KindEnd, 2) {
		if m.Kind == feed.KindAttempt && m.Step == 2 && (m.Attempt != 1 || m.MaxAttempts != 5) {
			t.Errorf("step 2's attempt on the feed = %d of %d, want 1 of 5", m.Attempt, m.MaxAttempts)
		}
	}
}

// TestStepPastDeadlineSkipsModel: once the turn's time budget has passed,
// the calls run and the model is not called.
func TestStepPastDeadlineSkipsModel(t *testing.T) {
	t.Parallel()
	const session = "s1"
	e := newEnv(t)
	in := stepSetup(e, session)
	in.Deadline = time.Now().Add(-time.Minute)
	res, err := e.kit.Activities(e.bus).RunStep(context.Background(), in, 1)
	if err != nil {
		t.Fatalf("RunStep: %v", err)
	}
	if res.Model != nil {
		t.Errorf("model result = %+v, want none (deadline passed)", res.Model)
	}
	if len(res.Tools) != 1 || e.kit.Counter.Runs(session) != 1 {
		t.Errorf("tool outcomes %+v, counter %d; want the call run once", res.Tools, e.kit.Counter.Runs(session))
	}
	if _, ok := e.stored(session, "a2"); ok {
		t.Error("a reply was stored past the deadline")
	}
}

// TestStepYieldsModelCall: told that the workflow took a steering message
// (its notice, workflows.StepYieldKey), Step.Run runs the calls and leaves
// the model call to the workflow.
func TestStepYieldsModelCall(t *testing.T) {
	t.Parallel()
	const session = "s1"
	e := newEnv(t)
	in := stepSetup(e, session)
	if err := e.bus.Stop(context.Background(), session, workflows.StepYieldKey("t1", 2)); err != nil {
		t.Fatal(err)
	}
	v, err := e.act.ExecuteActivity(workflows.ActivityStepRun, in)
	if err != nil {
		t.Fatalf("Step.Run: %v", err)
	}
	var res agentloop.StepResult
	if err := v.Get(&res); err != nil {
		t.Fatal(err)
	}
	if res.Model != nil {
		t.Errorf("model result = %+v, want none: the model call is the workflow's", res.Model)
	}
	if len(res.Tools) != 1 || e.kit.Counter.Runs(session) != 1 {
		t.Errorf("tool outcomes %+v, counter %d; want the call run once", res.Tools, e.kit.Counter.Runs(session))
	}
	if len(e.kit.Model.Requests()) != 0 {
		t.Errorf("the model was called %d times, want 0", len(e.kit.Model.Requests()))
	}
}

// An attempt that stored the model's reply and recorded the turn, retried
// (its completion lost) past the turn's deadline, returns the stored
// reply: the turn is recorded and answered already, and the workflow must
// not end it otherwise or make another model call.
func TestStepRetryAfterRecordedKeepsTheReply(t *testing.T) {
	const session = "s1"
	e := newEnv(t)
	in := stepSetup(e, session)
	in.Model.End = &agentloop.TurnEnd{}
	e.kit.Model.Enqueue(modelserver.Reply{Text: []string{"final answer"}})
	res, err := e.kit.Activities(e.bus).RunStep(context.Background(), in, 1)
	if err != nil || res.Model == nil || !res.Model.Recorded {
		t.Fatalf("attempt 1: %+v %v", res.Model, err)
	}
	in.Deadline = time.Now().Add(-time.Second)
	res2, err := e.kit.Activities(e.bus).RunStep(context.Background(), in, 2)
	if err != nil || res2.Model == nil || res2.Model.EntryID != res.Model.EntryID {
		t.Fatalf("attempt 2 past the deadline: model %+v, error %v; want the stored reply %s", res2.Model, err, res.Model.EntryID)
	}
	if n := e.kit.Model.Count(); n != 1 {
		t.Errorf("model called %d times, want 1", n)
	}
}

// A call that sets a wake-up (or cancels one) leaves the turn's record to
// the workflow: the step's model call, though it ends the turn, does not
// record it (Recorded false), so the turn is not seen to end — its answer
// out, the session's wake-ups asked for — before the workflow applied the
// wake-up (as after Tool.Execute, whose wake-up is applied before the next
// model call is made).
func TestStepWakeLeavesTheRecordToTheWorkflow(t *testing.T) {
	t.Parallel()
	const session = "s1"
	e := newEnv(t)
	in := stepSetup(e, session)
	in.Model.End = &agentloop.TurnEnd{First: "u1"}
	// The call's result is stored (an earlier attempt ran it): the wake
	// tool's details carry its directive.
	details, _ := json.Marshal(wakes.Directive{Wake: &wakes.Wake{ID: "w1", Prompt: "check", FireAt: time.Now().Add(time.Hour)}})
	e.store(session, message("r1", "a1", transcript.Message{Role: transcript.RoleToolResult, ToolCallID: "c1",
		ToolName: testkit.CounterName, Text: "wake-up w1 set", Details: details}))
	e.kit.Model.Enqueue(modelserver.Reply{Text: []string{"I will check in an hour."}})
	res, err := e.kit.Activities(e.bus).RunStep(context.Background(), in, 1)
	if err != nil || res.Model == nil {
		t.Fatalf("RunStep: %+v %v", res, err)
	}
	if len(res.Tools) != 1 || res.Tools[0].Wake == nil || res.Tools[0].Wake.ID != "w1" {
		t.Errorf("tool outcomes = %+v, want the wake-up w1", res.Tools)
	}
	if !res.Model.EndsTurn() || res.Model.Recorded {
		t.Errorf("model result = %+v, want a reply that ends the turn, not recorded", res.Model)
	}
}

// TestStepCallSpans: on a traced worker, a Step.Run's calls have the spans
// their own activities would (below the Step.Run's RunActivity span):
// StartActivity:Tool.Execute and RunActivity:Tool.Execute below it, the
// same for Model.Generate, with the SDK's attributes.
func TestStepCallSpans(t *testing.T) {
	t.Parallel()
	const session = "s1"
	e := newEnv(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	icpt, err := tracing.New(tp).Interceptor()
	if err != nil {
		t.Fatal(err)
	}
	var suite testsuite.WorkflowTestSuite
	act := suite.NewTestActivityEnvironment()
	act.SetWorkerOptions(sdkworker.Options{Interceptors: []interceptor.WorkerInterceptor{icpt.(interceptor.WorkerInterceptor)}})
	e.kit.Activities(e.bus).Register(act)
	in := stepSetup(e, session)
	e.kit.Model.Enqueue(modelserver.Reply{Text: []string{"counted"}})
	if _, err := act.ExecuteActivity(workflows.ActivityStepRun, in); err != nil {
		t.Fatalf("Step.Run: %v", err)
	}
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		byName[s.Name()] = s
	}
	step := byName["RunActivity:"+workflows.ActivityStepRun]
	if step == nil {
		t.Fatalf("no Step.Run span among %v", byName)
	}
	for _, name := range []string{workflows.ActivityToolExecute, workflows.ActivityModelGenerate} {
		start, run := byName["StartActivity:"+name], byName["RunActivity:"+name]
		if start == nil || run == nil {
			t.Errorf("no spans StartActivity:%s and RunActivity:%s", name, name)
			continue
		}
		if start.Parent().SpanID() != step.SpanContext().SpanID() || run.Parent().SpanID() != start.SpanContext().SpanID() {
			t.Errorf("%s: StartActivity hangs from %v, RunActivity from %v", name, start.Parent().SpanID(), run.Parent().SpanID())
		}
		attrs := map[string]bool{}
		for _, a := range run.Attributes() {
			attrs[string(a.Key)] = true
		}
		for _, k := range []string{"temporalWorkflowID", "temporalRunID", "temporalActivityID"} {
			if !attrs[k] {
				t.Errorf("RunActivity:%s lacks attribute %s", name, k)
			}
		}
	}
}

// TestStepAbortRecordSaysWhetherModelBegun: the record of an aborted
// Step.Run's call (StepModel set) settles whether an attempt reached the
// step's model call — not merely whether the call's own result was stored
// (a stopped tool may answer rather than fail) — and, when none had, no
// attempt begins it afterwards: every record, and the workflow's charge of
// a stopped call's usage, see one answer.
func TestStepAbortRecordSaysWhetherModelBegun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	acts := e.kit.Activities(e.bus)
	record := func(in agentloop.StepCall) agentloop.ToolOutcome {
		t.Helper()
		rec := in.Tools[0]
		rec.StepModel = in.Model.EntryID
		rec.Synthetic = &agent.ToolResult{IsError: true, Content: "Tool call interrupted: stop."}
		out, err := acts.RunTool(context.Background(), rec)
		if err != nil {
			t.Fatalf("record: %v", err)
		}
		return out
	}

	// s1: the call ran and stored its result; the abort's record comes
	// before any attempt reached the model call, which then never begins.
	s1 := stepSetup(e, "s1")
	if _, err := acts.RunTool(context.Background(), s1.Tools[0]); err != nil {
		t.Fatalf("RunTool: %v", err)
	}
	if out := record(s1); !out.Recorded || out.ModelBegun {
		t.Errorf("record before the model call = %+v, want Recorded, not ModelBegun", out)
	}
	_, err := acts.RunStep(context.Background(), s1, 1)
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != workflows.ErrStopped || !appErr.NonRetryable() {
		t.Errorf("RunStep after the record = %v, want a non-retryable %s", err, workflows.ErrStopped)
	}
	if n := e.kit.Model.Count(); n != 0 {
		t.Errorf("the model was called %d times after the abort's record, want 0", n)
	}
	if out := record(s1); out.ModelBegun {
		t.Errorf("a second record = %+v, want the same answer (not begun)", out)
	}

	// s2: an attempt reaches the model call (and fails there) before the
	// abort's record.
	s2 := stepSetup(e, "s2")
	e.kit.Model.Enqueue(modelserver.Reply{Status: 500, Message: "upstream down"})
	if _, err := acts.RunStep(context.Background(), s2, 1); err == nil {
		t.Fatal("RunStep succeeded, want the model's failure")
	}
	if out := record(s2); !out.Recorded || !out.ModelBegun {
		t.Errorf("record after the model call began = %+v, want Recorded and ModelBegun", out)
	}
	if got := e.kit.Counter.Runs("s1") + e.kit.Counter.Runs("s2"); got != 2 {
		t.Errorf("counter ran %d times, want once per session", got)
	}
}
