package relay

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// subAgentDrain bounds the wait, when a delegate call ends, for its
// sub-agent's last events to be read before the call's tool_ended.
const subAgentDrain = 2 * time.Second

// subAgents follows the feeds of the sub-agents a turn delegated to and
// queues their events, wrapped as delegated events, for the relay to show
// live. A sub-agent's own delegations are followed too, wrapped once more.
type subAgents struct {
	ctx    context.Context
	follow func(ctx context.Context, session, turn string) (feed.Subscription, error)
	wake   chan struct{} // signalled when events are queued

	mu      sync.Mutex
	pending []agent.Event
	done    map[string]chan struct{} // delegate call (callKey) → its follower ended
	subs    []feed.Subscription
	closed  bool
}

// newSubAgents returns the followers of a turn's sub-agents; nil (which
// follows nothing) when follow is nil.
func newSubAgents(ctx context.Context, follow func(context.Context, string, string) (feed.Subscription, error)) *subAgents {
	if follow == nil {
		return nil
	}
	return &subAgents{ctx: ctx, follow: follow, wake: make(chan struct{}, 1), done: map[string]chan struct{}{}}
}

// started follows the sub-agent of a delegate call's tool_started event
// (of the turn of session); other events are ignored.
func (d *subAgents) started(session, turn string, ev agent.Event) {
	d.start(session, turn, ev, func(e agent.Event) agent.Event { return e })
}

func (d *subAgents) start(session, turn string, ev agent.Event, wrap func(agent.Event) agent.Event) {
	if d == nil || d.follow == nil || ev.Type != agent.TypeToolStarted || ev.Name != agentloop.DelegateTool {
		return
	}
	var args struct {
		Agent   string `json:"agent"`
		Session string `json:"session"`
	}
	_ = json.Unmarshal(ev.Args, &args)
	child, childTurn := agentloop.DelegateStore(session, turn, ev.ID, args.Agent, args.Session)
	call := callKey(session, turn, ev.ID)
	d.mu.Lock()
	if d.closed || d.done[call] != nil {
		d.mu.Unlock()
		return
	}
	fin := make(chan struct{})
	d.done[call] = fin
	d.mu.Unlock()
	sub, err := d.follow(d.ctx, child, childTurn)
	if err != nil {
		close(fin)
		return
	}
	d.mu.Lock()
	d.subs = append(d.subs, sub)
	d.mu.Unlock()
	inner := func(e agent.Event) agent.Event { return wrap(agent.Delegated(ev.ID, args.Agent, e)) }
	go d.forward(child, childTurn, sub, inner, fin)
}

// forward reads one sub-agent's feed until its outcome, deduplicated as
// the relay deduplicates a turn, and queues its events wrapped.
func (d *subAgents) forward(child, childTurn string, sub feed.Subscription, wrap func(agent.Event) agent.Event, fin chan struct{}) {
	defer close(fin)
	r := newState()
	for m := range sub.C() {
		if m.Kind == feed.KindOutcome {
			return
		}
		for _, ev := range r.handle(m) {
			if ev.Type == agent.TypeToolStarted {
				d.start(child, childTurn, ev, wrap)
			}
			d.push(wrap(ev))
		}
	}
}

func (d *subAgents) push(ev agent.Event) {
	d.mu.Lock()
	d.pending = append(d.pending, ev)
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// take returns the queued events.
func (d *subAgents) take() []agent.Event {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.pending
	d.pending = nil
	return out
}

// ended waits (briefly) for the follower of the delegate call whose
// tool_ended this is to read its sub-agent's last events.
func (d *subAgents) ended(session, turn string, ev agent.Event) {
	if d == nil || ev.Type != agent.TypeToolEnded {
		return
	}
	d.mu.Lock()
	fin := d.done[callKey(session, turn, ev.ID)]
	d.mu.Unlock()
	if fin == nil {
		return
	}
	t := time.NewTimer(subAgentDrain)
	defer t.Stop()
	select {
	case <-fin:
	case <-t.C:
	case <-d.ctx.Done():
	}
}

// wakeC is signalled when events are queued (nil: never).
func (d *subAgents) wakeC() <-chan struct{} {
	if d == nil {
		return nil
	}
	return d.wake
}

// close ends every follower.
func (d *subAgents) close() {
	if d == nil {
		return
	}
	d.mu.Lock()
	d.closed = true
	subs := d.subs
	d.subs = nil
	d.mu.Unlock()
	for _, s := range subs {
		_ = s.Close()
	}
}

// callKey names a delegate call of a turn of a session.
func callKey(session, turn, call string) string { return session + "\x00" + turn + "\x00" + call }
