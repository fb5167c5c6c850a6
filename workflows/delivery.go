package workflows

import (
	"encoding/json"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

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
	// Notify is the workflow ID told (a turn-done signal) how the turn ended:
	// the chat workflow that folded buffered context into it.
	Notify string `json:"notify,omitempty"`
	// Answer is the message's own text when Prompt is rendered around it
	// (a GitHub rule's template): what answers a waiting question ("":
	// Prompt's text).
	Answer string `json:"answer,omitempty"`
	// WhileBusy is what the message does when it finds the session busy
	// (WhileBusyQueue, "" too; WhileBusySteer, WhileBusyInterrupt,
	// WhileBusyReject); an unknown mode queues.
	WhileBusy string `json:"whileBusy,omitempty"`
	// Command makes the delivery a chat command instead of a turn (a
	// GitHub comment "/stop"): "stop", "new", "status" or "help"; it is
	// answered where it came from.
	Command string `json:"command,omitempty"`
}

// ReplyTarget is a platform reply target: the channel kind and its opaque
// data (for Slack the channel and thread root).
type ReplyTarget struct {
	Kind string          `json:"kind"`
	Data json.RawMessage `json:"data,omitempty"`
}

// wireReply is d's reply target as the activities take it (nil: none).
func (d Delivery) wireReply() *wire.ReplyTarget {
	if d.Reply == nil {
		return nil
	}
	r := wire.ReplyTarget(*d.Reply)
	return &r
}

// replyTimeout bounds one Channel.Reply attempt.
const replyTimeout = time.Minute

// changeDrainDeliveries: SignalDeliver is no longer received by a listener
// coroutine that lives as long as the run (a parked goroutine, with its
// stack, for as long as the session sits in the worker's cache); the main
// loop's waits notice a pending delivery and start a drain coroutine that
// ends once the channel is empty (drainDeliveries).
const changeDrainDeliveries = "drain-deliveries"

