package workflows_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// The harness runs SessionWorkflow in the SDK's time-skipping test
// environment against fake activities that record what they receive and
// answer from a per-test script.
//
// Timing: delayed callbacks fire instantly (mock time) while no activity
// runs, and after the same amount of wall time while one does. Tests that
// act during a running activity therefore wait (harness.when) until the fake
// has been entered, and the fake blocks on a gate (or on its cancellation)
// so the activity is certainly still running when the test acts.

// ms is the mock time of a test's first update.
const ms = time.Millisecond

// waitLimit bounds every wait in a fake, so a workflow bug fails the test
// instead of hanging it.
const waitLimit = 10 * time.Second

// endOfTest is the mock time at which tests cancel the workflow; with time
// skipping it fires as soon as every activity has finished. It comes before
// a run that took a turn update continues as new (shortly before the 24 h
// idempotency window ends).
const endOfTest = 20 * time.Hour

type cancelSignal struct {
	ch   chan struct{}
	once sync.Once
}

func (c *cancelSignal) fire() { c.once.Do(func() { close(c.ch) }) }

type harness struct {
	t   *testing.T
	env *testsuite.TestWorkflowEnvironment

	mu        sync.Mutex
	opens     []wire.OpenInput
	models    []agentloop.ModelCall
	tools     []agentloop.ToolCall
	events    []string
	logged    chan struct{} // closed (and replaced) when an event is logged
	active    int
	maxActive int
	cancels   map[string]*cancelSignal
	cancelled []string

	// begins and records are what Turn.Begin and Turn.Record received;
	// stored is the fake session store's turn records by key.
	begins  []wire.BeginTurnInput
	records []wire.RecordTurnInput
	stored  map[string]agentloop.Outcome
	// recordHeartbeats are the heartbeat timeouts Turn.Record ran with.
	recordHeartbeats []time.Duration

	openLeaf string
	// openSettings are the settings the fake Session.Open answers with.
	openSettings agentloop.Settings
	// queues are "<activity> <task queue>" of the model, tool, compaction
	// and record activities, in start order (a tool call's activity as
	// "Tool.Execute run|record <call>").
	queues []string
	// begin, when set, replaces the fake Turn.Begin's answer.
	begin func(ctx context.Context, in wire.BeginTurnInput) (wire.BeginTurnResult, error)
	model func(ctx context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error)
	tool  func(ctx context.Context, call agentloop.ToolCall) (agentloop.ToolOutcome, error)
	// compacts are what Session.Compact received; compactFn answers it
	// (default: a compaction entry under the ID asked for).
	compacts []wire.CompactInput
	// published are the events Feed.Publish put on turns' feeds.
	published []wire.PublishInput
	compactFn func(ctx context.Context, in wire.CompactInput) (workflows.CompactResult, error)
	// steps are what Step.Run received; stepFn answers it (default: each
	// call through the tool fake, then the model call through the model
	// fake, each recorded as those fakes record them).
	steps  []agentloop.StepCall
	stepFn func(ctx context.Context, in agentloop.StepCall) (agentloop.StepResult, error)
	// stops are the turn keys of the notices Feed.Stop published.
	stops []string
}

// harnessWorkerOptions are the worker options every harness starts with
// (a test that sets its own keeps the deadlock bound: see withOptions).
var harnessWorkerOptions = worker.Options{DeadlockDetectionTimeout: time.Minute}

// withOptions sets worker options on the harness's environment, keeping
// the harness's deadlock bound unless o sets one.
func (h *harness) withOptions(o worker.Options) {
	if o.DeadlockDetectionTimeout == 0 {
		o.DeadlockDetectionTimeout = harnessWorkerOptions.DeadlockDetectionTimeout
	}
	h.env.SetWorkerOptions(o)
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	return newHarnessWith(t, nil)
}

