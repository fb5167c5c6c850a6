package workflows_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// withSubAgents lets h's session delegate: the real Delegate workflow runs
// each sub-agent as a child in the test environment, on the same fakes (a
// model call's Session tells a sub-agent's from the session's own).
func withSubAgents(h *harness) {
	h.env.RegisterWorkflowWithOptions(workflows.DelegateWorkflow, workflow.RegisterOptions{Name: workflows.DelegateWorkflowType})
}

// delegateTo is a delegate call id handing task to agent self (in the named
// sub-session, when set).
func delegateTo(id, task, session string) agentloop.Call {
	c := known(id, agentloop.DelegateTool)
	c.Delegate = &agentloop.Delegation{Agent: "self", Task: task, Session: session, MaxDepth: 2, MaxChildren: 4, Timeout: 30 * time.Minute}
	return c
}

// gated is a call id of tool deploy that waits for approval.
func gated(id string) agentloop.Call {
	c := known(id, "deploy")
	c.RequiresApproval, c.Args, c.ArgsHash, c.DefinitionHash = true, json.RawMessage(`{"env":"prod"}`), "sha256:args-"+id, "sha256:def"
	c.ApprovalTimeout = 10 * time.Minute
	return c
}

// asks is an ask_user call id asking question.
func asks(id, question string) agentloop.Call {
	c := known(id, "ask_user")
	c.Ask, c.Args, c.ApprovalTimeout = true, json.RawMessage(`{"question":"`+question+`"}`), 10*time.Minute
	return c
}

// isSub reports whether a model call is a sub-agent's.
func isSub(call agentloop.ModelCall) bool { return strings.Contains(call.Session, "/") }

func (h *harness) pendingApprovals() []string {
	var out []string
	for _, a := range h.state().Approvals {
		out = append(out, a.Call)
	}
	return out
}

// A sub-agent's gated call is listed on the delegating session as
// "<delegate call>.<call>" and approved there (the harness works).
func TestSubAgentApprovalOnTheParent(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	withSubAgents(h)
	h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		switch {
		case isSub(call) && call.Step == 1:
			return reply(call, gated("c1")), nil
		case !isSub(call) && call.Step == 1:
			return reply(call, delegateTo("d1", "deploy it", "")), nil
		}
		return reply(call), nil
	}
	u := h.turn(ms, "t1", "go")
	var listed []string
	ap := &update{}
	h.when(func() bool { return len(h.state().Approvals) > 0 }, func() {
		listed = h.pendingApprovals()
		h.sendNow(ap, workflows.UpdateApprove, "ap-1", workflows.ApproveRequest{Call: "d1.c1", Approve: true, By: "alice"})
	})
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()
	equalSlice(t, "listed", listed, []string{"d1.c1"})
	h.requireOK(ap, "approve d1.c1")
	requireOutcome(t, h.outcome(u), "t1", agent.TypeCompleted, "", false)
	if c := h.toolCallsFor("c1"); len(c) != 1 || c[0].Synthetic != nil {
		t.Fatalf("c1 = %+v, want it run once", c)
	}
}

// Two delegations of one step to the same named sub-session: one runs,
// the other is told the sub-session is busy, and the running one's gated
// call is still listed on the delegating session under its own delegate
// call and decided there (the busy sibling does not take its place).
func TestSubAgentNamedSiblingKeepsTheWaits(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	withSubAgents(h)
	h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		switch {
		case isSub(call) && call.Step == 1:
			return reply(call, gated("c1")), nil
		case !isSub(call) && call.Step == 1:
			return reply(call, delegateTo("d1", "deploy it", "notes"), delegateTo("d2", "deploy it too", "notes")), nil
		}
		return reply(call), nil
	}
	u := h.turn(ms, "t1", "go")
	var listed []string
	ap := &update{}
	h.at(time.Minute, func() {
		listed = h.pendingApprovals()
		if len(listed) == 1 {
			h.sendNow(ap, workflows.UpdateApprove, "ap-1", workflows.ApproveRequest{Call: listed[0], Approve: true, By: "alice"})
		}
	})
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()
	var ran, busy []string
	for _, id := range []string{"d1", "d2"} {
		c := h.toolCallsFor(id)
		if len(c) == 1 && c[0].Synthetic != nil && strings.Contains(c[0].Synthetic.Content, "busy") {
			busy = append(busy, id)
		} else {
			ran = append(ran, id)
		}
	}
	if len(ran) != 1 || len(busy) != 1 {
		t.Fatalf("delegations run %v, busy %v: want one of each (listed %v)", ran, busy, listed)
	}
	equalSlice(t, "listed a minute in", listed, []string{ran[0] + ".c1"})
	h.requireOK(ap, "approve "+ran[0]+".c1")
	requireOutcome(t, h.outcome(u), "t1", agent.TypeCompleted, "", false)
	if c := h.toolCallsFor("c1"); len(c) != 1 || c[0].Synthetic != nil {
		t.Fatalf("c1 = %+v, want it run once, approved", c)
	}
}
