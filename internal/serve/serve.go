// Package serve assembles the running parts every serving command shares —
// session store, live feed, agent definition, model clients, activities,
// worker and HTTP ingress — from one Config, so that `dev`, `start`,
// `worker` and `ingress` differ only in which parts they start.
package serve

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tmc/langchaingo/llms"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/hooks"
	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/admission"
	"github.com/fastagent/fastagent/internal/buildinfo"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/feishu"   // registers the feishu and lark kinds
	_ "github.com/fastagent/fastagent/internal/channels/github" // registers the github kind
	_ "github.com/fastagent/fastagent/internal/channels/slack"  // registers the slack kind
	"github.com/fastagent/fastagent/internal/channels/telegram" // registers the telegram kind
	"github.com/fastagent/fastagent/internal/channels/webhook"  // registers channels/webhooks/
	"github.com/fastagent/fastagent/internal/codec"
	"github.com/fastagent/fastagent/internal/delivery"
	"github.com/fastagent/fastagent/internal/durable"
	"github.com/fastagent/fastagent/internal/egress"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/ingress"
	"github.com/fastagent/fastagent/internal/llm"
	"github.com/fastagent/fastagent/internal/metrics"
	"github.com/fastagent/fastagent/internal/plugin"
	"github.com/fastagent/fastagent/internal/sandbox"
	"github.com/fastagent/fastagent/internal/schedules"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/tools"
	"github.com/fastagent/fastagent/internal/tracing"
	"github.com/fastagent/fastagent/internal/workspace"
)

// Config is what a user sets — the CLI's flags and environment, the public
// packages' Options (fastagent, worker, ingress, activities) — and nothing
// else: what tests inject is Components. Every serving command, the
// library and the tests build their runtime from one Config with the one
// builder (Start, or Assemble and Parts.Start), so they differ only here.
type Config struct {
	// Roles are the parts Start runs: `dev` and `start` both, `worker` and
	// `ingress` one each. Assemble makes a worker's process non-dumpable
	// and checks its definition.
	Roles Roles
	// Temporal is how Start reaches Temporal when it is given no client: a
	// client, the development server (a child process), or an address.
	Temporal Temporal
	// Dir is the working directory (workspace); AgentDir optionally moves
	// the agent surface into a subfolder.
	Dir      string
	AgentDir string
	// StateDir holds machine state (default <Dir>/.fastagent).
	StateDir string
	// Store is the session store DSN: a SQLite path or postgres://…
	// (default <StateDir>/sessions.db).
	Store string
	// Feed is "inprocess" (default) or nats://host:port.
	Feed string
	// Warn receives warnings a user should read — a definition's
	// diagnostics, a missing model, an unconfined tool sandbox (default:
	// logged).
	Warn func(string)
	// HTTPHost and HTTPPort are the ingress address (default: http.host
	// and http.port of fastagent.yaml, else 127.0.0.1:8787).
	HTTPHost string
	HTTPPort int
	// Listener, when set, is where the ingress serves instead (what
	// fastagent.Options.HTTPAddr opened); stopping the ingress closes it.
	Listener net.Listener
	// APIToken is one admin principal's API token (FASTAGENT_API_TOKEN).
	APIToken string
	// APITokens are tokens lines "principal:rights:sha256hex", separated by
	// newlines or ";" (FASTAGENT_API_TOKENS); TokensFile is a file of them.
	// Without any token the ingress listens on loopback only, with a token
	// generated per run (Running.Token, <StateDir>/api-token).
	APITokens  string
	TokensFile string
	// AllowedOrigins are the browser origins the ingress serves; AllowedHosts
	// the Host names beside loopback (default: http.allowedOrigins and
	// http.allowedHosts of fastagent.yaml).
	AllowedOrigins []string
	AllowedHosts   []string
	// TaskQueue defaults to workflows.TaskQueue.
	TaskQueue string
	// Agents are other agents' folders served beside this one, by name:
	// each gets a worker polling the task queue of its name (what
	// delegation.agents.<name>.taskQueue names), sharing this one's store,
	// feed, models and tool sandbox. Their HTTP, channels and schedules are
	// not served here: they are reached by delegation.
	Agents map[string]string
	// Namespace is the Temporal namespace of the client (default
	// "default"); admission control describes the task queue in it.
	Namespace string
	// Admission are the ingress's saturation limits (default: http.admission
	// of fastagent.yaml; the zero value: off).
	Admission admission.Limits
	// PerPrincipal bounds each API principal's new HTTP turns (default:
	// limits.perPrincipal of fastagent.yaml; the zero value: none).
	PerPrincipal ingress.PrincipalLimits
	// WorkerStopTimeout bounds how long a stopping worker lets running
	// activities finish (0: plugin.DefaultStopTimeout).
	WorkerStopTimeout time.Duration
	// Versioning places the worker in a Temporal Worker Deployment
	// (FASTAGENT_DEPLOYMENT, FASTAGENT_BUILD_ID); zero: unversioned.
	Versioning plugin.Versioning
	// ActivityGroups, when set, makes the worker serve only these groups'
	// activities (model, tools), no workflows, on TaskQueue — by default
	// the one fastagent.yaml's activities: block places them on
	// (ActivityQueue).
	ActivityGroups []activities.Group
	// MaxConcurrentActivities bounds the worker's parallel model and tool
	// calls (0: the worker's default).
	MaxConcurrentActivities int
	// Tools are Go tools registered by a library user.
	Tools []agent.Tool
	// Hooks are Go hooks run on the worker around model and tool calls.
	Hooks  hooks.Hooks
	Logger *slog.Logger
	// Getenv reads the environment model clients use (default os.Getenv).
	Getenv func(string) string
	// ModelClients are model clients an embedder built, by spec (see
	// Models.Clients).
	ModelClients map[string]llms.Model
	// DetachGrace is the longest a turn whose HTTP client went away keeps
	// running for the client to re-attach, when the request asked for it
	// with Resume-Within (default DefaultDetachGrace; negative = never).
	DetachGrace time.Duration
	// Metrics records fastagent's metrics (worker interceptor, webhook
	// doors) and serves GET /metrics on the ingress; nil: none.
	Metrics *metrics.Metrics
	// MetricsAddr is a separate listen address serving GET /metrics without
	// a token (FASTAGENT_METRICS_ADDR); "" serves it only on the ingress.
	MetricsAddr string
	// TracerProvider, when set, receives a span per HTTP request on the
	// ingress and the channel doors, and the Temporal client's and worker's
	// spans; it is the caller's (not shut down). Without it, TracingEnv
	// (nil: none) is where the OTEL_EXPORTER_OTLP_* variables asking for
	// export by OTLP are read; that exporter is flushed by Parts.Close.
	TracerProvider trace.TracerProvider
	TracingEnv     func(string) string
	// Codec, when set, encrypts what the runtime writes to Temporal and is
	// served as the codec server on the ingress (POST /codec/encode|decode);
	// nil reads FASTAGENT_CODEC_KEYS / FASTAGENT_CODEC_KEY_FILE (see
	// CodecKeys). CodecOrigins are the Web UI origins allowed to call it
	// (FASTAGENT_CODEC_ORIGINS).
	Codec        *codec.Codec
	CodecOrigins []string
	// ControlPlane are addresses tools must never reach besides the ones
	// this process knows (the Temporal frontend, the Web UI); see
	// SandboxSpec.
	ControlPlane []string
}

