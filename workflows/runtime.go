package workflows

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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

// Defaults for activity options when the definition has not said otherwise.
const (
	defaultModelTimeout   = 10 * time.Minute
	defaultModelAttempts  = 6
	defaultHeartbeat      = 20 * time.Second
	defaultToolTimeout    = 10 * time.Minute
	defaultToolAttempts   = 3
	toolTimeoutMargin     = 30 * time.Second
	recordResultTimeout   = time.Minute
	summaryArgsPreviewLen = 60
)

// recordHeartbeat is the heartbeat timeout of the activities that store
// what the workflow decided (Turn.Record, a tool result it recorded). One
// that runs longer than half of it heartbeats, so a worker that dies in one
// is noticed within seconds (the session's next turn waits for a turn's
// record), while a slow store still has all of recordResultTimeout.
const recordHeartbeat = 5 * time.Second

// loopRuntime carries out agent loop steps as activities.
type loopRuntime struct {
	s    *session
	ctx  workflow.Context // cancelled on abort
	root workflow.Context // survives an abort, for recording results
	// children counts the turn's delegations; spent sums its tokens so
	// far, sub-agents included (a delegation's share of the budget);
	// reserved is what its running delegations may still spend, toStart
	// the delegations of the step's parallel batch not yet started.
	children int
	spent    agent.Usage
	reserved int64
	toStart  int
	// hookSteps counts the turn's hook steps (their activity IDs);
	// hookStop is the reason a hook gave to end the turn after the
	// running batch (its later calls are then not run).
	hookSteps int
	hookStop  string
	// started is when the turn began; recorded says its last model step
	// ended it and recorded its outcome (agentloop.ModelCall.End), so the
	// session runs no Turn.Record for it.
	started  time.Time
	recorded bool
	// attemptBase numbers the attempts of a model call a Step.Run left to
	// the loop after those it may have begun.
	attemptBase stepAttempts
}

var _ agentloop.Runtime = (*loopRuntime)(nil)

func (r *loopRuntime) NewID() string                { return r.s.nextID() }
func (r *loopRuntime) Now() time.Time               { return workflow.Now(r.ctx) }
func (r *loopRuntime) aborted() bool                { return r.ctx.Err() != nil }
func (r *loopRuntime) settings() agentloop.Settings { return r.s.snap.Loop.Settings }

func (r *loopRuntime) Steering() []string {
	out := r.s.steering
	r.s.steering = nil
	return out
}

func (r *loopRuntime) Model(call agentloop.ModelCall) (agentloop.ModelResult, error) {
	if r.aborted() {
		return agentloop.ModelResult{}, &agent.Failure{Details: "aborted", Code: agent.CodeAborted}
	}
	if b := r.attemptBase; b.step == call.Step && b.turn == call.Turn && call.AttemptBase == 0 {
		call.AttemptBase = b.base
	}
	if call.End != nil {
		end := *call.End
		end.Started = r.started
		call.End = &end
		// Until this step's result is heard, its turn may be over: a reply
		// without tool calls records the turn and publishes its answer
		// before the workflow learns of it (validateTurn).
		r.s.ending = true
		defer func() { r.s.ending = false }()
	}
	res, err := r.generateWithin(call)
	r.recorded = err == nil && res.Recorded
	if res.Usage != nil {
		r.spent.Add(*res.Usage)
	}
	return res, err
}

// maxFallbacks bounds the models one step may be handed to.
const maxFallbacks = 8

// generate runs one Model.Generate activity, and again for the next model of
// the chain each time the activity hands the step on (ErrModelFallback).
func (r *loopRuntime) generate(call agentloop.ModelCall) (agentloop.ModelResult, error) {
	for {
		res, err := r.generateOnce(call)
		var app *temporal.ApplicationError
		if err == nil || r.aborted() || !errors.As(err, &app) || app.Type() != wire.ErrModelFallback || call.Fallback >= maxFallbacks {
			return res, r.modelFailure(err)
		}
		call.Fallback++
	}
}

// modelFailure turns a model activity's error (nil: none) into the turn's.
func (r *loopRuntime) modelFailure(err error) error {
	if err == nil {
		return nil
	}
	if r.aborted() {
		return &agent.Failure{Details: "aborted", Code: agent.CodeAborted}
	}
	return modelFailure(err, orInt(r.settings().ModelAttempts, defaultModelAttempts))
}

