// Package ingress is fastagent's HTTP door as an http.Handler you mount in
// a server of your own, under any prefix, with your own authentication in
// front:
//
//	h, err := ingress.New(temporalClient, ingress.Options{
//		Dir:        "./my-agent",
//		Principals: ingress.PrincipalsFunc(fromMySession),
//	})
//	if err != nil { … }
//	defer h.Close()
//	mux.Handle("/agent/", http.StripPrefix("/agent", h))
//
// The handler serves the agent's whole HTTP API (docs/http-api.md): POST
// /invoke streaming a turn as server-sent events, re-attaching to a turn
// (GET /sessions/{id}/turns/{key}/events, Last-Event-ID), the session
// routes (state, abort, steer, approvals, answers, transcripts, export
// and import, rewind, follow-ups), GET /health, the webhook endpoints and
// chat platforms' doors of the agent's channels/ folder (Slack, Feishu and
// Lark, Telegram, GitHub, channels/webhooks/) with their long connections,
// the routes of other agents under /agents/<name>/ (Options.Agents), the
// web chat page (/chat/, signed in by one-time links a principal asks for
// at POST /chat/links; docs/web-chat.md), and, when configured, the codec
// server and GET /metrics. Every route but
// /health is authenticated: by Options.Principals (or the API tokens), or,
// for channel doors, by the platform's signature. Paths the handler writes
// into its answers (a follow-up's or a webhook's events route) start with
// the prefix it is mounted under, as http.StripPrefix leaves it in the
// request.
//
// The handler is the ingress only: the turns run on workers (`fastagent
// worker`, or fastagent's plugin on a worker of your own) polling
// Options.TaskQueue of the same Temporal namespace, sharing the session
// store and the live feed with it. In one process the default in-process
// feed is shared by every part of the process; across processes use NATS
// (Options.Feed).
//
// `fastagent ingress` is this handler served on a listener of its own.
package ingress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"

	iingress "github.com/fastagent/fastagent/internal/ingress"
	"github.com/fastagent/fastagent/internal/metrics"
	"github.com/fastagent/fastagent/internal/serve"
)

// Options configure the handler. Dir is the only one most programs set;
// the zero value serves the agent in the current directory with the API
// tokens of the environment.
type Options struct {
	// Dir is the agent's workspace (default "."); AgentDir optionally
	// moves the agent surface (fastagent.yaml, channels/, …) into a
	// subfolder; StateDir holds machine state (default <Dir>/.fastagent).
	// The handler reads fastagent.yaml's http: block (allowed origins and
	// hosts, admission limits, how long a turn waits for its client to come
	// back) and channels/.
	Dir, AgentDir, StateDir string
	// Store is the session store the workers write: a SQLite file or a
	// postgres:// DSN (default <StateDir>/sessions.db).
	Store string
	// Feed is the live feed the workers publish on: "" or "inprocess" (the
	// process's own, shared with a worker in the same process), or
	// nats://host:4222 when the workers run elsewhere.
	Feed string
	// TaskQueue is the workers' task queue (default "fastagent"); the
	// agent's routes are also served under /agents/<TaskQueue>/.
	TaskQueue string
	// Namespace is the client's Temporal namespace (default "default"),
	// where admission control counts the task queue's backlog.
	Namespace string
	// Agents are other agents served beside this one, by name (their task
	// queue): name → folder. Each one's sessions, channels and webhook
	// endpoints are under /agents/<name>/.
	Agents map[string]string

	// Principals says who each request acts for; nil uses the API tokens
	// below (Tokens). With neither, New fails with ErrNoPrincipals.
	Principals Principals
	// APIToken is one admin principal's token; APITokens are tokens lines
	// ("principal:rights:sha256hex[:agents]", see Tokens); TokensFile is a
	// file of them. Read when Principals is nil.
	APIToken, APITokens, TokensFile string

	// AllowedOrigins are the browser origins served; a request with
	// another Origin is 403 (default: fastagent.yaml's http.allowedOrigins).
	AllowedOrigins []string
	// AllowedHosts are the Host names answered besides the loopback names
	// (a defence against DNS rebinding); another Host is 421. Default:
	// fastagent.yaml's http.allowedHosts; when both are empty (or list
	// "*"), any Host — the handler does not know your server's address.
	AllowedHosts []string

	// NoWebChat leaves out the web chat (GET /chat/, POST /chat/links and
	// their cookie sessions; docs/web-chat.md), which is served by default.
	NoWebChat bool

	// DetachGrace is the longest a turn whose client went away keeps
	// running for it to come back, when the request asked (Resume-Within);
	// default fastagent.yaml's http.detachGrace, else 15 s; negative: never.
	DetachGrace time.Duration
	// CodecKeys ("id:base64key,…", else FASTAGENT_CODEC_KEYS) serves the
	// codec server (POST /codec/encode|decode) for principals with
	// RightCodec, to the Web UI origins CodecOrigins (else
	// FASTAGENT_CODEC_ORIGINS). The client given to New must encode
	// payloads with the same keys as the workers: a client made with the
	// worker plugin (package worker) does; New refuses another, which
	// would send the prompts unencrypted.
	CodecKeys    string
	CodecOrigins []string
	// TracerProvider, when set, receives a span per HTTP request; nil:
	// none. Tracing of the Temporal calls is the client's interceptor.
	TracerProvider trace.TracerProvider
	// Getenv reads the channels' secrets (default os.Getenv).
	Getenv func(string) string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// ErrNoPrincipals is returned by New when nothing authenticates callers:
// no Options.Principals and no API token.
var ErrNoPrincipals = errors.New("ingress: nothing authenticates callers: set Options.Principals " +
	"(your own authentication) or API tokens (Options.APIToken, APITokens, TokensFile)")

// Handler is the ingress: an http.Handler to mount in your server.
type Handler struct {
	http    *serve.HTTP
	parts   *serve.Parts
	metrics *metrics.Metrics
}

// New returns the ingress of the agent opts names, sending turns through
// c. It opens the session store and the live feed, reads the agent's
// definition (a broken channel file is an error naming it) and connects
// the channels' long connections; Close releases them.
func New(c client.Client, opts Options) (*Handler, error) {
	if c == nil {
		return nil, errors.New("ingress: New needs a Temporal client")
	}
	auth, err := opts.auth()
	if err != nil {
		return nil, err
	}
	cfg, err := opts.config()
	if err != nil {
		return nil, err
	}
	if cfg.Codec != nil && !cfg.Codec.OnClient(c) {
		return nil, errors.New("ingress: payload codec keys are configured, but the Temporal client given to New was not made with the " +
			"fastagent plugin, so prompts would reach Temporal unencrypted: make the plugin with the same keys (worker.New), pass it in " +
			"client.Options.Plugins and give New that client; or remove the keys (Options.CodecKeys, FASTAGENT_CODEC_KEYS)")
	}
	ctx := context.Background()
	parts, err := serve.Open(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("ingress: %w", err)
	}
	h, err := parts.OpenHTTP(ctx, c, auth)
	if err != nil {
		parts.Close()
		return nil, fmt.Errorf("ingress: %w", err)
	}
	return &Handler{http: h, parts: parts, metrics: cfg.Metrics}, nil
}

// auth is how the handler authenticates: Principals, else the API tokens.
func (o Options) auth() (serve.HTTPAuth, error) {
	if f, ok := o.Principals.(PrincipalsFunc); ok && f == nil {
		return serve.HTTPAuth{}, errors.New("ingress: Options.Principals is a nil PrincipalsFunc: give it your function, or leave Principals nil for the API tokens")
	}
	if o.Principals != nil {
		if tp, ok := o.Principals.(tokenPrincipals); ok {
			return serve.HTTPAuth{Tokens: tp.t}, nil
		}
		return serve.HTTPAuth{Principals: resolver{o.Principals}}, nil
	}
	t, err := tokens(o.APIToken, o.APITokens, o.TokensFile)
	if err != nil {
		return serve.HTTPAuth{}, err
	}
	if t.Len() == 0 {
		return serve.HTTPAuth{}, ErrNoPrincipals
	}
	return serve.HTTPAuth{Tokens: t}, nil
}

// tokens reads the API tokens: an admin token, tokens lines and a file of
// them.
func tokens(admin, lines, file string) (*iingress.Tokens, error) {
	t := &iingress.Tokens{}
	if admin != "" {
		t.AddToken(iingress.AdminPrincipal, admin, iingress.RightAdmin)
	}
	if err := t.Parse(lines); err != nil {
		return nil, fmt.Errorf("ingress: API tokens: %w", err)
	}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("ingress: tokens file: %w", err)
		}
		if err := t.Parse(string(b)); err != nil {
			return nil, fmt.Errorf("ingress: tokens file %s: %w", file, err)
		}
	}
	return t, nil
}