// Components are what tests inject: parts a caller already holds — the
// test kit's store, loader, models and activities, an in-process feed —
// for Assemble to use instead of opening its own, and the seams of a
// worker (fake repliers, interceptors, tuning). Production code never sets
// them (internal/apicheck checks). The parts stay the caller's: Parts.Close
// does not close them. Any left nil is opened from Config as Open would.
type Components struct {
	Store store.Store
	Feed  feed.Bus
	// Loader is the definition loader. A given loader is used as is:
	// Config.Tools and Getenv are not added to it, channels/ is not read
	// (Channels are the caller's), and its Sandbox, when set, is the
	// worker's tool sandbox.
	Loader *workspace.Loader
	Models *Models
	// Activities replaces the activities Assemble builds from the parts
	// above (a kit's, writing through a fault-injecting store or with a
	// shorter heartbeat). Config.Metrics still observes them.
	Activities *activities.Activities
	// Channels are the enabled channels when Loader is given.
	Channels []*channels.Channel
	// Repliers are channel repliers the worker runs beside those of
	// Channels (a test's fake platform, the lab's bench channels).
	Repliers []channels.Replier
	// Interceptors are added to the worker beside the metrics interceptor
	// (a test's fault injection or run log).
	Interceptors []interceptor.WorkerInterceptor
	// WorkflowTaskPollers and StickyCacheSize tune the worker (see
	// plugin.Tuning; zero keeps its defaults): the lab's benchmarks.
	WorkflowTaskPollers int
	StickyCacheSize     int
}

// DefaultDetachGrace is the default Config.DetachGrace.
const DefaultDetachGrace = 15 * time.Second

// Parts are the opened backends.
type Parts struct {
	Config Config
	// fronts are the Temporal frontends kept from tools (frontend.go).
	fronts frontends
	Store  store.Store
	Feed   feed.Bus
	Loader *workspace.Loader
	Models *Models
	Acts   *activities.Activities
	// Channels are the enabled channels of channels/ (doors on the
	// ingress, repliers on the worker).
	Channels []*channels.Channel
	// Sandbox confines the worker's tool processes; opened with the worker.
	Sandbox *sandbox.Sandbox
	// agentDoors are the channels of Config.Agents this ingress serves
	// (loadAgentDoors), under /agents/<name>/.
	agentDoors []agentDoors
	// invokeOff unmounts POST /invoke: channel files exist and
	// fastagent.yaml does not say http: {invoke: true}.
	invokeOff bool
	// connRestart overrides connRestartMin (tests).
	connRestart time.Duration
	// closers release what Assemble opened (not the caller's Components),
	// in reverse order.
	closers []func()
	// principals counts every agent's HTTP turns per principal
	// (Config.PerPrincipal), made by the first IngressFor that needs it.
	principals *ingress.PrincipalLimiter
	// ownSandbox says Sandbox was opened here (not the given loader's).
	ownSandbox bool
	// walls are, by agent ("" the main one), what no tool of it may change
	// or read beyond its own rules (protectAgents).
	walls map[string][]tools.Protected
	// clientCodec is the codec Start dialled the client with (connect).
	clientCodec *codec.Codec
	// polled is the task queue of the last worker built (Worker).
	polled string
	// plugin, when set (UsePlugin), is the plugin every worker gets.
	plugin *plugin.Plugin
	// seams are the worker's seams of the Components given to Assemble.
	seams Components
	// tracing is Config.TracerProvider's, or the OTLP export TracingEnv
	// asks for (shut down by Close); nil: none.
	tracing *tracing.Tracing
	// devUIOrigin and devCodecKey are the embedded Web UI's origin and the
	// key of its codec endpoint (connect; ingress.Server.DevCodecKey).
	devUIOrigin, devCodecKey string
	// workersUp is set once the worker role's workers started: the
	// metrics listener's GET /health answers 200 from then on.
	workersUp atomic.Bool
}

