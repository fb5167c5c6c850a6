package workflows

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// An accepted message is a kept message. A delivery (SignalDeliver) cannot
// be refused before it is accepted — a signal has no answer — so the
// session keeps every delivered turn in its queue, bounded by bytes
// (MaxQueuedBytes) and count (MaxQueuedDeliveries), and carries what still
// waits across continue-as-new (snapshot.Queue) instead of holding it
// back. Only past that bound, or without a usable key, is a delivery
// refused, and visibly: a busy reply to the sender on its platform (a
// callback with the refusal for a webhook), the key recorded as refused in
// the session and its store (a redelivery gets the same answer;
// re-attaching to the turn shows it), a warning in the worker's log and
// MetricTurnsRefused.
//
// Keys are remembered by time — for the idempotency window, refusing new
// ones past recentBytes rather than forgetting — so a key reused after the
// window runs again; a redelivered answer is never the answer to another
// question, and questions are asked one at a time; an abort is remembered
// by its update ID (a retried stop aborts nothing else); a channel reply's
// reference is kept under a key of its own run (ReplyRef); a reply that
// fails after its retries is reported.
//
// What the session keeps is weighed as Temporal measures the
// continue-as-new input, encoded: a delivery and a remembered key count at
// their JSON size (markup's "<", ">" and "&" are six bytes each there), and
// before continuing as new the snapshot sheds what the store keeps anyway
// (remembered outcomes, failed replies' bodies) until it fits
// snapshotBudget, so that no queue within its bound can make the input pass
// the payload limit (the server would terminate the session). A delivery
// refused while the run rolls over leaves its record and busy reply to the
// next run (snapshot.Refusals), so that refusals that keep coming cannot
// hold continue-as-new, and the turns waiting, forever. And a run that took
// a turn update continues as new before that update leaves the idempotency
// window (a timer): Temporal answers a repeated update ID from the run's
// history for as long as the run lasts.

// Reasons of MetricTurnsRefused.
const (
	refusedQueueFull   = "queue_full"
	refusedWindowFull  = "window_full"
	refusedNoKey       = "no_key"
	refusedInternalKey = "internal_key"
	refusedBadKey      = "bad_key"
	refusedNoPrompt    = "no_prompt"
	refusedTooLarge    = "too_large"
)

// maxRecentDetails bounds the details of an outcome kept in Recent.
const maxRecentDetails = 1 << 10

// abortKeyPrefix keys the aborts Recent remembers by update ID.
const abortKeyPrefix = InternalKeyPrefix + "abort:"

// snapshotBudget is what the snapshot may weigh encoded when the run
// continues as new: under Temporal's 2 MB payload limit, with room for the
// rest of the input.
const snapshotBudget = 1800 << 10

// recentEntryOverhead is what a remembered key without its outcome weighs
// encoded besides the key: {"key":…,"at":"<RFC 3339, nanoseconds, zone>"},
const recentEntryOverhead = len(`{"key":,"at":""},`) + len(time.RFC3339Nano) + 6

// weigh is what a waiting delivered turn weighs in the snapshot: its
// encoded size.
func (s *session) weigh(q queuedTurn) int {
	return encodedLen(q, 6*deliverySize(q.Delivery)) + 1
}

// keyBytes is what remembering key weighs in the snapshot.
func (s *session) keyBytes(key string) int {
	return jsonLen(key) + recentEntryOverhead
}

// encodedLen is the length of v encoded as Temporal's JSON payload
// converter encodes it (encoding/json); worst when v cannot be encoded.
func encodedLen(v any, worst int) int {
	// Deterministic: structs and slices of recorded values encode to the
	// same bytes every time (maps, if any, in sorted key order).
	//workflowcheck:ignore
	b, err := json.Marshal(v)
	if err != nil {
		return worst
	}
	return len(b)
}

// jsonLen is the length of s as a JSON string written by encoding/json,
// quotes included: '"', '\\' and the usual control characters take two
// bytes, other control characters, "<", ">", "&", U+2028, U+2029 and each
// byte of invalid UTF-8 six.
func jsonLen(s string) int {
	n := 2
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			switch {
			case b == '"' || b == '\\' || b == '\n' || b == '\r' || b == '\t':
				n += 2
			case b < 0x20 || b == '<' || b == '>' || b == '&':
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || r == '\u2028' || r == '\u2029' {
			n += 6
		} else {
			n += size
		}
		i += size
	}
	return n
}

