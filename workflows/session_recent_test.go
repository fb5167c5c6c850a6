package workflows_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// from is d sent by user on d's channel (the asker rule reads the user).
func from(d workflows.Delivery, user string) workflows.Delivery {
	d.Reply = &workflows.ReplyTarget{Kind: "slack", Data: []byte(fmt.Sprintf(`{"chat":"T1:C1","thread":"1.0","user":%q}`, user))}
	return d
}

// askOnFirstStep makes the first step of every turn whose prompt is in
// askers ask the person question id.
func askOnFirstStep(h *harness, askers map[string]string) {
	h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		if id, ok := askers[call.Turn]; ok && call.Step == 1 {
			c := known(id, "ask_user")
			c.Ask, c.Args, c.ApprovalTimeout = true, json.RawMessage(`{"question":"Which region?"}`), 10*time.Minute
			return reply(call, c), nil
		}
		return reply(call), nil
	}
}

// A key is answered from the session's memory only within the idempotency
// window: the same key after it is a new turn (Turn.Begin, which keeps the
// window by the record's time, runs it); within the window it runs nothing
// and asks nobody.
func TestSessionRecentKeysExpireWithTheWindow(t *testing.T) {
	t.Parallel()
	// The fake store forgets: whatever the harness recorded, Turn.Begin
	// says "new", as the real one does past the window.
	forgetful := func(context.Context, wire.BeginTurnInput) (wire.BeginTurnResult, error) {
		return wire.BeginTurnResult{}, nil
	}
	t.Run("a delivery", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		h.begin = forgetful
		h.at(ms, func() { h.deliver(delivery("d1", "delivered")) })
		h.at(time.Hour, func() { h.deliver(delivery("d1", "delivered")) })
		h.at(25*time.Hour, func() { h.deliver(delivery("d1", "delivered")) })
		h.runUntil(workflows.SessionInput{Session: "s1"}, 48*time.Hour)
		h.requireCancelled()
		equalSlice(t, "prompts the model saw", h.prompts(), []string{"delivered", "delivered"})
		equal(t, "Turn.Begin calls", len(h.beginCalls()), 2)
	})
	// Within one run Temporal itself answers a repeated update ID; a key
	// carried to a new run in Recent is answered by the window.
	t.Run("a turn update in the next run", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		h.begin = forgetful
		start := time.Date(2030, 1, 2, 12, 0, 0, 0, time.UTC)
		h.env.SetStartTime(start)
		done := agentloop.Outcome{Turn: "old", Status: agent.TypeCompleted}
		snap := &workflows.Snapshot{Opened: true, IDPrefix: "p", Loop: agentloop.State{Leaf: "L"}, Recent: []workflows.RecentTurn{
			{Key: "old", Outcome: done, At: start.Add(-25 * time.Hour)},
			{Key: "fresh", Outcome: agentloop.Outcome{Turn: "fresh", Status: agent.TypeCompleted, Details: "from memory"}, At: start.Add(-time.Hour)},
		}}
		old := h.turn(ms, "old", "again")
		fresh := h.turn(2*ms, "fresh", "again")
		h.run(workflows.SessionInput{Session: "s1", Snapshot: snap})
		h.requireCancelled()
		equalSlice(t, "prompts the model saw", h.prompts(), []string{"again"})
		requireOutcome(t, h.outcome(old), "old", agent.TypeCompleted, "", false)
		equal(t, "fresh answered from memory", h.outcome(fresh).Details, "from memory")
	})
}

