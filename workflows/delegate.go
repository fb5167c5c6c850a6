package workflows

import (
	"encoding/json"
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// DelegateWorkflowType is the registered name of DelegateWorkflow.
const DelegateWorkflowType = "Delegate"

// changeDelegation versions delegate calls, which run as child workflows
// (older builds had no delegate tool).
const changeDelegation = "delegation"

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
}

// DelegateWorkflow runs a sub-agent's one turn (workflow ID "session:" +
// agentloop.DelegateSession of the delegating call) as the pi loop, like
// any session turn, on the store session in.Session, and returns its
// outcome: the
// answer stays in the session store, where the delegating call's record
// reads it. Cancelling the workflow (the delegating turn was aborted)
// aborts the turn, recording what ran.
func DelegateWorkflow(ctx workflow.Context, in DelegateInput) (agentloop.Outcome, error) {
	s := &session{in: SessionInput{Session: in.Session}, root: ctx, depth: in.Depth}
	if err := s.register(ctx); err != nil {
		return agentloop.Outcome{}, err
	}
	s.initStatus(ctx)
	s.version = workflow.GetVersion(ctx, changeTurnRecords, workflow.DefaultVersion, 1)
	s.keys = workflow.GetVersion(ctx, changeTurnKeys, workflow.DefaultVersion, 1)
	s.snap.IDPrefix = randomHex(ctx, 4)
	// The turn's bookkeeping (records, results) survives a cancellation;
	// the cancellation aborts the turn itself.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	if err := s.open(dctx); err != nil {
		return agentloop.Outcome{}, err
	}
	s.snap.Loop.TokenCap = in.TokenCap
	t := &pendingTurn{id: orStr(in.Turn, agentloop.DelegateTurn), req: TurnRequest{Prompt: agent.Prompt{Text: in.Task}, Source: "delegate"}}
	finished := false
	workflow.Go(dctx, func(gctx workflow.Context) {
		_ = workflow.Await(gctx, func() bool { return ctx.Err() != nil && s.running != nil || finished })
		if !finished {
			s.abortReason = "the delegating turn was aborted"
			id := s.running.id
			s.cancelTurn()
			s.stopActivities(gctx, id)
		}
	})
	s.serve(dctx, t, turnsPerRun)
	finished = true
	s.setStatus(dctx, StatusIdle)
	return *t.outcome, nil
}

// delegate runs a delegate call's sub-agent as a child workflow and
// returns the call's result: a reference to the sub-agent's stored answer,
// or an error the model reads (a limit, the sub-agent's failure), and what
// the sub-agent spent. An aborted turn cancels the child and waits for it.
func (r *loopRuntime) delegate(ctx workflow.Context, c agentloop.ToolCall) (agentloop.ToolCall, *agent.Usage, error) {
	d := c.Call.Delegate
	if refused := r.delegationRefused(d); refused != "" {
		c.Synthetic = &agent.ToolResult{IsError: true, Content: refused}
		return c, nil, nil
	}
	r.children++
	child := agentloop.DelegateSession(c.Session, c.Turn, c.Call.ID)
	stored, key := agentloop.DelegateStore(c.Session, c.Turn, c.Call.ID, d.Agent, d.Session)
	shown := struct {
		Agent   string `json:"agent"`
		Task    string `json:"task"`
		Session string `json:"session,omitempty"`
	}{d.Agent, d.Task, d.Session}
	// Deterministic: a struct's JSON encoding.
	args, _ := json.Marshal(shown) //workflowcheck:ignore
	started := agent.ToolStarted(c.Call.ID, c.Call.Name, args)
	r.publish(ctx, c, started)
	queue := d.TaskQueue
	if queue == "" {
		queue = workflow.GetInfo(ctx).TaskQueueName
	}
	opts := workflow.ChildWorkflowOptions{
		WorkflowID:               "session:" + child,
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
	var budget int64
	if total := r.s.snap.Loop.TurnTokens(); total > 0 {
		budget = max(total-r.spent.Tokens(), 1)
	}
	in := DelegateInput{Session: stored, Agent: d.Agent, Task: d.Task, Parent: c.Session, Depth: r.s.depth + 1, TokenCap: budget}
	if key != agentloop.DelegateTurn {
		in.Turn = key
	}
	var out agentloop.Outcome
	err := workflow.ExecuteChildWorkflow(workflow.WithChildOptions(ctx, opts), DelegateWorkflowType, in).Get(ctx, &out)
	switch {
	case r.aborted():
		return c, out.Usage, errAborted
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
	}
	return ""
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