// newHarnessWith is newHarness with the test suite adjusted by tune (a
// metrics handler) before the environment is built.
func newHarnessWith(t *testing.T, tune func(*testsuite.WorkflowTestSuite)) *harness {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4}))))
	if tune != nil {
		tune(&suite)
	}
	env := suite.NewTestWorkflowEnvironment()
	// Wall-clock bounds, not workflow time: generous, because under -race on
	// a loaded 2-core machine (the unit phase beside the end-to-end phase) a
	// workflow task that copies large payloads can take seconds, and the
	// SDK's default deadlock detector (1 s) would call that a deadlock.
	env.SetTestTimeout(2 * time.Minute)
	env.SetWorkerOptions(harnessWorkerOptions)

	h := &harness{t: t, env: env, cancels: map[string]*cancelSignal{}, openLeaf: "leaf-0", stored: map[string]agentloop.Outcome{}}
	h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		return reply(call), nil
	}
	h.tool = func(_ context.Context, call agentloop.ToolCall) (agentloop.ToolOutcome, error) {
		return okTool(call), nil
	}
	env.RegisterWorkflowWithOptions(workflows.SessionWorkflow, workflow.RegisterOptions{Name: workflows.SessionWorkflowType})
	env.RegisterActivityWithOptions(h.open, activity.RegisterOptions{Name: workflows.ActivitySessionOpen})
	env.RegisterActivityWithOptions(h.generate, activity.RegisterOptions{Name: workflows.ActivityModelGenerate})
	env.RegisterActivityWithOptions(h.execute, activity.RegisterOptions{Name: workflows.ActivityToolExecute})
	env.RegisterActivityWithOptions(h.step, activity.RegisterOptions{Name: workflows.ActivityStepRun})
	env.RegisterActivityWithOptions(h.stop, activity.RegisterOptions{Name: workflows.ActivityFeedStop})
	env.RegisterActivityWithOptions(h.beginTurn, activity.RegisterOptions{Name: workflows.ActivityTurnBegin})
	env.RegisterActivityWithOptions(h.recordTurn, activity.RegisterOptions{Name: workflows.ActivityTurnRecord})
	env.RegisterActivityWithOptions(h.compact, activity.RegisterOptions{Name: workflows.ActivityCompact})
	env.RegisterActivityWithOptions(h.publish, activity.RegisterOptions{Name: workflows.ActivityFeedPublish})
	env.SetOnActivityCanceledListener(func(info *activity.Info) {
		h.mu.Lock()
		h.cancelled = append(h.cancelled, info.ActivityType.Name)
		sig := h.cancelSignalLocked(info.ActivityID)
		h.mu.Unlock()
		sig.fire()
	})
	return h
}

// ---- fake activities ----

func (h *harness) open(_ context.Context, in wire.OpenInput) (wire.OpenResult, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.opens = append(h.opens, in)
	return wire.OpenResult{Leaf: h.openLeaf, Settings: h.openSettings}, nil
}

// beginTurn is the fake Turn.Begin: it answers keys in h.stored.
func (h *harness) beginTurn(ctx context.Context, in wire.BeginTurnInput) (wire.BeginTurnResult, error) {
	h.mu.Lock()
	h.begins = append(h.begins, in)
	fn := h.begin
	out, found := h.stored[in.Key]
	h.mu.Unlock()
	if fn != nil {
		return fn(ctx, in)
	}
	if found && in.Key != "" {
		return wire.BeginTurnResult{Outcome: &out}, nil
	}
	return wire.BeginTurnResult{}, nil
}

// recordTurn is the fake Turn.Record: the first record of a key wins.
func (h *harness) recordTurn(ctx context.Context, in wire.RecordTurnInput) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, in)
	h.queues = append(h.queues, workflows.ActivityTurnRecord+" "+activity.GetInfo(ctx).TaskQueue)
	h.recordHeartbeats = append(h.recordHeartbeats, activity.GetInfo(ctx).HeartbeatTimeout)
	if _, ok := h.stored[in.Key]; !ok {
		h.stored[in.Key] = in.Outcome
	}
	return nil
}

func (h *harness) generate(ctx context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
	h.mu.Lock()
	h.models = append(h.models, call)
	h.queues = append(h.queues, workflows.ActivityModelGenerate+" "+activity.GetInfo(ctx).TaskQueue)
	h.logLocked(fmt.Sprintf("model %s/%d", call.Turn, call.Step))
	fn := h.model
	h.mu.Unlock()
	return fn(ctx, call)
}

