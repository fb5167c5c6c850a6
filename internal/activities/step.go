package activities

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// Step is the Step.Run activity (RunStep): a tool step's calls, then the
// turn's next model call. It heartbeats with the calls' last progress
// report, as Tool.Execute does, and stops at once on its turn's stop
// notice (tools and model stream alike).
func (a *Activities) Step(ctx context.Context, in agentloop.StepCall) (agentloop.StepResult, error) {
	var progress progressSlot
	ctx = withProgressSlot(ctx, &progress)
	stop := a.heartbeatWith(ctx, func() (any, bool) {
		p := progress.Load()
		if p == nil {
			return nil, false
		}
		return *p, true
	})
	defer stop()
	var yield <-chan struct{}
	if a.Feed != nil && in.Model.Session != "" && in.Model.Turn != "" {
		// Watched from the start: a notice that comes while the calls run
		// is seen once they are done.
		var release func()
		yield, release = a.Feed.WatchStop(in.Model.Session, workflows.StepYieldKey(in.Model.Turn, in.Model.Step))
		defer release()
	}
	ctx, done := stoppable(ctx, a.Feed, in.Model.Session, in.Model.Turn)
	defer done()
	res, err := a.runStep(ctx, in, int(activity.GetInfo(ctx).Attempt), yield)
	return res, stoppedError(ctx, err)
}

// StartedKey is where the session store keeps which attempt of a Step.Run
// started a non-idempotent call (SaveReply: the first write wins).
func StartedKey(call agentloop.ToolCall) string { return "started/" + call.ResultEntryID }

// RunStep runs the calls of in (at once, or one after another when
// Sequential), each as RunTool does — tool_started, its progress and
// tool_ended on the live feed, its result stored under its ResultEntryID —
// and then the model call as RunModel does, in attempt attempt. Exactly
// once lives in the store:
//
//   - a call whose result is stored is not run again: a retried attempt
//     reads it (RunTool);
//   - a non-idempotent call is marked started (StartedKey) before it runs;
//     an attempt that finds it started by another attempt and not
//     finished records its outcome as unknown, as the workflow does for a
//     lost Tool.Execute, and never runs it;
//   - an idempotent call runs again in a retried attempt, at most as many
//     times as its tool's attempts; the last failure is its result.
//
// The model is not called once in.Deadline has passed (the turn's time
// budget): the result then has no Model, and the workflow ends the turn
// as it would before any model call. Any error fails the attempt: the
// activity's retry policy (the model's) runs it again, with the calls'
// results read from the store.
func (a *Activities) RunStep(ctx context.Context, in agentloop.StepCall, attempt int) (agentloop.StepResult, error) {
	return a.runStep(ctx, in, attempt, nil)
}

