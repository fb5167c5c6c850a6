package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// DelegateWorkflowType is the registered name of DelegateWorkflow.
const DelegateWorkflowType = "Delegate"

// DelegateInput starts a sub-agent: one turn on a fresh session, the child
// workflow of the delegating turn.
type DelegateInput struct {
	// Session is the sub-agent's session in the store and Turn its turn's
	// key (agentloop.DelegateStore; "" is agentloop.DelegateTurn).
	Session string `json:"session"`
	Turn    string `json:"turn,omitempty"`
	Agent   string `json:"agent"`
	Task    string `json:"task"`
	// Parent is the delegating session, Depth how deep this sub-agent is
	// (1: a child of a top-level session).
	Parent string `json:"parent"`
	Depth  int    `json:"depth"`
	// TokenCap is the sub-agent's share of the delegating turn's token
	// budget (0: none).
	TokenCap int64 `json:"tokenCap,omitempty"`
	// Timeout, when set, bounds the sub-agent's turn (delegation.timeout):
	// at its end the turn is aborted and returns what it spent. The
	// workflow's own timeout is a little longer.
	Timeout time.Duration `json:"timeout,omitempty"`
}

// DelegateWorkflow runs a sub-agent's one turn (workflow ID "session:" +
// agentloop.DelegateSession of the delegating call, or of its named
// sub-session) as the pi loop, like any session turn, on the store session
// in.Session, and returns its outcome: the answer stays in the session
// store, where the delegating call's record reads it. Cancelling the
// workflow (the delegating turn was aborted) aborts the turn, recording
// what ran; so does in.Timeout running out. Its calls that wait for a
// person are decided on the delegating session (subagents.go); a delivery
// sent to it is refused, and every signal is handled before it completes.
func DelegateWorkflow(ctx workflow.Context, in DelegateInput) (agentloop.Outcome, error) {
	s := &session{in: SessionInput{Session: in.Session}, root: ctx, depth: in.Depth}
	if err := s.register(ctx); err != nil {
		return agentloop.Outcome{}, err
	}
	decisions := s.listenDecisions(ctx)
	deliveries := s.refuseDeliveries(ctx)
	s.initStatus(ctx)
	s.snap.IDPrefix = chainPrefix(ctx)
	// The turn's bookkeeping (records, results) survives a cancellation;
	// the cancellation aborts the turn itself.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	if err := s.open(dctx); err != nil {
		return agentloop.Outcome{}, err
	}
	s.snap.Loop.TokenCap = in.TokenCap
	t := &pendingTurn{id: orStr(in.Turn, agentloop.DelegateTurn), req: TurnRequest{Prompt: agent.Prompt{Text: in.Task}, Source: "delegate"}}
	finished, timedOut := false, false
	if in.Timeout > 0 {
		// Its own deadline, ahead of the workflow's timeout: the turn ends
		// with an outcome, so what it spent reaches the delegating turn.
		workflow.Go(dctx, func(gctx workflow.Context) {
			ended, err := workflow.AwaitWithOptions(gctx, workflow.AwaitOptions{Timeout: in.Timeout,
				TimerOptions: workflow.TimerOptions{Summary: "delegation.timeout " + in.Timeout.String()}}, func() bool { return finished })
			timedOut = err == nil && !ended
		})
	}
	workflow.Go(dctx, func(gctx workflow.Context) {
		_ = workflow.Await(gctx, func() bool { return (ctx.Err() != nil || timedOut) && s.running != nil || finished })
		if !finished {
			s.abortReason = "the delegating turn was aborted"
			if ctx.Err() == nil {
				s.abortReason = fmt.Sprintf("the sub-agent ran out of time (delegation.timeout %s)", in.Timeout)
			}
			id := s.running.id
			s.cancelTurn()
			s.stopActivities(gctx, id)
			s.stopSubAgents(gctx)
		}
	})
	s.serve(dctx, t, turnsPerRun)
	finished = true
	s.setStatus(dctx, StatusIdle)
	s.drainSignals(dctx, decisions, deliveries)
	return *t.outcome, nil
}

// delegateTimeoutGrace is how much longer than delegation.timeout a
// sub-agent's workflow may run: the time its own deadline leaves it to
// record its aborted turn and return what it spent.
const delegateTimeoutGrace = 2 * time.Minute