// config is the assembly's configuration for these options.
func (o Options) config() (serve.Config, error) {
	cfg := serve.Config{
		Roles: serve.Roles{Ingress: true},
		Dir:   o.Dir, AgentDir: o.AgentDir, StateDir: o.StateDir, Store: o.Store, Feed: o.Feed,
		TaskQueue: o.TaskQueue, Namespace: o.Namespace, Agents: o.Agents,
		AllowedOrigins: o.AllowedOrigins, AllowedHosts: o.AllowedHosts, NoWebChat: o.NoWebChat,
		DetachGrace: o.DetachGrace, Getenv: o.Getenv, Logger: o.Logger,
		CodecOrigins: o.CodecOrigins, Metrics: metrics.Default(), TracerProvider: o.TracerProvider,
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	var err error
	if cfg.Codec, err = serve.CodecKeys(o.CodecKeys, os.Getenv); err != nil {
		return cfg, fmt.Errorf("ingress: %w", err)
	}
	dir := o.Dir
	if dir == "" {
		dir = "."
	}
	if cfg.Agents, err = serve.CheckAgents(o.Agents, dir); err != nil {
		return cfg, fmt.Errorf("ingress: Options.Agents: %w", err)
	}
	return cfg, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.http.ServeHTTP(w, r) }

// Drain prepares a shutdown: open streams are told to reconnect elsewhere
// (their turns keep running; clients resume with Last-Event-ID), new turns
// are refused with 503 and GET /health answers 503 "draining". Call it
// before your server's Shutdown (http.Server.RegisterOnShutdown(h.Drain)).
func (h *Handler) Drain() { h.http.Drain() }

// Metrics serves the handler's metrics as Prometheus text (GET), for a
// metrics endpoint of your own; GET /metrics on the handler serves them to
// principals with RightMetrics.
func (h *Handler) Metrics() http.Handler { return h.metrics.Handler() }

// Close stops the channels' long connections and closes the store and the
// feed New opened; the client stays yours. Call it after your server has
// shut down; it is idempotent.
func (h *Handler) Close() error {
	h.http.Close()
	h.parts.Close()
	return nil
}
