// Package plugin installs fastagent on a Temporal worker as an SDK plugin
// (temporal.SimplePlugin: both a client.Plugin and a worker.Plugin): on
// worker start it registers the session, delegate, chat and schedule-fire
// workflows with every activity they call (or, on a task queue a group of
// activities is placed on, that group alone), adds fastagent's worker
// interceptors and, on a client, sets its payload codec. Tuning holds the
// SDK worker options fastagent's own workers run with (tuning, Worker
// Deployment versioning). The public worker package and every serving
// command (internal/serve) build their workers with it.
package plugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/codec"
	"github.com/fastagent/fastagent/workflows"
)

// Name is the plugin's name, reported in worker heartbeats.
const Name = "fastagent"

// Options configure a plugin.
type Options struct {
	// TaskQueue is the agent's task queue, where its sessions run (default
	// workflows.TaskQueue).
	TaskQueue string
	// Activities implement the activities.
	Activities activities.Set
	// Groups, when set, limits the plugin to these groups' activities, on
	// every worker it is on, and no workflows: a worker of its own for the
	// tools, say.
	Groups []activities.Group
	// Placement returns the task queues fastagent.yaml places groups on
	// (activities: block), read at each worker start; nil places none.
	Placement func(context.Context) map[activities.Group]string
	// Interceptors are added to every worker the plugin is on (metrics, a
	// test's fault injection).
	Interceptors []interceptor.WorkerInterceptor
	// ClientInterceptors are added to the clients made with the plugin
	// (tracing).
	ClientInterceptors []interceptor.ClientInterceptor
	// Codec encrypts payloads and failure messages: set on every client
	// made with the plugin. A worker refuses to start unless its client
	// has it: made with the plugin, or ClientEncoded.
	Codec *codec.Codec
	// ClientEncoded says the workers' client was dialled with Codec already
	// (the serving commands dial with it).
	ClientEncoded bool
	// Frontend is told the Temporal address (HostPort, the SDK's default
	// when empty) of every client made with the plugin: the runtime keeps
	// tools from it.
	Frontend func(hostPort string)
	// MetricsHandler is set on the clients made with the plugin that have
	// none (the SDK's metrics).
	MetricsHandler client.MetricsHandler
	// Version is reported in worker heartbeats beside Name.
	Version string
	Logger  *slog.Logger
}

// Plugin is fastagent as a Temporal plugin. Put it on a client
// (client.Options.Plugins: every worker made from the client gets it, and
// the client the codec) or on a worker (worker.Options.Plugins).
type Plugin struct {
	*temporal.SimplePlugin
	opts Options
	// clientConfigured is set once a client was made with the plugin.
	clientConfigured atomic.Bool
	// closed is set by Close: the activities' store and feed are closed.
	closed atomic.Bool
	// aliases are the values that stand for this plugin in a worker's
	// Options.Plugins (the public worker.Plugin wrapping it).
	aliases []any

	mu      sync.Mutex
	workers map[string]*workerState // by worker instance key
}

// workerState is what the plugin learned of one worker when it was
// configured.
type workerState struct {
	queue string
	// registered are the workflow and activity names registered on it, by
	// anyone: the plugin registers only the others.
	registered map[string]bool
	// noWorkflows: DisableWorkflowWorker (registering one would panic).
	noWorkflows bool
	// pin: a versioned worker without a default behaviour needs one per
	// workflow.
	pin bool
	// configured counts the plugin's ConfigureWorker calls for this
	// worker, inOptions says the worker's own Options.Plugins name it: the
	// SDK configures a worker with its client's plugins, then its own, so
	// a plugin named in the options and configured once is not on the
	// worker's client.
	configured int
	inOptions  bool
}

// onClient says whether the plugin is on the worker's client.
func (w *workerState) onClient() bool { return w.configured > 1 || !w.inOptions }