// delegate runs a delegate call's sub-agent as a child workflow and
// returns the call's result: a reference to the sub-agent's stored answer,
// or an error the model reads (a limit, the sub-agent's failure), and what
// the sub-agent spent. An aborted turn cancels the child and waits for it.
//
// A delegation is bounded: its share of the turn's token budget is split
// among the step's parallel delegations (not the whole remainder for
// each), it runs to its own deadline ahead of the workflow's timeout (so
// what it spent comes back), a named sub-session's child has the
// sub-session's workflow ID (one task at a time), and its waits are kept
// for the delegating session.
func (r *loopRuntime) delegate(ctx workflow.Context, c agentloop.ToolCall) (agentloop.ToolCall, *agent.Usage, error) {
	d := c.Call.Delegate
	if refused := r.delegationRefused(d); refused != "" {
		r.notStarting()
		c.Synthetic = &agent.ToolResult{IsError: true, Content: refused}
		return c, nil, nil
	}
	r.children++
	child := agentloop.DelegateSession(c.Session, c.Turn, c.Call.ID)
	stored, key := agentloop.DelegateStore(c.Session, c.Turn, c.Call.ID, d.Agent, d.Session)
	if d.Session != "" {
		// One workflow ID per named sub-session: a second task for it
		// cannot start while one runs, whoever sends it.
		child = stored
	}
	shown := struct {
		Agent   string `json:"agent"`
		Task    string `json:"task"`
		Session string `json:"session,omitempty"`
	}{d.Agent, d.Task, d.Session}
	// Deterministic: a struct's JSON encoding.
	args, _ := json.Marshal(shown) //workflowcheck:ignore
	started := agent.ToolStarted(c.Call.ID, c.Call.Name, args)
	r.publish(ctx, c, started)
	opts := r.childOptions(ctx, c, child)
	budget := r.share()
	r.notStarting()
	in := DelegateInput{Session: stored, Agent: d.Agent, Task: d.Task, Parent: c.Session, Depth: r.s.depth + 1, TokenCap: budget}
	if key != agentloop.DelegateTurn {
		in.Turn = key
	}
	opts.WorkflowExecutionTimeout = d.Timeout + delegateTimeoutGrace
	in.Timeout = d.Timeout
	r.reserved += budget
	defer func() { r.reserved -= budget }()
	r.s.addSubAgent(opts.WorkflowID, &subAgent{call: c.Call.ID, agent: d.Agent, session: stored, childTurn: orStr(in.Turn, agentloop.DelegateTurn),
		turn: c.Turn, step: c.Step})
	defer r.s.subAgentEnded(opts.WorkflowID)
	var out agentloop.Outcome
	fut := workflow.ExecuteChildWorkflow(workflow.WithChildOptions(ctx, opts), DelegateWorkflowType, in)
	err := r.awaitChild(ctx, fut, &out)
	return r.delegateResult(c, stored, out, err)
}

// childOptions are the options of the child workflow of delegate call c
// (workflow ID session:<child>).
func (r *loopRuntime) childOptions(ctx workflow.Context, c agentloop.ToolCall, child string) workflow.ChildWorkflowOptions {
	d := c.Call.Delegate
	queue := d.TaskQueue
	if queue == "" {
		queue = workflow.GetInfo(ctx).TaskQueueName
	}
	opts := workflow.ChildWorkflowOptions{
		WorkflowID:               WorkflowID(child),
		TaskQueue:                queue,
		WorkflowExecutionTimeout: d.Timeout,
		ParentClosePolicy:        enumspb.PARENT_CLOSE_POLICY_REQUEST_CANCEL,
		WaitForCancellation:      true,
		StaticSummary:            fmt.Sprintf("%s: sub-task of %s (call %s)", d.Agent, c.Session, c.Call.ID),
	}
	if r.s.searchable {
		opts.TypedSearchAttributes = SessionAttrs{Agent: queue, Channel: "delegate", Parent: c.Session,
			Principal: r.s.principal(ctx)}.SearchAttributes()
	}
	return opts
}

