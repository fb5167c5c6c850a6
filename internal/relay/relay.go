// Package relay turns one turn's live-feed messages and its durable outcome
// into the Agent contract's event stream: deltas and tool events in order,
// `retrying` whenever a model call restarts after the client saw partial
// text, duplicates from retried activities dropped, and exactly one terminal
// — taken from the outcome, never guessed — after the feed has caught up to
// the marker the outcome names.
package relay

import (
	"context"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/feed"
)

// DefaultGrace is how long the relay waits, after the outcome, for the feed
// to deliver the outcome's marker. The feed is at-most-once; a lost marker
// must delay the terminal, never suppress it.
const DefaultGrace = 2 * time.Second

// quietGrace replaces the grace when nothing of the turn was seen at all: a
// redelivered key answered from the session's memory, whose events were
// published long ago.
const quietGrace = 100 * time.Millisecond

// Terminal is a turn's outcome as the relay needs it.
type Terminal struct {
	Event  agent.Event
	Marker string
}

// Run relays messages of turn from sub to yield until the terminal arrives on
// outcome and the feed has caught up with its marker. It returns false when
// yield asked to stop or ctx ended first (no terminal was sent then).
func Run(ctx context.Context, sub feed.Subscription, turn string, outcome <-chan Terminal, grace time.Duration, yield func(agent.Event) bool) bool {
	if grace <= 0 {
		grace = DefaultGrace
	}
	r := state{
		attempt:   map[int]int{},
		textSeen:  map[int]bool{},
		announced: map[[2]int]bool{},
		started:   map[string]bool{},
		ended:     map[string]bool{},
		markers:   map[string]bool{},
	}
	var (
		term     *Terminal
		deadline <-chan time.Time
		msgs     = sub.C()
	)
	for {
		if term != nil && (term.Marker == "" || r.markers[term.Marker] || msgs == nil) {
			yield(term.Event)
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case t := <-outcome:
			term = &t
			outcome = nil
			wait := grace
			if !r.seen {
				wait = min(grace, quietGrace)
			}
			timer := time.NewTimer(wait)
			defer timer.Stop()
			deadline = timer.C
		case <-deadline:
			yield(term.Event)
			return true
		case m, ok := <-msgs:
			if !ok {
				msgs = nil
				continue
			}
			if m.Turn != turn {
				continue
			}
			r.seen = true
			for _, ev := range r.handle(m) {
				if !yield(ev) {
					return false
				}
			}
		}
	}
}

// state tracks what the client has been shown.
type state struct {
	seen      bool            // any message of the turn arrived
	attempt   map[int]int     // step → latest attempt seen
	textSeen  map[int]bool    // step → text shown since the last restart
	announced map[[2]int]bool // (step, attempt) → retrying already shown
	started   map[string]bool
	ended     map[string]bool
	markers   map[string]bool
}

func (r *state) handle(m feed.Message) []agent.Event {
	switch m.Kind {
	case feed.KindEnd:
		r.markers[m.Marker] = true
		return nil
	case feed.KindAttempt:
		prev := r.attempt[m.Step]
		if m.Attempt <= prev {
			return nil
		}
		r.attempt[m.Step] = m.Attempt
		var out []agent.Event
		if prev > 0 && r.textSeen[m.Step] && !r.announced[[2]int{m.Step, m.Attempt}] {
			out = append(out, agent.Event{
				Type:        agent.TypeRetrying,
				Attempt:     m.Attempt,
				MaxAttempts: m.MaxAttempts,
				Reason:      "the model call restarted after an interruption; discard the partial answer",
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
		r.textSeen[m.Step] = true
	case agent.TypeRetrying:
		key := [2]int{m.Step, ev.Attempt}
		if r.announced[key] {
			return nil
		}
		r.announced[key] = true
		r.textSeen[m.Step] = false
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

// Stream runs one turn behind a relay: it subscribes to the session's feed
// (before the turn can publish anything), carries out the turn with run in
// the background and relays until the terminal. When the consumer stops
// first it cancels run's context, waits for run to return and reports false.
func Stream(ctx context.Context, bus feed.Bus, session, turn string, grace time.Duration,
	run func(ctx context.Context) Terminal, yield func(agent.Event) bool) bool {
	sub, err := bus.Subscribe(ctx, session)
	if err != nil {
		yield(agent.Failed("live feed unavailable: "+err.Error(), true, ""))
		return true
	}
	defer sub.Close()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	outcome := make(chan Terminal, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		outcome <- run(rctx)
	}()
	ok := Run(ctx, sub, turn, outcome, grace, yield)
	cancel()
	<-done
	return ok
}
