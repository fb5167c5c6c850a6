package workflows_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// busyTurn sends turn id with a whileBusy mode.
func (h *harness) busyTurn(u *update, id, text, mode string) {
	h.sendNow(u, workflows.UpdateTurn, id, workflows.TurnRequest{Prompt: agent.Prompt{Text: text}, Source: "test", WhileBusy: mode})
}

func busyDelivery(key, text, mode string) workflows.Delivery {
	d := delivery(key, text)
	d.WhileBusy = mode
	return d
}

// replyFor is the (last) reply of turn key.
func replyFor(r *replyLog, key string) (wire.ReplyInput, bool) {
	var out wire.ReplyInput
	found := false
	for _, c := range r.calls() {
		if c.Turn == key {
			out, found = c, true
		}
	}
	return out, found
}

// foldedSignals fakes the chat workflow "chat:slack:T1:C1" told that a
// message was folded into the running turn: the first such signal opens
// gate (the message was taken); done lists the signals.
func foldedSignals(h *harness, gate chan struct{}) (done func() []workflows.TurnDone) {
	var mu sync.Mutex
	var got []workflows.TurnDone
	var once sync.Once
	h.env.OnSignalExternalWorkflow(mock.Anything, "chat:slack:T1:C1", "", wire.SignalTurnDone, mock.Anything).Return(
		func(_, _, _, _ string, arg interface{}) error {
			mu.Lock()
			got = append(got, arg.(workflows.TurnDone))
			mu.Unlock()
			once.Do(func() { close(gate) })
			return nil
		})
	return func() []workflows.TurnDone {
		mu.Lock()
		defer mu.Unlock()
		return append([]workflows.TurnDone(nil), got...)
	}
}

// toolGated makes turn's first step call a tool that runs until gate
// closes (a message steers a turn only between its steps), and every
// other step answer.
func toolGated(h *harness, turn string, gate chan struct{}) {
	h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		if call.Turn == turn && call.Step == 1 {
			return reply(call, known("c1", "bash")), nil
		}
		return reply(call), nil
	}
	h.tool = func(_ context.Context, call agentloop.ToolCall) (agentloop.ToolOutcome, error) {
		if err := waitGate(gate); err != nil {
			return agentloop.ToolOutcome{}, err
		}
		return okTool(call), nil
	}
}

