package worker

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/tmc/langchaingo/llms"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/activities"
	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/hooks"
	iacts "github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/metrics"
	"github.com/fastagent/fastagent/internal/plugin"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/workflows"
)

// Options say which agent the plugin serves, where its sessions keep their
// state, and how Run's worker is tuned.
type Options struct {
	// Dir is the agent's folder (default "."); AgentDir optionally moves
	// the agent surface into a subfolder; StateDir holds machine state
	// (default <Dir>/.fastagent).
	Dir, AgentDir, StateDir string
	// Store is the session store: a SQLite file or a postgres:// DSN
	// (default <StateDir>/sessions.db). Every worker and ingress of the
	// agent uses the same store.
	Store string
	// Feed is the live feed: "" (in process) or nats://host:4222 when
	// workers and ingresses run in different processes. With Activities
	// set it must be named: the session workers' NATS feed, or
	// "inprocess" when they run in this very process (the activities'
	// live events and aborts travel on it).
	Feed string
	// TaskQueue is the agent's task queue, where its sessions run (default
	// "fastagent"). With Activities set, it is the task queue those
	// activities are served on (default: the one fastagent.yaml's
	// activities: block places them on).
	TaskQueue string
	// Activities, when set, limits the plugin to these groups' activities
	// (model, tools) and no workflows: a worker of their own for the tool
	// calls, on GPU machines, or the model calls, in the network zone that
	// may reach the provider. See the activities package.
	Activities []activities.Group
	// Tools are Go tools offered to the model next to the definition's own.
	Tools []agent.Tool
	// Hooks run around model and tool calls.
	Hooks hooks.Hooks
	// Models are model clients you built (any langchaingo llms.Model), by
	// the "provider/model" spec fastagent.yaml names; a spec found here is
	// served by its client instead of one built from the environment.
	Models map[string]llms.Model
	// Getenv reads the environment model clients and channels use
	// (default os.Getenv).
	Getenv func(string) string
	// CodecKeys encrypts every payload and failure message the agent's
	// workflows and activities write to Temporal: entries "id:base64key"
	// separated by commas, the first encrypts, all decrypt
	// (FASTAGENT_CODEC_KEYS and FASTAGENT_CODEC_KEY_FILE are read when it
	// is empty). The plugin sets the codec on the clients made with it; a
	// worker whose client was not refuses to start.
	CodecKeys string
	// TracerProvider, when set, receives the spans of the Temporal calls,
	// workflows and activities of clients made with the plugin; nil
	// exports them by OTLP when the OTEL_EXPORTER_OTLP_* variables ask.
	TracerProvider trace.TracerProvider
	// ControlPlane are host:port addresses tools must never reach even with
	// the network on, beside loopback, link-local and private addresses,
	// the store, the feed and the Temporal frontend: the frontend of every
	// client made with the plugin, and of any client a worker running tool
	// calls is on, is added by itself (a Temporal Cloud endpoint is
	// public); name other addresses of your deployment here.
	ControlPlane []string
	// Logger defaults to slog.Default().
	Logger *slog.Logger

	// The worker Run (and Plugin.Run) starts.

	// MaxConcurrentActivities bounds parallel model and tool calls
	// (default 200).
	MaxConcurrentActivities int
	// StopTimeout is how long a stopping worker lets running tool and model
	// calls finish before it cancels them (default DefaultStopTimeout).
	StopTimeout time.Duration
	// Deployment and BuildID place the worker in a Temporal Worker
	// Deployment, its workflows pinned to their version (default:
	// FASTAGENT_DEPLOYMENT and FASTAGENT_BUILD_ID; empty: unversioned). See
	// docs/operations.md, "Rollouts", and MoveToCurrent.
	Deployment, BuildID string
}

// DefaultStopTimeout is how long a stopping worker waits for running
// activities, so that a tool running at that moment finishes and its
// result is used rather than becoming "outcome unknown".
const DefaultStopTimeout = 30 * time.Second

