package workflows

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// changeStepRun marks runs that may run a tool step's calls and the next
// model call as one Step.Run activity (a tool step costs one action, not
// two). It is asked once per workflow chain, just before the first turn's
// Turn.Begin (so its marker is recorded with that turn's markers, one
// action together), and carried in the snapshot (snapshot.StepRun), so
// later runs ask nothing.
const changeStepRun = "step-run"

// askStepRun settles whether this chain may use Step.Run (changeStepRun).
func (s *session) askStepRun(ctx workflow.Context) {
	if !s.snap.StepRun && workflow.GetVersion(ctx, changeStepRun, workflow.DefaultVersion, 1) >= 1 {
		s.snap.StepRun = true
	}
}

var _ agentloop.Stepper = (*loopRuntime)(nil)

// StepYieldKey is the turn key of the notice (on the live feed's stop
// board, Feed.Stop) that tells the Step.Run running turn's model step step
// not to make its model call: a steering message came while its calls ran,
// and the model call must read it. The workflow then makes that call
// itself (Model.Generate).
func StepYieldKey(turn string, step int) string { return fmt.Sprintf("%s#steer-%d", turn, step) }

// stepAttempts says the model call of a turn's step that a Step.Run left
// to the loop numbers its attempts after base.
type stepAttempts struct {
	turn string
	step int
	base int
}

// stepFlight is the Step.Run in flight: the turn and the model step it
// runs, and whether it was told to leave its model call to the workflow.
type stepFlight struct {
	turn    string
	step    int
	yielded bool
}

// yieldStep tells the running Step.Run, once, not to make its model call
// (StepYieldKey): a steering message was just taken. Best effort: a lost
// notice, or one that comes once the model call has begun, leaves the
// message to the model call after that one (or, when that one ended the
// turn, to the next turn). The local activity adds at most one action, to
// the workflow task that takes the message.
func (s *session) yieldStep(ctx workflow.Context) {
	f := s.stepRun
	if f == nil || f.yielded {
		return
	}
	f.yielded = true
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
		Summary:             "steer · step " + fmt.Sprint(f.step),
	})
	in := wire.TurnStopInput{Session: s.in.Session, Turn: StepYieldKey(f.turn, f.step)}
	if err := workflow.ExecuteLocalActivity(lctx, ActivityFeedStop, in).Get(lctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("step not told of the steering message; the model call after the next reads it", "turn", f.turn, "error", err)
	}
}

// CanStep says whether a batch (of plain calls: agentloop.PlainCall) and
// the next model call can run as one Step.Run activity: the chain may
// (changeStepRun), the model workers can (Settings.StepRun: they register
// Step.Run), calls and model both run on the session's own task queue
// (where Step.Run then runs — the tools where the tools group is), no
// steering waits to be read before the next model call, nothing stopped
// the turn, and a sequential batch is one call (later calls of a
// sequential batch see the wake-ups of the earlier ones, decided here).
func (r *loopRuntime) CanStep(calls []agentloop.ToolCall, sequential bool) bool {
	set := r.settings()
	switch {
	case !r.s.snap.StepRun, !set.StepRun, set.ToolTaskQueue != "", set.ModelTaskQueue != "",
		r.aborted(), r.hookStop != "", len(r.s.steering) > 0, len(calls) == 0, sequential && len(calls) > 1:
		return false
	}
	return true
}