// publish is the fake Feed.Publish.
func (h *harness) publish(_ context.Context, in wire.PublishInput) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.published = append(h.published, in)
	h.logLocked(fmt.Sprintf("publish %s %s", in.Event.Type, in.Event.ID))
	return nil
}

func (h *harness) publishedEvents() []wire.PublishInput {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]wire.PublishInput(nil), h.published...)
}

// compact is the fake Session.Compact.
func (h *harness) compact(ctx context.Context, in wire.CompactInput) (workflows.CompactResult, error) {
	h.mu.Lock()
	h.compacts = append(h.compacts, in)
	h.queues = append(h.queues, workflows.ActivityCompact+" "+activity.GetInfo(ctx).TaskQueue)
	h.logLocked(fmt.Sprintf("compact %s force=%v", in.Reason, in.Force))
	fn := h.compactFn
	h.mu.Unlock()
	if fn != nil {
		return fn(ctx, in)
	}
	return workflows.CompactResult{EntryID: in.EntryID, FirstKept: "kept", TokensBefore: 1000, TokensAfter: 100}, nil
}

func (h *harness) compactCalls() []wire.CompactInput {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]wire.CompactInput(nil), h.compacts...)
}

func (h *harness) execute(ctx context.Context, call agentloop.ToolCall) (agentloop.ToolOutcome, error) {
	kind := "run"
	if call.Synthetic != nil {
		kind = "record"
	}
	h.mu.Lock()
	h.tools = append(h.tools, call)
	h.queues = append(h.queues, fmt.Sprintf("%s %s %s %s", workflows.ActivityToolExecute, kind, call.Call.ID, activity.GetInfo(ctx).TaskQueue))
	h.logLocked(fmt.Sprintf("start %s %s", kind, call.Call.ID))
	h.active++
	if h.active > h.maxActive {
		h.maxActive = h.active
	}
	fn := h.tool
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.active--
		h.logLocked(fmt.Sprintf("end %s %s", kind, call.Call.ID))
		h.mu.Unlock()
	}()
	return fn(ctx, call)
}

// step is the fake Step.Run.
func (h *harness) step(ctx context.Context, in agentloop.StepCall) (agentloop.StepResult, error) {
	h.mu.Lock()
	h.steps = append(h.steps, in)
	h.queues = append(h.queues, fmt.Sprintf("%s %s", workflows.ActivityStepRun, activity.GetInfo(ctx).TaskQueue))
	h.logLocked(fmt.Sprintf("step %s/%d", in.Model.Turn, in.Model.Step))
	fn := h.stepFn
	h.mu.Unlock()
	if fn != nil {
		return fn(ctx, in)
	}
	return h.stepThrough(ctx, in)
}

// stepThrough runs a Step.Run's calls through the tool fake, one after
// another, then its model call through the model fake.
func (h *harness) stepThrough(ctx context.Context, in agentloop.StepCall) (agentloop.StepResult, error) {
	var res agentloop.StepResult
	for _, c := range in.Tools {
		h.mu.Lock()
		h.tools = append(h.tools, c)
		h.logLocked(fmt.Sprintf("start run %s", c.Call.ID))
		fn := h.tool
		h.mu.Unlock()
		out, err := fn(ctx, c)
		if err != nil {
			return agentloop.StepResult{}, err
		}
		res.Tools = append(res.Tools, out)
	}
	h.mu.Lock()
	if slices.Contains(h.stops, workflows.StepYieldKey(in.Model.Turn, in.Model.Step)) {
		// Told to leave its model call to the workflow.
		h.mu.Unlock()
		return res, nil
	}
	h.models = append(h.models, in.Model)
	h.logLocked(fmt.Sprintf("model %s/%d", in.Model.Turn, in.Model.Step))
	fn := h.model
	h.mu.Unlock()
	m, err := fn(ctx, in.Model)
	if err != nil {
		return agentloop.StepResult{}, err
	}
	res.Model = &m
	return res, nil
}

// stop is the fake Feed.Stop.
func (h *harness) stop(_ context.Context, in wire.TurnStopInput) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stops = append(h.stops, in.Turn)
	h.logLocked("stop " + in.Turn)
	return nil
}

