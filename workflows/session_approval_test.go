package workflows_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// fullArgs are longer than any preview: a human approves all of them.
var fullArgs = `{"env":"prod","note":"` + strings.Repeat("x", 300) + `"}`

// TestSessionApproval: a call that requires approval waits durably for the
// "approve" update; approval runs it, denial records a refusal.
func TestSessionApproval(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		req         workflows.ApproveRequest
		wantContent string // "" = the tool runs
	}{
		{name: "approved", req: workflows.ApproveRequest{Call: "c1", Approve: true}},
		{name: "denied with a reason", req: workflows.ApproveRequest{Call: "c1", Reason: "too risky"},
			wantContent: "A human denied this tool call. Reason: too risky"},
		{name: "denied without a reason", req: workflows.ApproveRequest{Call: "c1"},
			wantContent: "A human denied this tool call."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
				if call.Step == 1 {
					c1 := known("c1", "deploy")
					c1.RequiresApproval = true
					c1.ArgsPreview = `{"env":"prod"}`
					c1.Args = json.RawMessage(fullArgs)
					c1.ArgsHash, c1.DefinitionHash = "sha256:args", "sha256:def"
					return reply(call, c1), nil
				}
				return reply(call), nil
			}
			gate := make(chan struct{})
			h.tool = func(_ context.Context, call agentloop.ToolCall) (agentloop.ToolOutcome, error) {
				if err := waitGate(gate); err != nil {
					return agentloop.ToolOutcome{}, err
				}
				return okTool(call), nil
			}
			u := h.turn(ms, "t1", "ship it")
			var waiting, decided workflows.SessionView
			var toolsWhileWaiting int
			var nowWaiting time.Time
			h.at(time.Minute, func() {
				waiting = h.state()
				toolsWhileWaiting = len(h.toolCalls())
				nowWaiting = h.env.Now()
			})
			wrong := h.send(time.Minute+time.Second, workflows.UpdateApprove, "approve-0", workflows.ApproveRequest{Call: "c-404", Approve: true})
			otherArgs := h.send(time.Minute+2*time.Second, workflows.UpdateApprove, "approve-0a",
				workflows.ApproveRequest{Call: "c1", Approve: true, ArgsHash: "sha256:other"})
			otherDef := h.send(time.Minute+3*time.Second, workflows.UpdateApprove, "approve-0b",
				workflows.ApproveRequest{Call: "c1", Approve: true, ArgsHash: "sha256:args", DefinitionHash: "sha256:other"})
			ap := h.send(2*time.Minute, workflows.UpdateApprove, "approve-1", tt.req)
			// The decided call's activity (run or record) holds at the gate.
			h.at(2*time.Minute+ms, func() {
				decided = h.state()
				close(gate)
			})
			late := h.send(time.Hour, workflows.UpdateApprove, "approve-2", workflows.ApproveRequest{Call: "c1", Approve: true})
			var after workflows.SessionView
			h.at(2*time.Hour, func() { after = h.state() })
			h.run(workflows.SessionInput{Session: "s1"})
			h.requireCancelled()

			equal(t, "Tool.Execute calls while waiting", toolsWhileWaiting, 0)
			equal(t, "waiting.Running", waiting.Running, "t1")
			want := workflows.PendingApproval{Turn: "t1", Call: "c1", Tool: "deploy", Args: json.RawMessage(fullArgs),
				ArgsHash: "sha256:args", DefinitionHash: "sha256:def"}
			if len(waiting.Approvals) == 1 {
				// The default deadline: an hour after the wait began (just
				// after the turn was sent, a minute before nowWaiting).
				if left := waiting.Approvals[0].Deadline.Sub(nowWaiting); left < 59*time.Minute-time.Second || left > 59*time.Minute+time.Second {
					t.Errorf("deadline %v is %v after the wait was looked at, want about 59m", waiting.Approvals[0].Deadline, left)
				}
				want.Deadline = waiting.Approvals[0].Deadline
			}
			if len(waiting.Approvals) != 1 || !reflect.DeepEqual(waiting.Approvals[0], want) {
				t.Errorf("waiting.Approvals = %+v, want the deploy call with its full arguments and hashes", waiting.Approvals)
			}
			h.requireRejected(wrong, agent.CodeNotFound)
			h.requireRejected(otherArgs, agent.CodeCallChanged)
			h.requireRejected(otherDef, agent.CodeCallChanged)
			h.requireOK(ap, "approve")
			h.requireRejected(late, agent.CodeNotFound)
			equal(t, "decided.Running", decided.Running, "t1")
			equal(t, "len(decided.Approvals) (a decided call is no longer pending)", len(decided.Approvals), 0)
			equal(t, "len(after.Approvals)", len(after.Approvals), 0)

			out := h.outcome(u)
			requireOutcome(t, out, "t1", agent.TypeCompleted, "", false)
			equal(t, "outcome.Steps", out.Steps, 2)
			c1 := h.toolCallsFor("c1")
			if len(c1) != 1 {
				t.Fatalf("c1: Tool.Execute called %d times, want 1", len(c1))
			}
			if tt.wantContent == "" {
				if c1[0].Synthetic != nil {
					t.Errorf("approved call recorded %+v instead of running", c1[0].Synthetic)
				}
			} else {
				if c1[0].Synthetic == nil {
					t.Fatal("denied call ran")
				}
				equal(t, "c1.Synthetic.Content", c1[0].Synthetic.Content, tt.wantContent)
				equal(t, "c1.Synthetic.IsError", c1[0].Synthetic.IsError, true)
			}
			equal(t, "step2.Leaf", h.modelCalls()[1].Leaf, c1[0].ResultEntryID)
		})
	}
}