// Step runs a batch and the next model call as one Step.Run activity. The
// activity runs each call at most once through the session store (a
// retried attempt reads a stored result, and a non-idempotent call that an
// earlier attempt started but did not finish is recorded as unknown), then
// the model call. Its retry policy is the model's, its start-to-close
// timeout the calls' plus the model's.
//
// While it runs, the turn may end (the model call records it, as a model
// step does): a turn update arriving while the run rolls over is refused
// as for a model step (session.stepping). A steering message is still
// taken — the turn's tools may be running — and the activity is told to
// leave its model call to the workflow (yieldStep), which then makes it
// with the message, as after any batch.
//
// When the activity fails (not stopped), each call's result is recorded
// as the two-activity path records a lost call's (a stored result stays
// the call's), and the model call runs as Model.Generate: its fallback
// chain, compaction and failure as after any batch.
func (r *loopRuntime) Step(call agentloop.StepCall) agentloop.StepOutcome {
	set := r.settings()
	wakes, nextWake := r.s.wakeIDs(), r.s.nextWakeID()
	toolTimeout := time.Duration(0)
	for i := range call.Tools {
		c := &call.Tools[i]
		c.PendingWakes, c.NextWakeID = wakes, nextWake
		// Parallel calls: the longest bounds them (a sequential batch is
		// one call).
		toolTimeout = max(toolTimeout, orDur(c.Call.Timeout, defaultToolTimeout))
	}
	attempts := orInt(set.ModelAttempts, defaultModelAttempts)
	next := call.Model
	next.MaxAttempts = attempts
	next.CheckContext = true
	if next.End != nil {
		end := *next.End
		end.Started = r.started
		next.End = &end
	}
	call.Model = next
	ctx := workflow.WithActivityOptions(r.ctx, workflow.ActivityOptions{
		TaskQueue:           "", // the session's own: CanStep
		StartToCloseTimeout: toolTimeout + toolTimeoutMargin + orDur(set.ModelTimeout, defaultModelTimeout),
		HeartbeatTimeout:    orDur(set.Heartbeat, defaultHeartbeat),
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    time.Minute,
			MaximumAttempts:    int32(attempts),
		},
		Summary: stepSummary(call.Tools, next.Step),
	})
	if next.End != nil {
		r.s.stepping = true
	}
	r.s.stepRun = &stepFlight{turn: next.Turn, step: next.Step}
	var res agentloop.StepResult
	err := workflow.ExecuteActivity(ctx, ActivityStepRun, call).Get(ctx, &res)
	r.s.stepping, r.s.stepRun = false, nil
	if err == nil && len(res.Tools) == len(call.Tools) {
		r.s.applyWakes(res.Tools)
		out := agentloop.StepOutcome{Tools: res.Tools}
		if m := res.Model; m != nil && m.Compact == nil && m.EntryID != "" {
			// Taken in as Model would: its usage, whether it recorded the turn.
			r.recorded = m.Recorded
			if m.Usage != nil {
				r.spent.Add(*m.Usage)
			}
			out.Model = m
		} else {
			// The loop makes the model call: its attempts follow those the
			// activity may have begun on the live feed.
			r.attemptBase = stepAttempts{turn: next.Turn, step: next.Step, base: res.ModelAttempts}
		}
		return out
	}
	if err == nil {
		err = fmt.Errorf("Step.Run answered %d outcomes for %d calls", len(res.Tools), len(call.Tools))
	}
	return r.stepFailed(call, err)
}

// stepFailed settles a Step.Run activity that failed: each call gets the
// result a lost Tool.Execute would (a stored result stays the call's:
// Tool.Execute records nothing over it); then, unless the turn was
// stopped, the model call runs as Model.Generate, or fails as the
// activity's model call did.
func (r *loopRuntime) stepFailed(call agentloop.StepCall, err error) agentloop.StepOutcome {
	if r.aborted() {
		outs := r.recordAll(call.Tools, func(ctx workflow.Context, c agentloop.ToolCall) agentloop.ToolOutcome {
			c.StepModel = call.Model.EntryID
			return r.record(ctx, c, abortedResult(r.s.abortReason))
		})
		// The activity had reached the model call the abort stopped (the
		// records settle it through the store, first write wins: an
		// attempt's mark, or theirs, after which no attempt begins the
		// call; ModelBegun): that call is
		// the turn's last step, as a stopped Model.Generate's would be:
		// the usage it reported on the live feed when stopped
		// (feed.KindUsage) is read for that step and charged to the
		// turn's principal. Calls stopped while they ran (a stopped tool
		// may answer rather than fail, its result stored) leave it unbegun.
		begun := len(outs) > 0
		for _, o := range outs {
			begun = begun && o.Recorded && o.ModelBegun
		}
		// A wake-up (or its cancellation) a call stored before the abort
		// is the session's, as on the two-activity path: the transcript
		// says it is set.
		r.s.applyWakes(outs)
		return agentloop.StepOutcome{Tools: outs, ToolsErr: errAborted, ModelBegun: begun}
	}
	outs := r.recordAll(call.Tools, func(ctx workflow.Context, c agentloop.ToolCall) agentloop.ToolOutcome {
		attempts := 1
		if c.Call.Idempotent {
			attempts = orInt(c.Call.MaxAttempts, defaultToolAttempts)
		}
		return r.recordKept(ctx, c, lostResult(c.Call, attempts, err))
	})
	r.s.applyWakes(outs)
	out := agentloop.StepOutcome{Tools: outs}
	next := call.Model
	next.MaxAttempts, next.CheckContext = 0, false
	// Every attempt may have begun the model call: the workflow's attempts
	// are numbered after them on the live feed (a fallback model's are
	// anyway).
	next.AttemptBase = orInt(r.settings().ModelAttempts, defaultModelAttempts)
	var app *temporal.ApplicationError
	switch {
	case errors.As(err, &app) && app.Type() == wire.ErrModelFallback:
		// The primary model handed the call on: the chain goes on.
		next.Fallback++
		res, merr := r.Model(next)
		out.Model, out.ModelErr = &res, merr
	case errors.As(err, &app) && modelCode(app.Type()):
		// The model call failed as Model.Generate's would have (its
		// retries spent, or not retryable).
		out.ModelErr = modelFailure(err, orInt(r.settings().ModelAttempts, defaultModelAttempts))
	default:
		// Lost or timed out, a store that kept failing, or the context
		// overflowed (compacted first): the model call runs as after any
		// batch (a reply stored under its entry ID is read, not asked
		// for again).
		res, merr := r.Model(next)
		out.Model, out.ModelErr = &res, merr
	}
	return out
}