// runStep is RunStep that, once the calls are done, does not call the
// model when yield is closed: the workflow took a steering message while
// the calls ran (workflows.StepYieldKey), which the model call must read —
// the workflow makes that call itself, the message added.
func (a *Activities) runStep(ctx context.Context, in agentloop.StepCall, attempt int, yield <-chan struct{}) (agentloop.StepResult, error) {
	outs, err := a.stepTools(ctx, in, attempt)
	if err != nil {
		return agentloop.StepResult{}, err
	}
	if err := ctx.Err(); err != nil {
		// Stopped while the calls ran (a stopped tool may answer rather
		// than fail): the model call is not begun.
		return agentloop.StepResult{}, err
	}
	if slot := progressSlotOf(ctx); slot != nil {
		slot.Store(nil) // the model call's heartbeats carry no tool's progress
	}
	res := agentloop.StepResult{Tools: outs}
	skip := !in.Deadline.IsZero() && !time.Now().Before(in.Deadline)
	if !skip {
		select {
		case <-yield:
			skip = true
		default:
		}
	}
	if skip {
		// A reply an earlier attempt stored (and perhaps recorded as the
		// turn's end, published already) is the step's: it is returned, not
		// left for the workflow to make another model call.
		if prev, err := a.Store.Get(ctx, in.Model.Session, in.Model.EntryID); err == nil && prev.Message != nil {
			skip = false
		} else if err != nil && !errors.Is(err, store.ErrNotFound) {
			return agentloop.StepResult{}, storeError(err)
		}
	}
	if skip {
		// Earlier attempts may have begun the model call: the workflow's
		// attempts are numbered after theirs.
		if first, err := a.Store.Reply(ctx, in.Model.Session, modelStartedKey(in.Model)); err == nil {
			if f, err := strconv.Atoi(first); err == nil && f >= 1 && f < attempt {
				res.ModelAttempts = attempt - f
			}
		} else if !errors.Is(err, store.ErrNotFound) {
			return agentloop.StepResult{}, storeError(err)
		}
		return res, nil
	}
	// The model call's attempts are numbered from the first attempt that
	// reached it, as Model.Generate's are from its own first: the live
	// feed sees attempt 1 begin the step, whatever failed before.
	first, err := a.firstModelAttempt(ctx, in.Model, attempt)
	if err != nil {
		return agentloop.StepResult{}, err
	}
	next := in.Model
	next.MaxAttempts = max(next.MaxAttempts-(first-1), 1)
	next.Activated = append([]string(nil), next.Activated...)
	for _, o := range outs {
		next.Activated = addActivated(next.Activated, o.Activated)
		if o.Wake != nil || o.Unwake != "" {
			// A wake-up the workflow must apply (arm, or cancel) before
			// the turn is seen to end: were the model call to record the
			// turn, its answer would be out (a client asking for the
			// session's wake-ups would not see this one) before the
			// workflow hears of it, and a worker lost meanwhile would leave
			// the ended turn's wake-up to the retry. The workflow records
			// the turn itself (Turn.Record), once it applied the wake-up,
			// as after Tool.Execute and Model.Generate.
			next.End = nil
		}
	}
	// The model call keeps its own bound (retry.modelTimeout), as
	// Model.Generate's start-to-close timeout bounds it: the activity's
	// timeout also holds the calls' time.
	mctx, bound := ctx, time.Duration(0)
	if def, err := a.Definitions.Load(ctx); err == nil && def.Config.Retry.ModelTimeout > 0 {
		var cancel context.CancelFunc
		bound = time.Duration(def.Config.Retry.ModelTimeout)
		mctx, cancel = context.WithTimeout(ctx, bound)
		defer cancel()
	}
	sctx, endSpans := callSpans(mctx, workflows.ActivityModelGenerate, "")
	took := time.Now()
	m, stored, err := a.runModel(sctx, next, attempt-first+1)
	endSpans(err)
	if o := stepObserverOf(ctx); o != nil {
		o.StepModel(next, time.Since(took), stored, m, err)
	}
	if err != nil {
		if ctx.Err() == nil && mctx.Err() != nil {
			return agentloop.StepResult{}, temporal.NewApplicationError(
				fmt.Sprintf("the model call took longer than retry.modelTimeout (%s); it is tried again", bound), "model_timeout")
		}
		return agentloop.StepResult{}, err
	}
	res.Model, res.ModelAttempts = &m, attempt-first+1
	return res, nil
}

// stepTools runs the calls of a Step.Run attempt (stepTool): at once, or
// one after another when sequential (or one). Any error fails the attempt.
func (a *Activities) stepTools(ctx context.Context, in agentloop.StepCall, attempt int) ([]agentloop.ToolOutcome, error) {
	outs := make([]agentloop.ToolOutcome, len(in.Tools))
	errs := make([]error, len(in.Tools))
	if in.Sequential || len(in.Tools) == 1 {
		for i, c := range in.Tools {
			if outs[i], errs[i] = a.stepTool(ctx, c, attempt); errs[i] != nil {
				break
			}
		}
	} else {
		var wg sync.WaitGroup
		for i, c := range in.Tools {
			wg.Add(1)
			go func() {
				defer wg.Done()
				outs[i], errs[i] = a.stepTool(ctx, c, attempt)
			}()
		}
		wg.Wait()
	}
	if err := errors.Join(errs...); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, firstError(errs)
	}
	return outs, nil
}

// modelStartedKey is where the session store keeps the first Step.Run
// attempt that reached the model call (SaveReply: the first write wins).
func modelStartedKey(call agentloop.ModelCall) string { return "model-started/" + call.EntryID }

// claimStepModel settles, for an aborted Step.Run's records, whether its
// model call began: the first write of modelStartedKey wins (SaveReply), an
// attempt's number when an attempt reached the call first, else
// stoppedMark, after which no attempt begins it (firstModelAttempt). Every
// record of the step reads the same answer.
// No entry ID (not such a record): nothing to claim.
func (a *Activities) claimStepModel(ctx context.Context, session, entryID string) (bool, error) {
	if entryID == "" {
		return false, nil
	}
	key := modelStartedKey(agentloop.ModelCall{EntryID: entryID})
	if err := a.Store.SaveReply(ctx, session, key, stoppedMark); err != nil {
		return false, storeError(err)
	}
	got, err := a.Store.Reply(ctx, session, key)
	if err != nil {
		return false, storeError(err)
	}
	return got != stoppedMark, nil
}

// stoppedMark is modelStartedKey's value when an abort's record claimed
// the model call before any attempt reached it.
const stoppedMark = "stopped"

// firstModelAttempt records attempt as the first to reach the model call
// unless one did before, and returns the first.
func (a *Activities) firstModelAttempt(ctx context.Context, call agentloop.ModelCall, attempt int) (int, error) {
	key := modelStartedKey(call)
	if err := a.Store.SaveReply(ctx, call.Session, key, strconv.Itoa(attempt)); err != nil {
		return 0, storeError(err)
	}
	got, err := a.Store.Reply(ctx, call.Session, key)
	if err != nil {
		return 0, storeError(err)
	}
	if got == stoppedMark {
		// The turn was aborted and its records claimed the call first.
		return 0, temporal.NewNonRetryableApplicationError("stopped: the turn was aborted before the step's model call", workflows.ErrStopped, nil)
	}
	first, err := strconv.Atoi(got)
	if err != nil || first < 1 || first > attempt {
		first = attempt
	}
	return first, nil
}