// gatedDeploy is a deploy call that needs approval within timeout from
// approvers.
func gatedDeploy(timeout time.Duration, approvers ...string) agentloop.Call {
	c := known("c1", "deploy")
	c.RequiresApproval = true
	c.Args = json.RawMessage(`{"env":"prod"}`)
	c.ArgsHash, c.DefinitionHash = "sha256:args", "sha256:def"
	c.ApprovalTimeout, c.Approvers = timeout, approvers
	return c
}

// TestSessionApprovalTimeout: a call no one decides is denied at its
// deadline, with a result that tells the model why; the stream is told the
// call waits (approval_requested, with its hashes and deadline) and how the
// wait ended (approval_resolved, timed out); a decision after the deadline
// finds nothing waiting.
func TestSessionApprovalTimeout(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		if call.Step == 1 {
			return reply(call, gatedDeploy(10*time.Minute)), nil
		}
		return reply(call), nil
	}
	u := h.turn(ms, "t1", "ship it")
	var waiting workflows.SessionView
	h.at(9*time.Minute, func() { waiting = h.state() })
	late := h.send(11*time.Minute, workflows.UpdateApprove, "approve-late", workflows.ApproveRequest{Call: "c1", Approve: true})
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()

	requireOutcome(t, h.outcome(u), "t1", agent.TypeCompleted, "", false)
	equal(t, "pending approvals at 9m", len(waiting.Approvals), 1)
	h.requireRejected(late, agent.CodeNotFound)
	c1 := h.toolCallsFor("c1")
	if len(c1) != 1 || c1[0].Synthetic == nil {
		t.Fatalf("c1 = %+v, want one recorded denial", c1)
	}
	if got := c1[0].Synthetic.Content; !strings.Contains(got, "no one approved or denied it within 10m0s (approvals.timeout)") || !strings.Contains(got, "was not run") {
		t.Errorf("the model reads %q, want the deadline named and that the call was not run", got)
	}
	pub := h.publishedEvents()
	if len(pub) != 2 {
		t.Fatalf("published %+v, want approval_requested then approval_resolved", pub)
	}
	req, res := pub[0].Event, pub[1].Event
	equal(t, "first event", req.Type, agent.TypeApprovalRequested)
	equal(t, "requested.ID", req.ID, "c1")
	equal(t, "requested.ArgsHash", req.ArgsHash, "sha256:args")
	equal(t, "requested.DefinitionHash", req.DefinitionHash, "sha256:def")
	equal(t, "requested.Deadline", req.Deadline, waiting.Approvals[0].Deadline)
	equal(t, "published step", pub[0].Step, 1)
	equal(t, "second event", res.Type, agent.TypeApprovalResolved)
	equal(t, "resolved.TimedOut", res.TimedOut, true)
	equal(t, "resolved.Approved", res.Approved, false)
}