// prepareStateDir fills the directory defaults (workspace ".", state dir
// <dir>/.fastagent, store <state>/sessions.db) and creates the state dir,
// owner-only: it holds the session store, logs and the API token.
func (cfg *Config) prepareStateDir() error {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Dir == "" {
		cfg.Dir = "."
	}
	abs, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return err
	}
	cfg.Dir = abs
	if cfg.StateDir == "" {
		cfg.StateDir = filepath.Join(cfg.Dir, ".fastagent")
	}
	if cfg.Store == "" {
		cfg.Store = filepath.Join(cfg.StateDir, "sessions.db")
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("state dir %s: %w", cfg.StateDir, err)
	}
	_ = os.Chmod(cfg.StateDir, 0o700) //nolint:gosec // G302: a directory needs x; 0700 is owner-only
	ensureGitignore(cfg.StateDir)
	return nil
}

// invokeOffFor says whether the agent of def, with channels chans, has
// POST /invoke switched off: it has channels and fastagent.yaml does not
// say http: {invoke: true}.
func invokeOffFor(def *workspace.Definition, chans []*channels.Channel) bool {
	h := def.Config.HTTP
	return len(chans) > 0 && (h.Invoke == nil || !*h.Invoke)
}

// invokeOffReason is the 404's message of a switched-off POST /invoke.
const invokeOffReason = "POST /invoke is off because this agent has channels (channels/*.yaml); set http: {invoke: true} in fastagent.yaml to keep it"

// fromDefinition reads what the definition says about serving: its
// channels (a broken enabled channel is an error naming its file) and
// fastagent.yaml's http: block, which fills what flags and env left unset.
// A definition that does not load yet is reported later by Check.
func (cfg *Config) fromDefinition(ctx context.Context, loader *workspace.Loader) (chans []*channels.Channel, invokeOff bool, err error) {
	def, lerr := loader.Load(ctx)
	if lerr != nil {
		return nil, false, nil //nolint:nilerr // Check reports a broken definition with its file
	}
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if chans, err = channels.Load(def.Workspace.Channels(), getenv); err != nil {
		return nil, false, err
	}
	channels.DefaultWhileBusy(chans, def.Config.Conversation.WhileBusy)
	h := def.Config.HTTP
	invokeOff = invokeOffFor(def, chans)
	cfg.fromHTTP(h)
	if !cfg.PerPrincipal.Enabled() {
		cfg.PerPrincipal = principalLimits(def.Config.Limits.PerPrincipal)
	}
	return chans, invokeOff, nil
}

// fromHTTP fills what flags and the environment left unset from
// fastagent.yaml's http: block.
func (cfg *Config) fromHTTP(h workspace.HTTPConfig) {
	if cfg.HTTPHost == "" {
		cfg.HTTPHost = h.Host
	}
	if cfg.HTTPPort == 0 {
		cfg.HTTPPort = h.Port
	}
	if cfg.AllowedOrigins == nil {
		cfg.AllowedOrigins = h.AllowedOrigins
	}
	if cfg.AllowedHosts == nil {
		cfg.AllowedHosts = h.AllowedHosts
	}
	if cfg.Admission == (admission.Limits{}) {
		cfg.Admission = admissionLimits(h.Admission)
	}
}

// defaultAddress fills the ingress's default listen address.
func (cfg *Config) defaultAddress() {
	if cfg.HTTPHost == "" {
		cfg.HTTPHost = "127.0.0.1"
	}
	if cfg.HTTPPort == 0 {
		cfg.HTTPPort = 8787
	}
}

// Open opens the store and the feed and prepares the definition loader
// (Assemble without Components).
func Open(ctx context.Context, cfg Config) (*Parts, error) {
	return Assemble(ctx, cfg, Components{})
}

