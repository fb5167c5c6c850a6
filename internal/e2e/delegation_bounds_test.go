package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/converter"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// delegateInput is the input a sub-agent's workflow was started with.
func delegateInput(t *testing.T, e *env, session, key, call string) workflows.DelegateInput {
	t.Helper()
	id := workflows.WorkflowID(agentloop.DelegateSession(session, key, call))
	it := e.client.GetWorkflowHistory(context.Background(), id, "", false, 0)
	ev, err := it.Next()
	if err != nil {
		t.Fatalf("history of %s: %v", id, err)
	}
	var in workflows.DelegateInput
	if err := converter.GetDefaultDataConverter().FromPayloads(ev.GetWorkflowExecutionStartedEventAttributes().GetInput(), &in); err != nil {
		t.Fatalf("input of %s: %v", id, err)
	}
	return in
}

// Sub-agents started by one reply split what is left of the turn's token
// budget: each gets its share, not the whole remainder (which let N
// children spend N times the budget).
func TestDelegationSplitsTheBudget(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(fastRetries + delegationConfig + "limits:\n  turnTokens: 1000\n")
	e.startWorker()
	usage := &modelserver.Usage{PromptTokens: 70, CompletionTokens: 30}
	e.kit.Model.EnqueueFor("split the work",
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{delegateCall("b1", "self", "part one (BUDGETA)"), delegateCall("b2", "self", "part two (BUDGETB)")}, Usage: usage},
		modelserver.Reply{Text: []string{"both parts done"}, Usage: usage})
	e.kit.Model.EnqueueFor("BUDGETA", modelserver.Reply{Text: []string{"one"}, Usage: usage})
	e.kit.Model.EnqueueFor("BUDGETB", modelserver.Reply{Text: []string{"two"}, Usage: usage})
	const session = "deleg-split"
	evs := collect(t, e.agent, agent.WithIdempotencyKey(context.Background(), "split"), session, "split the work")
	must(t, evs, agent.TypeCompleted)
	a, b := delegateInput(t, e, session, "split", "b1"), delegateInput(t, e, session, "split", "b2")
	if a.TokenCap != 450 || b.TokenCap != 450 {
		t.Errorf("the sub-agents' token caps are %d and %d, want 450 each (the 900 left after the first step, split in two)", a.TokenCap, b.TokenCap)
	}
	if term := evs[len(evs)-1]; term.Usage == nil || term.Usage.Tokens() != 400 {
		t.Errorf("the turn's usage %+v, want 400 tokens (its two steps and both sub-agents)", term.Usage)
	}
}

// A sub-agent that runs out of time (delegation.timeout) ends its turn
// itself, so what it spent reaches the delegating turn's usage and budget;
// the call says it ran out of time.
func TestDelegationTimeoutCountsTheSubAgentsTokens(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(fastRetries + delegationConfig + "  timeout: 3s\n")
	e.kit.Counter.Delay = time.Minute
	e.startWorker()
	e.kit.Model.EnqueueFor("hand off the slow part",
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{delegateCall("t1", "self", "be slow (SLOWTASK)")}, Usage: &modelserver.Usage{PromptTokens: 10, CompletionTokens: 10}},
		modelserver.Reply{Text: []string{"it was too slow"}, Usage: &modelserver.Usage{PromptTokens: 10, CompletionTokens: 10}})
	e.kit.Model.EnqueueFor("SLOWTASK", modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "s1", Name: testkit.CounterName, Args: `{}`}},
		Usage: &modelserver.Usage{PromptTokens: 300, CompletionTokens: 200}})
	const session = "deleg-timeout"
	evs := collect(t, e.agent, agent.WithIdempotencyKey(context.Background(), "slow"), session, "hand off the slow part")
	must(t, evs, agent.TypeCompleted)
	if res := toolResult(t, e, session, "t1"); res == nil || !res.IsError || !strings.Contains(res.Text, "ran out of time") {
		t.Errorf("the delegate call's result = %+v, want that the sub-agent ran out of time", res)
	}
	if term := evs[len(evs)-1]; term.Usage == nil || term.Usage.Tokens() != 540 {
		t.Errorf("the turn's usage %+v, want 540 tokens: its own 40 and the timed-out sub-agent's 500", term.Usage)
	}
}

// tools.delegate.requiresApproval puts a delegation up for approval like
// any gated tool: the stream asks, and a denied delegation starts no
// sub-agent.
func TestDelegationRequiresApproval(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(fastRetries + delegationConfig + "tools:\n  delegate: {requiresApproval: true}\n")
	e.startWorker()
	e.kit.Model.EnqueueFor("delegate if allowed",
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{delegateCall("g1", "self", "a gated sub-task (GATEDTASK)")}},
		modelserver.Reply{Text: []string{"not allowed, fine"}})
	e.kit.Model.EnqueueFor("GATEDTASK", modelserver.Reply{Text: []string{"the sub-agent ran"}})
	const session, key = "deleg-gated", "gated"
	evs := invokeInBackground(t, e.agent, session, key, "delegate if allowed")
	var seen []agent.Event
	req := awaitEvent(t, evs, &seen, agent.TypeApprovalRequested, "g1")
	if req.Name != agentloop.DelegateTool || !strings.Contains(string(req.Args), "GATEDTASK") {
		t.Fatalf("approval_requested = %+v, want the delegate call with its task", req)
	}
	if err := e.agent.Approve(context.Background(), session, workflows.ApproveRequest{Call: "g1", Approve: false, Reason: "no sub-agents today", By: "tester"}); err != nil {
		t.Fatalf("deny: %v", err)
	}
	drain(evs, &seen)
	must(t, seen, agent.TypeCompleted)
	if res := toolResult(t, e, session, "g1"); res == nil || !res.IsError || !strings.Contains(res.Text, "no sub-agents today") {
		t.Errorf("the delegate call's result = %+v, want the denial", res)
	}
	_, err := e.client.DescribeWorkflowExecution(context.Background(), workflows.WorkflowID(agentloop.DelegateSession(session, key, "g1")), "")
	var nf *serviceerror.NotFound
	if !errors.As(err, &nf) {
		t.Errorf("the denied delegation's sub-agent: %v, want no workflow", err)
	}
	for _, r := range e.kit.Model.Requests() {
		if strings.Contains(r.LastUserText(), "GATEDTASK") {
			t.Errorf("the denied sub-agent asked its model")
		}
	}
}
