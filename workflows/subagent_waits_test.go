package workflows_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/wire"
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
	// As the model activity marks it: a named sub-session's calls run alone.
	c.Sequential = session != ""
	return c
}

// gated is a call id of tool deploy that waits for approval.
func gated(id string) agentloop.Call {
	c := known(id, "deploy")
	c.RequiresApproval, c.Args, c.ArgsHash, c.DefinitionHash = true, json.RawMessage(`{"env":"prod"}`), "sha256:args-"+id, "sha256:def"
	c.ApprovalTimeout = 10 * time.Minute
	return c
}

// asks is an ask_user call id asking question (a sequential tool, as the
// built-in is).
func asks(id, question string) agentloop.Call {
	c := known(id, "ask_user")
	c.Ask, c.Sequential, c.Args, c.ApprovalTimeout = true, true, json.RawMessage(`{"question":"`+question+`"}`), 10*time.Minute
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

// raceChild is a sub-agent whose wait (an approval c1, or a question q1
// when ask is set) ends at its own deadline just as a decision made on the
// delegating session is on its way: it tells the delegating session of the
// wait, takes the decision, and then — as the real Delegate workflow does
// when its deadline fired first — tells of the wait's end (timed out) and
// then that it refused the decision (nothing waits any more). It runs on
// for an hour, so the delegating turn is still running meanwhile.
func raceChild(ask bool) func(ctx workflow.Context, in workflows.DelegateInput) (agentloop.Outcome, error) {
	return func(ctx workflow.Context, in workflows.DelegateInput) (agentloop.Outcome, error) {
		info := workflow.GetInfo(ctx)
		parent, me := info.ParentWorkflowExecution.ID, info.WorkflowExecution.ID
		tell := func(w workflows.SubAgentWait) {
			w.Child = me
			_ = workflow.SignalExternalWorkflow(ctx, parent, "", wire.SignalSubAgentWait, w).Get(ctx, nil)
		}
		deadline := workflow.Now(ctx).Add(10 * time.Minute)
		asked, ended := agent.ApprovalRequested("c1", "deploy", json.RawMessage(`{"env":"prod"}`), "sha256:a", "sha256:d", nil, deadline),
			agent.ApprovalResolved("c1", false, "", "no one approved or denied it within 10m0s (approvals.timeout)", true)
		if ask {
			asked, ended = agent.QuestionAsked("q1", "Which region?", deadline), agent.QuestionAnswered("q1", "", true)
		}
		tell(workflows.SubAgentWait{Event: &asked})
		var d workflows.SubAgentDecision
		workflow.GetSignalChannel(ctx, wire.SignalSubAgentDecision).Receive(ctx, &d)
		tell(workflows.SubAgentWait{Event: &ended})
		tell(workflows.SubAgentWait{Refused: &workflows.SubAgentRefusal{Decision: d.ID, Code: agent.CodeNotFound, Message: "nothing waits under that ID"}})
		_ = workflow.Sleep(ctx, time.Hour)
		return agentloop.Outcome{Turn: agentloop.DelegateTurn, Status: agent.TypeCompleted}, nil
	}
}

// A decision that races the sub-agent's deadline — the sub-agent tells of
// its wait's end (timed out) and then refuses the decision — is answered
// "not decided by you", and the wait, ended, is ended on the delegating
// session for good: no longer listed, no longer decidable.
func TestSubAgentDecisionRacingTheDeadline(t *testing.T) {
	t.Parallel()
	for _, ask := range []bool{false, true} {
		name, call := "approval", "d1.c1"
		if ask {
			name, call = "question", "d1.q1"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.env.RegisterWorkflowWithOptions(raceChild(ask), workflow.RegisterOptions{Name: workflows.DelegateWorkflowType})
			h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
				if call.Step == 1 {
					return reply(call, delegateTo("d1", "deploy it", "")), nil
				}
				return reply(call), nil
			}
			u := h.turn(ms, "t1", "go")
			first := &update{}
			h.when(func() bool { v := h.state(); return len(v.Approvals)+len(v.Questions) > 0 }, func() {
				if ask {
					h.sendNow(first, workflows.UpdateAnswer, "dec-1", workflows.AnswerRequest{Call: call, Text: "eu", By: "alice"})
				} else {
					h.sendNow(first, workflows.UpdateApprove, "dec-1", workflows.ApproveRequest{Call: call, Approve: true, By: "alice"})
				}
			})
			var after workflows.SessionView
			again := &update{}
			h.when(first.finished, func() {
				h.at(time.Minute, func() {
					after = h.state()
					if ask {
						h.sendNow(again, workflows.UpdateAnswer, "dec-2", workflows.AnswerRequest{Call: call, Text: "eu", By: "alice"})
					} else {
						h.sendNow(again, workflows.UpdateApprove, "dec-2", workflows.ApproveRequest{Call: call, Approve: true, By: "alice"})
					}
				})
			})
			h.run(workflows.SessionInput{Session: "s1"})
			h.requireCancelled()
			if _, rej, done, _, err := first.snapshot(); rej != nil || !done || err == nil {
				t.Errorf("the racing decision: rejected %v, completed %v, error %v; want it completed with an error", rej, done, err)
			}
			equal(t, "calls waiting after the race", len(after.Approvals)+len(after.Questions), 0)
			h.requireRejected(again, agent.CodeNotFound)
			requireOutcome(t, h.outcome(u), "t1", agent.TypeCompleted, "", false)
		})
	}
}