// TestSessionApprovers: a call with approvers is decided only by one of
// them; an owner not on the list is refused (not_approver) and a listed-only
// request from someone else finds nothing waiting; both leave it waiting.
func TestSessionApprovers(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		if call.Step == 1 {
			return reply(call, gatedDeploy(time.Hour, "bob")), nil
		}
		return reply(call), nil
	}
	u := h.turn(ms, "t1", "ship it")
	owner := h.send(time.Minute, workflows.UpdateApprove, "a-owner", workflows.ApproveRequest{Call: "c1", Approve: true, By: "alice"})
	stranger := h.send(2*time.Minute, workflows.UpdateApprove, "a-stranger", workflows.ApproveRequest{Call: "c1", Approve: true, By: "carol", Listed: true})
	var still workflows.SessionView
	h.at(3*time.Minute, func() { still = h.state() })
	bob := h.send(4*time.Minute, workflows.UpdateApprove, "a-bob", workflows.ApproveRequest{Call: "c1", Approve: true, By: "bob", Listed: true})
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()

	h.requireRejected(owner, agent.CodeNotApprover)
	h.requireRejected(stranger, agent.CodeNotFound)
	h.requireOK(bob, "bob's approval")
	equal(t, "pending after refused decisions", len(still.Approvals), 1)
	equalSlice(t, "approvers shown", still.Approvals[0].Approvers, []string{"bob"})
	requireOutcome(t, h.outcome(u), "t1", agent.TypeCompleted, "", false)
	if c1 := h.toolCallsFor("c1"); len(c1) != 1 || c1[0].Synthetic != nil {
		t.Fatalf("c1 = %+v, want it run once", c1)
	}
	pub := h.publishedEvents()
	if len(pub) != 2 || pub[1].Event.Type != agent.TypeApprovalResolved || pub[1].Event.By != "bob" || !pub[1].Event.Approved {
		t.Fatalf("published %+v, want approval_resolved by bob, approved", pub)
	}
}

// TestSessionApproverRoles: a call listing a platform role ("slack:admins")
// is decided by someone the door vouches for with that role; the same
// person without it, a role claimed for another door's platform, or a role
// on the HTTP route is refused (not_approver) and the call keeps waiting.
func TestSessionApproverRoles(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		if call.Step == 1 {
			return reply(call, gatedDeploy(time.Hour, "slack:admins")), nil
		}
		return reply(call), nil
	}
	u := h.turn(ms, "t1", "ship it")
	member := h.send(time.Minute, workflows.UpdateApprove, "a-member", workflows.ApproveRequest{Call: "c1", Approve: true, By: "slack:U1", Door: "slack"})
	otherDoor := h.send(2*time.Minute, workflows.UpdateApprove, "a-other", workflows.ApproveRequest{Call: "c1", Approve: true, By: "telegram:7", Door: "telegram",
		Role: "slack:admins"})
	api := h.send(3*time.Minute, workflows.UpdateApprove, "a-api", workflows.ApproveRequest{Call: "c1", Approve: true, By: "carol", Role: "slack:admins"})
	var still workflows.SessionView
	h.at(4*time.Minute, func() { still = h.state() })
	admin := h.send(5*time.Minute, workflows.UpdateApprove, "a-admin", workflows.ApproveRequest{Call: "c1", Approve: true, By: "slack:U9", Door: "slack",
		Role: "slack:admins"})
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()

	h.requireRejected(member, agent.CodeNotApprover)
	h.requireRejected(otherDoor, agent.CodeNotApprover)
	h.requireRejected(api, agent.CodeNotApprover)
	h.requireOK(admin, "the admin's approval")
	equal(t, "pending after refused decisions", len(still.Approvals), 1)
	requireOutcome(t, h.outcome(u), "t1", agent.TypeCompleted, "", false)
	pub := h.publishedEvents()
	if len(pub) != 2 || pub[1].Event.Type != agent.TypeApprovalResolved || pub[1].Event.By != "slack:U9" || !pub[1].Event.Approved {
		t.Fatalf("published %+v, want approval_resolved by slack:U9, approved", pub)
	}
}

