package workflows

import (
	"encoding/json"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// changeChannelReplies versions channel deliveries (SignalDeliver) and the
// Channel.Reply activity after each channel turn.
const changeChannelReplies = "channel-replies"

// Delivery is the argument of SignalDeliver: one user message from a channel.
type Delivery struct {
	// Key is the turn's idempotency key, "<kind>:<platform message ID>": a
	// redelivered or overlapping event carries the same key and runs no
	// second turn.
	Key    string       `json:"key"`
	Source string       `json:"source,omitempty"`
	Prompt agent.Prompt `json:"prompt"`
	// Reply says where the answer goes; nil means nowhere.
	Reply *ReplyTarget `json:"reply,omitempty"`
}

// ReplyTarget is a platform reply target: the channel kind and its opaque
// data (for Slack the channel and thread root).
type ReplyTarget struct {
	Kind string          `json:"kind"`
	Data json.RawMessage `json:"data,omitempty"`
}

// ReplyInput is the argument of ActivityChannelReply.
type ReplyInput struct {
	Session string      `json:"session"`
	Turn    string      `json:"turn"`
	Reply   ReplyTarget `json:"reply"`
	// Outcome is the finished turn; the reply posts its stored answer.
	Outcome agentloop.Outcome `json:"outcome"`
	// Busy asks for a "busy" notice instead: the turn was not queued.
	Busy bool `json:"busy,omitempty"`
}

// replyTimeout bounds one Channel.Reply attempt.
const replyTimeout = time.Minute

// listenDeliveries receives SignalDeliver for the whole run and queues a
// turn per new key.
func (s *session) listenDeliveries(ctx workflow.Context) {
	s.deliveries = workflow.GetSignalChannel(ctx, SignalDeliver)
	workflow.Go(ctx, func(gctx workflow.Context) {
		for {
			var d Delivery
			if !s.deliveries.Receive(gctx, &d) {
				return
			}
			s.onDelivery(gctx, d)
		}
	})
}

// onDelivery queues a delivery's turn unless its key is running, queued or
// remembered. Turn.Begin answers keys the store recorded (no run, no reply).
func (s *session) onDelivery(ctx workflow.Context, d Delivery) {
	log := workflow.GetLogger(ctx)
	// Runs before this version ignored the signal; replaying them must too.
	if workflow.GetVersion(ctx, changeChannelReplies, workflow.DefaultVersion, 1) < 1 {
		log.Warn("delivery ignored by a run without channel replies", "key", d.Key)
		return
	}
	if d.Key == "" || (d.Prompt.Text == "" && len(d.Prompt.Images) == 0) {
		log.Warn("delivery without a key or a prompt ignored", "key", d.Key)
		return
	}
	if s.running != nil && s.running.id == d.Key {
		return
	}
	for _, t := range s.queue {
		if t.id == d.Key {
			return
		}
	}
	if _, ok := s.recent(d.Key); ok {
		return
	}
	if len(s.queue) >= MaxQueuedTurns {
		log.Warn("delivery refused: the session's queue is full", "key", d.Key, "queued", len(s.queue))
		if d.Reply != nil {
			s.replies++
			workflow.Go(ctx, func(gctx workflow.Context) {
				defer func() { s.replies-- }()
				s.reply(gctx, ReplyInput{Session: s.in.Session, Turn: d.Key, Reply: *d.Reply, Busy: true})
			})
		}
		return
	}
	s.queue = append(s.queue, &pendingTurn{id: d.Key, req: TurnRequest{Prompt: d.Prompt, Source: d.Source}, reply: d.Reply})
}

// replyTurn posts a finished channel turn's answer, unless the store had
// already recorded the turn (it was answered then).
func (s *session) replyTurn(ctx workflow.Context, t *pendingTurn, out agentloop.Outcome) {
	if t.reply == nil || t.recorded {
		return
	}
	s.reply(ctx, ReplyInput{Session: s.in.Session, Turn: t.id, Reply: *t.reply, Outcome: out})
}

// reply runs ActivityChannelReply with retries; a reply that still fails is
// logged, never fails the session.
func (s *session) reply(ctx workflow.Context, in ReplyInput) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: replyTimeout,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second,
			MaximumAttempts: 20},
		Summary: "reply · " + in.Reply.Kind + " · turn " + in.Turn,
	})
	if err := workflow.ExecuteActivity(actx, ActivityChannelReply, in).Get(actx, nil); err != nil {
		workflow.GetLogger(ctx).Error("channel reply failed", "turn", in.Turn, "error", err)
	}
}