// twoAsking scripts a turn (k1) whose first step delegates d1 and d2 in
// parallel, each sub-agent asking one question (q1) on its first step.
func twoAsking(h *harness) {
	h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		switch {
		case isSub(call) && call.Step == 1:
			return reply(call, asks("q1", "Which size for "+call.Session+"?")), nil
		case !isSub(call) && call.Step == 1 && call.Turn == "k1":
			return reply(call, delegateTo("d1", "size one", ""), delegateTo("d2", "size two", "")), nil
		}
		return reply(call), nil
	}
}

// subResult is the result recorded for call id in the sub-agent of
// delegate call d of turn k1 in session s1.
func (h *harness) subResult(d, id string) string {
	session := agentloop.DelegateSession("s1", "k1", d)
	for _, c := range h.toolCallsFor(id) {
		if c.Session == session && c.Synthetic != nil {
			return c.Synthetic.Content
		}
	}
	return ""
}

// The questions of two sub-agents running at once are asked one at a time
// on the delegating session, as two of its own are: the person sees one
// question (on the feed and in the state), and what they type in the
// channel answers that one; then the other is asked, and the next message
// answers it.
func TestSubAgentQuestionAskedOneAtATime(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	withReplies(h)
	withSubAgents(h)
	twoAsking(h)
	asked := func() []string {
		var out []string
		for _, p := range h.publishedEvents() {
			if p.Session == "s1" && p.Event.Type == agent.TypeQuestionAsked {
				out = append(out, p.Event.ID)
			}
		}
		return out
	}
	var shown [][]string
	var listed []int
	look := func() {
		shown = append(shown, asked())
		listed = append(listed, len(h.state().Questions))
	}
	h.at(ms, func() { h.deliver(from(delivery("k1", "deploy"), "U1")) })
	h.at(time.Minute, func() {
		look()
		h.deliver(from(delivery("a1", "first answer"), "U1"))
	})
	h.at(2*time.Minute, func() {
		look()
		h.deliver(from(delivery("a2", "second answer"), "U1"))
	})
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()
	if len(shown) != 2 || len(shown[0]) != 1 || len(shown[1]) != 2 {
		t.Fatalf("questions asked on the delegating session before each answer: %v, want one, then the other", shown)
	}
	equalSlice(t, "questions listed before each answer", listed, []int{1, 1})
	for id, want := range map[string]string{shown[0][0]: "first answer", shown[1][1]: "second answer"} {
		d, call, _ := strings.Cut(id, ".")
		if got := h.subResult(d, call); got != want {
			t.Errorf("%s's result %q, want %q (the answer typed while it was the question shown)", id, got, want)
		}
	}
}

// Two messages that arrive together while one sub-agent's question is the
// one asked: the first answers it; the second is not the answer to the
// other sub-agent's question, not asked yet (it waits as a turn).
func TestSubAgentQuestionNotAnsweredBeforeAsked(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	withReplies(h)
	withSubAgents(h)
	twoAsking(h)
	var first string
	h.at(ms, func() { h.deliver(from(delivery("k1", "deploy"), "U1")) })
	h.at(time.Minute, func() {
		if qs := h.state().Questions; len(qs) > 0 {
			first = qs[0].Call
		}
		h.deliver(from(delivery("a1", "first answer"), "U1"))
		h.deliver(from(delivery("a2", "second message"), "U1"))
	})
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()
	if first != "d1.q1" && first != "d2.q1" {
		t.Fatalf("the question asked first: %q, want d1.q1 or d2.q1", first)
	}
	other := "d2"
	if first == "d2.q1" {
		other = "d1"
	}
	equal(t, first+"'s result", h.subResult(first[:2], "q1"), "first answer")
	if got := h.subResult(other, "q1"); got == "second message" {
		t.Errorf("%s.q1, not asked yet, took %q as its answer", other, got)
	}
	if !containsStr(h.prompts(), "second message") {
		t.Errorf("the second message did not run as a turn: prompts %v", h.prompts())
	}
}

