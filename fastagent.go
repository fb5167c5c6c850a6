// Package fastagent embeds the fastagent runtime in a Go program: a
// file-defined agent (a folder with persona.md, AGENTS.md, tools/, …) served
// durably on Temporal, with Go tools and hooks of the program's own.
//
//	rt, err := fastagent.Start(ctx, fastagent.Options{
//		Dir:      "./my-agent",
//		Temporal: fastagent.Temporal{Embedded: true},
//		Tools:    []agent.Tool{myTool{}},
//		Hooks:    hooks.Hooks{BeforeAgentStart: addContext},
//	})
//	defer rt.Close()
//	res, err := agent.Collect(rt.Agent().Invoke(ctx, agent.Scope{Session: "s1"}, agent.Prompt{Text: "hi"}))
//
// Start runs what Options.Roles asks for — by default a worker and the HTTP
// ingress, as `fastagent start` does (and `fastagent dev` with an embedded
// Temporal server). Every signature here mentions only public packages —
// agent (the contract and tools), hooks — and the third-party types below.
//
// # Third-party types in the public API
//
// The signatures of fastagent's public packages name types of three other
// modules, each the common interface of its domain, so that a program
// passes what it already has rather than an adapter:
//
//   - go.temporal.io/sdk (client.Client, workflow.Context, the registries
//     and plugin types of worker and activity, temporal.SearchAttributes):
//     fastagent is a Temporal program; go.mod names the SDK version it is
//     built and tested with.
//   - github.com/tmc/langchaingo (llms.Model, in Options.Models and in the
//     Options of packages worker and activities): a model client you build
//     yourself — Bedrock, Google AI, Mistral, a client behind your own
//     gateway, a test double — needs an interface, and langchaingo's is the
//     one Go model clients implement and the one the clients fastagent
//     builds from fastagent.yaml are made with, so a fastagent interface
//     would only add an adapter between the two. A langchaingo release that
//     changes llms.Model changes fastagent's API with it.
//   - go.opentelemetry.io/otel (trace.TracerProvider, in the Options of
//     fastagent, worker and ingress): the standard tracing interface.
//
// No other third-party type appears in a public signature:
// internal/apicheck fails when one does that this section does not name.
package fastagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/tmc/langchaingo/llms"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/hooks"
	"github.com/fastagent/fastagent/internal/metrics"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/tclient"
)

// Options configure an embedded runtime. The zero value serves the agent in
// the current directory with a worker and an ingress on 127.0.0.1:8787,
// against a Temporal server at TEMPORAL_ADDRESS (default 127.0.0.1:7233).
type Options struct {
	// Dir is the agent's workspace (default "."); AgentDir optionally moves
	// the agent surface into a subfolder; StateDir holds machine state
	// (default <Dir>/.fastagent).
	Dir, AgentDir, StateDir string
	// Temporal says which Temporal to use.
	Temporal Temporal
	// Roles selects the parts to run (default: both).
	Roles Roles
	// HTTPAddr is the ingress's listen address (default 127.0.0.1:8787;
	// "127.0.0.1:0" picks a free port, see Runtime.URL).
	HTTPAddr string
	// APIToken is an admin token the ingress accepts; APITokens are tokens
	// lines ("principal:rights:sha256hex", see docs/security.md,
	// Authentication). Without either, the ingress serves loopback only, with a
	// token generated per run (Runtime.APIToken).
	APIToken, APITokens string
	// AllowedOrigins are the browser origins the ingress serves;
	// AllowedHosts the Host names beside loopback (default: fastagent.yaml's
	// http: block).
	AllowedOrigins, AllowedHosts []string
	// Store is the session store: a SQLite file or a postgres:// DSN
	// (default <StateDir>/sessions.db).
	Store string
	// Feed is the live feed: "" (in process) or nats://host:4222 when
	// workers and ingresses run in different processes.
	Feed string
	// TaskQueue defaults to "fastagent".
	TaskQueue string
	// Tools are Go tools offered to the model next to the definition's own.
	Tools []agent.Tool
	// Hooks run on the worker around model and tool calls.
	Hooks hooks.Hooks
	// DetachGrace is the longest a turn whose HTTP client went away keeps
	// running for the client to come back, when the request asked for it
	// (Resume-Within); default 15 s, negative = never.
	DetachGrace time.Duration
	// WorkerStopTimeout bounds how long Close lets running tool and model
	// calls finish (default 30 s).
	WorkerStopTimeout time.Duration
	// Getenv reads the environment model clients use (default os.Getenv).
	Getenv func(string) string
	// Models are model clients you built yourself — any langchaingo
	// llms.Model (Bedrock, Google AI, Mistral, a proxy with its own auth, a
	// test double) — by the "provider/model" spec fastagent.yaml names in
	// model: or fallbacks:. A spec found here is served by its client
	// instead of one built from the environment. Text must stream through
	// the client's StreamingFunc: its chunks keep the stall watchdog quiet.
	Models map[string]llms.Model
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// MetricsAddr, when set, serves GET /metrics (Prometheus text) without a
	// token on its own listener, e.g. "127.0.0.1:9464". The ingress serves
	// it for a token with the metrics right either way, and
	// Runtime.Metrics is the handler to mount on a server of your own.
	MetricsAddr string
	// CodecKeys encrypts every payload written to Temporal: entries
	// "id:base64key" separated by commas, the first encrypts, all decrypt
	// (as FASTAGENT_CODEC_KEYS, which is read when this is empty). The
	// ingress then serves the codec server (POST /codec/encode|decode) for
	// a token with the codec right; CodecOrigins are the Web UI origins
	// allowed to call it from a browser. With Temporal.Embedded, the
	// embedded Web UI is configured with it.
	CodecKeys    string
	CodecOrigins []string
	// TracerProvider, when set, receives the spans of HTTP requests,
	// updates, workflows and activities; nil exports them by OTLP when the
	// OTEL_EXPORTER_OTLP_* variables ask for it. With Temporal.Client,
	// tracing of Temporal calls needs the interceptor on that client.
	TracerProvider trace.TracerProvider
}