// listenDeliveries receives SignalDeliver for the whole run and queues a
// turn per new key (onDelivery); Turn.Begin answers keys the store
// recorded (no run, no reply). A run continued from one that drained on
// demand does so without asking GetVersion again (the snapshot says so),
// so an idle run's first workflow task records no marker.
func (s *session) listenDeliveries(ctx workflow.Context) {
	if s.snap.DrainOnDemand || workflow.GetVersion(ctx, changeDrainDeliveries, workflow.DefaultVersion, 1) >= 1 {
		// The channel is asked for once a delivery came (queuedDeliveries):
		// a session that never gets one keeps no channel object.
		s.snap.DrainOnDemand = true
		return
	}
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

// deliveryWaiting reports, in a run that drains on demand, that a delivery
// waits and no drain coroutine runs: the main loop's waits return then and
// call drainDeliveries.
func (s *session) deliveryWaiting() bool {
	return s.snap.DrainOnDemand && !s.draining && s.waitingDeliveries() > 0
}

// waitingDeliveries is how many SignalDeliver wait to be handled. A run that
// drains on demand takes the signal channel only once one came (the SDK
// makes the channel when a signal arrives; GetUnhandledSignalNames names
// the channels holding one).
func (s *session) waitingDeliveries() int {
	if s.deliveries == nil {
		if !slices.Contains(workflow.GetUnhandledSignalNames(s.root), SignalDeliver) {
			return 0
		}
		s.deliveries = workflow.GetSignalChannel(s.root, SignalDeliver)
	}
	return s.deliveries.Len()
}

// drainDeliveries starts a coroutine that handles the deliveries waiting,
// one after another as the listener did, and ends once none is left.
func (s *session) drainDeliveries() {
	if !s.deliveryWaiting() {
		return
	}
	s.draining = true
	workflow.Go(s.root, func(gctx workflow.Context) {
		defer func() { s.draining = false }()
		for {
			var d Delivery
			if s.waitingDeliveries() == 0 || !s.deliveries.ReceiveAsync(&d) {
				return
			}
			s.onDelivery(gctx, d)
		}
	})
}

// awaitSettled waits until every handler has finished, no delivery waits
// or is being handled and no busy reply or refusal record runs; in a run
// that drains on demand it drains the deliveries that come meanwhile.
func (s *session) awaitSettled(ctx workflow.Context) error {
	return s.awaitQuiet(ctx, nil)
}

// awaitQuiet waits until every update handler finished, no delivery waits
// or is being handled and no busy reply or refusal record runs — or until
// stop holds (nil: never); deliveries that come meanwhile in a run that
// drains on demand are drained.
func (s *session) awaitQuiet(ctx workflow.Context, stop func() bool) error {
	for {
		if err := workflow.Await(ctx, func() bool {
			return (stop != nil && stop()) || s.deliveryWaiting() ||
				workflow.AllHandlersFinished(ctx) && s.waitingDeliveries() == 0 && !s.draining && s.replies == 0 && s.records == 0
		}); err != nil {
			return err
		}
		if !s.deliveryWaiting() {
			return nil
		}
		s.drainDeliveries()
	}
}

// replyTurn posts a finished channel turn's answer, unless the store had
// already recorded the turn (it was answered then).
func (s *session) replyTurn(ctx workflow.Context, t *pendingTurn, out agentloop.Outcome) {
	if t.live != nil {
		s.settleLive(ctx, t)
	}
	if t.reply == nil || t.recorded {
		return
	}
	s.reply(ctx, wire.ReplyInput{Session: s.in.Session, Turn: t.id, Reply: *t.reply, Outcome: out, Ref: t.ref})
	if t.notify != "" {
		// The chat workflow commits (or releases) the context it folded.
		f := workflow.SignalExternalWorkflow(ctx, t.notify, "", wire.SignalTurnDone,
			turnDone{Key: t.id, Completed: out.Status == agent.TypeCompleted})
		if err := f.Get(ctx, nil); err != nil {
			workflow.GetLogger(ctx).Warn("chat workflow not told the turn ended", "chat", t.notify, "turn", t.id, "error", err)
		}
	}
}

// Channel streams: a channel turn's answer is rendered live by
// Channel.Stream, which follows the turn's feed, while the turn runs; the
// final Channel.Reply then makes the same message equal the stored answer.

// Bounds of a live reply: its heartbeat, and how long it may take to
// finish by itself after the turn before it is cancelled.
const (
	liveHeartbeat = 15 * time.Second
	liveSettle    = 3 * time.Second
)

// prepareChannelTurn starts the live reply of a channel turn and resolves
// its attachments into its prompt, before the turn runs.
func (s *session) prepareChannelTurn(ctx workflow.Context, t *pendingTurn) {
	if t.reply == nil {
		return
	}
	var target wire.Target
	// Decoding bytes recorded in history is a pure function of them;
	// background files come from chat workflows that fold them.
	//workflowcheck:ignore
	if err := json.Unmarshal(t.reply.Data, &target); err == nil && len(target.Attachments)+len(target.Background) > 0 {
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout: 2 * time.Minute,
			RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 10 * time.Second, MaximumAttempts: 5},
			Summary:             "files · " + t.reply.Kind + " · turn " + t.id,
		})
		var p agent.Prompt
		err := workflow.ExecuteActivity(actx, ActivityChannelFetch, wire.FetchInput{Session: s.in.Session, Turn: t.id, Reply: *t.reply, Prompt: t.req.Prompt}).Get(ctx, &p)
		if err != nil {
			workflow.GetLogger(ctx).Warn("channel files not resolved", "turn", t.id, "error", err)
			t.req.Prompt.Text += "\n\n(The message had files that could not be fetched: " + err.Error() + ")"
		} else {
			t.req.Prompt = p
		}
	}
	if t.live == nil {
		s.startLive(ctx, t, false)
	}
}