// A channel message that answered a question is remembered for the whole
// window: redelivered after 64 other turns it is still no turn.
func TestSessionAnswerKeyKeptWithinTheWindow(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	withReplies(h)
	askOnFirstStep(h, map[string]string{"k0": "q0"})
	h.at(ms, func() { h.deliver(from(delivery("k0", "deploy"), "U1")) })
	h.when(func() bool { return len(h.publishedEvents()) > 0 }, func() {
		h.deliver(from(delivery("a1", "eu-west-1"), "U1"))
	})
	for i := 1; i <= 64; i++ { // one at a time: no queue bound involved
		h.at(time.Hour+time.Duration(i)*time.Minute, func() { h.deliver(delivery(fmt.Sprintf("k%d", i), fmt.Sprintf("more %d", i))) })
	}
	h.at(3*time.Hour, func() { h.deliver(from(delivery("a1", "eu-west-1"), "U1")) })
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()
	for _, p := range h.prompts() {
		if p == "eu-west-1" {
			t.Fatal("the redelivered answer ran as a turn")
		}
	}
	equal(t, "turns", len(h.prompts()), 65)
	q := h.toolCallsFor("q0")
	if len(q) != 1 || q[0].Synthetic == nil || q[0].Synthetic.Content != "eu-west-1" {
		t.Fatalf("q0 = %+v, want the answer as its result", q)
	}
}

// A redelivered answer is not the answer to the next question: the key
// answered its own question once.
func TestSessionRedeliveredAnswerAnswersNothingElse(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	withReplies(h)
	askOnFirstStep(h, map[string]string{"k1": "q1", "k2": "q2"})
	asked := func(n int) func() bool {
		return func() bool {
			c := 0
			for _, p := range h.publishedEvents() {
				if p.Event.Type == agent.TypeQuestionAsked {
					c++
				}
			}
			return c >= n
		}
	}
	h.at(ms, func() { h.deliver(from(delivery("k1", "deploy"), "U1")) })
	h.when(asked(1), func() { h.deliver(from(delivery("a1", "eu-west-1"), "U1")) })
	h.at(time.Hour, func() {
		h.deliver(from(delivery("k2", "deploy again"), "U1"))
		h.when(asked(2), func() {
			h.deliver(from(delivery("a1", "eu-west-1"), "U1")) // redelivered
			h.at(time.Minute, func() { h.deliver(from(delivery("a2", "us-east-2"), "U1")) })
		})
	})
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()
	q2 := h.toolCallsFor("q2")
	if len(q2) != 1 || q2[0].Synthetic == nil || q2[0].Synthetic.Content != "us-east-2" {
		t.Fatalf("q2 = %+v, want its own answer us-east-2", q2)
	}
}

// Two questions of one step are asked one at a time: the person sees one
// question, and the message they send answers that one, never the other.
func TestSessionQuestionsAskedOneAtATime(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	withReplies(h)
	h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		if call.Step == 1 {
			var cs []agentloop.Call
			for _, q := range []struct{ id, text string }{{"qa", "Which region?"}, {"qb", "Which size?"}} {
				c := known(q.id, "ask_user")
				c.Ask, c.Args, c.ApprovalTimeout = true, json.RawMessage(fmt.Sprintf(`{"question":%q}`, q.text)), 10*time.Minute
				cs = append(cs, c)
			}
			return reply(call, cs...), nil
		}
		return reply(call), nil
	}
	var views []workflows.SessionView
	h.at(ms, func() { h.deliver(from(delivery("k1", "deploy"), "U1")) })
	h.when(func() bool { return len(h.publishedEvents()) >= 1 }, func() {
		views = append(views, h.state())
		h.deliver(from(delivery("a1", "eu-west-1"), "U1"))
	})
	h.when(func() bool { return len(h.publishedEvents()) >= 3 }, func() {
		views = append(views, h.state())
		h.deliver(from(delivery("a2", "large"), "U1"))
	})
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()
	var kinds []string
	for _, p := range h.publishedEvents() {
		kinds = append(kinds, p.Event.Type+":"+p.Event.ID)
	}
	first, second := "qa", "qb"
	if len(kinds) > 0 && kinds[0] == "question_asked:qb" {
		first, second = "qb", "qa"
	}
	equalSlice(t, "published", kinds, []string{"question_asked:" + first, "question_answered:" + first,
		"question_asked:" + second, "question_answered:" + second})
	for i, v := range views {
		equal(t, fmt.Sprintf("questions waiting in view %d", i), len(v.Questions), 1)
	}
	for id, want := range map[string]string{first: "eu-west-1", second: "large"} {
		q := h.toolCallsFor(id)
		if len(q) != 1 || q[0].Synthetic == nil || q[0].Synthetic.Content != want {
			t.Errorf("%s = %+v, want %q", id, q, want)
		}
	}
}