// Roles selects the parts of the runtime a process runs.
type Roles struct {
	// Worker runs session workflows, model and tool calls.
	Worker bool
	// Ingress serves the HTTP API.
	Ingress bool
}

// Temporal says how to reach Temporal: an existing client, an embedded
// development server, or an address (TEMPORAL_* environment variables fill
// what is unset, including Temporal Cloud API keys and mTLS files).
type Temporal struct {
	Client client.Client
	// Embedded starts a Temporal development server (and Web UI), with its
	// state in <StateDir>/temporal.db, as `fastagent dev` does: the
	// fastagent-devserver program, run as a child process that ends with
	// this one (found through FASTAGENT_DEVSERVER, next to the executable
	// or on PATH, else built once into the user cache dir when the Go
	// toolchain is there; see docs/operations.md). Every call to it needs
	// the key it writes to <StateDir>/temporal-token; its Web UI opens
	// through Runtime.WebUILogin.
	Embedded bool
	// UIPort is the embedded Web UI's port (0 = a free port, -1 = no UI).
	UIPort    int
	Address   string
	Namespace string
}

// Runtime is a started fastagent.
type Runtime struct {
	run     *serve.Running
	metrics *metrics.Metrics
}

// ErrNothingToRun is returned when Options.Roles was set to run no part.
var ErrNothingToRun = errors.New("fastagent: Roles asks for neither the worker nor the ingress")

// Start opens the store and feed, loads the definition (a broken one is an
// error naming the file), connects to Temporal and starts the roles: the
// runtime `fastagent start` runs (and `fastagent dev`, with
// Temporal.Embedded), built by the same builder from these options.
func Start(ctx context.Context, opts Options) (*Runtime, error) {
	cfg, err := opts.serveConfig()
	if err != nil {
		return nil, err
	}
	run, err := serve.Start(ctx, cfg, serve.Components{})
	if err != nil {
		if cfg.Listener != nil {
			_ = cfg.Listener.Close()
		}
		return nil, fmt.Errorf("fastagent: %w", err)
	}
	return &Runtime{run: run, metrics: cfg.Metrics}, nil
}