// New returns the plugin of opts.
func New(opts Options) (*Plugin, error) {
	if opts.TaskQueue == "" {
		opts.TaskQueue = workflows.TaskQueue
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	for _, g := range opts.Groups {
		if _, err := activities.ParseGroup(string(g)); err != nil {
			return nil, err
		}
	}
	p := &Plugin{opts: opts, workers: map[string]*workerState{}}
	so := temporal.SimplePluginOptions{
		Name:               Name,
		Version:            opts.Version,
		ClientInterceptors: opts.ClientInterceptors,
		ConfigureClient:    p.configureClient,
		ConfigureWorker:    p.configureWorker,
		RunContextBefore:   p.start,
		RunContextAfter:    p.stop,
	}
	if opts.Codec != nil {
		so.DataConverter = opts.Codec.DataConverter()
		so.FailureConverter = opts.Codec.FailureConverter()
		// The client says it encodes (codec.OnClient: the ingress and
		// Agent refuse a client that does not).
		so.ClientInterceptors = append(slices.Clone(so.ClientInterceptors), opts.Codec.Marker())
	}
	sp, err := temporal.NewSimplePlugin(so)
	if err != nil {
		return nil, err
	}
	p.SimplePlugin = sp
	return p, nil
}

// TaskQueue is the agent's task queue.
func (p *Plugin) TaskQueue() string { return p.opts.TaskQueue }

// Codec is the plugin's payload codec (nil: none).
func (p *Plugin) Codec() *codec.Codec { return p.opts.Codec }

// Groups are the groups the plugin is limited to (none: all, with the
// workflows).
func (p *Plugin) Groups() []activities.Group { return p.opts.Groups }

func (p *Plugin) configureClient(_ context.Context, o client.PluginConfigureClientOptions) error {
	if o.ClientOptions.MetricsHandler == nil && p.opts.MetricsHandler != nil {
		o.ClientOptions.MetricsHandler = p.opts.MetricsHandler
	}
	if p.opts.Frontend != nil {
		hp := o.ClientOptions.HostPort
		if hp == "" {
			hp = client.DefaultHostPort
		}
		p.opts.Frontend(hp)
	}
	p.clientConfigured.Store(true)
	return nil
}

// configureWorker notes the worker's task queue and what is registered on
// it, adds the interceptors and, when the worker sets none, a stop timeout
// (DefaultStopTimeout) — once per worker, though the plugin may be on both
// its client and its options.
func (p *Plugin) configureWorker(_ context.Context, o sdkworker.PluginConfigureWorkerOptions) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	key := o.WorkerInstanceKey
	if w, seen := p.workers[key]; seen {
		w.configured++
		return nil
	}
	d := o.WorkerOptions.DeploymentOptions
	w := &workerState{
		queue:       o.TaskQueue,
		registered:  map[string]bool{},
		noWorkflows: o.WorkerOptions.DisableWorkflowWorker,
		pin:         d.UseVersioning && d.DefaultVersioningBehavior == workflow.VersioningBehaviorUnspecified,
		configured:  1,
		inOptions:   slices.ContainsFunc(o.WorkerOptions.Plugins, p.is),
	}
	p.workers[key] = w
	o.WorkerOptions.Interceptors = append(o.WorkerOptions.Interceptors, p.opts.Interceptors...)
	if o.WorkerOptions.WorkerStopTimeout == 0 {
		// The SDK cancels running activities at once on stop: a tool call
		// running during a restart would become "outcome unknown".
		o.WorkerOptions.WorkerStopTimeout = DefaultStopTimeout
	}
	reg := o.WorkerRegistryOptions
	onWorkflow, onActivity := reg.OnRegisterWorkflow, reg.OnRegisterActivity
	reg.OnRegisterWorkflow = func(fn any, ro workflow.RegisterOptions) {
		p.noteRegistered(w, ro.Name)
		if onWorkflow != nil {
			onWorkflow(fn, ro)
		}
	}
	reg.OnRegisterActivity = func(fn any, ro activity.RegisterOptions) {
		p.noteRegistered(w, ro.Name)
		if onActivity != nil {
			onActivity(fn, ro)
		}
	}
	return nil
}

// Close marks the plugin closed: a worker starting later is refused (the
// activities' store and feed are closed by their owner).
func (p *Plugin) Close() { p.closed.Store(true) }

// Alias makes x (a value wrapping the plugin, such as the public
// worker.Plugin) stand for the plugin in a worker's Options.Plugins.
func (p *Plugin) Alias(x any) { p.aliases = append(p.aliases, x) }

// is reports whether x, an entry of a worker's Options.Plugins, is this
// plugin.
func (p *Plugin) is(x sdkworker.Plugin) bool {
	if x == nil {
		return false
	}
	if pp, ok := x.(*Plugin); ok {
		return pp == p
	}
	return slices.Contains(p.aliases, any(x))
}

func (p *Plugin) noteRegistered(w *workerState, name string) {
	if name == "" {
		return
	}
	p.mu.Lock()
	w.registered[name] = true
	p.mu.Unlock()
}

