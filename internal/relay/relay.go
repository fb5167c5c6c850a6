// Package relay turns one turn's live-feed log and its durable outcome into
// the Agent contract's event stream: deltas and tool events in order,
// `retrying` (naming its step) whenever a model call restarts after the
// client saw partial text of that step, duplicates from retried activities
// dropped, and exactly one terminal — taken from the outcome, never guessed —
// once the feed has delivered every step the outcome covers. A step whose
// events the feed lost is filled in from the session store, so a terminal
// never follows a known gap.
//
// The relay is a deterministic function of the turn's log: two relays (two
// ingresses) reading the same log emit the same events with the same Seq, so
// a consumer can resume on any of them after the last Seq it has.
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
}

// FromOutcome describes a finished turn to the relay.
func FromOutcome(o agentloop.Outcome, stored func(ctx context.Context) ([]string, error)) Terminal {
	return Terminal{
		Event:     o.Event(),
		Marker:    o.Marker,
		Steps:     o.Steps,
		Completed: o.Status == agent.TypeCompleted,
		Stored:    stored,
	}
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
}

// Run relays the turn's messages from sub to yield until the terminal
// arrives (on outcome, or as the turn's KindOutcome feed message) and the
// feed has delivered the steps it covers. It returns false when yield asked
// to stop or ctx ended first (no terminal was sent then).
func Run(ctx context.Context, sub feed.Subscription, outcome <-chan Terminal, opt Options, yield func(agent.Event) bool) bool {
	ok, _ := relayTurn(ctx, sub, outcome, opt, "", yield)
	return ok
}

// relayTurn is Run for a consumer that announced itself with attach message self;
// it also reports whether that message was read.
func relayTurn(ctx context.Context, sub feed.Subscription, outcome <-chan Terminal, opt Options, self string, yield func(agent.Event) bool) (bool, bool) {
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
			return r.finish(ctx, *term, opt, emit), r.selfSeen
		}
		select {
		case <-ctx.Done():
			return false, r.selfSeen
		case t := <-outcome:
			setTerm(t)
		case <-deadline:
			return r.finish(ctx, *term, opt, emit), r.selfSeen
		case m, ok := <-msgs:
			if !ok {
				msgs = nil
				continue
			}
			r.seen = true
			r.seq = max(r.seq, m.Seq)
			if m.Kind == feed.KindAttach && m.Attach == r.self {
				r.selfSeen = true
			}
			if m.Kind == feed.KindOutcome {
				r.outcomeSeen = true
			}
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
			for _, ev := range r.handle(m) {
				ev.Seq = m.Seq
				if !emit(ev) {
					return false, r.selfSeen
				}
			}
		}
	}
}

// state tracks what the consumer has been shown (or, below the resume
// cursor, had been shown before).
type state struct {
	self        string          // this consumer's attach ID
	selfSeen    bool            // its attach message was read
	seen        bool            // any message of the turn arrived
	outcomeSeen bool            // the turn's outcome message arrived
	seq         int64           // highest Seq seen
	attempt     map[int]int     // step → latest attempt seen
	textSeen    map[int]bool    // step → text shown since the last restart
	announced   map[[2]int]bool // (step, attempt) → retrying already shown
	stepDone    map[int]bool    // step → its model end marker arrived
	started     map[string]bool
	ended       map[string]bool
	markers     map[string]bool
}

