package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/delivery"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/relay"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
)

// BusyText is the reply to a message that found its session's queue full.
const BusyText = "I'm busy with earlier messages in this conversation and could not take this one. Please send it again in a moment."

// BusyRejectText is the reply to a message refused because a turn was
// running (whileBusy: reject).
const BusyRejectText = "I'm still working on an earlier message, so I did not take this one. Send it again once I have answered, or send /stop to stop me first."

// DroppedText settles a reply mounted for a turn (its "queued" state) that
// was dropped because its message was deleted before it started.
const DroppedText = "(The message was deleted before I started on it, so it is not answered.)"

// Replies holds the channel activities: Channel.Stream renders a channel
// turn's answer live while it runs, Channel.Reply settles it to the stored
// answer, Channel.Fetch resolves a message's files, Chat.Route hands a chat
// workflow's turn to its session. Secrets live in the repliers (built from
// the worker's environment), never in arguments.
type Replies struct {
	Store    store.Store
	Feed     feed.Bus
	Repliers map[string]channels.Replier
	// Starter and TaskQueue serve Chat.Route (and Chat.Stop, Chat.Drop);
	// without a Starter they use the client of the worker running them.
	Starter   channels.Starter
	TaskQueue string
	// Dir is the agent's workspace, where Channel.Fetch saves files.
	Dir    string
	Logger *slog.Logger
	// Tick is how often Channel.Stream re-renders and heartbeats (default
	// 500 ms).
	Tick time.Duration
	// Senders are the channels Channel.Send delivers through.
	Senders delivery.Senders
}

// NewReplies returns the channel activities with repliers indexed by kind.
func NewReplies(st store.Store, bus feed.Bus, repliers []channels.Replier, log *slog.Logger) *Replies {
	r := &Replies{Store: st, Feed: bus, Repliers: map[string]channels.Replier{}, Logger: log}
	for _, rp := range repliers {
		r.Repliers[rp.Kind()] = rp
	}
	return r
}

// Register registers the channel activities under their names.
func (r *Replies) Register(w Registrar) { Register(w, Set{Replies: r}) }

// refKey is the key a reply's reference is kept under: the one the workflow
// named for this run of the turn (wire.ReplyRef), else the turn's key.
func refKey(turn, ref string) string {
	if ref != "" {
		return ref
	}
	return turn
}

// busySuffix keys the reference of a busy notice sent without a reference
// key of its own (workflows before per-run references): never the turn's,
// so it cannot stand in for the turn's answer.
const busySuffix = "#busy"

// render opens the renderer of a turn's reply on its platform, continuing
// the reply an earlier attempt stored under turn (the reply's reference
// key, see refKey).
func (r *Replies) render(ctx context.Context, session, turn string, rt wire.ReplyTarget) (channels.Render, string, error) {
	rp := r.Repliers[rt.Kind]
	if rp == nil {
		return nil, "", temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("reply: no %q channel is configured on this worker", rt.Kind), agent.CodeInvalidCommand, nil)
	}
	var target wire.Target
	if err := json.Unmarshal(rt.Data, &target); err != nil {
		return nil, "", temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("reply: bad %s reply target: %v", rt.Kind, err), agent.CodeInvalidCommand, nil)
	}
	target.Turn = turn
	ref, err := r.Store.Reply(ctx, session, turn)
	switch {
	case errors.Is(err, store.ErrNotFound):
		ref = ""
	case err != nil:
		return nil, "", storeError(err)
	}
	rd, err := rp.Render(ctx, target, ref)
	if err != nil {
		return nil, "", fmt.Errorf("reply: turn %q: %w", turn, err)
	}
	return rd, ref, nil
}

// saveRef stores the reply's platform reference once it exists or changes.
func (r *Replies) saveRef(ctx context.Context, session, turn string, rd channels.Render, saved *string) error {
	ref := rd.Ref()
	if ref == "" || ref == *saved {
		return nil
	}
	if err := r.Store.SaveReply(ctx, session, turn, ref); err != nil {
		return storeError(err)
	}
	*saved = ref
	return nil
}