// TestWhileBusyTurns: a turn update that finds a turn running queues
// (default), interrupts it, or is rejected, as its whileBusy says; steer
// is not a turn update's to ask.
func TestWhileBusyTurns(t *testing.T) {
	t.Parallel()

	for _, mode := range []string{"", workflows.WhileBusyQueue} {
		t.Run("queue "+fmt.Sprintf("%q", mode), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			gate := make(chan struct{})
			h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
				if call.Turn == "t1" {
					if err := waitGate(gate); err != nil {
						return agentloop.ModelResult{}, err
					}
				}
				return reply(call), nil
			}
			u1 := h.turn(ms, "t1", "first")
			u2 := &update{}
			h.when(func() bool { return h.modelStarted("t1", 1) }, func() {
				h.busyTurn(u2, "t2", "second", mode)
				close(gate)
			})
			h.run(workflows.SessionInput{Session: "s1"})
			h.requireCancelled()
			requireOutcome(t, h.outcome(u1), "t1", agent.TypeCompleted, "", false)
			requireOutcome(t, h.outcome(u2), "t2", agent.TypeCompleted, "", false)
			equalSlice(t, "prompts", h.prompts(), []string{"first", "second"})
		})
	}

	t.Run("interrupt aborts the running turn and runs the new one next", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		h.model = func(ctx context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
			if call.Turn == "t1" {
				return agentloop.ModelResult{}, h.blockUntilCancelled(ctx)
			}
			return reply(call), nil
		}
		u1 := h.turn(ms, "t1", "write a novel")
		u2 := h.turn(2*ms, "t2", "queued before")
		u3 := &update{}
		h.when(func() bool { return h.modelStarted("t1", 1) && u2.isAccepted() }, func() {
			h.busyTurn(u3, "t3", "never mind, do this", workflows.WhileBusyInterrupt)
		})
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		out := h.outcome(u1)
		requireOutcome(t, out, "t1", agent.TypeFailed, agent.CodeAborted, false)
		contains(t, "t1 details", out.Details, "interrupted by a newer message", "t3")
		requireOutcome(t, h.outcome(u3), "t3", agent.TypeCompleted, "", false)
		requireOutcome(t, h.outcome(u2), "t2", agent.TypeCompleted, "", false)
		// The interrupting turn ran before the one that was waiting.
		equalSlice(t, "prompts", h.prompts(), []string{"write a novel", "never mind, do this", "queued before"})
		equalSlice(t, "cancelled activities", h.cancelledTypes(), []string{workflows.ActivityModelGenerate})
	})

	t.Run("interrupt with nothing running just runs", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		u := &update{}
		h.at(ms, func() { h.busyTurn(u, "t1", "hello", workflows.WhileBusyInterrupt) })
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		requireOutcome(t, h.outcome(u), "t1", agent.TypeCompleted, "", false)
		equal(t, "cancelled activities", len(h.cancelledTypes()), 0)
	})

	t.Run("reject refuses while a turn runs, runs when idle", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		gate := make(chan struct{})
		h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
			if call.Turn == "t1" {
				if err := waitGate(gate); err != nil {
					return agentloop.ModelResult{}, err
				}
			}
			return reply(call), nil
		}
		u1 := h.turn(ms, "t1", "first")
		u2 := &update{then: nil}
		h.when(func() bool { return h.modelStarted("t1", 1) }, func() {
			h.busyTurn(u2, "t2", "second", workflows.WhileBusyReject)
		})
		h.when(func() bool { return u2.finished() }, func() { close(gate) })
		u3 := &update{}
		h.when(func() bool { return u1.finished() }, func() { h.busyTurn(u3, "t3", "third", workflows.WhileBusyReject) })
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		requireOutcome(t, h.outcome(u1), "t1", agent.TypeCompleted, "", false)
		app := h.requireRejected(u2, agent.CodeTurnRunning)
		contains(t, "refusal", app.Error(), "busy", "t1", "whileBusy: reject")
		requireOutcome(t, h.outcome(u3), "t3", agent.TypeCompleted, "", false)
		equalSlice(t, "prompts", h.prompts(), []string{"first", "third"})
	})

	t.Run("steer and unknown modes are refused", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		u1, u2 := &update{}, &update{}
		h.at(ms, func() {
			h.busyTurn(u1, "t1", "hi", workflows.WhileBusySteer)
			h.busyTurn(u2, "t2", "hi", "shout")
		})
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		h.requireRejected(u1, agent.CodeInvalidCommand)
		app := h.requireRejected(u2, agent.CodeInvalidCommand)
		contains(t, "refusal", app.Error(), `"shout"`, "queue, steer, interrupt, reject")
		equal(t, "model calls", len(h.modelCalls()), 0)
	})

	t.Run("a second stop while the turn stops aborts nothing more", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		h.model = func(ctx context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
			if call.Turn == "t1" {
				return agentloop.ModelResult{}, h.blockUntilCancelled(ctx)
			}
			return reply(call), nil
		}
		u1 := h.turn(ms, "t1", "write a novel")
		u2 := h.turn(2*ms, "t2", "next")
		ab1, ab2 := &update{}, &update{}
		h.when(func() bool { return h.modelStarted("t1", 1) && u2.isAccepted() }, func() {
			h.sendNow(ab1, workflows.UpdateAbort, "stop-1", workflows.AbortRequest{Reason: "stop"})
			h.sendNow(ab2, workflows.UpdateAbort, "stop-2", workflows.AbortRequest{Reason: "stop again"})
		})
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		equal(t, "first stop", h.abortResult(ab1).Turn, "t1")
		h.requireRejected(ab2, agent.CodeNoActiveRun)
		requireOutcome(t, h.outcome(u1), "t1", agent.TypeFailed, agent.CodeAborted, false)
		// The turn waiting behind was not touched.
		requireOutcome(t, h.outcome(u2), "t2", agent.TypeCompleted, "", false)
	})

	t.Run("steer bound to a turn steers only that one", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		gate := make(chan struct{})
		toolGated(h, "t1", gate)
		u1 := h.turn(ms, "t1", "first")
		wrong, right := &update{}, &update{then: func() { close(gate) }}
		h.when(func() bool { return h.toolStarted("c1") }, func() {
			h.sendNow(wrong, workflows.UpdateSteer, "s-1", workflows.SteerRequest{Text: "not you", Turn: "t0"})
			h.sendNow(right, workflows.UpdateSteer, "s-2", workflows.SteerRequest{Text: "you", Turn: "t1"})
		})
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		h.requireRejected(wrong, agent.CodeNoActiveRun)
		h.requireOK(right, "steer t1")
		out := h.outcome(u1)
		equal(t, "t1 steps", out.Steps, 2)
	})
}