// generateOnce runs one Model.Generate activity with its retries.
func (r *loopRuntime) generateOnce(call agentloop.ModelCall) (agentloop.ModelResult, error) {
	set := r.settings()
	attempts := orInt(set.ModelAttempts, defaultModelAttempts)
	call.MaxAttempts = attempts
	summary := fmt.Sprintf("model · turn step %d", call.Step)
	if call.Fallback > 0 {
		summary += fmt.Sprintf(" · fallback %d", call.Fallback)
	}
	ctx := workflow.WithActivityOptions(r.ctx, workflow.ActivityOptions{
		TaskQueue:           set.ModelTaskQueue, // "": the session's own
		StartToCloseTimeout: orDur(set.ModelTimeout, defaultModelTimeout),
		HeartbeatTimeout:    orDur(set.Heartbeat, defaultHeartbeat),
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    time.Minute,
			MaximumAttempts:    int32(attempts),
		},
		Summary: summary,
	})
	var res agentloop.ModelResult
	err := workflow.ExecuteActivity(ctx, ActivityModelGenerate, call).Get(ctx, &res)
	return res, err
}

// modelFailure turns a failed model activity into the turn's failure.
func modelFailure(err error, attempts int) *agent.Failure {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		// The activity's error type is already a contract code (model_error,
		// model_config, definition_error, …): the failed event carries it.
		if app.Type() == wire.ErrModelFallback {
			// The chain was cut short (maxFallbacks): the model failed.
			return &agent.Failure{Details: app.Message(), Retryable: true, Code: agent.CodeModel}
		}
		if app.NonRetryable() {
			return &agent.Failure{Details: app.Message(), Retryable: false, Code: app.Type()}
		}
		return &agent.Failure{
			Details:   fmt.Sprintf("the model call failed %d times; last error: %s", attempts, app.Message()),
			Retryable: true,
			Code:      app.Type(),
		}
	}
	var timeout *temporal.TimeoutError
	if errors.As(err, &timeout) {
		return &agent.Failure{Details: "the model call timed out: " + timeout.Error(), Retryable: true}
	}
	return &agent.Failure{Details: "the model call failed: " + err.Error(), Retryable: true}
}

func (r *loopRuntime) Tools(calls []agentloop.ToolCall, sequential bool) ([]agentloop.ToolOutcome, error) {
	outs := make([]agentloop.ToolOutcome, len(calls))
	errs := make([]error, len(calls))
	r.toStart = 0
	r.hookStop = ""
	if sequential {
		for i, c := range calls {
			outs[i], errs[i] = r.tool(r.ctx, c)
		}
	} else {
		for _, c := range calls {
			if c.Call.Delegate != nil && c.Synthetic == nil && c.Call.Refused == "" && c.Call.Reused == "" {
				r.toStart++
			}
		}
		done := 0
		for i, c := range calls {
			workflow.Go(r.ctx, func(ctx workflow.Context) {
				outs[i], errs[i] = r.tool(ctx, c)
				done++
			})
		}
		// The root context: the coroutines finish (recording aborted results)
		// even when the turn is cancelled.
		_ = workflow.Await(r.root, func() bool { return done == len(calls) })
	}
	r.s.applyWakes(outs)
	for _, err := range errs {
		if err != nil {
			return outs, err
		}
	}
	return outs, nil
}

// tool runs one call: waits for approval when required, executes it as an
// activity and, when it cannot produce a result, records an honest one.
// screen settles what a call is before it can wait or run: aborted, refused
// or reused by the model step (recorded with the refusal), or decided by a
// before_tool hook (which may also end the turn: hookStop). A non-nil early
// outcome is the call's, recorded; err is then errAborted or nil.
func (r *loopRuntime) screen(ctx workflow.Context, c *agentloop.ToolCall) (hookStop string, early *agentloop.ToolOutcome, err error) {
	aborted := func() (string, *agentloop.ToolOutcome, error) {
		out := r.record(ctx, *c, abortedResult(r.s.abortReason))
		return "", &out, errAborted
	}
	if c.Synthetic == nil && r.aborted() {
		return aborted()
	}
	if c.Synthetic == nil && c.Call.Refused != "" {
		// Refused by the model activity (a call ID used twice in one
		// reply): recorded, not run.
		c.Synthetic = &agent.ToolResult{IsError: true, Content: c.Call.Refused}
	}
	if c.Synthetic == nil && c.Call.Reused != "" {
		// Its ID an earlier step of the turn used: recorded with the
		// refusal, not run and not put up for approval.
		c.Synthetic = &agent.ToolResult{IsError: true, Content: c.Call.Reused}
	}
	if c.Synthetic == nil && (r.hookStop != "" || c.Call.BeforeHook != "") {
		if r.hookStop != "" {
			c.Synthetic = &agent.ToolResult{IsError: true, Content: "This call was not run: the turn was ended: " + r.hookStop}
		} else if hookStop = r.beforeTool(ctx, c); hookStop != "" {
			r.hookStop = hookStop
		}
		if c.Synthetic == nil && r.aborted() {
			if c.Call.Delegate != nil {
				r.notStarting()
			}
			return aborted()
		}
		if c.Synthetic != nil && c.Call.Delegate != nil {
			r.notStarting() // refused by a hook: no sub-agent starts
		}
	}
	return hookStop, nil, nil
}