// Reply settles the reply of in.Turn to its stored answer: it updates the
// message (or stream) posted for the turn by Channel.Stream or an earlier
// attempt — its reference is kept in the session store under (session,
// turn) — and posts one only when none exists, so a retried reply never
// posts twice. A busy notice is posted only when nothing was posted for
// the turn.
func (r *Replies) Reply(ctx context.Context, in wire.ReplyInput) error {
	if in.Notice != "" {
		return r.commandNotice(ctx, in)
	}
	key := refKey(in.Turn, in.Ref)
	if in.Busy && in.Ref == "" {
		// Nothing when the turn was answered; else the notice under a key
		// of its own, so that the answer still goes out if the turn runs.
		switch ref, err := r.Store.Reply(ctx, in.Session, in.Turn); {
		case err == nil && ref != "":
			return nil
		case err != nil && !errors.Is(err, store.ErrNotFound):
			return storeError(err)
		}
		key = in.Turn + busySuffix
	}
	rd, ref, err := r.render(ctx, in.Session, key, in.Reply)
	if err != nil {
		return err
	}
	text := BusyText
	status, code := agent.TypeFailed, agent.CodeSessionBusy
	if in.Busy && in.Outcome.Code == agent.CodeTurnRunning {
		text, code = BusyRejectText, agent.CodeTurnRunning
	}
	if in.Busy {
		if ref != "" {
			return nil
		}
	} else if text, err = r.answer(ctx, in); err != nil {
		return err
	} else {
		status, code = in.Outcome.Status, in.Outcome.Code
	}
	if c, ok := rd.(channels.Concluder); ok {
		if in.Busy && in.Outcome.Details != "" {
			text = in.Outcome.Details // a system's receiver: say what was refused and why
		}
		err = c.Conclude(ctx, text, status, code)
	} else {
		err = rd.Finish(ctx, text)
	}
	if err != nil {
		return fmt.Errorf("reply: turn %q: %w", in.Turn, err)
	}
	if err := r.saveRef(ctx, in.Session, key, rd, &ref); err != nil {
		return err
	}
	r.log().Info("channel reply settled", "kind", in.Reply.Kind, "session", in.Session, "turn", in.Turn, "busy", in.Busy)
	if !in.Busy {
		r.react(ctx, in.Session, key, in.Reply, channels.ReactAnswered)
	}
	return nil
}

// react marks the person's message of a turn's reply target for stage
// (channels.Reactor), best effort and once: a marker under the reply's
// key in the session store (key#<stage>) says it was done, so a retried
// activity does not react again.
func (r *Replies) react(ctx context.Context, session, key string, rt wire.ReplyTarget, stage string) {
	rx, ok := r.Repliers[rt.Kind].(channels.Reactor)
	if !ok {
		return
	}
	mark := key + "#" + stage
	if ref, err := r.Store.Reply(ctx, session, mark); err == nil && ref != "" {
		return
	}
	var target wire.Target
	if err := json.Unmarshal(rt.Data, &target); err != nil || target.Message == "" {
		return
	}
	if err := rx.React(ctx, target, stage); err != nil {
		r.log().Warn("channel reaction not added", "kind", rt.Kind, "session", session, "stage", stage, "error", err)
		return
	}
	if err := r.Store.SaveReply(ctx, session, mark, stage); err != nil {
		r.log().Warn("channel reaction not remembered; a retry may add it again", "kind", rt.Kind, "session", session, "error", err)
	}
}

// Stream renders in.Turn's answer live while the turn runs: it follows the
// turn's feed through the relay (the same events an SSE client gets), folds
// them into a channels.View and shows it through the platform's renderer,
// storing the reply's reference as soon as it exists. It returns when the
// turn's outcome has arrived on the feed, or when cancelled; a retried
// attempt continues the same reply.
func (r *Replies) Stream(ctx context.Context, in wire.StreamInput) error {
	if r.Feed == nil {
		return nil
	}
	// A stop ends the loop between platform calls, never inside one: a
	// call cut off client-side may still land at the platform after the
	// final reply, which must be the message's last write.
	stopped, release := r.Feed.WatchStop(in.Session, in.Turn)
	defer release()
	return stoppedError(ctx, r.stream(ctx, in, stopped))
}

// relayed runs the relay of a turn's feed into a channel the reply reads;
// cancel stops it.
func (r *Replies) relayed(ctx context.Context, sub feed.Subscription, session string) (<-chan agent.Event, context.CancelFunc) {
	events := make(chan agent.Event, 256)
	rctx, cancel := context.WithCancel(ctx)
	go func() {
		defer close(events)
		relay.Run(rctx, sub, nil, relay.Options{Stored: relay.StoreReader(r.Store, session), Logger: r.Logger, Follow: r.Feed.Subscribe},
			func(ev agent.Event) bool {
				select {
				case events <- ev:
					return true
				case <-rctx.Done():
					return false
				}
			})
	}()
	return events, cancel
}