// stepTool runs one call of a Step.Run attempt at most once (see RunStep).
func (a *Activities) stepTool(ctx context.Context, call agentloop.ToolCall, attempt int) (agentloop.ToolOutcome, error) {
	if prev, err := a.Store.Get(ctx, call.Session, call.ResultEntryID); err == nil && prev.Message != nil {
		return a.RunTool(ctx, call) // its stored result
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		return agentloop.ToolOutcome{}, storeError(err)
	}
	attempts := 1
	if call.Call.Idempotent {
		attempts = call.Call.MaxAttempts
		if attempts <= 0 {
			attempts = defaultToolAttempts
		}
	}
	if !call.Call.Idempotent {
		mine := fmt.Sprintf("attempt %d", attempt)
		if err := a.Store.SaveReply(ctx, call.Session, StartedKey(call), mine); err != nil {
			return agentloop.ToolOutcome{}, storeError(err)
		}
		got, err := a.Store.Reply(ctx, call.Session, StartedKey(call))
		if err != nil {
			return agentloop.ToolOutcome{}, storeError(err)
		}
		if got != mine {
			// Another attempt started it and stored no result: it may have
			// run. Never run again; its outcome is unknown.
			lost := workflows.LostToolResult(call.Call, attempts,
				fmt.Errorf("%s of its step started it and stopped before its result was stored", got))
			return a.recordResult(ctx, call, lost)
		}
	} else if attempt > attempts {
		lost := workflows.LostToolResult(call.Call, attempts,
			errors.New("the workers running it stopped or failed before its result was stored"))
		return a.recordResult(ctx, call, lost)
	}
	// The call's own bound, as Tool.Execute's start-to-close timeout is:
	// the tool's timeout and a margin.
	timeout := call.Call.Timeout
	if timeout <= 0 {
		timeout = defaultToolTimeout
	}
	timeout += toolTimeoutMargin
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := a.runTool(cctx, call)
	if err != nil && ctx.Err() == nil && cctx.Err() != nil {
		err = fmt.Errorf("the call ran past its timeout of %s", timeout)
		if !call.Call.Idempotent {
			// It may have had its effect: never run again.
			return a.recordResult(ctx, call, workflows.LostToolResult(call.Call, attempts, err))
		}
	}
	if err != nil && ctx.Err() == nil && call.Call.Idempotent && attempt >= attempts {
		// Its last attempt: the failure is its result, as when
		// Tool.Execute's retries run out.
		return a.recordResult(ctx, call, workflows.LostToolResult(call.Call, attempts, err))
	}
	return out, err
}

// runTool runs call (RunTool) as Tool.Execute would: in its spans, and
// told to the StepObserver — unless its stored result was read (another
// attempt ran it), which Tool.Execute's interceptor does not count either.
func (a *Activities) runTool(ctx context.Context, call agentloop.ToolCall) (agentloop.ToolOutcome, error) {
	sctx, endSpans := callSpans(ctx, workflows.ActivityToolExecute, call.Call.ID)
	out, err := a.RunTool(sctx, call)
	endSpans(err)
	if o := stepObserverOf(ctx); o != nil && !out.Recorded {
		o.StepTool(call, out, err)
	}
	return out, err
}

// recordResult records res as call's result (a result stored meanwhile
// stays the call's), as Tool.Execute records one the workflow decided: in
// its spans, not counted as a run of the call.
func (a *Activities) recordResult(ctx context.Context, call agentloop.ToolCall, res agent.ToolResult) (agentloop.ToolOutcome, error) {
	call.Synthetic = &res
	sctx, endSpans := callSpans(ctx, workflows.ActivityToolExecute, call.Call.ID)
	out, err := a.RunTool(sctx, call)
	endSpans(err)
	return out, err
}

// defaultToolAttempts, defaultToolTimeout and toolTimeoutMargin are the
// workflow's defaults for a tool call: attempts of an idempotent one
// (tools.<name>.maxAttempts unset), its timeout (tools.<name>.timeout
// unset), and the margin Tool.Execute's start-to-close timeout adds.
const (
	defaultToolAttempts = 3
	defaultToolTimeout  = 10 * time.Minute
	toolTimeoutMargin   = 30 * time.Second
)

func firstError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func addActivated(have, add []string) []string {
	for _, n := range add {
		found := false
		for _, h := range have {
			if h == n {
				found = true
				break
			}
		}
		if !found {
			have = append(have, n)
		}
	}
	return have
}