func (h *harness) stepCalls() []agentloop.StepCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]agentloop.StepCall(nil), h.steps...)
}

func (h *harness) cancelSignalLocked(activityID string) *cancelSignal {
	sig, ok := h.cancels[activityID]
	if !ok {
		sig = &cancelSignal{ch: make(chan struct{})}
		h.cancels[activityID] = sig
	}
	return sig
}

// blockUntilCancelled is the body of a fake that runs until the workflow
// cancels its activity (the test environment reports the cancellation through
// the listener; a real worker would see it through a heartbeat).
func (h *harness) blockUntilCancelled(ctx context.Context) error {
	h.mu.Lock()
	sig := h.cancelSignalLocked(activity.GetInfo(ctx).ActivityID)
	h.mu.Unlock()
	select {
	case <-sig.ch:
		return errors.New("cancelled")
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(waitLimit):
		return temporal.NewNonRetryableApplicationError("the activity was never cancelled", "test", nil)
	}
}

// waitGate blocks a fake until the test opens the gate.
func waitGate(gate <-chan struct{}) error {
	select {
	case <-gate:
		return nil
	case <-time.After(waitLimit):
		return temporal.NewNonRetryableApplicationError("the gate was never opened", "test", nil)
	}
}

// logLocked appends e to the event log and wakes the fakes waiting for an
// event (h.mu held).
func (h *harness) logLocked(e string) {
	h.events = append(h.events, e)
	if h.logged != nil {
		close(h.logged)
		h.logged = nil
	}
}

// waitEvent blocks a fake until the event log holds e.
func (h *harness) waitEvent(e string) error {
	limit := time.NewTimer(waitLimit)
	defer limit.Stop()
	for {
		h.mu.Lock()
		seen := slices.Contains(h.events, e)
		if h.logged == nil {
			h.logged = make(chan struct{})
		}
		logged := h.logged
		h.mu.Unlock()
		if seen {
			return nil
		}
		select {
		case <-logged:
		case <-limit.C:
			return temporal.NewNonRetryableApplicationError("never saw event "+e, "test", nil)
		}
	}
}

// ---- recorded data (copies, safe to read after the run) ----

func (h *harness) modelCalls() []agentloop.ModelCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]agentloop.ModelCall(nil), h.models...)
}

func (h *harness) toolCalls() []agentloop.ToolCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]agentloop.ToolCall(nil), h.tools...)
}

func (h *harness) toolCallsFor(id string) []agentloop.ToolCall {
	var out []agentloop.ToolCall
	for _, c := range h.toolCalls() {
		if c.Call.ID == id {
			out = append(out, c)
		}
	}
	return out
}

func (h *harness) queueLog() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.queues...)
}

func (h *harness) eventLog() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.events...)
}

func (h *harness) beginCalls() []wire.BeginTurnInput {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]wire.BeginTurnInput(nil), h.begins...)
}

func (h *harness) recordCalls() []wire.RecordTurnInput {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]wire.RecordTurnInput(nil), h.records...)
}

// userEntry is the user entry Turn.Begin stored for a step-1 model call:
// the one the call's Leaf names.
func (h *harness) userEntry(c agentloop.ModelCall) (transcript.Entry, bool) {
	for _, b := range h.beginCalls() {
		if b.Entry.ID == c.Leaf {
			return b.Entry, true
		}
	}
	return transcript.Entry{}, false
}

func (h *harness) openCalls() []wire.OpenInput {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]wire.OpenInput(nil), h.opens...)
}

func (h *harness) maxConcurrentTools() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.maxActive
}

func (h *harness) cancelledTypes() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.cancelled...)
}

// prompts lists the prompt of every step-1 model call (the user entry
// Turn.Begin stored below which it runs), in call order: the order turns ran in.
func (h *harness) prompts() []string {
	var out []string
	for _, c := range h.modelCalls() {
		if e, ok := h.userEntry(c); ok && c.Step == 1 && e.Message != nil {
			out = append(out, e.Message.Text)
		}
	}
	return out
}

// ---- driving the workflow ----

// update is the observed fate of one update.
type update struct {
	mu        sync.Mutex
	accepted  bool
	rejectErr error
	completed bool
	value     any
	err       error
	then      func()
}