// TestWhileBusyDeliveries: a channel message that finds its session busy
// queues (every one, the ninth and later too), is folded into the running
// turn, interrupts it, or is refused with a busy reply, as its whileBusy
// says.
func TestWhileBusyDeliveries(t *testing.T) {
	t.Parallel()

	gated := func(h *harness, turn string, gate chan struct{}) {
		h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
			if call.Turn == turn && call.Step == 1 {
				if err := waitGate(gate); err != nil {
					return agentloop.ModelResult{}, err
				}
			}
			return reply(call), nil
		}
	}

	t.Run("queue keeps every message, past MaxQueuedTurns too", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		replies := withReplies(h)
		gate := make(chan struct{})
		gated(h, "k0", gate)
		const n = workflows.MaxQueuedTurns + 3
		h.at(ms, func() { h.deliver(busyDelivery("k0", "first", workflows.WhileBusyQueue)) })
		h.when(func() bool { return h.modelStarted("k0", 1) }, func() {
			for i := 1; i <= n; i++ {
				h.deliver(busyDelivery(fmt.Sprintf("k%d", i), fmt.Sprintf("message %d", i), ""))
			}
		})
		h.when(func() bool { return len(h.state().Queued) == n }, func() { close(gate) })
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		equal(t, "model calls", len(h.modelCalls()), n+1)
		for i := 0; i <= n; i++ {
			r, ok := replyFor(replies, fmt.Sprintf("k%d", i))
			if !ok {
				t.Errorf("k%d: no reply", i)
				continue
			}
			equal(t, fmt.Sprintf("k%d busy", i), r.Busy, false)
			equal(t, fmt.Sprintf("k%d status", i), r.Outcome.Status, agent.TypeCompleted)
		}
	})

	t.Run("steer folds the message into the running turn", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		replies := withReplies(h)
		gate := make(chan struct{})
		toolGated(h, "k1", gate)
		done := foldedSignals(h, gate)
		h.at(ms, func() { h.deliver(busyDelivery("k1", "write a poem", workflows.WhileBusySteer)) })
		h.when(func() bool { return h.toolStarted("c1") }, func() {
			d := busyDelivery("k2", "about the sea", workflows.WhileBusySteer)
			d.Notify = "chat:slack:T1:C1"
			h.deliver(d)
			h.deliver(d) // redelivered
		})
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		models := h.modelCalls()
		if len(models) != 2 {
			t.Fatalf("model called %d times, want 2 (k1's two steps)", len(models))
		}
		m2 := models[1]
		equal(t, "step 2 turn", m2.Turn, "k1")
		if len(m2.Prepend) != 1 || m2.Prepend[0].Message == nil {
			t.Fatalf("step 2 prepend = %+v, want the steering message", m2.Prepend)
		}
		equal(t, "steer text", m2.Prepend[0].Message.Text, "about the sea")
		if _, ok := replyFor(replies, "k2"); ok {
			t.Errorf("k2 got a reply of its own; its answer is k1's")
		}
		r, ok := replyFor(replies, "k1")
		equal(t, "k1 replied", ok, true)
		equal(t, "k1 status", r.Outcome.Status, agent.TypeCompleted)
		// The chat workflow is told the folded message was answered.
		equal(t, "turn-done signals", fmt.Sprint(done()), fmt.Sprint([]workflows.TurnDone{{Key: "k2", Completed: true}}))
	})

	t.Run("steer with nothing running, or with files, queues", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		replies := withReplies(h)
		gate := make(chan struct{})
		gated(h, "k1", gate)
		withFile := busyDelivery("k2", "look at this", workflows.WhileBusySteer)
		withFile.Reply.Data = []byte(`{"chat":"C1","attachments":[{"id":"F1","name":"a.png"}]}`)
		h.at(ms, func() { h.deliver(busyDelivery("k1", "first", workflows.WhileBusySteer)) })
		h.when(func() bool { return h.modelStarted("k1", 1) }, func() { h.deliver(withFile) })
		h.when(func() bool { return len(h.state().Queued) == 1 }, func() { close(gate) })
		h.env.RegisterActivityWithOptions(func(_ context.Context, in wire.FetchInput) (agent.Prompt, error) {
			return in.Prompt, nil
		}, activity.RegisterOptions{Name: workflows.ActivityChannelFetch})
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		equalSlice(t, "prompts", h.prompts(), []string{"first", "look at this"})
		_, ok := replyFor(replies, "k2")
		equal(t, "k2 replied", ok, true)
	})

	t.Run("steer during a step that may end the turn queues as its own turn", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		replies := withReplies(h)
		gate := make(chan struct{})
		gated(h, "k1", gate)
		h.at(ms, func() { h.deliver(busyDelivery("k1", "first", workflows.WhileBusySteer)) })
		h.when(func() bool { return h.modelStarted("k1", 1) }, func() {
			h.deliver(busyDelivery("k2", "and also this", workflows.WhileBusySteer))
		})
		h.when(func() bool { return len(h.state().Queued) == 1 }, func() { close(gate) })
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		equalSlice(t, "prompts", h.prompts(), []string{"first", "and also this"})
		for _, k := range []string{"k1", "k2"} {
			r, ok := replyFor(replies, k)
			equal(t, k+" replied", ok, true)
			equal(t, k+" status", r.Outcome.Status, agent.TypeCompleted)
		}
	})

	t.Run("steer that comes too late is answered where it came from", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		replies := withReplies(h)
		gate := make(chan struct{})
		// The steering message is taken while k1's tool runs, but k1 may
		// take no further step (maxSteps 1): it stops, and the message
		// runs as its follow-up.
		toolGated(h, "k1", gate)
		model := h.model
		h.model = func(ctx context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
			res, err := model(ctx, call)
			res.Settings = agentloop.Settings{MaxSteps: 1}
			return res, err
		}
		foldedSignals(h, gate)
		h.at(ms, func() { h.deliver(busyDelivery("k1", "first", workflows.WhileBusySteer)) })
		h.when(func() bool { return h.toolStarted("c1") }, func() {
			d := busyDelivery("k2", "and also this", workflows.WhileBusySteer)
			d.Notify = "chat:slack:T1:C1"
			h.deliver(d)
		})
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		follow := workflows.InternalKeyPrefix + "steer:k1"
		equalSlice(t, "prompts", h.prompts(), []string{"first", "and also this"})
		r, ok := replyFor(replies, follow)
		equal(t, "follow-up replied", ok, true)
		equal(t, "follow-up reply kind", r.Reply.Kind, "slack")
		equal(t, "follow-up status", r.Outcome.Status, agent.TypeCompleted)
	})

	t.Run("interrupt aborts the running turn; the new message runs", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		replies := withReplies(h)
		h.model = func(ctx context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
			if call.Turn == "k1" {
				return agentloop.ModelResult{}, h.blockUntilCancelled(ctx)
			}
			return reply(call), nil
		}
		h.at(ms, func() { h.deliver(busyDelivery("k1", "write a novel", workflows.WhileBusyInterrupt)) })
		h.when(func() bool { return h.modelStarted("k1", 1) }, func() {
			h.deliver(busyDelivery("k2", "no, a haiku", workflows.WhileBusyInterrupt))
		})
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		r1, ok1 := replyFor(replies, "k1")
		r2, ok2 := replyFor(replies, "k2")
		equal(t, "k1 replied", ok1, true)
		equal(t, "k2 replied", ok2, true)
		equal(t, "k1 status", r1.Outcome.Code, agent.CodeAborted)
		contains(t, "k1 details", r1.Outcome.Details, "interrupted by a newer message")
		equal(t, "k2 status", r2.Outcome.Status, agent.TypeCompleted)
		equalSlice(t, "prompts", h.prompts(), []string{"write a novel", "no, a haiku"})
	})

	t.Run("reject answers busy and runs nothing", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		replies := withReplies(h)
		gate := make(chan struct{})
		gated(h, "k1", gate)
		h.at(ms, func() { h.deliver(busyDelivery("k1", "first", workflows.WhileBusyReject)) })
		h.when(func() bool { return h.modelStarted("k1", 1) }, func() {
			h.deliver(busyDelivery("k2", "second", workflows.WhileBusyReject))
		})
		h.when(func() bool { _, ok := replyFor(replies, "k2"); return ok }, func() {
			h.deliver(busyDelivery("k2", "second", workflows.WhileBusyReject)) // redelivered: the same refusal, no second reply
			close(gate)
		})
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		equalSlice(t, "prompts", h.prompts(), []string{"first"})
		n := 0
		for _, c := range replies.calls() {
			if c.Turn == "k2" {
				n++
				equal(t, "k2 busy", c.Busy, true)
				equal(t, "k2 code", c.Outcome.Code, agent.CodeTurnRunning)
				if !strings.Contains(c.Outcome.Details, "whileBusy: reject") {
					t.Errorf("k2 details = %q", c.Outcome.Details)
				}
			}
		}
		equal(t, "k2 replies", n, 1)
		// The refusal is recorded, so the key answers the same later.
		found := false
		for _, rec := range h.recordCalls() {
			if rec.Key == "k2" {
				found = true
				equal(t, "k2 record code", rec.Outcome.Code, agent.CodeTurnRunning)
			}
		}
		equal(t, "k2 recorded", found, true)
	})
}

