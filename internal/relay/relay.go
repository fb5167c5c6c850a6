// Package relay turns one turn's live-feed log and its durable outcome into
// the Agent contract's event stream: deltas and tool events in order,
// `retrying` (naming its step) whenever a model call restarts after the
// client saw partial text of that step, duplicates from retried activities
// dropped, and exactly one terminal — taken from the outcome, never guessed —
// once the feed has delivered every step the outcome covers. A step whose
// events the feed lost is filled in from the session store, so a terminal
// never follows a known gap.
//
// Every event's Seq is its position in the turn, derived from the turn's
// steps, not from the bus: Position(step, n) for the n-th event the relay
// shows of that step. Two relays (two ingresses, or one before and one after
// the log was swept, the process restarted, or on another bus) give the same
// events the same Seq, so a consumer can resume on any of them after the
// last Seq it has. A step whose start the log no longer holds is not shown
// live (its positions would not be the same); it is filled in from the store.
package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/turnusage"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// DefaultGrace is how long the relay waits, after the outcome, for the feed
// to deliver the rest of the turn before it fills the gap from the store.
const DefaultGrace = 2 * time.Second

// quietGrace replaces the grace when nothing of the turn was seen at all: a
// turn whose log has expired, answered from the store.
const quietGrace = 100 * time.Millisecond

// Terminal is a turn's outcome as the relay needs it.
type Terminal struct {
	Event agent.Event
	// Marker is the last feed marker the turn's events lead up to.
	Marker string
	// Steps is the number of model steps the turn ran (0 = unknown: no
	// fill-in is attempted).
	Steps int
	// Completed tells whether the turn completed (every step then stored a
	// reply) or failed (its last step may have stored none).
	Completed bool
	// Stored reads the turn's stored answer, one text per model step; nil
	// when there is no store to ask.
	Stored func(ctx context.Context) ([]string, error)
	// Outcome is the outcome the terminal describes (nil: none, such as a
	// failure to learn it).
	Outcome *agentloop.Outcome
}

// FromOutcome describes a finished turn to the relay.
func FromOutcome(o agentloop.Outcome, stored func(ctx context.Context) ([]string, error)) Terminal {
	return Terminal{
		Event:     o.Event(),
		Marker:    o.Marker,
		Steps:     o.Steps,
		Completed: o.Status == agent.TypeCompleted,
		Stored:    stored,
		Outcome:   &o,
	}
}

// stepScale separates a position's step from its index within the step.
const stepScale = 1_000_000_000

// Position is the Seq of the n-th event (from 1) the relay shows of model
// step step: step×10⁹ + n. Positions increase through a turn.
func Position(step, n int) int64 { return int64(step)*stepScale + int64(n) }

// SplitPosition is the inverse of Position.
func SplitPosition(seq int64) (step, n int) {
	if seq <= 0 {
		return 0, 0
	}
	return int(seq / stepScale), int(seq % stepScale)
}

// Options tune one relay.
type Options struct {
	// Grace bounds the wait for the feed after the outcome (default
	// DefaultGrace).
	Grace time.Duration
	// After is the consumer's resume cursor: events with Seq <= After were
	// already delivered and are not sent again.
	After int64
	// Stored, when set, reads the stored answer of a turn whose outcome
	// came from the feed (KindOutcome) rather than from the caller.
	Stored func(ctx context.Context, o agentloop.Outcome) ([]string, error)
	Logger *slog.Logger
	// OnTerminal, when set, is called with the terminal before it is sent.
	OnTerminal func(Terminal)
	// Follow, when set, subscribes to another turn's log: the relay then
	// shows the progress of the sub-agents the turn delegated to, as
	// delegated events (Stream sets it to the bus's Subscribe).
	Follow func(ctx context.Context, session, turn string) (feed.Subscription, error)
}

// Run relays the turn's messages from sub to yield until the terminal
// arrives (on outcome, or as the turn's KindOutcome feed message) and the
// feed has delivered the steps it covers. It returns false when yield asked
// to stop or ctx ended first (no terminal was sent then).
func Run(ctx context.Context, sub feed.Subscription, outcome <-chan Terminal, opt Options, yield func(agent.Event) bool) bool {
	ok, _ := relayTurn(ctx, sub, outcome, opt, "", yield)
	return ok
}