// Start is the one way a runtime starts — `fastagent dev`, `start`,
// `worker` and `ingress`, fastagent.Start, and tests that run a whole
// runtime: Assemble, then Parts.Start on the Temporal Config.Temporal
// names. Running.Close releases everything, the parts included.
func Start(ctx context.Context, cfg Config, with Components) (*Running, error) {
	p, err := Assemble(ctx, cfg, with)
	if err != nil {
		return nil, err
	}
	run, err := p.Start(ctx, nil)
	if err != nil {
		p.Close()
		return nil, err
	}
	run.parts = p
	return run, nil
}

// Assemble builds the runtime's parts from the components given and opens
// the missing ones from cfg, as Open does: the one way every serving
// command, the public worker, ingress and activities packages, the lab and
// the tests put a store, feed, definition, models, activities, worker and
// ingress together. For the worker role it makes the process non-dumpable
// and checks the definition (a broken one is an error naming its file; its
// warnings go to Config.Warn). Parts.Close releases only what it opened.
func Assemble(ctx context.Context, cfg Config, with Components) (_ *Parts, err error) {
	if err := cfg.prepareStateDir(); err != nil {
		return nil, err
	}
	if cfg.Roles.Worker {
		// Non-dumpable: tool processes cannot read this process's
		// /proc/<pid>/environ, mem or cmdline (see internal/sandbox).
		if err := sandbox.Harden(); err != nil {
			cfg.Logger.Warn("the worker's process stays dumpable", "err", err)
		}
	}
	if t := cfg.Temporal; t.Client == nil && t.Embedded == nil && t.Dial.Address != "" {
		// Tools never reach the Temporal frontend, whatever their network.
		cfg.ControlPlane = append(cfg.ControlPlane, t.Dial.Address)
	}
	p := &Parts{Loader: with.Loader, Store: with.Store, Feed: with.Feed, Models: with.Models, Channels: with.Channels, seams: with}
	defer func() {
		if err != nil {
			p.Close() // what it opened so far
		}
	}()
	if err := p.openTracing(ctx, &cfg); err != nil {
		return nil, err
	}
	if p.Loader == nil {
		if err := p.openLoader(ctx, &cfg); err != nil {
			return nil, err
		}
	} else if p.Loader.Sandbox != nil {
		p.Sandbox = p.Loader.Sandbox
	}
	cfg.defaultAddress()
	p.Config = cfg
	if p.Store == nil {
		st, err := store.Open(ctx, cfg.Store)
		if err != nil {
			return nil, fmt.Errorf("session store: %w", err)
		}
		p.Store = st
		p.closers = append(p.closers, func() { _ = st.Close() })
	}
	if p.Feed == nil {
		bus, err := feed.Open(cfg.Feed) //nolint:contextcheck // the feed connection lives with the process
		if err != nil {
			return nil, fmt.Errorf("live feed: %w", err)
		}
		p.Feed = bus
		p.closers = append(p.closers, func() { _ = bus.Close() })
	}
	if p.Models == nil {
		p.Models = &Models{Getenv: cfg.Getenv, Clients: cfg.ModelClients}
	}
	p.Acts = with.Activities
	if p.Acts == nil {
		p.Acts = &activities.Activities{
			Store:       p.Store,
			Feed:        p.Feed,
			Definitions: p.Loader,
			Models:      p.Models,
			Logger:      cfg.Logger,
			Hooks:       cfg.Hooks,
		}
	}
	if p.Acts.Agent == "" {
		// Memories are kept under the agent's name, as the ingress's
		// /memories routes name it.
		p.Acts.Agent = taskQueueOr(cfg.TaskQueue)
	}
	if cfg.Metrics != nil && p.Acts.Observer == nil {
		p.Acts.Observer = cfg.Metrics
	}
	if with.Channels == nil {
		if err := p.confineDoors(ctx, p.Channels, "", p.Loader.Workspace()); err != nil {
			return nil, err
		}
	}
	if cfg.Roles.Worker {
		def, warnings, err := p.Check(ctx)
		if err != nil {
			return nil, err
		}
		for _, w := range warnings {
			p.warn(w)
		}
		cfg.Logger.Debug("agent loaded", "model", def.Config.Model, "tools", len(def.Tools), "dir", def.Workspace.Dir)
	}
	return p, nil
}

// openTracing opens the tracing cfg asks for: Config.TracerProvider's, or
// the OTLP export the OTEL_EXPORTER_OTLP_* variables of TracingEnv ask for.
func (p *Parts) openTracing(ctx context.Context, cfg *Config) error {
	switch {
	case cfg.TracerProvider != nil:
		p.tracing = tracing.New(cfg.TracerProvider)
	case cfg.TracingEnv != nil:
		tr, err := tracing.FromEnv(ctx, cfg.TracingEnv)
		if err != nil {
			return err
		}
		if tr != nil {
			p.tracing = tr
			cfg.Logger.Info("tracing: spans exported by OTLP")
			log := cfg.Logger
			p.closers = append(p.closers, func() { //nolint:contextcheck // flushing spans at Close runs after any ctx ended, on its own deadline
				// Flush what is left, after everything else closed.
				sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if err := tr.Shutdown(sctx); err != nil {
					log.Warn("tracing: flush on exit", "error", err)
				}
			})
		}
	}
	return nil
}

