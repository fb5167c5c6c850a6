// Package turnusage carries, from the door that starts a turn to the
// engine that runs it, a function the engine calls with the turn's token
// usage once the turn has ended (limits.perPrincipal.tokensPerDay).
package turnusage

import (
	"context"
	"sync"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// Report is one ended turn's usage. First and Leaf name the run of the
// turn (its user entry and last entry): a remembered outcome answered
// again has the same ones, a key run anew (after the idempotency window)
// new ones, so a sink can charge each run once. Stopped marks the usage of
// the model call the turn's abort stopped (an estimate, reported on the
// turn's feed), charged apart from the outcome's.
type Report struct {
	Session string
	Turn    string
	First   string
	Leaf    string
	Stopped bool
	Usage   agent.Usage
}

// ID names the run Report describes.
func (r Report) ID() string {
	id := r.Session + "\x00" + r.Turn + "\x00" + r.First + "\x00" + r.Leaf
	if r.Stopped {
		id += "\x00stopped"
	}
	return id
}

type sinkKey struct{}

// WithSink returns ctx carrying f: an engine calls it with the outcome of
// the turn it ran or followed for this context.
func WithSink(ctx context.Context, f func(Report)) context.Context {
	return context.WithValue(ctx, sinkKey{}, f)
}

// StoppedWait bounds how long Send waits for an aborted turn's stopped
// model call to report its usage before returning; StoppedFollow how long
// it is waited for in all.
// The model activity publishes the estimate within seconds of the stop,
// so a short follow is enough. At most one follower runs per turn run,
// and at most maxFollowers in the process: a client that asks again and
// again about the same aborted turn (a resume of it) starts nothing more.
var (
	StoppedWait   = time.Second
	StoppedFollow = 10 * time.Second
)

// maxFollowers bounds the background followers of a process.
const maxFollowers = 256

var (
	following = sync.Map{} // Report.ID → struct{}: runs being followed
	followers = make(chan struct{}, maxFollowers)
)

// Send calls ctx's sink, if any, with the usage of the outcome out of
// session's turn key (nothing when the outcome used no tokens). When the
// turn was aborted while a model call ran, the workflow never heard what
// that call used: its activity reports it on the turn's feed
// (feed.KindUsage), where Send reads it from bus (nil: not at all) — for
// up to StoppedWait before returning, so the charge is usually made before
// the turn's terminal is sent, and for up to StoppedFollow in the
// background.
func Send(ctx context.Context, bus feed.Bus, session, key string, out agentloop.Outcome) {
	f, _ := ctx.Value(sinkKey{}).(func(Report))
	if f == nil {
		return
	}
	if out.Usage != nil && out.Usage.Tokens() > 0 {
		f(Report{Session: session, Turn: key, First: out.First, Leaf: out.Leaf, Usage: *out.Usage})
	}
	if bus == nil || out.Code != agent.CodeAborted || out.Steps <= 0 {
		return
	}
	run := Report{Session: session, Turn: key, First: out.First, Leaf: out.Leaf, Stopped: true}
	if _, busy := following.LoadOrStore(run.ID(), struct{}{}); busy {
		return
	}
	select {
	case followers <- struct{}{}:
	default:
		following.Delete(run.ID())
		return // too many at once: the estimate goes uncharged (a soft limit)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { <-followers; following.Delete(run.ID()) }()
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), StoppedFollow)
		defer cancel()
		if u, ok := StoppedUsage(fctx, bus, session, key, out.Steps); ok {
			run.Usage = u
			f(run)
		}
	}()
	t := time.NewTimer(StoppedWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-ctx.Done():
	}
}

// StoppedUsage reads the turn's feed log for the usage its model call of
// step (the turn's last) reported when the turn stopped it; false when
// that call ended without being stopped (its end marker came first: its
// usage is the outcome's) or ctx ended first.
func StoppedUsage(ctx context.Context, bus feed.Bus, session, turn string, step int) (agent.Usage, bool) {
	sub, err := bus.Subscribe(ctx, session, turn)
	if err != nil {
		return agent.Usage{}, false
	}
	defer func() { _ = sub.Close() }()
	for {
		select {
		case <-ctx.Done():
			return agent.Usage{}, false
		case m, ok := <-sub.C():
			if !ok {
				return agent.Usage{}, false
			}
			switch {
			case m.Kind == feed.KindUsage && m.Step == step && m.Usage != nil:
				return *m.Usage, true
			case m.Kind == feed.KindEnd && m.Step == step:
				return agent.Usage{}, false
			}
		}
	}
}