func (r *loopRuntime) tool(ctx workflow.Context, c agentloop.ToolCall) (agentloop.ToolOutcome, error) {
	hookStop, early, err := r.screen(ctx, &c)
	if early != nil {
		return *early, err
	}
	if c.Synthetic == nil && c.Call.Ask {
		res, err := r.askUser(ctx, c)
		if err != nil {
			return r.record(ctx, c, abortedResult(r.s.abortReason)), errAborted
		}
		c.Synthetic = &res
	}
	if c.Synthetic == nil && c.Call.Delegate != nil {
		if c.Call.RequiresApproval {
			// tools.delegate.requiresApproval: decided like any gated call,
			// before the sub-agent starts.
			ok, denial, err := r.approve(ctx, &c)
			if err != nil {
				r.notStarting()
				return r.record(ctx, c, abortedResult(r.s.abortReason)), errAborted
			}
			if !ok {
				r.notStarting()
				return r.record(ctx, c, agent.ToolResult{IsError: true, Content: denial}), nil
			}
		}
		return r.delegated(ctx, c)
	}
	if c.Synthetic == nil && c.Call.RequiresApproval {
		ok, denial, err := r.approve(ctx, &c)
		if err != nil {
			return r.record(ctx, c, abortedResult(r.s.abortReason)), errAborted
		}
		if !ok {
			c.Synthetic = &agent.ToolResult{IsError: true, Content: denial}
		}
	}
	if c.Synthetic != nil {
		out := r.record(ctx, c, *c.Synthetic)
		out.Stop = hookStop
		return out, nil
	}
	set := r.settings()
	attempts := 1
	if c.Call.Idempotent {
		attempts = orInt(c.Call.MaxAttempts, defaultToolAttempts)
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           set.ToolTaskQueue, // "": the session's own
		StartToCloseTimeout: orDur(c.Call.Timeout, defaultToolTimeout) + toolTimeoutMargin,
		HeartbeatTimeout:    orDur(set.Heartbeat, defaultHeartbeat),
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    30 * time.Second,
			MaximumAttempts:    int32(attempts),
		},
		Summary: toolSummary(c.Call),
	})
	c.PendingWakes, c.NextWakeID = r.s.wakeIDs(), r.s.nextWakeID()
	var out agentloop.ToolOutcome
	err = workflow.ExecuteActivity(actx, ActivityToolExecute, c).Get(actx, &out)
	if err == nil {
		if c.Call.AfterHook != "" {
			r.afterTool(ctx, c, &out)
			if out.Stop != "" && r.hookStop == "" {
				r.hookStop = out.Stop
			}
		}
		if c.Call.Sequential {
			// Later calls of a sequential batch see this one's wake-up.
			r.s.applyWakes([]agentloop.ToolOutcome{out})
			out.Wake, out.Unwake = nil, ""
		}
		return out, nil
	}
	if r.aborted() {
		return r.record(ctx, c, abortedResult(r.s.abortReason)), errAborted
	}
	return r.record(ctx, c, lostResult(c.Call, attempts, err)), nil
}