// startLive starts Channel.Stream for t's reply.
func (s *session) startLive(ctx workflow.Context, t *pendingTurn, queued bool) {
	lctx, cancel := workflow.WithCancel(ctx)
	lctx = workflow.WithActivityOptions(lctx, workflow.ActivityOptions{
		StartToCloseTimeout: 24 * time.Hour,
		HeartbeatTimeout:    liveHeartbeat,
		WaitForCancellation: true,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 10 * time.Second, MaximumAttempts: 10},
		Summary:             "live · " + t.reply.Kind + " · turn " + t.id,
	})
	t.live = workflow.ExecuteActivity(lctx, ActivityChannelStream, wire.StreamInput{Session: s.in.Session, Turn: t.id, Reply: *t.reply, Queued: queued, Ref: t.ref})
	t.stopLive = cancel
}

// settleLive lets the live reply finish by itself (it stops at the turn's
// outcome on the feed), else cancels it and waits until it has stopped:
// the final reply must not race a live update.
func (s *session) settleLive(ctx workflow.Context, t *pendingTurn) {
	wait := func(d time.Duration) bool {
		done := false
		tctx, cancel := workflow.WithCancel(ctx)
		sel := workflow.NewSelector(ctx)
		sel.AddFuture(t.live, func(workflow.Future) { done = true })
		sel.AddFuture(workflow.NewTimer(tctx, d), func(workflow.Future) {})
		sel.Select(ctx)
		cancel()
		return done
	}
	if !wait(liveSettle) {
		t.stopLive()
		s.stopActivities(ctx, t.id)
		// Wait until it has stopped: it stops at its next platform call
		// (each bounded by the channel's HTTP timeout), and a worker lost
		// meanwhile is bounded by its heartbeat timeout.
		_ = t.live.Get(ctx, nil)
	}
	t.stopLive()
	t.live = nil
}

// reply runs ActivityChannelReply with retries; a reply that still fails is
// logged, never fails the session.
func (s *session) reply(ctx workflow.Context, in wire.ReplyInput) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: replyTimeout,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second,
			MaximumAttempts: 20},
		Summary: "reply · " + in.Reply.Kind + " · turn " + in.Turn,
	})
	if err := workflow.ExecuteActivity(actx, ActivityChannelReply, in).Get(actx, nil); err != nil {
		s.replyFailed(ctx, in, err)
	}
}

// answersQuestion makes a channel message the answer to the question the
// running turn asked (ask_user) when it comes, on the same channel, from
// the person whose message started the turn: the message is then not a
// turn, and its key is remembered so a redelivery is not one either.
func (s *session) answersQuestion(ctx workflow.Context, d Delivery) bool {
	text := d.Prompt.Text
	if strings.TrimSpace(d.Answer) != "" {
		text = d.Answer
	}
	if d.Reply == nil || strings.TrimSpace(text) == "" || len(text) > maxAnswerBytes {
		return false
	}
	q := s.nextQuestion()
	if q == nil || (q.sub != nil && q.sub.held) {
		// A question not asked yet is nobody's answer.
		return false
	}
	var from wire.Target
	// Deterministic: decoding recorded bytes.
	err := json.Unmarshal(d.Reply.Data, &from) //workflowcheck:ignore
	asker := s.requester(d.Reply.Kind)
	if err != nil || asker == "" || d.Reply.Kind+":"+from.User != asker {
		return false
	}
	s.takeAnswer(ctx, q, text, asker, d.Key)
	s.remember(ctx, d.Key, agentloop.Outcome{Turn: d.Key, Status: agent.TypeCompleted,
		Details: "this message answered the question of call " + q.view.Call})
	if d.Notify != "" {
		f := workflow.SignalExternalWorkflow(ctx, d.Notify, "", wire.SignalTurnDone, turnDone{Key: d.Key, Completed: true})
		if err := f.Get(ctx, nil); err != nil {
			workflow.GetLogger(ctx).Warn("chat workflow not told the message was an answer", "chat", d.Notify, "key", d.Key, "error", err)
		}
	}
	return true
}