// relayTurn is Run for a consumer that announced itself with attach message
// self; it also returns what it read of the log (whether that message was
// read, and whether another consumer attached after it).
func relayTurn(ctx context.Context, sub feed.Subscription, outcome <-chan Terminal, opt Options, self string, yield func(agent.Event) bool) (bool, *state) {
	grace := opt.Grace
	if grace <= 0 {
		grace = DefaultGrace
	}
	r := newState()
	r.self = self
	var (
		term     *Terminal
		deadline <-chan time.Time
		msgs     = sub.C()
	)
	emit := func(ev agent.Event) bool {
		if ev.Seq <= opt.After && !ev.IsTerminal() {
			return true
		}
		return yield(ev)
	}
	// Sub-agents' events are live progress: a consumer that resumes is
	// not sent them again (they have no position).
	live := func(ev agent.Event) bool { return opt.After > 0 || yield(ev) }
	r.progress = func(ev agent.Event) bool {
		// A tool's progress has no position either; a consumer that
		// resumes gets what comes after its cursor in the log.
		if opt.After > 0 && Position(r.cur, r.shown[r.cur]) < opt.After {
			return true
		}
		return yield(ev)
	}
	subs := newSubAgents(ctx, opt.Follow)
	defer subs.close()
	setTerm := func(t Terminal) {
		term = &t
		outcome = nil
		wait := grace
		if !r.seen || (!t.Completed && len(r.missing(t)) == 0) {
			wait = min(grace, quietGrace)
		}
		timer := time.NewTimer(wait)
		deadline = timer.C
	}
	for {
		if term != nil && (r.complete(*term) || msgs == nil) {
			return showLive(subs, live) && r.finish(ctx, *term, opt, emit), r
		}
		select {
		case <-ctx.Done():
			return false, r
		case t := <-outcome:
			setTerm(t)
		case <-deadline:
			return showLive(subs, live) && r.finish(ctx, *term, opt, emit), r
		case m, ok := <-msgs:
			if !ok {
				msgs = nil
				continue
			}
			r.observe(m)
			if m.Kind == feed.KindOutcome && term == nil {
				var o agentloop.Outcome
				if json.Unmarshal(m.Outcome, &o) == nil {
					var stored func(context.Context) ([]string, error)
					if opt.Stored != nil {
						stored = func(ctx context.Context) ([]string, error) { return opt.Stored(ctx, o) }
					}
					setTerm(FromOutcome(o, stored))
				}
				continue
			}
			if !r.show(m, subs, emit, live) {
				return false, r
			}
		case <-subs.wakeC():
			if !showLive(subs, live) {
				return false, r
			}
		}
	}
}

// observe records what message m tells about the log: whether this
// consumer's attach message was read, whether another consumer attached
// after it, whether the turn has said anything, and whether its outcome
// was read.
func (r *state) observe(m feed.Message) {
	switch {
	case m.Kind == feed.KindAttach && m.Attach == r.self:
		r.selfSeen = true
	case m.Kind == feed.KindAttach:
		if r.selfSeen {
			r.attachedAfter = true
		}
	default:
		r.seen = true // consumers attaching say nothing about the turn
	}
	if m.Kind == feed.KindOutcome {
		r.outcomeSeen = true
	}
}

// show relays the events of message m: each gets its position; a
// delegate call's sub-agent is followed from its tool_started, and its
// last events are shown before the call's tool_ended.
func (r *state) show(m feed.Message, subs *subAgents, emit, live func(agent.Event) bool) bool {
	for _, ev := range r.handle(m) {
		switch ev.Type {
		case agent.TypeToolStarted:
			subs.started(m.Session, m.Turn, ev)
		case agent.TypeToolEnded:
			subs.ended(m.Session, m.Turn, ev)
			if !showLive(subs, live) {
				return false
			}
		}
		if ev.Type == agent.TypeToolProgress {
			ev.Seq = 0
			if !r.progress(ev) {
				return false
			}
			continue
		}
		ev.Seq = r.position(m.Step)
		if !emit(ev) {
			return false
		}
	}
	return true
}

// showLive shows the sub-agents' queued events.
func showLive(subs *subAgents, live func(agent.Event) bool) bool {
	for _, ev := range subs.take() {
		if !live(ev) {
			return false
		}
	}
	return true
}