// carriesAll reports whether every waiting turn can be carried to the
// next run (no handler waits for any of them).
func (s *session) carriesAll() bool {
	for _, t := range s.queue {
		if t.delivery == nil {
			return false
		}
	}
	return true
}

// waitingCallers counts the waiting turns a caller's update waits for.
func (s *session) waitingCallers() int {
	n := 0
	for _, t := range s.queue {
		if t.delivery == nil {
			n++
		}
	}
	return n
}

// queuedDeliveries counts the carriable turns waiting and their bytes.
func (s *session) queuedDeliveries() (n, bytes int) {
	for _, t := range s.queue {
		if t.delivery != nil {
			n++
			bytes += t.size
		}
	}
	return n, bytes
}

// deliverySize is about what a delivery weighs raw: weigh's worst case
// comes from it.
func deliverySize(d Delivery) int {
	n := len(d.Key) + len(d.Source) + len(d.Prompt.Text) + len(d.Notify) + len(d.Answer) + 128
	for _, im := range d.Prompt.Images {
		n += len(im.MimeType) + len(im.Data) + 32
	}
	if d.Reply != nil {
		n += len(d.Reply.Kind) + len(d.Reply.Data)
	}
	return n
}

// window is the idempotency window: the session's own, the definition's,
// else the default.
func (s *session) window() time.Duration {
	if s.in.IdempotencyWindow > 0 {
		return s.in.IdempotencyWindow
	}
	if w := s.snap.Loop.Settings.IdempotencyWindow; w > 0 {
		return w
	}
	return defaultIdempotencyWindow
}

// pruneRecent forgets the keys answered before the window.
func (s *session) pruneRecent(now time.Time) {
	horizon := now.Add(-s.window())
	n := 0
	for n < len(s.snap.Recent) && s.snap.Recent[n].At.Before(horizon) {
		n++
	}
	if n > 0 {
		s.snap.Recent = append([]recentTurn(nil), s.snap.Recent[n:]...)
	}
}

// recentFull reports whether remembering one more key, besides the turns
// waiting and running, would take Recent past its bound.
func (s *session) recentFull(ctx workflow.Context, key string) bool {
	limit := recentBytes
	if s.in.RecentBytes > 0 {
		limit = s.in.RecentBytes
	}
	horizon := workflow.Now(ctx).Add(-s.window())
	used := s.keyBytes(key)
	for _, r := range s.snap.Recent {
		if !r.At.Before(horizon) {
			used += s.keyBytes(r.Key)
		}
	}
	for _, t := range s.queue {
		used += s.keyBytes(t.id)
	}
	if s.running != nil {
		used += s.keyBytes(s.running.id)
	}
	return used > limit
}

// windowFullText is the refusal of a new key while Recent is full.
func (s *session) windowFullText() string {
	return fmt.Sprintf("session busy: it has taken %d turns within its idempotency window (%s) and keeps every key for that long, "+
		"so that a redelivered one is never run twice; new keys are refused until older ones leave the window — retry later",
		len(s.snap.Recent), s.window())
}

// countRefusal counts a refused turn in MetricTurnsRefused.
func (s *session) countRefusal(ctx workflow.Context, reason, via string) {
	workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"reason": reason, "via": via}).Counter(MetricTurnsRefused).Inc(1)
}

// abortSeen reports what the abort update being handled did when an update
// with its ID was handled before (a retried stop), so it does it again to
// no other turn.
func (s *session) abortSeen(ctx workflow.Context) (AbortResult, bool) {
	info := workflow.GetCurrentUpdateInfo(ctx)
	if info == nil {
		return AbortResult{}, false
	}
	out, _, known := s.recentKey(ctx, abortKeyPrefix+info.ID)
	if !known {
		return AbortResult{}, false
	}
	return AbortResult{Turn: out.Turn}, true
}