// Serves says what the plugin registers on a worker of task queue queue:
// the workflows, and the activities of groups. Limited to Groups, it
// serves them wherever it is; otherwise everything on its TaskQueue, and
// on a task queue fastagent.yaml places groups on, those groups.
func (p *Plugin) Serves(ctx context.Context, queue string) (workflows bool, groups []activities.Group) {
	if len(p.opts.Groups) > 0 {
		return false, p.opts.Groups
	}
	if queue == p.opts.TaskQueue {
		return true, activities.Groups
	}
	if p.opts.Placement == nil {
		return false, nil
	}
	placed := p.opts.Placement(ctx)
	for _, g := range activities.Groups {
		if q := placed[g]; q != "" && q == queue {
			groups = append(groups, g)
		}
	}
	return false, groups
}

// start registers on the starting worker what Serves says and nothing
// registered already; on a replayer, the workflows.
func (p *Plugin) start(ctx context.Context, o temporal.SimplePluginRunContextBeforeOptions) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("fastagent plugin: registering on the worker: %v", r)
		}
	}()
	if o.WorkflowReplayer {
		registerWorkflows(o.Registry, nil, false)
		return nil
	}
	if p.closed.Load() {
		return errors.New("fastagent plugin: closed (its store, feed and tool sandbox are released): start workers before Plugin.Close, or make a new plugin")
	}
	p.mu.Lock()
	w := p.workers[o.InstanceKey]
	p.mu.Unlock()
	if w == nil {
		return errors.New("fastagent plugin: the worker starting was not configured by it")
	}
	// The codec is on the worker's client if the plugin configured a
	// client and this worker's client is one of them (the plugin is on
	// it, not only in the worker's options).
	if p.opts.Codec != nil && !p.opts.ClientEncoded && (!p.clientConfigured.Load() || !w.onClient()) {
		return errors.New("fastagent: payload codec keys are configured, but this worker's Temporal client was not made with the fastagent plugin, " +
			"so payloads would be written unencrypted: make the plugin first (worker.New), pass it in client.Options.Plugins (it sets the codec's " +
			"data and failure converters) and run the worker on that client (Plugin.Run, or sdkworker.New); or let fastagent dial Temporal; or remove the keys")
	}
	wf, groups := p.Serves(ctx, w.queue)
	p.mu.Lock()
	done := maps.Clone(w.registered)
	p.mu.Unlock()
	if !wf && len(groups) == 0 {
		if len(done) == 0 {
			return fmt.Errorf("fastagent plugin: a worker on task queue %q serves nothing of this agent: its sessions run on %q, "+
				"and fastagent.yaml's activities: block places no group on %q", w.queue, p.opts.TaskQueue, w.queue)
		}
		p.opts.Logger.Debug("fastagent plugin: nothing to register on this task queue", "task_queue", w.queue, "agent_task_queue", p.opts.TaskQueue)
		return nil
	}
	if wf && !w.noWorkflows {
		registerWorkflows(o.Registry, done, w.pin)
	}
	for _, e := range p.opts.Activities.Entries() {
		if activities.RegistersOn(e, func(g activities.Group) bool { return slices.Contains(groups, g) }) && !done[e.Name] {
			p.opts.Activities.Registering(e)
			o.Registry.RegisterActivityWithOptions(e.Fn, activity.RegisterOptions{Name: e.Name})
		}
	}
	p.opts.Logger.Debug("fastagent plugin: registered", "task_queue", w.queue, "workflows", wf && !w.noWorkflows, "groups", groups)
	return nil
}

func (p *Plugin) stop(_ context.Context, o temporal.SimplePluginRunContextAfterOptions) {
	p.mu.Lock()
	delete(p.workers, o.InstanceKey)
	p.mu.Unlock()
}

// registry is where workflows are registered.
type registry interface {
	RegisterWorkflowWithOptions(any, workflow.RegisterOptions)
}

// registerWorkflows registers the four workflows but those in done; pin
// gives each the pinned versioning behaviour.
func registerWorkflows(r registry, done map[string]bool, pin bool) {
	for _, wf := range []struct {
		fn   any
		name string
	}{
		{workflows.SessionWorkflow, workflows.SessionWorkflowType},
		{workflows.ScheduleFireWorkflow, workflows.ScheduleFireWorkflowType},
		{workflows.ChatWorkflow, workflows.ChatWorkflowType},
		{workflows.DelegateWorkflow, workflows.DelegateWorkflowType},
	} {
		if done[wf.name] {
			continue
		}
		ro := workflow.RegisterOptions{Name: wf.name}
		if pin {
			ro.VersioningBehavior = workflow.VersioningBehaviorPinned
		}
		r.RegisterWorkflowWithOptions(wf.fn, ro)
	}
}