// CodecKeys is the payload codec of keys ("id:base64key,…"), else of
// FASTAGENT_CODEC_KEYS / FASTAGENT_CODEC_KEY_FILE read with getenv (nil:
// os.Getenv); nil without any key.
func CodecKeys(keys string, getenv func(string) string) (*codec.Codec, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	return codec.FromEnv(func(k string) string {
		if k == codec.EnvKeys && keys != "" {
			return keys
		}
		return getenv(k)
	})
}

// openLoader opens the definition loader of cfg and reads what the
// definition says about serving (channels, the http: block) into cfg.
func (p *Parts) openLoader(ctx context.Context, cfg *Config) error {
	loader, err := workspace.NewLoader(cfg.Dir, cfg.AgentDir)
	if err != nil {
		return err
	}
	p.closers = append(p.closers, loader.Close)
	for spec := range cfg.ModelClients {
		if loader.CustomModels == nil {
			loader.CustomModels = map[string]bool{}
		}
		loader.CustomModels[spec] = true
	}
	if p.Channels, p.invokeOff, err = cfg.fromDefinition(ctx, loader); err != nil {
		return err
	}
	loader.Extra = append([]agent.Tool(nil), cfg.Tools...)
	for _, ch := range p.Channels {
		// Channel tools (slack_send_file) run in the worker with the
		// channel's credentials.
		loader.Extra = append(loader.Extra, ch.Tools...)
	}
	if cfg.Getenv != nil {
		loader.Getenv = cfg.Getenv
	}
	p.Loader = loader
	return nil
}

// Check loads the definition and the model client once and returns what a
// user should read at startup: a fatal error for a broken definition, and
// warnings (no model configured, diagnostics) that do not stop serving.
func (p *Parts) Check(ctx context.Context) (*workspace.Definition, []string, error) {
	def, err := p.Loader.Load(ctx)
	if err != nil {
		return nil, nil, err
	}
	var warnings []string
	if _, err := p.Models.Model(def.Config.Model); err != nil { //nolint:contextcheck // building a model client calls nothing
		warnings = append(warnings, err.Error())
	}
	for _, d := range def.Diagnostics {
		warnings = append(warnings, d.String())
	}
	return def, warnings, nil
}

// Close releases what Assemble (or StartWorker, the sandbox) opened —
// and flushes the spans of an OTLP export it started; the caller's
// Components stay open. Later calls are no-ops.
func (p *Parts) Close() {
	if p.ownSandbox {
		_ = p.Sandbox.Close()
		p.ownSandbox = false
	}
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
	p.closers = nil
}

// StartWorker starts a worker on c, with its tool sandbox; stop it with Stop.
func (p *Parts) StartWorker(ctx context.Context, c client.Client) (sdkworker.Worker, error) {
	w, err := p.Worker(ctx, c)
	if err != nil {
		return nil, err
	}
	if err := w.Start(); err != nil {
		return nil, fmt.Errorf("start worker: %w", err)
	}
	p.checkCurrentVersion(ctx, c)
	return w, nil
}

// Worker returns the worker StartWorker starts, not started yet, for a
// caller that registers more on it first (the lab's floor workflow): an
// SDK worker tuned by plugin.Tuning with the fastagent plugin (Plugin) on
// it. Every worker of the program is built here.
func (p *Parts) Worker(ctx context.Context, c client.Client) (sdkworker.Worker, error) {
	pl := p.plugin
	if pl == nil {
		var err error
		if pl, err = p.Plugin(ctx, c); err != nil {
			return nil, err
		}
	}
	tq, err := p.WorkerQueue(ctx)
	if err != nil {
		return nil, err
	}
	p.polled = tq
	cfg := p.Config
	wo, err := plugin.Tuning{StopTimeout: cfg.WorkerStopTimeout, Versioning: cfg.Versioning,
		WorkflowTaskPollers: p.seams.WorkflowTaskPollers, MaxConcurrentActivities: cfg.MaxConcurrentActivities,
		StickyCacheSize: p.seams.StickyCacheSize}.WorkerOptions(pl)
	if err != nil {
		return nil, err
	}
	return sdkworker.New(c, tq, wo), nil
}

// Plugin returns the fastagent plugin of these parts, with the tool
// sandbox opened and the channels' repliers: every activity the workflows
// call (or Config.ActivityGroups' alone), the metrics interceptor and
// Components.Interceptors. c is the client its workers run on when the caller
// dialled it already (Start; its codec is then Config.Codec); nil for a
// plugin made before its client (the worker package), which sets the
// codec, the tracing interceptor and the SDK metrics on the clients made
// with it, and whose activities use their worker's client.
func (p *Parts) Plugin(ctx context.Context, c client.Client) (*plugin.Plugin, error) {
	set, err := p.ActivitySet(ctx, c)
	if err != nil {
		return nil, err
	}
	cfg := p.Config
	var icpt []interceptor.WorkerInterceptor
	if cfg.Metrics != nil {
		icpt = append(icpt, cfg.Metrics.Interceptor())
	}
	icpt = append(icpt, p.seams.Interceptors...)
	opts := plugin.Options{
		TaskQueue:    taskQueueOr(cfg.TaskQueue),
		Activities:   set,
		Groups:       cfg.ActivityGroups,
		Placement:    p.placement,
		Interceptors: icpt,
		Codec:        cfg.Codec,
		Frontend:     func(hostPort string) { p.denyAddress(context.Background(), hostPort) }, //nolint:contextcheck // called as a client is configured, with no context
		Version:      buildinfo.Read().Version,
		Logger:       cfg.Logger,
	}
	if c != nil {
		opts.ClientEncoded = cfg.Codec != nil && p.clientCodec == cfg.Codec
	} else {
		ci, err := p.tracing.Interceptor()
		if err != nil {
			return nil, err
		}
		if ci != nil {
			opts.ClientInterceptors = append(opts.ClientInterceptors, ci)
		}
		if cfg.Metrics != nil {
			opts.MetricsHandler = cfg.Metrics.SDKHandler()
		}
	}
	return plugin.New(opts)
}