// rememberAbort keeps what the abort update being handled did, by its ID.
func (s *session) rememberAbort(ctx workflow.Context, res AbortResult) {
	info := workflow.GetCurrentUpdateInfo(ctx)
	if info == nil {
		return
	}
	s.remember(ctx, abortKeyPrefix+info.ID, agentloop.Outcome{Turn: res.Turn, Status: agent.TypeFailed, Code: agent.CodeAborted})
}

// restoreQueue queues the turns the previous run carried and settles the
// refusals it carried.
func (s *session) restoreQueue(ctx workflow.Context) {
	for _, q := range s.snap.Queue {
		d := q.Delivery
		s.queue = append(s.queue, &pendingTurn{id: d.Key, req: TurnRequest{Prompt: d.Prompt, Source: d.Source},
			reply: d.wireReply(), notify: d.Notify, delivery: &d, at: q.At, ref: q.Ref, size: s.weigh(q)})
	}
	s.snap.Queue = nil
	for _, r := range s.snap.Refusals {
		s.settleRefusal(ctx, r)
	}
	s.snap.Refusals = nil
}

// stopCarriedLive stops the live replies of the turns about to be carried
// and waits until they have stopped: a live reply of this run must not
// write after the next run's final reply.
func (s *session) stopCarriedLive(ctx workflow.Context) {
	for _, t := range s.queue {
		if t.live != nil && t.stopLive != nil {
			t.stopLive()
		}
	}
	for _, t := range s.queue {
		if t.live != nil {
			_ = t.live.Get(ctx, nil)
			t.live, t.stopLive = nil, nil
		}
	}
}

// carryQueue puts the waiting turns into the snapshot for the next run.
func (s *session) carryQueue() {
	s.snap.Queue = nil
	for _, t := range s.queue {
		if t.delivery != nil {
			s.snap.Queue = append(s.snap.Queue, queuedTurn{Delivery: *t.delivery, At: t.at, Ref: t.ref})
		}
	}
}

// endRunWithinWindow arms, at this run's first turn update, the end of the
// run shortly before that update leaves the idempotency window. Temporal answers a repeated update ID from
// the run's own history for as long as the run lasts, whatever the window:
// a key sent again after the window must reach a run that has not seen it
// (the snapshot's Recent knows the key only for the window). The first
// turn of a new session arms it once the session opened (its window is
// the definition's): the main loop does (armWindow).
func (s *session) endRunWithinWindow(ctx workflow.Context) {
	if !s.answeredAt.IsZero() {
		return
	}
	s.answeredAt = workflow.Now(ctx)
	s.armWindow()
}

// armWindow starts the window's timer once a turn update came and the
// session opened. The timer is a plain future the main loop's wait polls
// (windowReached), not a coroutine: each coroutine is a goroutine with its
// own stack for as long as the session is cached.
func (s *session) armWindow() {
	if s.answeredAt.IsZero() || s.windowTimer != nil || !s.snap.Opened {
		return
	}
	window := s.window()
	due := window - min(time.Hour, window/10)
	s.windowTimer = workflow.NewTimerWithOptions(s.root, due, workflow.TimerOptions{
		Summary: fmt.Sprintf("new run before the first turn key leaves the idempotency window (%s)", window)})
}

// windowReached reports whether the window's timer fired.
func (s *session) windowReached() bool {
	if !s.windowDue && s.windowTimer != nil && s.windowTimer.IsReady() {
		s.windowDue = s.windowTimer.Get(s.root, nil) == nil
	}
	return s.windowDue
}

