package workflows_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// replyLog is a fake of the channel activities (Channel.Reply and
// Channel.Stream) that records what they receive, in order.
type replyLog struct {
	mu      sync.Mutex
	got     []wire.ReplyInput
	streams []wire.StreamInput
	order   []string
}

func (r *replyLog) reply(_ context.Context, in wire.ReplyInput) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, in)
	r.order = append(r.order, "reply "+in.Turn)
	return nil
}

func (r *replyLog) stream(_ context.Context, in wire.StreamInput) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.streams = append(r.streams, in)
	r.order = append(r.order, "stream "+in.Turn)
	return nil
}

func (r *replyLog) log() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.order...)
}

func (r *replyLog) calls() []wire.ReplyInput {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]wire.ReplyInput(nil), r.got...)
}

func withReplies(h *harness) *replyLog {
	r := &replyLog{}
	h.env.RegisterActivityWithOptions(r.reply, activity.RegisterOptions{Name: workflows.ActivityChannelReply})
	h.env.RegisterActivityWithOptions(r.stream, activity.RegisterOptions{Name: workflows.ActivityChannelStream})
	return r
}

func delivery(key, text string) workflows.Delivery {
	return workflows.Delivery{Key: key, Source: "slack", Prompt: agent.Prompt{Text: text},
		Reply: &workflows.ReplyTarget{Kind: "slack", Data: []byte(`{"channel":"C1","thread":"1.0"}`)}}
}

func (h *harness) deliver(d workflows.Delivery) {
	h.env.SignalWorkflow(workflows.SignalDeliver, d)
}

// TestSessionDeliveries: a delivered key runs one turn and gets one reply,
// however often it is redelivered; a recorded key neither runs nor replies.
// (A queue past its bound: TestSessionDeliveryRefusedPastTheBound.)
func TestSessionDeliveries(t *testing.T) {
	t.Parallel()
	const key = "slack:T1:C1:1.0"

	t.Run("redeliveries while queued, running and finished", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		replies := withReplies(h)
		gate := make(chan struct{})
		h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
			if err := waitGate(gate); err != nil {
				return agentloop.ModelResult{}, err
			}
			return reply(call), nil
		}
		h.at(ms, func() { h.deliver(delivery(key, "hello")); h.deliver(delivery(key, "hello")) })
		h.when(func() bool { return len(h.modelCalls()) > 0 }, func() {
			h.deliver(delivery(key, "hello")) // running
			close(gate)
		})
		h.at(time.Hour, func() { h.deliver(delivery(key, "hello")) }) // in Recent
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		equal(t, "model calls", len(h.modelCalls()), 1)
		got := replies.calls()
		equal(t, "replies", len(got), 1)
		if len(got) == 1 {
			equal(t, "reply turn", got[0].Turn, key)
			equal(t, "reply busy", got[0].Busy, false)
			equal(t, "reply session", got[0].Session, "s1")
			equal(t, "reply outcome", got[0].Outcome.Status, agent.TypeCompleted)
			equal(t, "reply kind", got[0].Reply.Kind, "slack")
		}
		// The live reply starts with the turn and ends before the final one.
		equal(t, "channel activities", fmt.Sprint(replies.log()), fmt.Sprint([]string{"stream " + key, "reply " + key}))
	})

	t.Run("a turn queued behind another mounts its reply at once", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		replies := withReplies(h)
		gate := make(chan struct{})
		h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
			if call.Turn == "k1" {
				if err := waitGate(gate); err != nil {
					return agentloop.ModelResult{}, err
				}
			}
			return reply(call), nil
		}
		h.at(ms, func() { h.deliver(delivery("k1", "first")) })
		h.when(func() bool { return len(h.modelCalls()) > 0 }, func() { h.deliver(delivery("k2", "second")) })
		h.when(func() bool { return len(replies.log()) >= 2 }, func() { close(gate) })
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		equal(t, "channel activities", fmt.Sprint(replies.log()),
			fmt.Sprint([]string{"stream k1", "stream k2", "reply k1", "reply k2"}))
		replies.mu.Lock()
		defer replies.mu.Unlock()
		equal(t, "k1 queued", replies.streams[0].Queued, false)
		equal(t, "k2 queued", replies.streams[1].Queued, true)
	})

	t.Run("folded context is committed through the chat workflow", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		replies := withReplies(h)
		var signalled []workflows.TurnDone
		h.env.OnSignalExternalWorkflow(mock.Anything, "chat:slack:T1:C1", "", wire.SignalTurnDone, mock.Anything).Return(
			func(_, _, _, _ string, arg interface{}) error {
				signalled = append(signalled, arg.(workflows.TurnDone))
				return nil
			})
		d := delivery(key, "hello")
		d.Notify = "chat:slack:T1:C1"
		h.at(ms, func() { h.deliver(d) })
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		equal(t, "replies", len(replies.calls()), 1)
		equal(t, "turn-done signals", fmt.Sprint(signalled), fmt.Sprint([]workflows.TurnDone{{Key: key, Completed: true}}))
	})

	t.Run("key recorded in the store", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		replies := withReplies(h)
		h.stored[key] = agentloop.Outcome{Turn: key, Status: agent.TypeCompleted}
		h.at(ms, func() { h.deliver(delivery(key, "hello")) })
		h.run(workflows.SessionInput{Session: "s1"})
		h.requireCancelled()
		equal(t, "model calls", len(h.modelCalls()), 0)
		equal(t, "Turn.Begin calls", len(h.beginCalls()), 1)
		equal(t, "replies", len(replies.calls()), 0)
	})
}