// ActivitySet returns the implementation of every activity, with the tool
// sandbox opened and the channels' repliers; c (nil: the client of the
// worker running them) starts the sessions of chat messages and schedule
// fires.
func (p *Parts) ActivitySet(ctx context.Context, c client.Client) (activities.Set, error) {
	if err := p.protectAgents(); err != nil {
		return activities.Set{}, err
	}
	if err := p.openSandbox(ctx); err != nil {
		return activities.Set{}, err
	}
	var repliers []channels.Replier
	var controlPlane []egress.Dest
	resolved := false
	for _, ch := range p.Channels {
		switch rp := ch.Replier.(type) {
		case *telegram.Replier:
			rp.Refs = p.Store // split answers' later parts are stored too
		case *feishu.Replier:
			rp.Refs = p.Store
		case *webhook.Replier:
			if !resolved {
				controlPlane, resolved = p.controlPlaneDests(ctx), true
			}
			rp.SetControlPlane(controlPlane) // never a callback target, even with reply.allowPrivate
		}
		repliers = append(repliers, ch.Replier)
	}
	cfg := p.Config
	repliers = append(repliers, p.seams.Repliers...)
	// The channels that can send to a named place serve send_message,
	// send_file and schedules' deliver: lists.
	senders := delivery.Senders{}
	for _, rp := range repliers {
		if s, ok := rp.(delivery.Sender); ok {
			senders.Add(s)
		}
	}
	if p.Acts != nil {
		p.Acts.Senders = senders
	}
	tq := taskQueueOr(cfg.TaskQueue)
	replies := activities.NewReplies(p.Store, p.Feed, repliers, cfg.Logger)
	replies.TaskQueue, replies.Dir, replies.Senders = tq, cfg.Dir, senders
	if c != nil {
		replies.Starter = c
	}
	if p.Acts.ClientSeen == nil {
		// Whichever client runs the tools, its frontend is denied to them.
		p.Acts.ClientSeen = p.denyFrontend
	}
	return activities.Set{Acts: p.Acts, Replies: replies, Firer: schedules.NewFirer(c, p.Feed, p.Store, tq, cfg.Logger)}, nil
}

// UsePlugin makes pl, a plugin of these parts (Plugin), the one every
// worker built here gets: the worker package's, made before its client.
func (p *Parts) UsePlugin(pl *plugin.Plugin) { p.plugin = pl }

// placement is where fastagent.yaml's activities: block places the model
// and tools groups (none when the definition does not load).
func (p *Parts) placement(ctx context.Context) map[activities.Group]string {
	def, err := p.Loader.Load(ctx)
	if err != nil {
		return nil
	}
	a := def.Config.Activities
	return map[activities.Group]string{activities.GroupTools: a.Tools.TaskQueue, activities.GroupModel: a.Model.TaskQueue}
}

// WorkerQueue is the task queue the worker polls: the agent's, or for a
// worker of Config.ActivityGroups alone, ActivityQueue.
func (p *Parts) WorkerQueue(ctx context.Context) (string, error) {
	if len(p.Config.ActivityGroups) == 0 {
		return taskQueueOr(p.Config.TaskQueue), nil
	}
	return p.ActivityQueue(ctx)
}

// ActivityQueue is the task queue a worker of Config.ActivityGroups alone
// polls: Config.TaskQueue when set, else the one fastagent.yaml places the
// groups on. Only the model and tools groups run apart from the workflows;
// a queue the session does not schedule them on is served with a warning.
func (p *Parts) ActivityQueue(ctx context.Context) (string, error) {
	groups := p.Config.ActivityGroups
	placed := p.placement(ctx)
	queue := p.Config.TaskQueue
	for _, g := range groups {
		if !g.Placeable() {
			return "", fmt.Errorf("the %s activities run beside the session workflows, on their task queue: only the model and tools groups run on a worker of their own", g)
		}
		q := placed[g]
		switch {
		case queue == "" && q == "":
			return "", fmt.Errorf("fastagent.yaml does not place the %[1]s activities on a task queue of their own (activities: {%[1]s: {taskQueue: …}}): "+
				"the sessions schedule them on their own task queue, where the session workers run them; set it, or name the queue to poll (--task-queue)", g)
		case queue == "":
			queue = q
		case q == "":
			p.warn(fmt.Sprintf("fastagent.yaml does not place the %[1]s activities on a task queue of their own (activities.%[1]s.taskQueue): "+
				"the sessions schedule them on their own task queue, so this worker on %[2]q gets none of them until fastagent.yaml says %[2]s", g, queue))
		case q != queue:
			p.warn(fmt.Sprintf("the sessions schedule the %s activities on %q (fastagent.yaml activities.%s.taskQueue), not on %q: this worker gets none of them until fastagent.yaml says so",
				g, q, g, queue))
		}
	}
	return queue, nil
}