// finished reports whether the update was rejected or completed.
func (u *update) finished() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.rejectErr != nil || u.completed
}

func (u *update) isAccepted() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.accepted
}

func (u *update) snapshot() (accepted bool, rejectErr error, completed bool, value any, err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.accepted, u.rejectErr, u.completed, u.value, u.err
}

// send delivers an update at mock time `at`.
func (h *harness) send(at time.Duration, name, id string, arg any) *update {
	u := &update{}
	h.env.RegisterDelayedCallback(func() { h.sendNow(u, name, id, arg) }, at)
	return u
}

func (h *harness) sendNow(u *update, name, id string, arg any) {
	h.env.UpdateWorkflow(name, id, &testsuite.TestUpdateCallback{
		OnAccept: func() {
			u.mu.Lock()
			u.accepted = true
			u.mu.Unlock()
		},
		OnReject: func(err error) {
			u.mu.Lock()
			u.rejectErr = err
			u.mu.Unlock()
		},
		OnComplete: func(v any, err error) {
			u.mu.Lock()
			u.completed, u.value, u.err = true, v, err
			then := u.then
			u.mu.Unlock()
			if then != nil {
				then()
			}
		},
	}, arg)
}

func (h *harness) turn(at time.Duration, id, text string) *update {
	return h.send(at, workflows.UpdateTurn, id, workflows.TurnRequest{Prompt: agent.Prompt{Text: text}, Source: "test"})
}

// at runs fn at mock time `at` (on the test environment's main loop).
func (h *harness) at(at time.Duration, fn func()) { h.env.RegisterDelayedCallback(fn, at) }

// when runs fn on the test environment's main loop as soon as cond holds,
// checking every millisecond of mock time (wall time while an activity
// runs). Acting on what the fakes have seen, rather than at a fixed time,
// keeps tests deterministic however slow the machine is.
func (h *harness) when(cond func() bool, fn func()) {
	const maxPolls = 20000
	var poll func(n int)
	poll = func(n int) {
		if cond() {
			fn()
			return
		}
		if n >= maxPolls {
			h.t.Errorf("a when() condition never held")
			return
		}
		h.env.RegisterDelayedCallback(func() { poll(n + 1) }, time.Millisecond)
	}
	h.env.RegisterDelayedCallback(func() { poll(0) }, time.Millisecond)
}

// modelStarted reports whether the model fake has been entered for a step.
func (h *harness) modelStarted(turn string, step int) bool {
	for _, c := range h.modelCalls() {
		if c.Turn == turn && c.Step == step {
			return true
		}
	}
	return false
}

// toolStarted reports whether the tool fake has been entered to run (not
// record) a call.
func (h *harness) toolStarted(id string) bool {
	for _, c := range h.toolCallsFor(id) {
		if c.Synthetic == nil {
			return true
		}
	}
	return false
}

// state queries the workflow; call it from a callback.
func (h *harness) state() workflows.SessionView {
	h.t.Helper()
	v, err := h.env.QueryWorkflow(workflows.QueryState)
	if err != nil {
		h.t.Errorf("query %s: %v", workflows.QueryState, err)
		return workflows.SessionView{}
	}
	var view workflows.SessionView
	if err := v.Get(&view); err != nil {
		h.t.Errorf("decode %s: %v", workflows.QueryState, err)
	}
	return view
}

// run starts the workflow, cancelling it at endOfTest.
func (h *harness) run(in workflows.SessionInput) {
	h.t.Helper()
	h.runUntil(in, endOfTest)
}

// runUntil starts the workflow, cancelling it at mock time end.
func (h *harness) runUntil(in workflows.SessionInput, end time.Duration) {
	h.t.Helper()
	h.at(end, h.env.CancelWorkflow)
	h.env.ExecuteWorkflow(workflows.SessionWorkflowType, in)
	if !h.env.IsWorkflowCompleted() {
		h.t.Fatal("the workflow did not complete")
	}
}

// requireCancelled asserts the run ended by the test's cancellation (and
// not by an error or a continue-as-new).
func (h *harness) requireCancelled() {
	h.t.Helper()
	if err := h.env.GetWorkflowError(); !temporal.IsCanceledError(err) {
		h.t.Fatalf("workflow error = %v, want the test's cancellation", err)
	}
}