// Plugin is fastagent installed on Temporal for one agent: a client.Plugin
// and a worker.Plugin (go.temporal.io/sdk). Put it in client.Options.Plugins
// — every worker made from that client then gets it, and the client the
// payload codec — or in worker.Options.Plugins of the workers you choose.
//
// On a worker of the agent's task queue it registers the Session,
// Delegate, Chat and ScheduleFire workflows with every activity they call;
// on a task queue fastagent.yaml's activities: block places a group on,
// that group's activities; a worker of another task queue with nothing
// else registered is refused at start. Names already registered on the
// worker (yours, or the plugin's when it is on both the client and the
// worker) are left as they are. It adds fastagent's worker interceptor
// (metrics) and, on a client, the codec's data and failure converters,
// the tracing interceptor and the SDK metrics handler.
type Plugin struct {
	*temporal.SimplePlugin

	p       *plugin.Plugin
	parts   *serve.Parts
	metrics *metrics.Metrics
}

// New opens what the agent's workers use — the session store, the live
// feed, the agent's definition (a broken one is an error naming its file),
// the model clients, the channels' repliers and the tool sandbox — and
// returns the plugin. Close it once its workers stopped. The process is
// made non-dumpable, as every fastagent worker is: tool processes cannot
// read its memory or environment.
func New(ctx context.Context, opts Options) (*Plugin, error) {
	cfg, err := opts.config()
	if err != nil {
		return nil, err
	}
	// The runtime's worker role (non-dumpable, the definition checked),
	// built as every fastagent worker is.
	parts, err := serve.Assemble(ctx, cfg, serve.Components{})
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	pl := &Plugin{parts: parts, metrics: cfg.Metrics}
	if pl.p, err = parts.Plugin(ctx, nil); err != nil {
		pl.Close() //nolint:contextcheck // cleanup after a failed New must run whatever ctx says
		return nil, fmt.Errorf("worker: %w", err)
	}
	parts.UsePlugin(pl.p)
	pl.SimplePlugin = pl.p.SimplePlugin
	pl.p.Alias(pl) // a worker's Options.Plugins name the plugin by pl
	return pl, nil
}

// config is the runtime's configuration for opts: the worker role, codec
// keys from CodecKeys or the environment, tracing from TracerProvider or
// the OTEL_EXPORTER_OTLP_* variables, versioning from the environment.
func (o Options) config() (serve.Config, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	cfg := serve.Config{
		Roles: serve.Roles{Worker: true},
		Dir:   o.Dir, AgentDir: o.AgentDir, StateDir: o.StateDir, Store: o.Store, Feed: o.Feed,
		TaskQueue: o.TaskQueue, Tools: o.Tools, Hooks: o.Hooks, Logger: o.Logger, Getenv: o.Getenv,
		ModelClients: o.Models, ControlPlane: o.ControlPlane, Metrics: metrics.New(),
		WorkerStopTimeout: o.StopTimeout, MaxConcurrentActivities: o.MaxConcurrentActivities,
		Versioning:     plugin.Versioning{Deployment: o.Deployment, BuildID: o.BuildID},
		TracerProvider: o.TracerProvider, TracingEnv: getenv,
	}
	if o.Deployment == "" && o.BuildID == "" {
		cfg.Versioning = plugin.VersioningFromEnv(getenv)
	}
	if cfg.TaskQueue == "" && len(o.Activities) == 0 {
		cfg.TaskQueue = workflows.TaskQueue
	}
	for _, g := range o.Activities {
		ig, err := iacts.ParseGroup(string(g))
		if err != nil {
			return cfg, fmt.Errorf("worker: Options.Activities: %w", err)
		}
		if !ig.Placeable() {
			return cfg, fmt.Errorf("worker: Options.Activities: the %s activities run beside the session workflows, on their task queue: "+
				"only the model and tools groups run on a worker of their own (leave Activities empty for the whole agent)", g)
		}
		cfg.ActivityGroups = append(cfg.ActivityGroups, ig)
	}
	if len(cfg.ActivityGroups) > 0 && o.Feed == "" {
		return cfg, fmt.Errorf("worker: Options.Activities: %s; set Options.Feed to the NATS feed the session workers use "+
			"(nats://host:4222), or to \"inprocess\" when they run in this very process", iacts.InProcessFeedApart)
	}
	var err error
	if cfg.Codec, err = serve.CodecKeys(o.CodecKeys, getenv); err != nil {
		return cfg, fmt.Errorf("worker: %w", err)
	}
	return cfg, nil
}