// approve waits durably for an UpdateApprove decision (or the call's
// deadline); a call not approved gets the result the model reads.
//
// An approval with edits (ApproveRequest.Args) makes the edited arguments
// the call's: what it runs with (c.Args), what the tool activity checks
// the approval against (c.Call.ArgsHash), and an ApprovalEdit the result
// tells the model about.
func (r *loopRuntime) approve(ctx workflow.Context, c *agentloop.ToolCall) (bool, string, error) {
	view := PendingApproval{Turn: c.Turn, Call: c.Call.ID, Tool: c.Call.Name, Args: c.Call.Args,
		ArgsHash: c.Call.ArgsHash, DefinitionHash: c.Call.DefinitionHash}
	if len(view.Args) == 0 && c.Call.ArgsPreview != "" {
		// Deterministic: a string's JSON encoding (workflowcheck flags the
		// encoder's type cache, not the output).
		view.Args, _ = json.Marshal(c.Call.ArgsPreview) //workflowcheck:ignore
	}
	a := &approval{view: view, noEdit: noEditReason(c.Call)}
	r.s.approvals = append(r.s.approvals, a)
	r.s.setStatus(ctx, StatusWaiting)
	if err := r.awaitDecision(ctx, *c, a); err != nil {
		return false, "", err
	}
	if !r.s.waitingApproval() {
		r.s.setStatus(ctx, StatusIdle)
	}
	if a.approved && len(a.edited) > 0 && workflow.GetVersion(ctx, changeApprovalEdits, workflow.DefaultVersion, 1) >= 1 {
		from := c.Call.Args
		if len(c.Args) > 0 {
			from = c.Args
		}
		c.Edit = &agentloop.ApprovalEdit{By: a.by, From: from}
		c.Args, c.Call.Args, c.Call.ArgsHash = a.edited, a.edited, argsHash(a.edited)
		c.Call.ArgsPreview = argsPreview(string(a.edited))
	}
	if a.timedOut {
		return false, "This tool call was not run: it needs a human's approval and " + a.reason +
			". Tell the user what you wanted to do and why, or go on without it.", nil
	}
	msg := "A human denied this tool call."
	if a.reason != "" {
		msg += " Reason: " + a.reason
	}
	return a.approved, msg, nil
}

// changeApprovalEdits marks runs that apply an approver's edited
// arguments to the call (ApproveRequest.Args). The marker is recorded only
// where an approval carried edits, which no earlier history has.
const changeApprovalEdits = "approval-edits"

// noEditReason says why a call's arguments cannot be edited at approval
// ("" they can): a delegation was resolved from the model's arguments.
func noEditReason(c agentloop.Call) string {
	if c.Delegate != nil {
		return "a delegation is decided as the model asked for it; approve or deny it"
	}
	return ""
}

// argsHash is the digest an approval binds a call's arguments to (as the
// activities compute it: sha256 over the arguments, "{}" when empty).
func argsHash(args json.RawMessage) string {
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	sum := sha256.Sum256(args)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// awaitDecision announces the wait on the turn's stream, waits for a
// decision until the call's deadline (a timer the Web UI shows with the
// tool's name) and announces the outcome; at the deadline the call is
// denied with a reason the model reads.
func (r *loopRuntime) awaitDecision(ctx workflow.Context, c agentloop.ToolCall, a *approval) error {
	timeout := c.Call.ApprovalTimeout
	if timeout <= 0 {
		timeout = defaultApprovalTimeout
	}
	a.view.Approvers = c.Call.Approvers
	a.view.Deadline = workflow.Now(ctx).Add(timeout).UTC()
	v := a.view
	r.publish(ctx, c, agent.ApprovalRequested(v.Call, v.Tool, v.Args, v.ArgsHash, v.DefinitionHash, v.Approvers, v.Deadline))
	decided, err := workflow.AwaitWithOptions(ctx, workflow.AwaitOptions{
		Timeout:      timeout,
		TimerOptions: workflow.TimerOptions{Summary: fmt.Sprintf("approval · %s · %s (denied after %s)", v.Tool, v.Call, timeout)},
	}, func() bool { return a.decided })
	if err != nil {
		return err
	}
	timedOut := !decided
	if timedOut {
		a.decided, a.approved, a.timedOut = true, false, true
		a.reason = fmt.Sprintf("no one approved or denied it within %s (approvals.timeout)", timeout)
	}
	r.publish(ctx, c, agent.ApprovalResolved(v.Call, a.approved, a.by, a.reason, timedOut))
	return nil
}

// askUser asks the person the call's question (question_asked on the
// stream), waits for their answer until the deadline and makes it the
// call's result; without an answer in time the model is told so.
func (r *loopRuntime) askUser(ctx workflow.Context, c agentloop.ToolCall) (agent.ToolResult, error) {
	var args struct {
		Question string `json:"question"`
	}
	// Deterministic: decoding recorded bytes.
	_ = json.Unmarshal(c.Call.Args, &args) //workflowcheck:ignore
	if strings.TrimSpace(args.Question) == "" {
		return agent.ToolResult{IsError: true, Content: `ask_user needs {"question": "…"}: the question to ask.`}, nil
	}
	if r.s.depth == 0 {
		// One question at a time: the person sees one, and what they send
		// answers that one (never another asked beside it). A sub-agent
		// asks at once: its delegating session, where the person is,
		// holds its questions one at a time (holdQuestion).
		if err := workflow.Await(ctx, func() bool { return !r.s.asking() }); err != nil {
			return agent.ToolResult{}, err
		}
	}
	timeout := c.Call.ApprovalTimeout
	if timeout <= 0 {
		timeout = defaultApprovalTimeout
	}
	q := &question{view: PendingQuestion{Turn: c.Turn, Call: c.Call.ID, Question: args.Question,
		Deadline: workflow.Now(ctx).Add(timeout).UTC()}}
	r.s.questions = append(r.s.questions, q)
	r.s.setStatus(ctx, StatusAsking)
	r.publish(ctx, c, agent.QuestionAsked(q.view.Call, q.view.Question, q.view.Deadline))
	answered, err := workflow.AwaitWithOptions(ctx, workflow.AwaitOptions{
		Timeout:      timeout,
		TimerOptions: workflow.TimerOptions{Summary: fmt.Sprintf("question · %s (unanswered after %s)", c.Call.ID, timeout)},
	}, func() bool { return q.answered })
	if err != nil {
		return agent.ToolResult{}, err
	}
	if !answered {
		q.answered = true
	}
	r.publish(ctx, c, agent.QuestionAnswered(q.view.Call, q.by, !answered))
	q.closed = true
	if !r.s.waitingApproval() {
		r.s.setStatus(ctx, StatusIdle)
	}
	if !answered {
		return agent.ToolResult{IsError: true, Content: fmt.Sprintf("No answer came within %s (approvals.timeout); go on without it, "+
			"or say what you need and stop.", timeout)}, nil
	}
	return agent.ToolResult{Content: q.text}, nil
}

// publish puts an event the workflow decided on the turn's live feed
// through a local activity (one per workflow task on Temporal Cloud's
// bill). Best effort: the decision itself lives in the workflow, and a
// stream that misses the event still gets the tool's result.
func (r *loopRuntime) publish(ctx workflow.Context, c agentloop.ToolCall, ev agent.Event) {
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
		Summary:             ev.Type + " · " + c.Call.Name,
	})
	in := wire.PublishInput{Session: c.Session, Turn: c.Turn, Step: c.Step, Event: ev}
	if err := workflow.ExecuteLocalActivity(lctx, ActivityFeedPublish, in).Get(lctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("publishing an approval event failed", "call", c.Call.ID, "event", ev.Type, "error", err)
	}
	if isWaitEvent(ev) {
		// A sub-agent's wait is decided on the session that delegated.
		r.s.tellParent(ctx, subAgentWait{Event: &ev})
	}
}