// checkCurrentVersion warns when a versioned worker's deployment has no
// current version: until one is set, no workflow task reaches the worker.
func (p *Parts) checkCurrentVersion(ctx context.Context, c client.Client) {
	v := p.Config.Versioning
	if !v.Enabled() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d, err := c.WorkerDeploymentClient().GetHandle(v.Deployment).Describe(ctx, client.WorkerDeploymentDescribeOptions{})
	if err == nil && d.Info.RoutingConfig.CurrentVersion != nil {
		return
	}
	ver := v.Version()
	p.warn(fmt.Sprintf("worker deployment %q has no current version yet: this worker (build %s) gets no workflow tasks until one is set — run `fastagent rollout --deployment %s --build-id %s`",
		ver.DeploymentName, ver.BuildID, ver.DeploymentName, ver.BuildID))
}

// Agent returns the durable agent the ingress serves.
func (p *Parts) Agent(c client.Client) *durable.Agent {
	grace := p.Config.DetachGrace
	whileBusy := ""
	if p.Loader != nil {
		if def, err := p.Loader.Load(context.Background()); err == nil {
			whileBusy = def.Config.Conversation.WhileBusy
		}
	}
	if grace == 0 {
		if def, err := p.Loader.Load(context.Background()); err == nil && def.Config.HTTP.DetachGrace != nil {
			grace = time.Duration(*def.Config.HTTP.DetachGrace)
			if grace == 0 {
				grace = -1
			}
		}
	}
	switch {
	case grace == 0:
		grace = DefaultDetachGrace
	case grace < 0:
		grace = 0
	}
	return &durable.Agent{Client: c, Feed: p.Feed, TaskQueue: p.Config.TaskQueue, Logger: p.Config.Logger,
		Store: p.Store, DetachGrace: grace, WhileBusy: whileBusy}
}

// Ingress returns the HTTP server for the durable agent (IngressFor(Agent(c))).
func (p *Parts) Ingress(c client.Client) *ingress.Server { return p.IngressFor(p.Agent(c)) }

// WithChannels serves each channel's door (POST <path>) beside h, and
// those of the other agents this ingress serves at /agents/<name><path>.
// Webhook routes authenticate by the platform's signature, not by the
// ingress's API tokens; every other route goes to h. A door without a path
// (a long connection) has no route.
func (p *Parts) WithChannels(h http.Handler, c channels.Starter) http.Handler {
	if len(p.Channels) == 0 && len(p.agentDoors) == 0 {
		return h
	}
	mux := http.NewServeMux()
	p.mountDoors(mux, c, agentDoors{chans: p.Channels})
	for _, a := range p.agentDoors {
		p.mountDoors(mux, c, a)
	}
	mux.Handle("/", h)
	return mux
}

// mountDoors mounts the doors of a's channels on mux: the main agent's
// (a.name "") at their paths, another agent's at /agents/<name><path>
// with what they hand to Temporal scoped to it (channels.ForAgent).
func (p *Parts) mountDoors(mux *http.ServeMux, c channels.Starter, a agentDoors) {
	tq, prefix := p.Config.TaskQueue, ""
	if a.name != "" {
		tq, prefix = a.name, "/agents/"+a.name
	}
	hooks := p.doorAdmission(c, tq)
	for _, ch := range a.chans {
		if ch.Door.Path() == "" {
			continue // a long connection only (startConnections)
		}
		door := channels.Handler(ch.Door, c, tq, p.Config.Logger)
		if sd, ok := ch.Door.(channels.Served); ok {
			// A webhook endpoint; respond: wait follows the turn.
			var att channels.Attacher
			if cl, ok := c.(client.Client); ok {
				d := p.Agent(cl)
				d.TaskQueue = taskQueueOr(tq)
				att = scopedAttacher{att: d, scope: a.name}
			}
			door = sd.Handler(c, tq, p.Config.Logger, att)
			if hooks != nil {
				door = channels.Admitted(ch.Door.Kind(), door, hooks, p.Config.Logger)
			}
		}
		if p.Config.Metrics != nil {
			door = p.Config.Metrics.WrapDoor(ch.Door.Kind(), door)
		}
		if a.name != "" {
			door = forAgent(a.name, door)
		}
		mux.Handle("POST "+prefix+ch.Door.Path(), withAPIBase(prefix, door))
		p.Config.Logger.Info("channel enabled", "agent", a.name, "kind", ch.Door.Kind(), "route", prefix+ch.Door.Path(), "file", ch.File)
	}
}