// ---- assertions on updates ----

func (h *harness) outcome(u *update) agentloop.Outcome {
	h.t.Helper()
	accepted, rejectErr, completed, value, err := u.snapshot()
	if rejectErr != nil {
		h.t.Fatalf("turn rejected: %v", rejectErr)
	}
	if !accepted || !completed {
		h.t.Fatalf("turn accepted=%v completed=%v, want both", accepted, completed)
	}
	if err != nil {
		h.t.Fatalf("turn returned error %v", err)
	}
	var out agentloop.Outcome
	convert(h.t, value, &out)
	return out
}

func (h *harness) abortResult(u *update) workflows.AbortResult {
	h.t.Helper()
	accepted, rejectErr, completed, value, err := u.snapshot()
	if rejectErr != nil || !accepted || !completed || err != nil {
		h.t.Fatalf("abort: accepted=%v completed=%v reject=%v err=%v", accepted, completed, rejectErr, err)
	}
	var out workflows.AbortResult
	convert(h.t, value, &out)
	return out
}

func (h *harness) requireOK(u *update, what string) {
	h.t.Helper()
	accepted, rejectErr, completed, _, err := u.snapshot()
	if rejectErr != nil || !accepted || !completed || err != nil {
		h.t.Fatalf("%s: accepted=%v completed=%v reject=%v err=%v", what, accepted, completed, rejectErr, err)
	}
}

// requireRejected asserts the validator refused the update with an
// application error of the given type.
func (h *harness) requireRejected(u *update, errType string) *temporal.ApplicationError {
	h.t.Helper()
	accepted, rejectErr, completed, _, _ := u.snapshot()
	if accepted || completed {
		h.t.Fatalf("update accepted=%v completed=%v, want rejected with %s", accepted, completed, errType)
	}
	var app *temporal.ApplicationError
	if !errors.As(rejectErr, &app) {
		h.t.Fatalf("rejection = %v (%T), want an application error of type %s", rejectErr, rejectErr, errType)
	}
	if app.Type() != errType {
		h.t.Fatalf("rejection type = %q (%v), want %q", app.Type(), app, errType)
	}
	return app
}

// convert copies an update's result (the handler's Go value in the test
// environment) into out.
func convert(t *testing.T, v, out any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal %T: %v", v, err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("unmarshal into %T: %v", out, err)
	}
}

// ---- scripted replies ----

// reply answers a model call the way the real activity does: the reply gets
// the entry ID the workflow chose.
func reply(call agentloop.ModelCall, calls ...agentloop.Call) agentloop.ModelResult {
	stop := transcript.StopEnd
	if len(calls) > 0 {
		stop = transcript.StopToolUse
	}
	return agentloop.ModelResult{EntryID: call.EntryID, StopReason: stop, Calls: calls, Marker: "m-" + call.EntryID}
}

func okTool(call agentloop.ToolCall) agentloop.ToolOutcome {
	return agentloop.ToolOutcome{IsError: call.Synthetic != nil && call.Synthetic.IsError, Marker: "m-" + call.ResultEntryID}
}

func known(id, name string) agentloop.Call {
	return agentloop.Call{ID: id, Name: name, Known: true, ArgsPreview: `{"x":1}`}
}

// ---- small assertion helpers ----

func equal[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func equalSlice[T comparable](t *testing.T, what string, got, want []T) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s = %v, want %v", what, got, want)
		return
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("%s = %v, want %v", what, got, want)
			return
		}
	}
}

func contains(t *testing.T, what, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s = %q, want it to contain %q", what, got, w)
		}
	}
}

// requireOutcome checks the fields of an outcome that every test cares about.
func requireOutcome(t *testing.T, got agentloop.Outcome, turn, status, code string, retryable bool) {
	t.Helper()
	equal(t, "outcome.Turn", got.Turn, turn)
	equal(t, "outcome.Status", got.Status, status)
	equal(t, "outcome.Code", got.Code, code)
	equal(t, "outcome.Retryable", got.Retryable, retryable)
}
