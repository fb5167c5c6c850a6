package serve

import (
	"context"
	"net/http"
	"sync"

	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/ingress"
)

// HTTPAuth says how the ingress authenticates its callers.
type HTTPAuth struct {
	// Principals says who each request acts for (an embedder's own
	// authentication); nil: Tokens.
	Principals ingress.Authenticator
	// Tokens are the API tokens accepted when Principals is nil.
	Tokens *ingress.Tokens
	// Host is the host the ingress listens on: its name is answered beside
	// the loopback names and Config.AllowedHosts; "" (mounted in a server
	// whose address it does not know) or a wildcard answers any Host unless
	// AllowedHosts lists some.
	Host string
}

// HTTP is the ingress as one http.Handler, to serve on a listener or to
// mount in a server of the caller's: every agent's routes (ingress.Server
// and its Agents), the channels' doors and webhook endpoints, the codec
// and metrics routes, with the channels' long connections running. Close
// stops what it started.
type HTTP struct {
	// Server is the main agent's routes (tests and the serving commands
	// read its Agents and Waiting).
	Server  *ingress.Server
	handler http.Handler
	conns   *connections
	// ids looks up the bot identities of the doors (channels.Identity):
	// the runtime's one resolver, stopped by Close.
	ids    *channels.Resolver
	cancel context.CancelFunc
	once   sync.Once
}

// ServeHTTP implements http.Handler.
func (h *HTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.handler.ServeHTTP(w, r) }

// Drain tells open streams to reconnect elsewhere and refuses new turns
// (ingress.Server.Drain); call it before shutting the server down.
func (h *HTTP) Drain() { h.Server.Drain() }

// Close stops the long connections and the bot lookups, and waits for
// them; it is idempotent.
func (h *HTTP) Close() {
	h.once.Do(func() {
		h.cancel()
		if h.conns != nil {
			h.conns.stop()
		}
		h.ids.Close()
	})
}

// OpenHTTP builds the ingress of the durable agent on client c (and of
// Config.Agents under /agents/<name>/) with auth: the one way every
// ingress is put together — `fastagent start`, `dev` and `ingress`, the
// public ingress.New and fastagent.Start. The long connections run until
// Close; /health answers 503 until each one connected.
func (p *Parts) OpenHTTP(ctx context.Context, c client.Client, auth HTTPAuth) (*HTTP, error) {
	var err error
	if p.agentDoors, err = p.loadAgentDoors(ctx); err != nil {
		return nil, err
	}
	srv := p.agentIngresses(p.Agent(c), auth) //nolint:contextcheck // the Agent is long-lived; each Invoke takes its own context
	p.switchInvoke(srv)
	if p.Sandbox != nil {
		srv.Details = func() map[string]any { return map[string]any{"toolSandbox": p.Sandbox.Status()} }
	}
	if err := p.opsRoutes(srv, auth.Host); err != nil {
		return nil, err
	}
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	h := &HTTP{Server: srv, cancel: cancel, ids: p.resolver()}
	// The doors' bot identities are looked up from now until Close.
	h.ids.Start(hctx)
	// Long connections (Slack Socket Mode…) run beside the routes; /health
	// is 503 until each one connected.
	if h.conns = p.startConnections(hctx, c); h.conns != nil {
		srv.Waiting = h.conns.Waiting
	}
	srv.SetReady(true)
	h.handler = p.tracing.Middleware(p.WithChannels(srv.Handler(), c)) //nolint:contextcheck // the doors live until Close; each request has its own context
	return h, nil
}

// resolver returns a resolver of the bot identities of every door this
// ingress serves (the main agent's and Config.Agents'), not started yet.
func (p *Parts) resolver() *channels.Resolver {
	ids := &channels.Resolver{}
	for _, a := range append([]agentDoors{{chans: p.Channels}}, p.agentDoors...) {
		for _, ch := range a.chans {
			ids.Add(ch.Identity)
		}
	}
	return ids
}

// switchInvoke switches POST /invoke off — at the root and under
// /agents/<name>/ alike — for each agent served by srv (the main one and
// its Agents) that has channels and does not keep it (http: {invoke: true}).
func (p *Parts) switchInvoke(srv *ingress.Server) {
	if p.invokeOff {
		srv.InvokeOff = invokeOffReason
		p.Config.Logger.Info("POST /invoke is off: the agent has channels; http: {invoke: true} keeps it")
	}
	for _, a := range p.agentDoors {
		if o := srv.Agents[a.name]; o != nil && a.invokeOff {
			o.InvokeOff = invokeOffReason
			p.Config.Logger.Info("POST /invoke is off: the agent has channels; http: {invoke: true} keeps it", "agent", a.name)
		}
	}
}
