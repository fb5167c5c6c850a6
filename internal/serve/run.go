package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/admission"
	"github.com/fastagent/fastagent/internal/durable"
	"github.com/fastagent/fastagent/internal/ingress"
	"github.com/fastagent/fastagent/workflows"
)

// Roles says which parts of the program a process runs: `dev` and `start`
// run both, `worker` and `ingress` one each.
type Roles struct {
	Worker  bool
	Ingress bool
}

// Running is a started program: the parts its roles asked for.
type Running struct {
	// Agent is the durable agent (also usable in process, without HTTP).
	Agent *durable.Agent
	// Client is the Temporal client the parts run on.
	Client client.Client
	// Embedded is the development server Start started (nil: none).
	Embedded *EmbeddedServer
	// Ingress is the HTTP server when the ingress role runs.
	Ingress *ingress.Server
	// URL is the ingress's base URL ("" without the ingress role).
	URL string
	// Token is the API token generated for this run when no token was
	// configured (loopback only; also in <StateDir>/api-token), else "".
	Token string
	// TokenFile is where Token was written.
	TokenFile string

	stateDir string
	worker   sdkworker.Worker
	http     *HTTP
	httpErr  chan error
	// ln is the ingress's listener until its server runs (closed on a
	// failed start).
	ln net.Listener
	// stopMetrics stops the FASTAGENT_METRICS_ADDR listener.
	stopMetrics func()
	// stopAgents stops the workers of Config.Agents (nil: none).
	stopAgents func()
	cancel     context.CancelFunc
	stopped    chan struct{}
	// conn is the Temporal connection Start made (nil: the caller's
	// client), closed by Close.
	conn *Connection
	// parts are closed by Close when the package-level Start assembled
	// them.
	parts *Parts
	once  sync.Once
}