// stream follows the turn's feed into the live reply until its end, or
// until stopped is closed (feed.ErrStopped).
func (r *Replies) stream(ctx context.Context, in wire.StreamInput, stopped <-chan struct{}) error {
	rd, saved, err := r.render(ctx, in.Session, refKey(in.Turn, in.Ref), in.Reply)
	if err != nil {
		return err
	}
	r.react(ctx, in.Session, refKey(in.Turn, in.Ref), in.Reply, channels.ReactTaken)
	sub, err := r.Feed.Subscribe(ctx, in.Session, in.Turn)
	if err != nil {
		return fmt.Errorf("stream: subscribe: %w", err)
	}
	defer func() { _ = sub.Close() }()
	events, cancel := r.relayed(ctx, sub, in.Session)
	defer cancel()
	tick := r.Tick
	if tick <= 0 {
		tick = 500 * time.Millisecond
	}
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	beat := time.Now().Add(heartbeatEvery(ctx))
	var v channels.View
	v.Queued = in.Queued
	show := func() error {
		if err := rd.Show(ctx, &v); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// A live update is best effort: the final reply settles it.
			r.log().Warn("channel live update failed", "kind", in.Reply.Kind, "turn", in.Turn, "error", err)
		}
		return r.saveRef(ctx, in.Session, refKey(in.Turn, in.Ref), rd, &saved)
	}
	if v.Queued {
		if err := show(); err != nil {
			return err
		}
	}
	for {
		select {
		case ev, ok := <-events:
			if !ok || ev.IsTerminal() {
				if err := show(); err != nil {
					return err
				}
				return ctx.Err()
			}
			switch ev.Type {
			case agent.TypeApprovalRequested, agent.TypeApprovalResolved:
				r.approval(ctx, in, ev)
			case agent.TypeQuestionAsked:
				r.question(ctx, in, ev)
			}
			if v.Apply(ev) {
				if err := show(); err != nil {
					return err
				}
			}
		case now := <-ticker.C:
			if !now.Before(beat) { // a reply shorter than that sends none
				activity.RecordHeartbeat(ctx)
				beat = now.Add(heartbeatEvery(ctx))
			}
			if err := show(); err != nil {
				return err
			}
		case <-stopped:
			return feed.ErrStopped
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// approval asks for a decision where the conversation is, when the
// channel can (channels.Asker): the waiting call with its buttons, then the
// same message settled to the decision. The message's reference is kept
// under (session, turn#approval:call), so a retried stream asks once.
// Best effort: the wait has its deadline and the HTTP route either way.
func (r *Replies) approval(ctx context.Context, in wire.StreamInput, ev agent.Event) {
	asker, ok := r.Repliers[in.Reply.Kind].(channels.Asker)
	if !ok {
		return
	}
	target, key, ref, ok := r.waitMessage(ctx, in, ev, "#approval:")
	if !ok {
		return
	}
	var err error
	switch {
	case ev.Type == agent.TypeApprovalRequested && ref == "":
		ref, err = asker.Ask(ctx, target, in.Session, ev)
		if err == nil {
			err = r.Store.SaveReply(ctx, in.Session, key, ref)
		}
	case ev.Type == agent.TypeApprovalResolved && ref != "":
		err = asker.Settle(ctx, target, ref, ev)
	}
	if err != nil {
		r.log().Warn("approval message failed", "kind", in.Reply.Kind, "session", in.Session, "call", ev.ID, "event", ev.Type, "error", err)
	}
}

// question shows the agent's question where the conversation is, when the
// channel can (channels.Questioner), once: its reference is kept under
// (session, turn#question:call). Best effort: the question also waits on
// the HTTP route until its deadline.
func (r *Replies) question(ctx context.Context, in wire.StreamInput, ev agent.Event) {
	q, ok := r.Repliers[in.Reply.Kind].(channels.Questioner)
	if !ok {
		return
	}
	target, key, ref, ok := r.waitMessage(ctx, in, ev, "#question:")
	if !ok || ref != "" {
		return
	}
	ref, err := q.Question(ctx, target, ev)
	if err == nil {
		err = r.Store.SaveReply(ctx, in.Session, key, ref)
	}
	if err != nil {
		r.log().Warn("question message failed", "kind", in.Reply.Kind, "session", in.Session, "call", ev.ID, "error", err)
	}
}

// waitMessage reads what the channel message of a wait for a person (an
// approval, a question) needs: the reply target, the key its reference is
// kept under (turn + kind + call) and the reference when it was posted
// ("" when not yet); ok is false when either cannot be read.
func (r *Replies) waitMessage(ctx context.Context, in wire.StreamInput, ev agent.Event, kind string) (target wire.Target, key, ref string, ok bool) {
	if err := json.Unmarshal(in.Reply.Data, &target); err != nil {
		return target, "", "", false
	}
	target.Turn = in.Turn
	key = in.Turn + kind + ev.ID
	ref, err := r.Store.Reply(ctx, in.Session, key)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		r.log().Warn("reading a channel message's reference failed", "session", in.Session, "key", key, "error", err)
		return target, key, "", false
	}
	return target, key, ref, true
}

// Fetch resolves in's attachments into its prompt through the channel's
// Fetcher; a channel without one leaves the prompt as it is, saying so.
func (r *Replies) Fetch(ctx context.Context, in wire.FetchInput) (agent.Prompt, error) {
	rp := r.Repliers[in.Reply.Kind]
	var target wire.Target
	if err := json.Unmarshal(in.Reply.Data, &target); err != nil {
		return in.Prompt, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("fetch: bad %s reply target: %v", in.Reply.Kind, err), agent.CodeInvalidCommand, nil)
	}
	target.Turn = in.Turn
	f, ok := rp.(channels.Fetcher)
	if !ok || len(target.Attachments)+len(target.Background) == 0 {
		if n := len(target.Attachments) + len(target.Background); n > 0 {
			in.Prompt.Text += fmt.Sprintf("\n\n(%d attached file(s) could not be read: this channel does not fetch files.)", n)
		}
		return in.Prompt, nil
	}
	p := in.Prompt
	if len(target.Attachments) > 0 {
		var err error
		p, err = f.Fetch(ctx, target, in.Prompt, r.Dir)
		if err != nil && channels.IsPermanent(err) {
			// A retry cannot fix it (a file over the cap, a refused host).
			return in.Prompt, temporal.NewNonRetryableApplicationError(err.Error(), agent.CodeInvalidCommand, nil)
		}
		if err != nil {
			return p, err
		}
	}
	return r.background(ctx, f, target, p), nil
}