// record stores a result the workflow decided (unknown tool, denial, abort,
// lost worker) through the same activity, so it is appended and published
// like any other.
func (r *loopRuntime) record(ctx workflow.Context, c agentloop.ToolCall, res agent.ToolResult) agentloop.ToolOutcome {
	c.Synthetic = &res
	// Disconnected: an aborted turn still records its results. Blocking
	// calls must use the calling coroutine's own context.
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
	}
	out.IsError = res.IsError
	return out
}

func abortedResult(reason string) agent.ToolResult {
	if reason == "" {
		reason = "the turn was aborted"
	}
	return agent.ToolResult{IsError: true, Content: "Tool call interrupted: " + reason + "."}
}

// lostResult tells the model honestly what happened to a call whose
// activity failed: a non-idempotent tool is never re-run, so its effect is
// unknown.
func lostResult(c agentloop.Call, attempts int, err error) agent.ToolResult {
	if !c.Idempotent {
		return agent.ToolResult{IsError: true, Content: fmt.Sprintf(
			"The outcome of this %s call is unknown: the worker running it stopped or failed mid-call (%s). "+
				"It was not re-run because it may have side effects; check its effect before calling it again.",
			c.Name, rootCause(err))}
	}
	return agent.ToolResult{IsError: true, Content: fmt.Sprintf(
		"The %s call failed %d times: %s", c.Name, attempts, rootCause(err))}
}

func rootCause(err error) string {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err.Error()
		}
		err = next
	}
}

func toolSummary(c agentloop.Call) string {
	s := "tool · " + c.Name
	if p := strings.TrimSpace(c.ArgsPreview); p != "" {
		if len(p) > summaryArgsPreviewLen {
			p = p[:summaryArgsPreviewLen] + "…"
		}
		s += " " + p
	}
	return s
}

func orInt(v, d int) int {
	if v > 0 {
		return v
	}
	return d
}

func orDur(v, d time.Duration) time.Duration {
	if v > 0 {
		return v
	}
	return d
}