// modelCode reports whether an activity error type is one only a model
// call fails with (not the store's, nor a lost worker's).
func modelCode(typ string) bool {
	switch typ {
	case agent.CodeModel, agent.CodeModelConfig, agent.CodeDefinition, agent.CodeHook:
		return true
	}
	return false
}

// recordAll records a result for each call, at once (an aborted turn's
// calls as the two-activity path records them), on the root context: the
// records are made even when the turn is cancelled.
func (r *loopRuntime) recordAll(calls []agentloop.ToolCall, rec func(workflow.Context, agentloop.ToolCall) agentloop.ToolOutcome) []agentloop.ToolOutcome {
	outs := make([]agentloop.ToolOutcome, len(calls))
	done := 0
	for i, c := range calls {
		workflow.Go(r.root, func(ctx workflow.Context) {
			outs[i] = rec(ctx, c)
			done++
		})
	}
	_ = workflow.Await(r.root, func() bool { return done == len(calls) })
	return outs
}

// recordKept records a result the workflow decided for a call, as record
// does, but gives the call's stored result when it has one (its own
// outcome: a Step.Run attempt ran it).
func (r *loopRuntime) recordKept(ctx workflow.Context, c agentloop.ToolCall, res agent.ToolResult) agentloop.ToolOutcome {
	c.Synthetic = &res
	ctx, _ = workflow.NewDisconnectedContext(ctx)
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: recordResultTimeout,
		HeartbeatTimeout:    recordHeartbeat,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second},
		Summary:             "record · " + c.Call.Name + " result",
	})
	var out agentloop.ToolOutcome
	if err := workflow.ExecuteActivity(ctx, ActivityToolExecute, c).Get(ctx, &out); err != nil {
		workflow.GetLogger(ctx).Error("recording a tool result failed", "call", c.Call.ID, "error", err)
		out.IsError = res.IsError
	}
	return out
}

// stepSummary is the Web UI's line for a Step.Run activity.
func stepSummary(calls []agentloop.ToolCall, step int) string {
	names := make([]string, len(calls))
	for i, c := range calls {
		names[i] = c.Call.Name
	}
	s := "step · " + strings.Join(names, ", ")
	if len(calls) == 1 {
		s = "step · " + strings.TrimPrefix(toolSummary(calls[0].Call), "tool · ")
	}
	return s + fmt.Sprintf(" · then model · turn step %d", step)
}

// LostToolResult is the result a tool call gets when its activity failed
// without one (attempts: what the call had): a non-idempotent tool is
// never re-run, so its outcome is unknown. Step.Run records it for a call
// an earlier attempt started and did not finish.
func LostToolResult(c agentloop.Call, attempts int, err error) agent.ToolResult {
	return lostResult(c, attempts, err)
}