// delegateResult is delegate call c's result from its child's outcome
// (out, or the error of a child that returned none; stored is the child's
// session), and what the child spent.
func (r *loopRuntime) delegateResult(c agentloop.ToolCall, stored string, out agentloop.Outcome, err error) (agentloop.ToolCall, *agent.Usage, error) {
	d := c.Call.Delegate
	var busy *temporal.ChildWorkflowExecutionAlreadyStartedError
	switch {
	case r.aborted():
		return c, out.Usage, errAborted
	case err != nil && d.Session != "" && errors.As(err, &busy):
		c.Synthetic = &agent.ToolResult{IsError: true, Content: fmt.Sprintf("Not delegated: the %s sub-session %q is busy with another task "+
			"(an earlier one is still running or stopping). Try again later, or use another sub-session name.", d.Agent, d.Session)}
		return c, nil, nil
	case err != nil:
		c.Synthetic = &agent.ToolResult{IsError: true, Content: fmt.Sprintf("The %s sub-agent did not finish: %s", d.Agent, childError(err))}
		return c, out.Usage, nil
	case out.Status != agent.TypeCompleted:
		c.Synthetic = &agent.ToolResult{IsError: true, Content: fmt.Sprintf("The %s sub-agent failed (%s): %s", d.Agent, orStr(out.Code, "error"), out.Details)}
		return c, out.Usage, nil
	}
	c.Answer = &agentloop.AnswerRef{Session: stored, First: out.First, Leaf: out.Leaf}
	c.Synthetic = &agent.ToolResult{Content: "(the sub-agent finished without a text answer)"}
	return c, out.Usage, nil
}

// delegateAbortGrace is how long an aborted turn waits for a cancelled
// sub-agent to stop and record what it ran before it ends without it (a
// sub-agent whose workers are gone records it when one comes back).
const delegateAbortGrace = 10 * time.Second

// awaitChild waits for a sub-agent's outcome, and once the turn is aborted
// at most delegateAbortGrace more: the abort has asked the child to stop
// (a cancellation, and the stop notice of its turn), which it does at once
// when its workers run, and the turn does not wait for a child that
// cannot (errAborted then, without its outcome).
func (r *loopRuntime) awaitChild(ctx workflow.Context, fut workflow.ChildWorkflowFuture, out *agentloop.Outcome) error {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	if err := workflow.Await(dctx, func() bool { return fut.IsReady() || r.aborted() }); err != nil {
		return err
	}
	if !fut.IsReady() {
		_, _ = workflow.AwaitWithOptions(dctx, workflow.AwaitOptions{Timeout: delegateAbortGrace,
			TimerOptions: workflow.TimerOptions{Summary: "aborted · waiting for the sub-agent to stop"}}, fut.IsReady)
	}
	if !fut.IsReady() {
		return errAborted
	}
	return fut.Get(dctx, out)
}

// share is the token budget a delegation may spend (0: the turn has
// none): what the turn has left, less what its running delegations hold,
// split evenly among the step's parallel delegations still to start.
func (r *loopRuntime) share() int64 {
	total := r.s.snap.Loop.TurnTokens()
	if total <= 0 {
		return 0
	}
	left := total - r.spent.Tokens() - r.reserved
	return max(left/int64(max(r.toStart, 1)), 1)
}

// notStarting counts a delegation of the step's parallel batch as no
// longer to start (it started, or it never will).
func (r *loopRuntime) notStarting() {
	if r.toStart > 0 {
		r.toStart--
	}
}

// delegated runs a delegate call and records its result; the turn's
// usage gets what the sub-agent spent.
func (r *loopRuntime) delegated(ctx workflow.Context, c agentloop.ToolCall) (agentloop.ToolOutcome, error) {
	dc, usage, err := r.delegate(ctx, c)
	if usage != nil {
		r.spent.Add(*usage)
	}
	var out agentloop.ToolOutcome
	if err != nil {
		out = r.record(ctx, c, abortedResult(r.s.abortReason))
	} else {
		out = r.record(ctx, dc, *dc.Synthetic)
	}
	out.Usage = usage
	return out, err
}