// state tracks what the consumer has been shown (or, below the resume
// cursor, had been shown before).
type state struct {
	self          string          // this consumer's attach ID
	selfSeen      bool            // its attach message was read
	attachedAfter bool            // another consumer attached after it
	seen          bool            // any message of the turn (not an attach) arrived
	outcomeSeen   bool            // the turn's outcome message arrived
	cur           int             // step of the last position given out
	shown         map[int]int     // step → events given a position in it
	begun         map[int]bool    // step → its first attempt's start arrived
	attempt       map[int]int     // step → latest attempt seen
	textSeen      map[int]bool    // step → text shown since the last restart
	announced     map[[2]int]bool // (step, attempt) → retrying already shown
	stepDone      map[int]bool    // step → its model end marker arrived
	started       map[string]bool
	ended         map[string]bool
	markers       map[string]bool
	approvals     map[string]bool // approval event type + call ID → shown
	// progress shows a tool_progress event (live, without a position).
	progress func(agent.Event) bool
}

func newState() *state {
	return &state{
		shown:     map[int]int{},
		begun:     map[int]bool{},
		attempt:   map[int]int{},
		textSeen:  map[int]bool{},
		announced: map[[2]int]bool{},
		stepDone:  map[int]bool{},
		started:   map[string]bool{},
		ended:     map[string]bool{},
		markers:   map[string]bool{},
		approvals: map[string]bool{},
	}
}

// complete reports whether the feed delivered everything the outcome covers.
// A failed turn's last step has no end marker to wait for; its partial text
// is known to be all there only once the turn's outcome message is read, so
// until then the relay lets the (short) settle time run out.
func (r *state) complete(t Terminal) bool {
	if t.Marker != "" && !r.markers[t.Marker] {
		return false
	}
	if !t.Completed && t.Steps > 0 && !r.outcomeSeen {
		return false
	}
	return len(r.missing(t)) == 0
}

// missing lists the model steps of the turn the feed did not deliver whole:
// whose end marker never arrived, or whose start (or an earlier step's) the
// log no longer holds.
func (r *state) missing(t Terminal) []int {
	last := t.Steps
	if !t.Completed {
		last-- // a failed turn's last step may have stored nothing
	}
	var out []int
	for s := 1; s <= last; s++ {
		if !r.stepDone[s] || !r.intact(s) {
			out = append(out, s)
		}
	}
	return out
}

// intact reports whether the log holds step s and every step before it from
// its start: only then are the step's events shown live (their positions
// are the same for every relay of the turn).
func (r *state) intact(s int) bool {
	for t := 1; t <= s; t++ {
		if !r.begun[t] {
			return false
		}
	}
	return true
}

// position gives the next event of step s (of the step shown last, if
// that is later) its Seq.
func (r *state) position(s int) int64 {
	r.cur = max(r.cur, s)
	r.shown[r.cur]++
	return Position(r.cur, r.shown[r.cur])
}

// finish fills in the steps the feed lost, from the store, then sends the
// terminal. A gap that cannot be filled is reported as a retryable failure
// of the stream (resending the key re-attaches), never as a cut-off answer
// that looks complete.
func (r *state) finish(ctx context.Context, t Terminal, opt Options, emit func(agent.Event) bool) bool {
	if opt.OnTerminal != nil {
		opt.OnTerminal(t)
	}
	atStep, atN := SplitPosition(opt.After)
	if missing := r.missing(t); len(missing) > 0 && t.Steps > 0 {
		texts, err := readStored(ctx, t)
		if err != nil {
			log(opt).Warn("relay: the live feed lost part of a turn and the stored answer could not be read", "error", err)
			ev := agent.Failed("the answer could not be read back from the session store ("+err.Error()+
				"); the turn itself is not lost: resend the same Idempotency-Key to get it", true, "")
			ev.Seq = r.position(0)
			emit(ev)
			return true
		}
		for _, s := range missing {
			if s < atStep {
				continue // the consumer was shown this step whole before
			}
			// The store's text follows what this relay (and, before a
			// resume, another) showed of the step.
			if s == atStep {
				r.shown[s] = max(r.shown[s], atN)
			}
			r.cur = max(r.cur, s)
			if r.textSeen[s] || (s == atStep && atN > 0) {
				if !emit(agent.Event{Type: agent.TypeRetrying, Step: s, Attempt: r.attempt[s],
					Reason: "the live feed lost part of this step; its stored text follows", Seq: r.position(s)}) {
					return false
				}
			}
			if s <= len(texts) && texts[s-1] != "" {
				if !emit(agent.Event{Type: agent.TypeText, Step: s, Delta: texts[s-1], Seq: r.position(s)}) {
					return false
				}
			}
		}
	}
	ev := t.Event
	ev.Seq = r.position(0)
	emit(ev)
	return true
}