// TestSessionRefusedCalls: calls the model activity refused (a call ID used
// twice in one reply) are recorded with the refusal and never run, even
// when they require approval.
func TestSessionRefusedCalls(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		if call.Step == 1 {
			a, b := known("dup", "deploy"), known("dup", "deploy")
			a.RequiresApproval = true
			a.Refused, b.Refused = "used twice", "used twice"
			return reply(call, a, b), nil
		}
		return reply(call), nil
	}
	h.tool = func(_ context.Context, call agentloop.ToolCall) (agentloop.ToolOutcome, error) {
		return okTool(call), nil
	}
	u := h.turn(ms, "t1", "ship it twice")
	var mid workflows.SessionView
	h.at(time.Minute, func() { mid = h.state() })
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()
	requireOutcome(t, h.outcome(u), "t1", agent.TypeCompleted, "", false)
	equal(t, "pending approvals", len(mid.Approvals), 0)
	calls := h.toolCallsFor("dup")
	equal(t, "recorded calls", len(calls), 2)
	for _, c := range calls {
		if c.Synthetic == nil || !c.Synthetic.IsError || c.Synthetic.Content != "used twice" {
			t.Errorf("refused call = %+v, want the refusal recorded", c.Synthetic)
		}
	}
}

// TestSessionReusedCallIDs: a call reusing an ID an earlier step of the turn
// used is recorded with the loop's refusal and never run, and it does not
// wait for approval — a decision about the first call cannot apply to it.
func TestSessionReusedCallIDs(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		switch call.Step {
		case 1:
			return reply(call, known("c1", "deploy")), nil
		case 2:
			again := known("c1", "deploy")
			again.RequiresApproval = true
			again.ArgsPreview = `{"env":"prod"}`
			return reply(call, again), nil
		}
		return reply(call), nil
	}
	h.tool = func(_ context.Context, call agentloop.ToolCall) (agentloop.ToolOutcome, error) {
		return okTool(call), nil
	}
	u := h.turn(ms, "t1", "deploy, then deploy again")
	var mid workflows.SessionView
	h.at(time.Minute, func() { mid = h.state() })
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()
	requireOutcome(t, h.outcome(u), "t1", agent.TypeCompleted, "", false)
	equal(t, "pending approvals", len(mid.Approvals), 0)
	calls := h.toolCallsFor("c1")
	equal(t, "Tool.Execute calls of c1", len(calls), 2)
	if calls[0].Synthetic != nil {
		t.Errorf("the first c1 was not run: %+v", calls[0].Synthetic)
	}
	if s := calls[1].Synthetic; s == nil || !s.IsError || !strings.Contains(s.Content, `"c1" was already used`) {
		t.Errorf("the reused c1 = %+v, want its refusal recorded", s)
	}
}

// TestSessionAskUser: an ask_user call asks its question on the stream
// (question_asked), waits for the answer update and makes the answer the
// call's result, run by no tool; an empty answer or one for another call
// is refused; a question no one answers ends at its deadline with a result
// that tells the model so.
func TestSessionAskUser(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ask := func(id string) agentloop.Call {
		c := known(id, "ask_user")
		c.Ask, c.Args, c.ApprovalTimeout = true, json.RawMessage(`{"question":"Which region?"}`), 10*time.Minute
		return c
	}
	h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		if call.Step == 1 {
			return reply(call, ask(call.Turn+"-q")), nil
		}
		return reply(call), nil
	}
	u1 := h.turn(ms, "t1", "deploy somewhere")
	var waiting workflows.SessionView
	h.at(time.Minute, func() { waiting = h.state() })
	empty := h.send(time.Minute+time.Second, workflows.UpdateAnswer, "ans-0", workflows.AnswerRequest{Call: "t1-q", Text: " "})
	other := h.send(time.Minute+2*time.Second, workflows.UpdateAnswer, "ans-1", workflows.AnswerRequest{Call: "t9-q", Text: "eu"})
	ok := h.send(2*time.Minute, workflows.UpdateAnswer, "ans-2", workflows.AnswerRequest{Call: "t1-q", Text: "eu-west-1", By: "alice"})
	u2 := h.turn(time.Hour, "t2", "and again")
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()

	h.requireRejected(empty, agent.CodeInvalidCommand)
	h.requireRejected(other, agent.CodeNotFound)
	h.requireOK(ok, "answer")
	requireOutcome(t, h.outcome(u1), "t1", agent.TypeCompleted, "", false)
	requireOutcome(t, h.outcome(u2), "t2", agent.TypeCompleted, "", false)
	if len(waiting.Questions) != 1 || waiting.Questions[0].Question != "Which region?" || waiting.Questions[0].Call != "t1-q" {
		t.Errorf("waiting questions %+v, want t1-q asking which region", waiting.Questions)
	}
	q1, q2 := h.toolCallsFor("t1-q"), h.toolCallsFor("t2-q")
	if len(q1) != 1 || q1[0].Synthetic == nil || q1[0].Synthetic.IsError || q1[0].Synthetic.Content != "eu-west-1" {
		t.Fatalf("t1-q = %+v, want the answer recorded as its result", q1)
	}
	if len(q2) != 1 || q2[0].Synthetic == nil || !q2[0].Synthetic.IsError || !strings.Contains(q2[0].Synthetic.Content, "No answer came within 10m0s") {
		t.Fatalf("t2-q = %+v, want a result saying no answer came", q2)
	}
	var kinds []string
	for _, p := range h.publishedEvents() {
		kinds = append(kinds, p.Event.Type+":"+p.Event.ID+":"+p.Event.By)
	}
	equalSlice(t, "published", kinds, []string{"question_asked:t1-q:", "question_answered:t1-q:alice", "question_asked:t2-q:", "question_answered:t2-q:"})
}

