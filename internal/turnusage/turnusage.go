// Package turnusage carries, from the door that starts a turn to the
// engine that runs it, a function the engine calls with the turn's token
// usage once the turn has ended (limits.perPrincipal.tokensPerDay).
package turnusage

import (
	"context"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// Report is one ended turn's usage. First and Leaf name the run of the
// turn (its user entry and last entry): a remembered outcome answered
// again has the same ones, a key run anew (after the idempotency window)
// new ones, so a sink can charge each run once.
type Report struct {
	Session string
	Turn    string
	First   string
	Leaf    string
	Usage   agent.Usage
}

// ID names the run Report describes.
func (r Report) ID() string { return r.Session + "\x00" + r.Turn + "\x00" + r.First + "\x00" + r.Leaf }

type sinkKey struct{}

// WithSink returns ctx carrying f: an engine calls it with the outcome of
// the turn it ran or followed for this context.
func WithSink(ctx context.Context, f func(Report)) context.Context {
	return context.WithValue(ctx, sinkKey{}, f)
}

// Send calls ctx's sink, if any, with the usage of the outcome out of
// session's turn key (nothing when the outcome used no tokens).
func Send(ctx context.Context, session, key string, out agentloop.Outcome) {
	f, _ := ctx.Value(sinkKey{}).(func(Report))
	if f == nil || out.Usage == nil || out.Usage.Tokens() <= 0 {
		return
	}
	f(Report{Session: session, Turn: key, First: out.First, Leaf: out.Leaf, Usage: *out.Usage})
}