func containsStr(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// A named sub-session's second task in the same turn whose gated call has
// the ID its first task's had (a model's IDs need not be unique across
// turns): it is listed under the second delegate call and decided there.
func TestSubAgentNamedSessionAgainSameCallID(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	withSubAgents(h)
	h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		switch {
		case isSub(call) && call.Step == 1:
			return reply(call, gated("c1")), nil
		case !isSub(call) && call.Step == 1:
			return reply(call, delegateTo("d1", "deploy it", "notes")), nil
		case !isSub(call) && call.Step == 2:
			return reply(call, delegateTo("d2", "deploy it again", "notes")), nil
		}
		return reply(call), nil
	}
	u := h.turn(ms, "t1", "go")
	var listed [][]string
	var decide func(n int)
	decide = func(n int) {
		h.when(func() bool { return len(h.state().Approvals) > 0 && len(listed) == n }, func() {
			l := h.pendingApprovals()
			listed = append(listed, l)
			h.sendNow(&update{}, workflows.UpdateApprove, fmt.Sprintf("ap-%d", n), workflows.ApproveRequest{Call: l[0], Approve: true, By: "alice"})
			if n == 0 {
				decide(1)
			}
		})
	}
	decide(0)
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()
	if len(listed) != 2 || !reflect.DeepEqual(listed[0], []string{"d1.c1"}) || !reflect.DeepEqual(listed[1], []string{"d2.c1"}) {
		t.Fatalf("listed %v, want [d1.c1] then [d2.c1]", listed)
	}
	requireOutcome(t, h.outcome(u), "t1", agent.TypeCompleted, "", false)
	for _, c := range h.toolCallsFor("c1") {
		if c.Synthetic != nil {
			t.Errorf("c1 in %s turn %s: %q, want it run (approved)", c.Session, c.Turn, c.Synthetic.Content)
		}
	}
}

// slowDecisions holds every decision a delegating session hands a
// sub-agent for a minute before it is sent: a signal still on its way
// (as on a real server, where it travels while the workflow goes on).
type slowDecisions struct {
	interceptor.WorkerInterceptorBase
}

func (*slowDecisions) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &slowDecisionsIn{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}}
}

type slowDecisionsIn struct {
	interceptor.WorkflowInboundInterceptorBase
}

func (i *slowDecisionsIn) Init(out interceptor.WorkflowOutboundInterceptor) error {
	return i.Next.Init(&slowDecisionsOut{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: out}})
}

type slowDecisionsOut struct {
	interceptor.WorkflowOutboundInterceptorBase
}

func (o *slowDecisionsOut) SignalExternalWorkflow(ctx workflow.Context, id, run, name string, arg any) workflow.Future {
	if name != wire.SignalSubAgentDecision {
		return o.Next.SignalExternalWorkflow(ctx, id, run, name, arg)
	}
	f, set := workflow.NewFuture(ctx)
	workflow.Go(ctx, func(gctx workflow.Context) {
		_ = workflow.Sleep(gctx, time.Minute)
		set.Set(nil, o.Next.SignalExternalWorkflow(gctx, id, run, name, arg).Get(gctx, nil))
	})
	return f
}

// stoppedChild is a sub-agent that asks q1 and ends thirty seconds later
// without its wait's end (as one whose turn was aborted at its
// delegation.timeout: the aborted wait announces nothing).
func stoppedChild(ctx workflow.Context, _ workflows.DelegateInput) (agentloop.Outcome, error) {
	info := workflow.GetInfo(ctx)
	ev := agent.QuestionAsked("q1", "Which size?", workflow.Now(ctx).Add(10*time.Minute))
	_ = workflow.SignalExternalWorkflow(ctx, info.ParentWorkflowExecution.ID, "", wire.SignalSubAgentWait,
		workflows.SubAgentWait{Child: info.WorkflowExecution.ID, Event: &ev}).Get(ctx, nil)
	_ = workflow.Sleep(ctx, 30*time.Second)
	return agentloop.Outcome{Turn: agentloop.DelegateTurn, Status: agent.TypeFailed, Code: agent.CodeAborted}, nil
}

// An answer to a sub-agent's question that reaches the sub-agent only
// after it ended fails, and the question, gone with its sub-agent, stays
// gone: the delegating session's own next question is then the only one
// listed, and the one a channel message answers.
func TestSubAgentAnswerAfterTheSubAgentEnded(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.withOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{&slowDecisions{}}})
	h.env.RegisterWorkflowWithOptions(stoppedChild, workflow.RegisterOptions{Name: workflows.DelegateWorkflowType})
	h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		switch call.Step {
		case 1:
			return reply(call, delegateTo("d1", "size it", "")), nil
		case 2:
			return reply(call, asks("q0", "Anything else?")), nil
		}
		return reply(call), nil
	}
	withReplies(h)
	h.at(ms, func() { h.deliver(from(delivery("t1", "go"), "U1")) })
	ans := &update{}
	h.when(func() bool { return len(h.state().Questions) > 0 }, func() {
		h.sendNow(ans, workflows.UpdateAnswer, "ans-1", workflows.AnswerRequest{Call: "d1.q1", Text: "large", By: "alice"})
	})
	var after []string
	h.at(5*time.Minute, func() {
		for _, q := range h.state().Questions {
			after = append(after, q.Call)
		}
		h.deliver(from(delivery("a1", "nothing else"), "U1"))
	})
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()
	if _, rej, done, _, err := ans.snapshot(); rej != nil || !done || err == nil {
		t.Errorf("the late answer: rejected %v, completed %v, error %v; want it completed with an error", rej, done, err)
	}
	equalSlice(t, "questions listed once the answer failed", after, []string{"q0"})
	if q0 := h.toolCallsFor("q0"); len(q0) != 1 || q0[0].Synthetic == nil || q0[0].Synthetic.Content != "nothing else" {
		t.Errorf("q0 = %+v, want the message typed while it was asked as its answer", q0)
	}
}