// delegationRefused says why a delegation may not start (the tree's depth,
// the turn's count of sub-agents, its token budget), or "".
func (r *loopRuntime) delegationRefused(d *agentloop.Delegation) string {
	switch {
	case r.s.depth+1 > d.MaxDepth:
		return fmt.Sprintf("Not delegated: sub-agents may nest at most %d deep (delegation.maxDepth) and this one would be at depth %d. Do the task yourself.", d.MaxDepth, r.s.depth+1)
	case r.children >= d.MaxChildren:
		return fmt.Sprintf("Not delegated: a turn may start at most %d sub-agents (delegation.maxChildren) and this one has. Do the rest yourself or in the next turn.", d.MaxChildren)
	}
	if total := r.s.snap.Loop.TurnTokens(); total > 0 && r.spent.Tokens() >= total {
		return fmt.Sprintf("Not delegated: the turn has spent %d of its %d tokens (limits.turnTokens), sub-agents included.", r.spent.Tokens(), total)
	} else if total > 0 && r.spent.Tokens()+r.reserved >= total {
		return fmt.Sprintf("Not delegated: the turn's %d tokens (limits.turnTokens) are spent or held by its running sub-agents. Wait for their answers.", total)
	}
	return ""
}

// refuseDeliveries answers, in a sub-agent, each delivery sent to it (a
// channel or a client naming its session): it takes only the task it was
// delegated, so the sender's reply says so and its chat is told the turn
// did not run.
func (s *session) refuseDeliveries(ctx workflow.Context) workflow.ReceiveChannel {
	ch := workflow.GetSignalChannel(ctx, SignalDeliver)
	workflow.Go(ctx, func(gctx workflow.Context) {
		for {
			var d Delivery
			if !ch.Receive(gctx, &d) {
				return
			}
			s.refuseSubAgentDelivery(gctx, d)
		}
	})
	return ch
}

// subAgentRefusal is what a delivery to a sub-agent's session is told.
const subAgentRefusal = "this conversation is a sub-agent's session: it takes only the task it was delegated. Write to the conversation that delegated it."

func (s *session) refuseSubAgentDelivery(ctx workflow.Context, d Delivery) {
	workflow.GetLogger(ctx).Warn("a delivery to a sub-agent's session refused", "key", d.Key)
	s.replies++
	defer func() { s.replies-- }()
	if d.Reply != nil && d.Key != "" {
		s.reply(ctx, wire.ReplyInput{Session: s.in.Session, Turn: d.Key, Reply: wire.ReplyTarget(*d.Reply), Outcome: agentloop.Outcome{
			Turn: d.Key, Status: agent.TypeFailed, Code: agent.CodeInvalidCommand, Details: subAgentRefusal}})
	}
	if d.Notify != "" {
		if err := workflow.SignalExternalWorkflow(ctx, d.Notify, "", wire.SignalTurnDone, turnDone{Key: d.Key}).Get(ctx, nil); err != nil {
			workflow.GetLogger(ctx).Warn("chat workflow not told of a refused delivery", "chat", d.Notify, "key", d.Key, "error", err)
		}
	}
}

// drainSignals handles, before a sub-agent completes, the signals still
// queued for it (a signal left unread when a workflow completes is lost):
// deliveries are refused, decisions answered that nothing waits any more;
// and it waits for the handlers still running.
func (s *session) drainSignals(ctx workflow.Context, decisions, deliveries workflow.ReceiveChannel) {
	for {
		var d subAgentDecision
		if !decisions.ReceiveAsync(&d) {
			break
		}
		s.refuseDecision(ctx, d.ID, temporal.NewApplicationErrorWithOptions("the sub-agent has finished: nothing of it waits any more",
			agent.CodeNotFound, temporal.ApplicationErrorOptions{NonRetryable: true}))
	}
	for {
		var d Delivery
		if !deliveries.ReceiveAsync(&d) {
			break
		}
		s.refuseSubAgentDelivery(ctx, d)
	}
	_ = workflow.Await(ctx, func() bool { return s.replies == 0 && s.deciding == 0 })
}

// childError is what the model reads of a child workflow that did not
// return an outcome (timed out, terminated, failed).
func childError(err error) string {
	var timeout *temporal.TimeoutError
	if errors.As(err, &timeout) {
		return "it ran out of time (delegation.timeout)"
	}
	var canceled *temporal.CanceledError
	if errors.As(err, &canceled) {
		return "it was cancelled"
	}
	return rootCause(err)
}

func orStr(v, d string) string {
	if v != "" {
		return v
	}
	return d
}

// principal is the session's owning principal, as its start-time search
// attribute says ("" when unknown).
func (s *session) principal(ctx workflow.Context) string {
	p, _ := workflow.GetTypedSearchAttributes(ctx).GetKeyword(KeyPrincipal)
	return p
}