// fitSnapshot sheds, before continue-as-new, what the snapshot need not
// carry until it weighs at most snapshotBudget encoded: keys past the idempotency window, then
// remembered outcomes (the oldest first: the store answers their keys),
// then the bodies of failed replies (they stay listed, no longer
// resendable). What waits and the keys of the window are kept: their
// bounds keep them within the budget.
func (s *session) fitSnapshot(ctx workflow.Context) {
	s.pruneRecent(workflow.Now(ctx))
	size := encodedLen(s.snap, snapshotBudget+1)
	for i := range s.snap.Recent {
		if size <= snapshotBudget {
			return
		}
		if r := &s.snap.Recent[i]; r.Outcome.Turn != "" || r.Outcome.Status != "" {
			size -= encodedLen(r.Outcome, 0)
			r.Outcome = agentloop.Outcome{}
		}
	}
	for i := range s.snap.FailedReplies {
		if size <= snapshotBudget {
			return
		}
		if f := &s.snap.FailedReplies[i]; f.Input != nil {
			size -= encodedLen(f.Input, 0)
			f.Input = nil
		}
	}
	if size > snapshotBudget {
		workflow.GetLogger(ctx).Error("the session's snapshot weighs more than it should; continuing as new may fail",
			"session", s.in.Session, "bytes", size, "budget", snapshotBudget)
	}
}

// badDelivery is why a delivery cannot be a turn ("" when it can).
func badDelivery(d Delivery) (reason, detail string) {
	switch {
	case d.Key == "":
		return refusedNoKey, "a delivery needs a key (its idempotency key)"
	case strings.HasPrefix(d.Key, InternalKeyPrefix):
		return refusedInternalKey, fmt.Sprintf("key %q: keys starting with %q name the session's own turns (follow-ups, wake-ups); choose another key",
			d.Key, InternalKeyPrefix)
	case len(d.Key) > MaxKeyBytes:
		return refusedBadKey, fmt.Sprintf("a key of %d bytes is longer than %d", len(d.Key), MaxKeyBytes)
	case strings.TrimSpace(d.Prompt.Text) == "" && len(d.Prompt.Images) == 0:
		return refusedNoPrompt, "a delivery needs prompt text or images"
	}
	return "", ""
}

// onDelivery takes a delivery (SignalDeliver): one with a usable key that
// is new (not running, waiting, remembered, nor the answer to the question
// waiting) is queued, or refused visibly past the queue's bound.
func (s *session) onDelivery(ctx workflow.Context, d Delivery) {
	if reason, detail := badDelivery(d); reason != "" {
		workflow.GetLogger(ctx).Warn("delivery refused: "+detail, "session", s.in.Session, "key", d.Key, "reason", reason)
		s.countRefusal(ctx, reason, "deliver")
		return
	}
	if s.running != nil && s.running.id == d.Key {
		return
	}
	if _, _, known := s.recentKey(ctx, d.Key); known {
		return // answered, refused or an answer already: the same again
	}
	for _, t := range s.queue {
		if t.id == d.Key {
			return
		}
	}
	if d.Command != "" {
		s.onCommand(ctx, d)
		return
	}
	if s.answersQuestion(ctx, d) {
		return
	}
	switch d.WhileBusy {
	case WhileBusyReject:
		if s.busy() {
			s.refuseDeliveryAs(ctx, d, refusedBusy, agent.CodeTurnRunning, s.rejectBusyText())
			return
		}
	case WhileBusySteer:
		if s.steerable(ctx, d) {
			s.steerDelivery(ctx, d)
			return
		}
	}
	now := workflow.Now(ctx)
	ref := wire.ReplyRef(d.Key, now)
	size := s.weigh(queuedTurn{Delivery: d, At: now, Ref: ref})
	n, bytes := s.queuedDeliveries()
	switch {
	case size > MaxQueuedBytes:
		// It could not even be carried across continue-as-new.
		s.refuseDelivery(ctx, d, refusedTooLarge, fmt.Sprintf(
			"this message weighs %d KiB, more than the %d KiB a session keeps waiting; it was refused — send a smaller one",
			size>>10, MaxQueuedBytes>>10))
		return
	case n >= MaxQueuedDeliveries || bytes+size > MaxQueuedBytes:
		s.refuseDelivery(ctx, d, refusedQueueFull, fmt.Sprintf(
			"session busy: %d turns (%d KiB) are already waiting, the most it keeps (%d KiB); this message was refused and will not be answered — send it again later",
			n, bytes>>10, MaxQueuedBytes>>10))
		return
	case s.recentFull(ctx, d.Key):
		s.refuseDelivery(ctx, d, refusedWindowFull, s.windowFullText())
		return
	}
	t := &pendingTurn{id: d.Key, req: TurnRequest{Prompt: d.Prompt, Source: d.Source}, reply: d.wireReply(), notify: d.Notify,
		delivery: &d, at: now, ref: ref, size: size}
	interrupt := d.WhileBusy == WhileBusyInterrupt && s.running != nil && !s.rollover
	s.enqueue(t, interrupt)
	s.noteDepth(ctx)
	if interrupt {
		s.interruptFor(ctx, d.Key)
	}
	// Waiting behind another turn: its reply mounts now, showing that —
	// for the first few only (each is a running activity), and not while
	// the run rolls over (the turn waits for the next run).
	if d.Reply != nil && (s.running != nil || len(s.queue) > 1) && !s.rollover && n < MaxQueuedTurns {
		s.startLive(ctx, t, true)
	}
}