// Start starts the parts of Config.Roles on Temporal client c, or, when c
// is nil, on the client Config.Temporal reaches (the embedded server
// started, or an address dialled): the worker, registered completely
// (session and schedule workflows with every activity) after the
// schedules were reconciled, with the workers of Config.Agents; the HTTP
// ingress on Config.Listener, else on Config.HTTPHost:HTTPPort, with the
// channels' long connections and bot lookups; the metrics listener. Wait
// blocks until ctx ends and stops them; Close releases what Start opened.
func (p *Parts) Start(ctx context.Context, c client.Client) (_ *Running, err error) {
	roles := p.Config.Roles
	if !roles.Worker && !roles.Ingress {
		return nil, errors.New("serve: nothing to run: neither the worker nor the ingress role")
	}
	r := &Running{stateDir: p.Config.StateDir, stopped: make(chan struct{})}
	defer func() {
		if err != nil {
			r.Close() //nolint:contextcheck // cleanup after a failed start runs whatever ctx says
		}
	}()
	var auth HTTPAuth
	if roles.Ingress {
		// Who may call it, before anything listens or dials: without
		// tokens, only a loopback ingress serves (a token generated).
		auth.Host = listenHost(p.Config.HTTPHost, p.Config.Listener)
		var generated string
		if auth.Tokens, generated, err = p.auth(auth.Host); err != nil {
			return nil, err
		}
		if generated != "" {
			r.Token, r.TokenFile = generated, filepath.Join(p.Config.StateDir, TokenFileName)
		}
		if r.ln = p.Config.Listener; r.ln == nil {
			if r.ln, err = Listen(p.Config.HTTPHost, p.Config.HTTPPort); err != nil {
				return nil, err
			}
		}
	}
	if c == nil {
		if r.conn, err = p.connect(ctx, p.Config.Temporal, r.ln); err != nil {
			return nil, err
		}
		c, r.Embedded = r.conn.Client, r.conn.Embedded
	}
	if cdc := p.Config.Codec; cdc != nil && !cdc.OnClient(c) { //nolint:contextcheck // asks the client, calls no server
		// A client of the caller's that does not encode: the worker and
		// the ingress would write payloads (prompts, answers) in clear.
		return nil, errors.New("payload codec keys are configured, but the Temporal client given was not made with the fastagent plugin, " +
			"so payloads would be written unencrypted: make the plugin first (worker.New), pass it in client.Options.Plugins and use that " +
			"client; or let fastagent dial Temporal; or remove the keys")
	}
	r.Client = c
	r.Agent = p.Agent(c)                                   //nolint:contextcheck // the Agent is long-lived; each Invoke takes its own context
	if r.stopMetrics, err = p.startMetrics(); err != nil { //nolint:contextcheck // the metrics listener lives until Stop, not until ctx
		return nil, err
	}
	if p.Config.Metrics != nil {
		p.Config.Metrics.WatchSessions(c, 0)
	}
	if roles.Worker {
		if err := p.startWorkers(ctx, c, r); err != nil {
			return nil, err
		}
	}
	if roles.Ingress {
		if err := r.startIngress(ctx, p, c, auth); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// startIngress serves the ingress (OpenHTTP) with auth on r.ln.
func (r *Running) startIngress(ctx context.Context, p *Parts, c client.Client, auth HTTPAuth) error {
	ln := r.ln
	h, err := p.OpenHTTP(ctx, c, auth)
	if err != nil {
		return err
	}
	r.http, r.Ingress = h, h.Server
	r.URL = "http://" + ln.Addr().String()
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.cancel = cancel
	r.httpErr = make(chan error, 1)
	r.ln = nil // the server's now: it closes it
	go func() {
		r.httpErr <- ServeHTTP(hctx, ln, h, h.Drain) //nolint:contextcheck // the HTTP server lives until Stop (hctx), not the start call
	}()
	return nil
}

// startWorkers starts the worker role: schedules reconciled, the worker,
// and the workers of Config.Agents; a worker of Config.ActivityGroups alone
// serves only them.
func (p *Parts) startWorkers(ctx context.Context, c client.Client, r *Running) error {
	groups := p.Config.ActivityGroups
	if len(groups) == 0 {
		if err := p.reconcileSchedules(ctx, c, p.warn, ""); err != nil {
			return err
		}
	} else if len(p.Config.Agents) > 0 {
		return errors.New("serve: a worker of some activities alone serves one agent's: drop the other agents (--agent)")
	}
	w, err := p.StartWorker(ctx, c)
	if err != nil {
		return err
	}
	r.worker = w
	p.Config.Logger.Info("worker started", "task_queue", p.polled, "activities", groups)
	if r.stopAgents, err = p.startAgents(ctx, c); err != nil {
		return err
	}
	p.workersUp.Store(true)
	return nil
}

// StateDir is the runtime's state directory (Config.StateDir, filled).
func (r *Running) StateDir() string { return r.stateDir }

// Wait blocks until ctx ends, the HTTP server fails or the embedded
// Temporal server exits under the runtime (killed, crashed: the error
// points at its log), then stops the parts: the ingress drains first, then
// the worker lets running calls finish.
func (r *Running) Wait(ctx context.Context) error {
	var exited <-chan struct{}
	if r.Embedded != nil {
		exited = r.Embedded.Exited
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-r.httpErr:
		if err != nil {
			err = fmt.Errorf("http: %w", err)
		}
	case <-exited:
		if ctx.Err() == nil { // not the end of a runtime stopping anyway (Ctrl-C reaches both)
			cause := r.Embedded.Err()
			if cause == nil {
				cause = errors.New("no error reported")
			}
			err = fmt.Errorf("the Temporal dev server exited (%w); its log is %s", cause, filepath.Join(r.stateDir, "temporal.log"))
		}
	}
	r.Stop()
	return err
}

// Stop stops what Start started — the ingress drains, then the worker lets
// running calls finish; later calls are no-ops. The Temporal connection
// and the parts stay open until Close.
func (r *Running) Stop() {
	select {
	case <-r.stopped:
		return
	default:
	}
	close(r.stopped)
	if r.cancel != nil {
		r.cancel()
		select {
		case <-r.httpErr: //nolint:errcheck // Wait reports the server's error; Stop only waits for it to end
		case <-time.After(ShutdownTimeout + time.Second):
		}
	}
	if r.ln != nil {
		_ = r.ln.Close()
	}
	if r.http != nil {
		r.http.Close()
	}
	if r.stopMetrics != nil {
		r.stopMetrics()
	}
	if r.stopAgents != nil {
		r.stopAgents()
	}
	if r.worker != nil {
		r.worker.Stop()
	}
}

// Close stops the parts (Stop), then closes the Temporal connection Start
// made (the client, then the embedded server) and the parts the
// package-level Start assembled; it is idempotent.
func (r *Running) Close() {
	r.once.Do(func() {
		r.Stop()
		if r.conn != nil {
			r.conn.Close()
		}
		if r.parts != nil {
			r.parts.Close()
		}
	})
}

func (p *Parts) warn(msg string) {
	if p.Config.Warn != nil {
		p.Config.Warn(msg)
		return
	}
	p.Config.Logger.Warn(msg)
}

// IngressFor returns the HTTP server for a as the serving commands build
// it: a's session control, re-attach and session listing when a offers
// them (a durable agent does), the logger, and admission control when
// Config.Admission sets a limit (a durable agent's queue is probed). Start
// then adds authentication (tokens, owners, origins, hosts) and the ops
// routes; a caller serving it itself (tests, the lab) sets what it needs —
// NoAuth, Tokens, PingEvery — before Handler. Every ingress is built here.
func (p *Parts) IngressFor(a agent.Agent) *ingress.Server {
	s := newIngress(a, p.Config.Logger)
	d, ok := a.(*durable.Agent)
	if sc, scoped := a.(*scopedAgent); scoped {
		d, ok = sc.d, true
	}
	if _, scoped := a.(*scopedAgent); ok && !scoped {
		s.Deleter = durableDeleter{d}
	}
	if ok {
		// The agent's routes are also under /agents/<its task queue>/.
		s.Name = taskQueueOr(d.TaskQueue)
		if p.Store != nil {
			s.Memories = agentMemories{store: p.Store, agent: s.Name}
		}
	}
	if lim := p.Config.PerPrincipal; lim.Enabled() {
		if p.principals == nil {
			p.principals = ingress.NewPrincipalLimiter(lim)
			p.Config.Logger.Info("per-principal limits on", "concurrent_turns", lim.ConcurrentTurns, "turns_per_minute", lim.TurnsPerMinute, "tokens_per_day", lim.TokensPerDay,
				"exempt_admins", lim.ExemptAdmins, "exempt", lim.Exempt)
		}
		s.PrincipalLimiter = p.principals
	}
	if lim := p.Config.Admission; lim.Enabled() && ok {
		ns := p.Config.Namespace
		if ns == "" {
			ns = "default"
		}
		s.Admission = admission.New(lim, admission.TaskQueueProbe(d.Client, ns, taskQueueOr(d.TaskQueue)), p.Config.Logger)
		p.Config.Logger.Info("admission control on", "max_in_flight", lim.MaxInFlight, "max_backlog", lim.MaxBacklog, "max_backlog_age", lim.MaxBacklogAge)
	}
	return s
}

// taskQueueOr is tq, or the default task queue when tq is empty: an agent's
// name on the HTTP routes is its task queue.
func taskQueueOr(tq string) string {
	if tq == "" {
		return workflows.TaskQueue
	}
	return tq
}

// newIngress returns an ingress serving a (nil: no agent, as the codec
// server) with the control-plane parts a implements.
func newIngress(a agent.Agent, log *slog.Logger) *ingress.Server {
	s := &ingress.Server{Agent: a, Logger: log}
	if c, ok := a.(ingress.Control); ok {
		s.Control = c
	}
	if at, ok := a.(ingress.Attacher); ok {
		s.Attacher = at
	}
	if ss, ok := a.(ingress.Sessions); ok {
		s.Sessions = ss
	}
	if dl, ok := a.(ingress.Deleter); ok {
		s.Deleter = dl
	}
	return s
}