// withAPIBase serves h with channels.APIBase set: the prefix the ingress
// is mounted under, then prefix (another agent's /agents/<name>).
func withAPIBase(prefix string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(channels.WithAPIBase(r.Context(), ingress.MountPrefix(r)+prefix)))
	})
}

// doorAdmission is the admission of webhook endpoints on task queue tq:
// the backlog limits of Config.Admission (a door holds no turn, so the
// in-flight limit does not apply), probed on tq; nil when no backlog limit
// is set or c cannot describe task queues. A webhook sender retries a 429,
// so an endpoint refuses before accepting; chat platforms' doors are not
// refused (a platform that redelivers at once would storm).
func (p *Parts) doorAdmission(c channels.Starter, tq string) *admission.Limiter {
	lim := p.Config.Admission
	cl, ok := c.(client.Client)
	if !ok || (lim.MaxBacklog <= 0 && lim.MaxBacklogAge <= 0) {
		return nil
	}
	ns := p.Config.Namespace
	if ns == "" {
		ns = "default"
	}
	lim.MaxInFlight = 0
	return admission.New(lim, admission.TaskQueueProbe(cl, ns, taskQueueOr(tq)), p.Config.Logger)
}

// Listen binds the ingress address, with a message that says what to do
// when the port is taken.
func Listen(host string, port int) (net.Listener, error) {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http: cannot listen on %s: %w (choose another port with --port or FASTAGENT_HTTP_PORT)", addr, err)
	}
	return ln, nil
}

// HTTPTimeouts bound a slow client: the request headers, the whole request
// (headers and body), and an idle keep-alive connection.
var HTTPTimeouts = struct{ ReadHeader, Read, Idle time.Duration }{
	ReadHeader: 10 * time.Second, Read: time.Minute, Idle: 2 * time.Minute,
}

// ShutdownTimeout bounds a graceful HTTP shutdown.
const ShutdownTimeout = 5 * time.Second

// ServeHTTP serves h on ln until ctx ends, then drains: drain (when set)
// tells open streams to reconnect elsewhere and hands their turns off —
// nothing is aborted, the turns keep running in their workflows — and the
// server shuts down within ShutdownTimeout.
func ServeHTTP(ctx context.Context, ln net.Listener, h http.Handler, drain func()) error {
	// No WriteTimeout: an SSE stream lasts as long as its turn. The
	// streaming handlers lift the read deadline once the body is read.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: HTTPTimeouts.ReadHeader,
		ReadTimeout: HTTPTimeouts.Read, IdleTimeout: HTTPTimeouts.Idle}
	if drain != nil {
		srv.RegisterOnShutdown(drain)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		if drain != nil {
			drain() // before Shutdown waits for the streaming handlers
		}
		sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil { //nolint:contextcheck // shutdown runs after ctx ended, bounded by ShutdownTimeout
			_ = srv.Close()
		}
		return nil
	}
}

// Models caches one model client per "provider/model" spec.
type Models struct {
	Getenv func(string) string
	// Clients are langchaingo clients an embedder built, by the spec
	// ("provider/model") the definition names; they are used instead of
	// a client built from the environment.
	Clients map[string]llms.Model
	mu      sync.Mutex
	cache   map[string]llm.Model
}

// Model returns the client for spec, creating it on first use.
func (m *Models) Model(spec string) (llm.Model, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if mod, ok := m.cache[spec]; ok {
		return mod, nil
	}
	var mod llm.Model
	var err error
	if c, ok := m.Clients[spec]; ok {
		mod, err = llm.Wrap(spec, c, llm.Options{})
	} else {
		mod, err = llm.New(spec, llm.Options{Getenv: m.Getenv})
	}
	if err != nil {
		return nil, err
	}
	if m.cache == nil {
		m.cache = map[string]llm.Model{}
	}
	m.cache[spec] = mod
	return mod, nil
}

func ensureGitignore(stateDir string) {
	p := filepath.Join(stateDir, ".gitignore")
	if _, err := os.Stat(p); err == nil {
		return
	}
	_ = os.WriteFile(p, []byte("# fastagent machine state\n*\n"), 0o600)
}

// principalLimits converts fastagent.yaml's limits.perPrincipal block
// (admins are exempt unless exemptAdmins: false).
func principalLimits(c workspace.PerPrincipalConfig) ingress.PrincipalLimits {
	return ingress.PrincipalLimits{ConcurrentTurns: c.ConcurrentTurns, TurnsPerMinute: c.TurnsPerMinute, TokensPerDay: c.TokensPerDay,
		ExemptAdmins: c.ExemptAdmins == nil || *c.ExemptAdmins, Exempt: c.Exempt}
}

// admissionLimits converts fastagent.yaml's http.admission block.
func admissionLimits(a workspace.AdmissionConfig) admission.Limits {
	l := admission.Limits{MaxInFlight: a.MaxInFlight, MaxBacklog: a.MaxBacklog}
	if a.MaxBacklogAge != nil {
		l.MaxBacklogAge = time.Duration(*a.MaxBacklogAge)
	}
	if a.RetryAfter != nil {
		l.RetryAfter = time.Duration(*a.RetryAfter)
	}
	return l
}