// readStored asks the store for the turn's answer, retrying briefly: a
// store blip must not turn a finished answer into a failure.
func readStored(ctx context.Context, t Terminal) ([]string, error) {
	if t.Stored == nil {
		return nil, errors.New("no session store is configured on this ingress")
	}
	var err error
	for i := 0; i < 5; i++ {
		var texts []string
		if texts, err = t.Stored(ctx); err == nil {
			return texts, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Duration(200*(i+1)) * time.Millisecond):
		}
	}
	return nil, err
}

func (r *state) handle(m feed.Message) []agent.Event {
	if m.Kind == feed.KindAttempt && m.Attempt <= 1 && r.attempt[m.Step] == 0 {
		r.begun[m.Step] = true
	}
	if m.Kind != feed.KindEnd && m.Step > 0 && !r.intact(m.Step) {
		// The log lost the start of this step (or of one before it): its
		// events are filled in from the store once the turn ends.
		if m.Kind == feed.KindAttempt {
			r.attempt[m.Step] = max(r.attempt[m.Step], m.Attempt)
		}
		return nil
	}
	switch m.Kind {
	case feed.KindEnd:
		r.markers[m.Marker] = true
		if m.Step > 0 {
			r.stepDone[m.Step] = true
		}
		return nil
	case feed.KindAttempt:
		prev := r.attempt[m.Step]
		if m.Attempt <= prev {
			return nil
		}
		r.attempt[m.Step] = m.Attempt
		var out []agent.Event
		if prev > 0 && r.textSeen[m.Step] && !r.announced[[2]int{m.Step, m.Attempt}] {
			r.announced[[2]int{m.Step, m.Attempt}] = true
			out = append(out, agent.Event{
				Type:        agent.TypeRetrying,
				Step:        m.Step,
				Attempt:     m.Attempt,
				MaxAttempts: m.MaxAttempts,
				Reason:      "the model call restarted after an interruption; discard this step's partial text",
			})
		}
		r.textSeen[m.Step] = false
		return out
	case feed.KindEvent:
	default:
		return nil
	}
	if m.Event == nil {
		return nil
	}
	ev := *m.Event
	if !r.admit(m, &ev) {
		return nil
	}
	return []agent.Event{ev}
}

// admit says whether the event ev of m is shown, deduplicating what a
// retried producer sends again; it sets ev's step where the feed knows it.
func (r *state) admit(m feed.Message, ev *agent.Event) bool {
	switch ev.Type {
	case agent.TypeText, agent.TypeThinking:
		if m.Attempt != 0 && m.Attempt < r.attempt[m.Step] {
			return false // a late delta of a superseded attempt
		}
		ev.Step = m.Step
		r.textSeen[m.Step] = true
	case agent.TypeRetrying:
		if ev.Step == 0 {
			ev.Step = m.Step
		}
		key := [2]int{ev.Step, ev.Attempt}
		if r.announced[key] {
			return false
		}
		r.announced[key] = true
		r.textSeen[ev.Step] = false
	case agent.TypeToolStarted:
		if r.started[ev.ID] {
			return false
		}
		r.started[ev.ID] = true
	case agent.TypeToolProgress:
		if r.ended[ev.ID] {
			return false // a late report of a call that has ended
		}
	case agent.TypeToolEnded:
		if r.ended[ev.ID] {
			return false
		}
		r.ended[ev.ID] = true
	case agent.TypeApprovalRequested, agent.TypeApprovalResolved, agent.TypeQuestionAsked, agent.TypeQuestionAnswered:
		// A retried or replayed Feed.Publish sends the same decision again.
		key := ev.Type + "\x00" + ev.ID
		if r.approvals[key] {
			return false
		}
		r.approvals[key] = true
	case agent.TypeCompleted, agent.TypeFailed:
		return false // terminals come from the outcome only
	}
	return true
}

func log(opt Options) *slog.Logger {
	if opt.Logger != nil {
		return opt.Logger
	}
	return slog.Default()
}

// StreamOptions tune Stream.
type StreamOptions struct {
	Options
	// DetachGrace is how long a turn whose consumer went away keeps running
	// unattached before Abort is called; 0 calls it at once.
	DetachGrace time.Duration
	// Abort stops the turn. Nil means the turn's run is simply cancelled
	// (the in-process agent).
	Abort func(ctx context.Context)
	// Ended, when set, is called once, when the turn's work this consumer
	// started (or joined) is over: its run returned after the terminal or
	// an abort, or — for a turn kept running for another consumer — when
	// the turn ended. A door holds an admission place until then.
	Ended func()
}