// refuseDelivery refuses d visibly: a warning, MetricTurnsRefused, the key
// remembered and recorded as refused (a redelivery gets the same answer)
// and, for a channel message, a busy reply carrying the refusal. While the
// run rolls over the record and the reply are left to the next run: refusals that keep coming must not hold
// continue-as-new, and with it the turns waiting, for as long as they come.
func (s *session) refuseDelivery(ctx workflow.Context, d Delivery, reason, detail string) {
	s.refuseDeliveryAs(ctx, d, reason, agent.CodeSessionBusy, detail)
}

// refuseDeliveryAs is refuseDelivery with the refusal's code
// (agent.CodeTurnRunning for WhileBusyReject).
func (s *session) refuseDeliveryAs(ctx workflow.Context, d Delivery, reason, code, detail string) {
	workflow.GetLogger(ctx).Warn("delivery refused: "+detail, "session", s.in.Session, "key", d.Key, "reason", reason)
	s.countRefusal(ctx, reason, "deliver")
	out := agentloop.Outcome{Turn: d.Key, Status: agent.TypeFailed, Code: code, Details: detail}
	if reason != refusedWindowFull {
		s.remember(ctx, d.Key, out)
	}
	r := carriedRefusal{Key: d.Key, Outcome: out}
	if d.Reply != nil {
		r.Reply = &wire.ReplyInput{Session: s.in.Session, Turn: d.Key, Reply: wire.ReplyTarget(*d.Reply), Busy: true, Outcome: out,
			Ref: wire.ReplyRef(d.Key, workflow.Now(ctx))}
	}
	if s.rollover {
		s.carryRefusal(ctx, r)
		return
	}
	s.settleRefusal(ctx, r)
}

// refusalsBudget bounds the refusals a run rolling over carries to the
// next one (encoded), about a hundred.
const refusalsBudget = 64 << 10

// carryRefusal leaves r's record and reply to the next run; past
// refusalsBudget the refusal is only logged and counted.
func (s *session) carryRefusal(ctx workflow.Context, r carriedRefusal) {
	w := encodedLen(r, refusalsBudget+1) + 1
	if s.refusalBytes+w > refusalsBudget {
		workflow.GetLogger(ctx).Warn("refused delivery neither recorded nor answered on its platform: too many refusals while the session moves to a fresh run",
			"session", s.in.Session, "key", r.Key)
		return
	}
	s.refusalBytes += w
	s.snap.Refusals = append(s.snap.Refusals, r)
}

// settleRefusal records a refusal and sends its busy reply, if any;
// continue-as-new waits for both.
func (s *session) settleRefusal(ctx workflow.Context, r carriedRefusal) {
	s.records++
	workflow.Go(ctx, func(gctx workflow.Context) {
		defer func() { s.records-- }()
		s.recordTurn(gctx, r.Key, r.Outcome, time.Time{}, false)
	})
	if r.Reply == nil {
		return
	}
	in := *r.Reply
	s.replies++
	workflow.Go(ctx, func(gctx workflow.Context) {
		defer func() { s.replies-- }()
		s.reply(gctx, in)
	})
}