// serveConfig is the runtime's configuration for these options: both roles
// unless Roles says otherwise, the ingress on a listener of HTTPAddr, codec
// keys from CodecKeys or the environment, tracing from TracerProvider or
// the OTEL_EXPORTER_OTLP_* variables.
func (opts Options) serveConfig() (serve.Config, error) {
	roles := opts.Roles
	if roles == (Roles{}) {
		roles = Roles{Worker: true, Ingress: true}
	}
	t := opts.Temporal
	cfg := serve.Config{
		Roles: serve.Roles{Worker: roles.Worker, Ingress: roles.Ingress},
		Temporal: serve.Temporal{Client: t.Client,
			Dial: tclient.Config{Address: t.Address, Namespace: t.Namespace}.FromEnv()},
		Dir: opts.Dir, AgentDir: opts.AgentDir, StateDir: opts.StateDir,
		Store: opts.Store, Feed: opts.Feed, TaskQueue: opts.TaskQueue,
		Tools: opts.Tools, Hooks: opts.Hooks, Logger: opts.Logger, Getenv: opts.Getenv, ModelClients: opts.Models,
		DetachGrace: opts.DetachGrace, WorkerStopTimeout: opts.WorkerStopTimeout,
		APIToken: opts.APIToken, APITokens: opts.APITokens,
		AllowedOrigins: opts.AllowedOrigins, AllowedHosts: opts.AllowedHosts,
		Metrics: metrics.New(), MetricsAddr: opts.MetricsAddr, CodecOrigins: opts.CodecOrigins,
		TracerProvider: opts.TracerProvider, TracingEnv: os.Getenv,
	}
	if t.Embedded {
		cfg.Temporal.Embedded = &serve.Embedded{UIPort: t.UIPort}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	var err error
	if cfg.Codec, err = serve.CodecKeys(opts.CodecKeys, os.Getenv); err != nil {
		return cfg, fmt.Errorf("fastagent: %w", err)
	}
	if roles.Ingress {
		addr := opts.HTTPAddr
		if addr == "" {
			addr = "127.0.0.1:8787"
		}
		if cfg.Listener, err = net.Listen("tcp", addr); err != nil {
			return cfg, fmt.Errorf("fastagent: listen on %s: %w (choose another Options.HTTPAddr)", addr, err)
		}
	}
	return cfg, nil
}

// Run starts the runtime and serves until ctx ends, then stops it cleanly
// (the ingress drains, the worker lets running calls finish).
func Run(ctx context.Context, opts Options) error {
	rt, err := Start(ctx, opts)
	if err != nil {
		return err
	}
	defer rt.Close() //nolint:contextcheck // Close stops the runtime after ctx ended; it bounds itself
	return rt.run.Wait(ctx)
}

// Agent is the runtime as an engine-neutral Agent: turns invoked on it run
// durably on Temporal, as turns sent over HTTP do.
func (rt *Runtime) Agent() agent.Agent { return rt.run.Agent }

// URL is the HTTP ingress's base URL ("" without the ingress role).
func (rt *Runtime) URL() string { return rt.run.URL }

// APIToken is the API token generated for this run when Options configured
// none ("" otherwise, or without the ingress role).
func (rt *Runtime) APIToken() string { return rt.run.Token }

// Metrics serves the runtime's metrics as Prometheus text (GET), for a
// server of your own; it is also on the ingress (metrics right) and on
// Options.MetricsAddr.
func (rt *Runtime) Metrics() http.Handler { return rt.metrics.Handler() }

// TemporalAddress is the embedded Temporal frontend's host:port ("" when
// not embedded); calls need the key in <StateDir>/temporal-token.
func (rt *Runtime) TemporalAddress() string {
	if e := rt.run.Embedded; e != nil {
		return e.Frontend
	}
	return ""
}

// WebUI is the embedded Temporal Web UI's address ("" when not embedded).
// It answers only a browser that opened a login link (WebUILogin).
func (rt *Runtime) WebUI() string {
	if e := rt.run.Embedded; e != nil {
		return e.UI
	}
	return ""
}

// WebUILogin returns a new one-time login link to the embedded Web UI (""
// without one). The embedded Temporal server itself demands its key, which
// is in <StateDir>/temporal-token, on every call.
func (rt *Runtime) WebUILogin() (string, error) {
	if e := rt.run.Embedded; e != nil && e.UI != "" {
		return e.Login()
	}
	return "", nil
}

// Close stops the parts and releases the backends; it is idempotent.
func (rt *Runtime) Close() { rt.run.Close() }