// A stop is bound to the turn it was meant for: its abort, retried with the
// same update ID after the session moved on (here: into its next run), does
// not abort the next turn.
func TestSessionRetriedStopAbortsNothingElse(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	gate := make(chan struct{})
	gatedOn(h, "t1", gate)
	defer close(gate) // t1 is aborted while it waits
	t1 := h.turn(ms, "t1", "one")
	stop := &update{}
	h.when(func() bool { return h.modelStarted("t1", 1) }, func() {
		h.sendNow(stop, workflows.UpdateAbort, "stop:slack:T1:C1:9.0", workflows.AbortRequest{Reason: "stopped in the chat"})
	})
	h.run(workflows.SessionInput{Session: "s1", TurnsPerRun: 1})
	requireOutcome(t, h.outcome(t1), "t1", agent.TypeFailed, agent.CodeAborted, false)
	equal(t, "first stop aborted", h.abortResult(stop).Turn, "t1")

	next := newHarness(t)
	gate2 := make(chan struct{})
	gatedOn(next, "t2", gate2)
	t2 := next.turn(ms, "t2", "two")
	retried := &update{}
	next.when(func() bool { return next.modelStarted("t2", 1) }, func() {
		next.sendNow(retried, workflows.UpdateAbort, "stop:slack:T1:C1:9.0", workflows.AbortRequest{Reason: "stopped in the chat"})
	})
	next.when(retried.finished, func() { close(gate2) })
	next.run(continued(t, h))
	requireOutcome(t, next.outcome(t2), "t2", agent.TypeCompleted, "", false)
}

// Temporal answers a repeated update ID from the run's own history for as
// long as the run lasts, whatever the idempotency window: a turn key sent
// again after the window, to a run that answered it, got the old outcome
// and ran nothing. A run that has answered a turn update continues as new
// before that update leaves the window (an idle one too), so that the key
// sent again after the window reaches a run that never saw it, which runs
// it as a new turn.
func TestSessionRunEndsBeforeAnAnsweredKeyLeavesTheWindow(t *testing.T) {
	t.Parallel()
	forgetful := func(context.Context, wire.BeginTurnInput) (wire.BeginTurnResult, error) {
		return wire.BeginTurnResult{}, nil
	}
	h := newHarness(t)
	h.begin = forgetful
	first := h.turn(ms, "k1", "hello")
	again := h.turn(25*time.Hour, "k1", "hello again")
	h.runUntil(workflows.SessionInput{Session: "s1"}, 48*time.Hour)
	requireOutcome(t, h.outcome(first), "k1", agent.TypeCompleted, "", false)
	if err := h.env.GetWorkflowError(); temporal.IsCanceledError(err) {
		_, _, completed, _, _ := again.snapshot()
		t.Fatalf("the run that answered k1 was still open after the window (48 h); k1 sent again at 25 h was answered by Temporal from that run (completed %v) and ran nothing; prompts %q",
			completed, h.prompts())
	}
	in := continued(t, h)
	next := newHarness(t)
	next.begin = forgetful
	next.env.SetStartTime(next.env.Now().Add(25 * time.Hour))
	re := next.turn(ms, "k1", "hello again")
	next.runUntil(in, time.Hour)
	next.requireCancelled()
	requireOutcome(t, next.outcome(re), "k1", agent.TypeCompleted, "", false)
	equalSlice(t, "prompts of the next run", next.prompts(), []string{"hello again"})
}