// errClosed is what a closed plugin's methods return.
var errClosed = errors.New("worker: the plugin is closed (Close was called); make a new one with worker.New")

// TaskQueue is the task queue the plugin's worker polls in Run: the
// agent's, or the one of the activities it is limited to.
func (p *Plugin) TaskQueue(ctx context.Context) (string, error) {
	if p == nil || p.parts == nil {
		return "", errClosed
	}
	return p.parts.WorkerQueue(ctx)
}

// Agent is the agent as an engine-neutral agent.Agent: each Invoke runs a
// turn on the session's workflow through c (Update-with-Start on the
// agent's task queue) and streams its events from the plugin's live feed.
// With codec keys, c must have been made with the plugin; the agent of a
// client that would send prompts unencrypted, or of a closed plugin,
// fails every turn saying so.
func (p *Plugin) Agent(c client.Client) agent.Agent {
	if p == nil || p.parts == nil {
		return failing(errClosed)
	}
	if cdc := p.p.Codec(); cdc != nil && !cdc.OnClient(c) {
		return failing(errors.New("worker: Plugin.Agent: payload codec keys are configured, but this Temporal client was not made with " +
			"the plugin, so prompts would reach Temporal unencrypted: pass the plugin in client.Options.Plugins and use that client"))
	}
	return p.parts.Agent(c)
}

// failing is an agent whose every turn fails with err.
func failing(err error) agent.Agent {
	return agent.AgentFunc(func(context.Context, agent.Scope, agent.Prompt) iter.Seq[agent.Event] {
		return func(yield func(agent.Event) bool) { yield(agent.Failed(err.Error(), false, "")) }
	})
}

// Metrics serves the agent's metrics (turns, model calls, tool calls, the
// SDK's) as Prometheus text, for a server of your own.
func (p *Plugin) Metrics() http.Handler { return p.metrics.Handler() }

// Run runs a worker with the plugin on c until ctx ends, then stops it
// gracefully (running calls get StopTimeout to finish): what `fastagent
// worker` runs. On the agent's task queue it first makes the Temporal
// schedules of the definition's schedules/ files. With codec keys, c must
// have been made with the plugin (client.Options.Plugins).
func (p *Plugin) Run(ctx context.Context, c client.Client) error {
	if p == nil || p.parts == nil {
		return errClosed
	}
	run, err := p.parts.Start(ctx, c)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer run.Close() //nolint:contextcheck // Close stops the worker after ctx ended; it bounds itself
	return run.Wait(ctx)
}

// Close releases the store, the feed, the tool sandbox and the tracing
// exporter the plugin opened; later calls are no-ops. Close it after its
// workers stopped.
func (p *Plugin) Close() {
	if p == nil || p.parts == nil {
		return
	}
	if p.p != nil {
		p.p.Close()
	}
	p.parts.Close()
	p.parts = nil
}

// Run serves the agent of opts on c until ctx ends: New, then Plugin.Run,
// then Close. With codec keys, make the client with the plugin instead:
//
//	p, err := worker.New(ctx, opts)
//	c, err := client.Dial(client.Options{…, Plugins: []client.Plugin{p}})
//	err = p.Run(ctx, c)
func Run(ctx context.Context, c client.Client, opts Options) error {
	if c == nil {
		return errors.New("worker: Run needs a Temporal client")
	}
	p, err := New(ctx, opts)
	if err != nil {
		return err
	}
	defer p.Close() //nolint:contextcheck // Close releases the backends after ctx ended
	return p.Run(ctx, c)
}