// replyFailed reports a channel reply that failed after its retries: an
// error in the worker's log naming the session and turn,
// MetricRepliesFailed, and an entry of the session's FailedReplies, shown
// by its state; past maxFailedReplies the oldest busy notice goes (else
// the oldest entry: failed answers are the ones to keep for a resend).
func (s *session) replyFailed(ctx workflow.Context, in wire.ReplyInput, err error) {
	workflow.GetLogger(ctx).Error("channel reply failed after its retries; the turn's outcome stays in the session (re-attach to the turn to read it)",
		"session", s.in.Session, "turn", in.Turn, "kind", in.Reply.Kind, "busy", in.Busy, "error", err)
	workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"channel": in.Reply.Kind}).Counter(MetricRepliesFailed).Inc(1)
	msg := err.Error()
	if len(msg) > 500 {
		msg = msg[:500] + "…"
	}
	kept := in
	s.snap.FailedReplies = append(s.snap.FailedReplies, failedReplyEntry{FailedReply: FailedReply{Turn: in.Turn, Kind: in.Reply.Kind, Busy: in.Busy,
		Error: msg, At: workflow.Now(ctx)}, Input: &kept})
	if len(s.snap.FailedReplies) <= maxFailedReplies {
		return
	}
	drop := 0
	// Busy notices go first: a failed answer is the one to resend.
	for i, f := range s.snap.FailedReplies {
		if f.Busy {
			drop = i
			break
		}
	}
	s.snap.FailedReplies = append(s.snap.FailedReplies[:drop:drop], s.snap.FailedReplies[drop+1:]...)
}

// asking reports whether a question of the running turn waits for its
// answer, or for its answer to be shown (question_answered published).
func (s *session) asking() bool {
	for _, q := range s.questions {
		if !q.answered || q.sub == nil && !q.closed {
			return true
		}
	}
	return false
}

// failedReply is the index of turn's failed reply in the snapshot (-1:
// none).
func (s *session) failedReply(turn string) int {
	for i, f := range s.snap.FailedReplies {
		if f.Turn == turn && f.Input != nil {
			return i
		}
	}
	return -1
}

func (s *session) validateResend(_ workflow.Context, req ResendRequest) error {
	if s.failedReply(req.Turn) < 0 {
		return temporal.NewApplicationErrorWithOptions(fmt.Sprintf("turn %q has no failed channel reply to send again", req.Turn),
			agent.CodeNotFound, temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	if s.resending[req.Turn] {
		return temporal.NewApplicationErrorWithOptions(fmt.Sprintf("the reply of turn %q is being sent again already", req.Turn),
			agent.CodeTurnRunning, temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	return nil
}

// onResend sends the failed reply of a turn once more (a few attempts): it
// leaves FailedReplies when it is sent; else it stays with the new error.
func (s *session) onResend(ctx workflow.Context, req ResendRequest) error {
	i := s.failedReply(req.Turn)
	if i < 0 {
		return temporal.NewApplicationErrorWithOptions(fmt.Sprintf("turn %q has no failed channel reply to send again", req.Turn),
			agent.CodeNotFound, temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	in := *s.snap.FailedReplies[i].Input
	if s.resending == nil {
		s.resending = map[string]bool{}
	}
	s.resending[req.Turn] = true
	defer delete(s.resending, req.Turn)
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: replyTimeout,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 10 * time.Second, MaximumAttempts: 3},
		Summary:             "reply again · " + in.Reply.Kind + " · turn " + in.Turn,
	})
	err := workflow.ExecuteActivity(actx, ActivityChannelReply, in).Get(actx, nil)
	if i = s.failedReply(req.Turn); i < 0 {
		return err
	}
	if err != nil {
		msg := err.Error()
		if len(msg) > 500 {
			msg = msg[:500] + "…"
		}
		s.snap.FailedReplies[i].Error, s.snap.FailedReplies[i].At = msg, workflow.Now(ctx)
		return temporal.NewApplicationErrorWithOptions("the channel reply failed again: "+msg, "reply_failed",
			temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	s.snap.FailedReplies = append(s.snap.FailedReplies[:i:i], s.snap.FailedReplies[i+1:]...)
	workflow.GetLogger(ctx).Info("channel reply sent again", "session", s.in.Session, "turn", in.Turn, "kind", in.Reply.Kind)
	return nil
}