func newState() *state {
	return &state{
		attempt:   map[int]int{},
		textSeen:  map[int]bool{},
		announced: map[[2]int]bool{},
		stepDone:  map[int]bool{},
		started:   map[string]bool{},
		ended:     map[string]bool{},
		markers:   map[string]bool{},
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

// missing lists the model steps of the turn whose end marker never arrived.
func (r *state) missing(t Terminal) []int {
	last := t.Steps
	if !t.Completed {
		last-- // a failed turn's last step may have stored nothing
	}
	var out []int
	for s := 1; s <= last; s++ {
		if !r.stepDone[s] {
			out = append(out, s)
		}
	}
	return out
}

// finish fills in the steps the feed lost, from the store, then sends the
// terminal. A gap that cannot be filled is reported as a retryable failure
// of the stream (resending the key re-attaches), never as a cut-off answer
// that looks complete.
func (r *state) finish(ctx context.Context, t Terminal, opt Options, emit func(agent.Event) bool) bool {
	seq := r.seq
	next := func(ev agent.Event) bool {
		seq++
		ev.Seq = seq
		return emit(ev)
	}
	if missing := r.missing(t); len(missing) > 0 && t.Steps > 0 {
		texts, err := readStored(ctx, t)
		if err != nil {
			log(opt).Warn("relay: the live feed lost part of a turn and the stored answer could not be read", "error", err)
			next(agent.Failed("the answer could not be read back from the session store ("+err.Error()+
				"); the turn itself is not lost: resend the same Idempotency-Key to get it", true, ""))
			return true
		}
		for _, s := range missing {
			if r.textSeen[s] {
				if !next(agent.Event{Type: agent.TypeRetrying, Step: s, Attempt: r.attempt[s],
					Reason: "the live feed lost part of this step; its stored text follows"}) {
					return false
				}
			}
			if s <= len(texts) && texts[s-1] != "" {
				if !next(agent.Event{Type: agent.TypeText, Step: s, Delta: texts[s-1]}) {
					return false
				}
			}
		}
	}
	next(t.Event)
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
	switch ev.Type {
	case agent.TypeText, agent.TypeThinking:
		if m.Attempt != 0 && m.Attempt < r.attempt[m.Step] {
			return nil // a late delta of a superseded attempt
		}
		ev.Step = m.Step
		r.textSeen[m.Step] = true
	case agent.TypeRetrying:
		if ev.Step == 0 {
			ev.Step = m.Step
		}
		key := [2]int{ev.Step, ev.Attempt}
		if r.announced[key] {
			return nil
		}
		r.announced[key] = true
		r.textSeen[ev.Step] = false
	case agent.TypeToolStarted:
		if r.started[ev.ID] {
			return nil
		}
		r.started[ev.ID] = true
	case agent.TypeToolEnded:
		if r.ended[ev.ID] {
			return nil
		}
		r.ended[ev.ID] = true
	case agent.TypeCompleted, agent.TypeFailed:
		return nil // terminals come from the outcome only
	}
	return []agent.Event{ev}
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
}

// Stream runs one turn behind a relay: it subscribes to the turn's log,
// announces the attach, carries out the turn with run in the background and
// relays until the terminal. When the consumer stops first, the turn is
// detached: it keeps running, and is aborted only if no other consumer
// attaches within DetachGrace (unless ctx was cancelled with ErrHandOff:
// then nothing is aborted). It reports whether the terminal was sent.
func Stream(ctx context.Context, bus feed.Bus, session, turn string, opt StreamOptions,
	run func(ctx context.Context) Terminal, yield func(agent.Event) bool) bool {
	sub, err := bus.Subscribe(ctx, session, turn)
	if err != nil {
		yield(agent.Failed("live feed unavailable: "+err.Error(), true, ""))
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
	ok, selfSeen := relayTurn(ctx, sub, outcome, opt.Options, me, yield)
	if ok {
		cancel()
		<-done
		_ = sub.Close()
		return true
	}
	switch {
	case errors.Is(context.Cause(ctx), agent.ErrHandOff):
		cancel()
		_ = sub.Close()
	case opt.Abort == nil:
		cancel()
		<-done
		_ = sub.Close()
	case opt.DetachGrace <= 0:
		abort(ctx, opt.Abort)
		cancel()
		_ = sub.Close()
	default:
		go func() {
			defer func() { _ = sub.Close() }()
			defer cancel()
			if !reattached(sub, me, selfSeen, done, opt.DetachGrace) {
				abort(ctx, opt.Abort)
			}
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