// background adds the files of the buffered discussion folded into the
// turn as background input: each one is fetched on its own, and one that
// cannot be (or is past the prompt's image budget) is named instead — it
// never fails the turn.
func (r *Replies) background(ctx context.Context, f channels.Fetcher, target wire.Target, p agent.Prompt) agent.Prompt {
	if len(target.Background) == 0 {
		return p
	}
	budget := int64(channels.DefaultMaxImagesBytes)
	for _, im := range p.Images {
		budget -= int64(len(im.Data)) * 3 / 4
	}
	var lines []string
	for _, a := range target.Background {
		one := target
		one.Attachments, one.Background = []wire.Attachment{a}, nil
		got, err := f.Fetch(ctx, one, agent.Prompt{}, r.Dir)
		if err != nil {
			r.log().Warn("channel: background file not read", "turn", target.Turn, "file", a.Name, "error", err)
			lines = append(lines, fmt.Sprintf("[file %s could not be read: %v]", a.Name, err))
			continue
		}
		var size int64
		for _, im := range got.Images {
			size += int64(len(im.Data)) * 3 / 4
		}
		if size > budget {
			lines = append(lines, fmt.Sprintf("[image %s left out: the prompt's image budget is spent]", a.Name))
			continue
		}
		budget -= size
		p.Images = append(p.Images, got.Images...)
		if t := strings.TrimSpace(got.Text); t != "" {
			lines = append(lines, t)
		}
	}
	if len(lines) > 0 {
		p.Text += "\n\nFiles shared in the discussion above (background, not addressed to you):\n" + strings.Join(lines, "\n")
	}
	return p
}

// Route is the Chat.Route local activity: Signal-With-Start of in's
// delivery on its session workflow (which deduplicates it by key).
func (r *Replies) Route(ctx context.Context, in wire.RouteInput) error {
	st := r.starter(ctx)
	if st == nil {
		return temporal.NewNonRetryableApplicationError("route: this worker has no Temporal client for chat routing",
			agent.CodeInvalidCommand, nil)
	}
	return channels.SignalSession(ctx, st, r.TaskQueue, in.Session, in.Delivery)
}

// starter is the Starter, else the client of the worker running the
// activity (nil outside one).
func (r *Replies) starter(ctx context.Context) channels.Starter {
	if r.Starter != nil {
		return r.Starter
	}
	if activity.IsActivity(ctx) {
		if c := activity.GetClient(ctx); c != nil {
			return c
		}
	}
	return nil
}