// withFollow returns the options with Follow set to bus's Subscribe when
// they set none: a streamed turn shows its sub-agents' progress.
func (o StreamOptions) withFollow(bus feed.Bus) Options {
	if o.Follow == nil {
		o.Follow = bus.Subscribe
	}
	return o.Options
}

// reporting returns o reporting the turn's usage (turnusage) before its
// terminal is sent, so a door that charges it sees the charge before the
// caller can send its next turn.
func reporting(ctx context.Context, bus feed.Bus, o Options, session, turn string) Options {
	o.OnTerminal = func(t Terminal) {
		if t.Outcome != nil {
			turnusage.Send(ctx, bus, session, turn, *t.Outcome)
		}
	}
	return o
}

// abortSettle bounds the wait for a turn's run to return after an abort.
const abortSettle = 30 * time.Second

// Stream runs one turn behind a relay: it subscribes to the turn's log,
// announces the attach, carries out the turn with run in the background and
// relays until the terminal. When the consumer stops first, the turn is
// aborted at once (DetachGrace 0), or detached: it keeps running, and is
// aborted only if no other consumer attaches within DetachGrace. Another
// consumer that attached while this one's stream was still open counts:
// the turn is then theirs. When ctx was cancelled with ErrHandOff nothing
// is aborted. It reports whether the terminal was sent.
func Stream(ctx context.Context, bus feed.Bus, session, turn string, opt StreamOptions,
	run func(ctx context.Context) Terminal, yield func(agent.Event) bool) bool {
	ended := func() {
		if opt.Ended != nil {
			opt.Ended()
		}
	}
	sub, err := bus.Subscribe(ctx, session, turn)
	if err != nil {
		yield(agent.Failed("live feed unavailable: "+err.Error(), true, ""))
		ended()
		return true
	}
	me := newAttachID()
	_ = bus.Publish(ctx, feed.Message{Session: session, Turn: turn, Kind: feed.KindAttach, Attach: me})

	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	outcome := make(chan Terminal, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		outcome <- run(rctx)
	}()
	// settle waits for the run to return (at most wait), then ends it.
	settle := func(wait time.Duration) {
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-done:
			case <-t.C:
			}
			t.Stop()
		}
		cancel()
		<-done
		ended()
	}
	ok, r := relayTurn(ctx, sub, outcome, reporting(ctx, bus, opt.withFollow(bus), session, turn), me, yield)
	if ok {
		_ = sub.Close()
		settle(0)
		return true
	}
	switch {
	case errors.Is(context.Cause(ctx), agent.ErrHandOff):
		_ = sub.Close()
		cancel()
		go settle(0)
	case opt.Abort == nil:
		_ = sub.Close()
		settle(0)
	case opt.DetachGrace <= 0:
		_ = sub.Close()
		abort(ctx, opt.Abort)
		go settle(abortSettle)
	default:
		go func() {
			back := r.attachedAfter || reattached(sub, me, r.selfSeen, done, opt.DetachGrace)
			_ = sub.Close()
			if !back {
				abort(ctx, opt.Abort)
				settle(abortSettle)
				return
			}
			<-done // the turn runs on for the consumer that came back
			settle(0)
		}()
	}
	return false
}

// reattached waits up to grace for another consumer to attach to the turn
// after this one did (true) or for the turn to end (true); false when
// neither happened. selfSeen says whether this consumer's own attach message
// was already read: attach messages before it are older consumers'.
func reattached(sub feed.Subscription, me string, selfSeen bool, done <-chan struct{}, grace time.Duration) bool {
	timer := time.NewTimer(grace)
	defer timer.Stop()
	msgs := sub.C()
	for {
		select {
		case <-done:
			return true
		case <-timer.C:
			return false
		case m, ok := <-msgs:
			if !ok {
				msgs = nil
				continue
			}
			if m.Kind == feed.KindAttach {
				if m.Attach == me {
					selfSeen = true
				} else if selfSeen {
					return true
				}
			}
			if m.Kind == feed.KindOutcome {
				return true
			}
		}
	}
}

func abort(ctx context.Context, f func(context.Context)) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	f(actx)
}

func newAttachID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