func commandDelivery(key, cmd string) workflows.Delivery {
	d := delivery(key, "/"+cmd)
	d.Source, d.Command = "github", cmd
	return d
}

// TestDeliveredCommands: a delivery that is a chat command (a GitHub
// comment "/stop") is no turn: /stop aborts the running turn and a second
// one answers that nothing runs; /new starts the context afresh between
// turns; /status and /help answer.
func TestDeliveredCommands(t *testing.T) {
	t.Parallel()

	t.Run("stop twice", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		replies := withReplies(h)
		h.model = func(ctx context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
			return agentloop.ModelResult{}, h.blockUntilCancelled(ctx)
		}
		h.at(ms, func() { h.deliver(delivery("k1", "write a novel")) })
		h.when(func() bool { return h.modelStarted("k1", 1) }, func() {
			h.deliver(commandDelivery("c1", "stop"))
			h.deliver(commandDelivery("c2", "stop"))
			h.deliver(commandDelivery("c2", "stop")) // redelivered: nothing more
		})
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		r1, ok := replyFor(replies, "k1")
		equal(t, "k1 replied", ok, true)
		equal(t, "k1 code", r1.Outcome.Code, agent.CodeAborted)
		if _, ok := replyFor(replies, "c1"); ok {
			t.Errorf("the first /stop answered; the stopped turn's reply says it")
		}
		n := 0
		for _, c := range replies.calls() {
			if c.Turn == "c2" {
				n++
				equal(t, "c2 notice", c.Notice, wire.NoticeNothingRunning)
			}
		}
		equal(t, "c2 answers", n, 1)
		equal(t, "model calls", len(h.modelCalls()), 1)
	})

	t.Run("new, status and help", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		replies := withReplies(h)
		h.at(ms, func() { h.deliver(delivery("k1", "remember banana")) })
		h.when(func() bool { _, ok := replyFor(replies, "k1"); return ok }, func() {
			h.deliver(commandDelivery("c1", "new"))
			h.deliver(commandDelivery("c2", "status"))
			h.deliver(commandDelivery("c3", "help"))
			h.deliver(delivery("k2", "what fruit?"))
		})
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		for key, want := range map[string]string{"c1": wire.NoticeNew, "c2": wire.NoticeStatus, "c3": wire.NoticeHelp} {
			r, ok := replyFor(replies, key)
			equal(t, key+" answered", ok, true)
			equal(t, key+" notice", r.Notice, want)
		}
		models := h.modelCalls()
		if len(models) != 2 {
			t.Fatalf("model called %d times, want 2 (commands are no turns)", len(models))
		}
		user, ok := h.userEntry(models[1])
		equal(t, "k2's entry found", ok, true)
		equal(t, "k2 hangs below nothing (a fresh context)", user.ParentID, "")
	})
}