// updater is the part of a Temporal client Chat.Stop needs.
type updater interface {
	UpdateWorkflow(ctx context.Context, options client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error)
}

// Stop is the Chat.Stop local activity: the abort update on in's session.
// A session that does not exist or runs no turn is not an error.
func (r *Replies) Stop(ctx context.Context, in wire.StopInput) error {
	u, ok := r.starter(ctx).(updater)
	if !ok {
		return temporal.NewNonRetryableApplicationError("stop: this worker has no Temporal client for chat control",
			agent.CodeInvalidCommand, nil)
	}
	opts := client.UpdateWorkflowOptions{
		WorkflowID:   workflows.WorkflowID(in.Session),
		UpdateName:   workflows.UpdateAbort,
		Args:         []any{workflows.AbortRequest{Reason: in.Reason}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	}
	if in.Key != "" {
		// One ID for every attempt: the session does the stop once, to
		// the turn it found running, however often it is retried.
		opts.UpdateID = "stop:" + in.Key
	}
	h, err := u.UpdateWorkflow(ctx, opts)
	var res workflows.AbortResult
	if err == nil {
		err = h.Get(ctx, &res)
	}
	var nf *serviceerror.NotFound
	var app *temporal.ApplicationError
	switch {
	case err == nil:
		r.log().Info("chat stop: turn aborted", "session", in.Session, "turn", res.Turn)
		return nil
	case errors.As(err, &nf), errors.As(err, &app) && app.Type() == agent.CodeNoActiveRun:
		return nil
	}
	return fmt.Errorf("stop: session %q: %w", in.Session, err)
}

// Drop is the Chat.Drop local activity: the abort update on in's session
// for in.Turn only while it waits in the queue (AbortRequest.Queued). A
// turn that runs or finished, or a session that does not exist, is left
// as it is. When the turn was dropped and a reply had been mounted for it
// (its reference is stored), that reply is settled to DroppedText; nothing
// is posted otherwise.
func (r *Replies) Drop(ctx context.Context, in wire.DropInput) error {
	u, ok := r.starter(ctx).(updater)
	if !ok {
		return temporal.NewNonRetryableApplicationError("drop: this worker has no Temporal client for chat control",
			agent.CodeInvalidCommand, nil)
	}
	h, err := u.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   workflows.WorkflowID(in.Session),
		UpdateName:   workflows.UpdateAbort,
		Args:         []any{workflows.AbortRequest{Turn: in.Turn, Reason: in.Reason, Queued: true}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var res workflows.AbortResult
	if err == nil {
		err = h.Get(ctx, &res)
	}
	var nf *serviceerror.NotFound
	var app *temporal.ApplicationError
	switch {
	case errors.As(err, &nf), errors.As(err, &app) && app.Type() == agent.CodeNoActiveRun:
		r.log().Info("chat drop: the deleted message's turn is not waiting; left as it is", "session", in.Session, "turn", in.Turn)
		return nil
	case err != nil:
		return fmt.Errorf("drop: session %q: %w", in.Session, err)
	}
	r.log().Info("chat drop: the deleted message's waiting turn was dropped", "session", in.Session, "turn", in.Turn)
	if in.Reply == nil {
		return nil
	}
	rd, ref, err := r.render(ctx, in.Session, refKey(in.Turn, res.Reply), *in.Reply)
	if err != nil || ref == "" {
		return err
	}
	if err := rd.Finish(ctx, DroppedText); err != nil {
		return fmt.Errorf("drop: settle the mounted reply of turn %q: %w", in.Turn, err)
	}
	return nil
}

// answer is the turn's stored answer (the step texts joined), or a short
// note when the turn stored none.
func (r *Replies) answer(ctx context.Context, in wire.ReplyInput) (string, error) {
	var steps []string
	if in.Outcome.First != "" && in.Outcome.Leaf != "" {
		var err error
		if steps, err = relay.StoredSteps(ctx, r.Store, in.Session, in.Outcome); err != nil {
			return "", storeError(err)
		}
	}
	var parts []string
	for _, s := range steps {
		if s = strings.TrimSpace(s); s != "" {
			parts = append(parts, s)
		}
	}
	if len(parts) > 0 {
		return strings.Join(parts, "\n\n"), nil
	}
	if in.Outcome.Status == agent.TypeFailed {
		return "Sorry, I could not answer: " + in.Outcome.Details, nil
	}
	return "(no answer)", nil
}

func (r *Replies) log() *slog.Logger {
	if r.Logger != nil {
		return r.Logger
	}
	return slog.Default()
}