// TestSessionApprovalWithEdits: an approver changes the waiting call's
// arguments; the tool runs once with exactly the edited ones, bound to
// their digest, and the result tells the model what changed. Edits that
// cannot apply (with a denial, not an object) are refused and the call
// keeps waiting; an edit after the decision finds nothing waiting.
func TestSessionApprovalWithEdits(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		if call.Step == 1 {
			return reply(call, gatedDeploy(time.Hour)), nil
		}
		return reply(call), nil
	}
	edited := json.RawMessage(`{"env":"staging"}`)
	u := h.turn(ms, "t1", "ship it")
	withDenial := h.send(time.Minute, workflows.UpdateApprove, "e-deny", workflows.ApproveRequest{Call: "c1", Args: edited})
	notObject := h.send(time.Minute+time.Second, workflows.UpdateApprove, "e-list", workflows.ApproveRequest{Call: "c1", Approve: true, Args: json.RawMessage(`["staging"]`)})
	var still workflows.SessionView
	h.at(2*time.Minute, func() { still = h.state() })
	ok := h.send(3*time.Minute, workflows.UpdateApprove, "e-ok", workflows.ApproveRequest{Call: "c1", Approve: true, By: "alice", Args: edited})
	late := h.send(time.Hour, workflows.UpdateApprove, "e-late", workflows.ApproveRequest{Call: "c1", Approve: true, Args: json.RawMessage(`{"env":"dev"}`)})
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()

	h.requireRejected(withDenial, agent.CodeInvalidCommand)
	h.requireRejected(notObject, agent.CodeInvalidCommand)
	equal(t, "pending after refused edits", len(still.Approvals), 1)
	equal(t, "args shown while waiting", string(still.Approvals[0].Args), `{"env":"prod"}`)
	h.requireOK(ok, "the approval with edits")
	h.requireRejected(late, agent.CodeNotFound)
	requireOutcome(t, h.outcome(u), "t1", agent.TypeCompleted, "", false)
	c1 := h.toolCallsFor("c1")
	if len(c1) != 1 {
		t.Fatalf("c1: Tool.Execute called %d times, want 1", len(c1))
	}
	got := c1[0]
	if got.Synthetic != nil {
		t.Fatalf("edited call recorded %+v instead of running", got.Synthetic)
	}
	equal(t, "runs with", string(got.Args), string(edited))
	equal(t, "bound to", got.Call.ArgsHash, "sha256:"+sha256Hex(edited))
	equal(t, "Call.Args", string(got.Call.Args), string(edited))
	if got.Edit == nil || got.Edit.By != "alice" || string(got.Edit.From) != `{"env":"prod"}` {
		t.Fatalf("Edit = %+v, want alice's edit from the model's arguments", got.Edit)
	}
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
