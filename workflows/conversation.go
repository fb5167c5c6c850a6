package workflows

import (
	"encoding/json"
	"fmt"
	"strings"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// What a new message does when it reaches a session that is busy (a turn
// runs, or turns wait): TurnRequest.WhileBusy, Delivery.WhileBusy. The
// doors fill it from fastagent.yaml's conversation.whileBusy, a channel
// file's whileBusy or an HTTP request's; "" is WhileBusyQueue.
const (
	// WhileBusyQueue queues the message as a turn of its own behind the
	// running one (the default).
	WhileBusyQueue = "queue"
	// WhileBusySteer folds the message into the running turn: the model
	// reads it after its current step (as UpdateSteer does). A message
	// with images or files, or one that finds no turn running, is queued.
	// A turn update cannot steer (send UpdateSteer); the HTTP ingress
	// does that for an /invoke asking for it.
	WhileBusySteer = "steer"
	// WhileBusyInterrupt aborts the running turn (as UpdateAbort does) and
	// runs the message next, ahead of the turns waiting.
	WhileBusyInterrupt = "interrupt"
	// WhileBusyReject refuses the message while a turn runs or waits: a
	// turn update is rejected with agent.CodeTurnRunning, a delivery is
	// answered with a busy reply (its key recorded as refused with that
	// code).
	WhileBusyReject = "reject"
)

// WhileBusyModes lists the modes, in the order documentation names them.
var WhileBusyModes = []string{WhileBusyQueue, WhileBusySteer, WhileBusyInterrupt, WhileBusyReject}

// ValidWhileBusy reports whether mode is a while-busy mode ("" is one: the
// default).
func ValidWhileBusy(mode string) bool {
	if mode == "" {
		return true
	}
	for _, m := range WhileBusyModes {
		if m == mode {
			return true
		}
	}
	return false
}

// refusedBusy is MetricTurnsRefused's reason for a message refused by
// WhileBusyReject.
const refusedBusy = "busy"

// busy reports whether a turn runs or waits.
func (s *session) busy() bool {
	return s.running != nil || len(s.queue) > 0
}

// rejectBusyText is the refusal of a message sent with WhileBusyReject.
func (s *session) rejectBusyText() string {
	running := ""
	if s.running != nil {
		running = fmt.Sprintf(" (turn %q runs", s.running.id)
		if n := len(s.queue); n > 0 {
			running += fmt.Sprintf(", %d waiting", n)
		}
		running += ")"
	} else {
		running = fmt.Sprintf(" (%d turns waiting)", len(s.queue))
	}
	return "busy: this session is still working on an earlier message" + running +
		"; this one was refused (whileBusy: reject) — send it again once it has answered, or stop the running turn first"
}

// rejectTurnWhileBusy is the validator's refusal of a turn update sent with
// WhileBusyReject to a busy session (nil when it may run).
func (s *session) rejectTurnWhileBusy(ctx workflow.Context, req TurnRequest) error {
	if req.WhileBusy != WhileBusyReject || !s.busy() {
		return nil
	}
	s.countRefusal(ctx, refusedBusy, "update")
	return temporal.NewApplicationErrorWithOptions(s.rejectBusyText(), agent.CodeTurnRunning,
		temporal.ApplicationErrorOptions{NonRetryable: true})
}

// badWhileBusy is the validator's refusal of a turn update naming an
// unknown mode, or steer (nil when the mode is fine).
func badWhileBusy(mode string) error {
	switch {
	case mode == WhileBusySteer:
		return temporal.NewApplicationErrorWithOptions("whileBusy steer: a turn update cannot steer; send the text with the "+UpdateSteer+" update",
			agent.CodeInvalidCommand, temporal.ApplicationErrorOptions{NonRetryable: true})
	case !ValidWhileBusy(mode):
		return temporal.NewApplicationErrorWithOptions(fmt.Sprintf("whileBusy %q is not one of %s", mode, strings.Join(WhileBusyModes, ", ")),
			agent.CodeInvalidCommand, temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	return nil
}

// interruptFor aborts the running turn, if any, for the turn key that
// interrupts it (WhileBusyInterrupt): its model call, tools and
// sub-agents stop, it ends aborted, and the caller puts the new turn
// first in the queue.
func (s *session) interruptFor(ctx workflow.Context, key string) {
	if s.running == nil || s.cancelTurn == nil {
		return
	}
	s.abortReason = "interrupted by a newer message (turn " + key + ")"
	id := s.running.id
	s.cancelTurn()
	s.stopActivities(ctx, id)
	s.stopSubAgents(ctx)
}

// enqueue adds t to the queue: first when it interrupts the running turn,
// else last.
func (s *session) enqueue(t *pendingTurn, first bool) {
	if first {
		s.queue = append([]*pendingTurn{t}, s.queue...)
		return
	}
	s.queue = append(s.queue, t)
}

// changeSteerLate: a delivery that comes while the running turn may be
// ending (lateToSteer) is queued as its own turn instead of folded in.
const changeSteerLate = "steer-late"

// steerable reports whether delivery d can be folded into the running
// turn: a turn runs (not a compaction or rewind) between its steps (not
// lateToSteer), and d is text only.
func (s *session) steerable(ctx workflow.Context, d Delivery) bool {
	if s.running == nil || len(d.Prompt.Images) > 0 || strings.TrimSpace(d.Prompt.Text) == "" {
		return false
	}
	if s.lateToSteer() && workflow.GetVersion(ctx, changeSteerLate, workflow.DefaultVersion, 1) >= 1 {
		return false
	}
	if d.Reply != nil {
		var target wire.Target
		// Deterministic: decoding recorded bytes.
		err := json.Unmarshal(d.Reply.Data, &target) //workflowcheck:ignore
		if err != nil || len(target.Attachments) > 0 {
			return false
		}
	}
	return true
}

// steerDelivery folds d into the running turn (WhileBusySteer): its text
// is read after the turn's current step, its key is remembered as
// answered by that turn, and a chat workflow that folded context into it
// is told it completed. Text that arrives too late for the turn runs as
// its follow-up, answered where d came from.
func (s *session) steerDelivery(ctx workflow.Context, d Delivery) {
	// Every change to the session's state first: yieldStep waits for a
	// local activity, and meanwhile the running turn may end (s.running
	// nil, or its follow-up already built).
	s.steering = append(s.steering, d.Prompt.Text)
	if d.Reply != nil {
		s.steerReply = d.Reply
	}
	s.remember(ctx, d.Key, agentloop.Outcome{Turn: d.Key, Status: agent.TypeCompleted,
		Details: "this message was folded into the running turn " + s.running.id + " (whileBusy: steer)"})
	s.yieldStep(ctx)
	if d.Notify != "" {
		f := workflow.SignalExternalWorkflow(ctx, d.Notify, "", wire.SignalTurnDone, turnDone{Key: d.Key, Completed: true})
		if err := f.Get(ctx, nil); err != nil {
			workflow.GetLogger(ctx).Warn("chat workflow not told the message was folded into the running turn", "chat", d.Notify, "key", d.Key, "error", err)
		}
	}
}

// onCommand runs a delivered chat command (Delivery.Command: a GitHub
// comment "/stop"…) instead of a turn, and answers it where it came from:
// /stop aborts the running turn (a second one, or one while it stops,
// finds nothing running and says so); /new starts the session's context
// afresh from the next turn (only between turns); /status and /help
// answer. Its key is remembered, so a redelivery does nothing more.
func (s *session) onCommand(ctx workflow.Context, d Delivery) {
	s.remember(ctx, d.Key, agentloop.Outcome{Turn: d.Key, Status: agent.TypeCompleted, Details: "chat command /" + d.Command})
	notice := ""
	switch d.Command {
	case wire.CommandStop:
		if s.running == nil || s.abortReason != "" {
			notice = wire.NoticeNothingRunning
			break
		}
		_, _ = s.abort(ctx, AbortRequest{Reason: "stopped by /stop on " + orText(d.Source, "the channel")})
	case wire.CommandNew:
		if s.busy() {
			notice = wire.NoticeNewBusy
			break
		}
		s.snap.Loop.Leaf, s.snap.Loop.Activated = "", nil
		notice = wire.NoticeNew
	case wire.CommandStatus:
		notice = wire.NoticeStatus
	default:
		notice = wire.NoticeHelp
	}
	if notice == "" || d.Reply == nil {
		return
	}
	in := wire.ReplyInput{Session: s.in.Session, Turn: d.Key, Reply: wire.ReplyTarget(*d.Reply), Notice: notice}
	s.replies++
	workflow.Go(ctx, func(gctx workflow.Context) {
		defer func() { s.replies-- }()
		s.reply(gctx, in)
	})
}
