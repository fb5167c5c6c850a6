package plugin

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nexus-rpc/sdk-go/nexus"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/codec"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
)

// fakeWorker is what the SDK hands a worker plugin: the worker's mutable
// options and registry callbacks at configuration, a registry at start.
type fakeWorker struct {
	t       *testing.T
	key     string
	queue   string
	opts    sdkworker.Options
	reg     sdkworker.PluginConfigureWorkerRegistryOptions
	names   []string // registered, in order
	pinned  map[string]bool
	plugins []sdkworker.Plugin
}

func (w *fakeWorker) RegisterWorkflowWithOptions(fn any, o workflow.RegisterOptions) {
	if w.reg.OnRegisterWorkflow != nil {
		w.reg.OnRegisterWorkflow(fn, o)
	}
	if slices.Contains(w.names, o.Name) {
		panic("workflow name " + o.Name + " is already registered")
	}
	w.names = append(w.names, o.Name)
	if o.VersioningBehavior == workflow.VersioningBehaviorPinned {
		w.pinned[o.Name] = true
	}
}

func (w *fakeWorker) RegisterDynamicWorkflow(any, workflow.DynamicRegisterOptions) {}

func (w *fakeWorker) RegisterActivityWithOptions(fn any, o activity.RegisterOptions) {
	if w.reg.OnRegisterActivity != nil {
		w.reg.OnRegisterActivity(fn, o)
	}
	if slices.Contains(w.names, o.Name) {
		panic("activity type " + o.Name + " is already registered")
	}
	w.names = append(w.names, o.Name)
}

func (w *fakeWorker) RegisterDynamicActivity(any, activity.DynamicRegisterOptions) {}
func (w *fakeWorker) RegisterNexusService(*nexus.Service)                          {}

// newWorker configures a worker of queue with plugins (a plugin may be
// named twice: on the client and in the options), as sdkworker.New does.
func newWorker(t *testing.T, name, queue string, opts sdkworker.Options, plugins ...sdkworker.Plugin) *fakeWorker {
	t.Helper()
	w := &fakeWorker{t: t, key: t.Name() + "/" + name, queue: queue, opts: opts, pinned: map[string]bool{}, plugins: plugins}
	for _, p := range plugins {
		if err := p.ConfigureWorker(context.Background(), sdkworker.PluginConfigureWorkerOptions{
			WorkerInstanceKey: w.key, TaskQueue: queue, WorkerOptions: &w.opts, WorkerRegistryOptions: &w.reg,
		}); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// start runs the plugins' StartWorker chain, as Worker.Start does.
func (w *fakeWorker) start() error {
	started := false
	next := func(context.Context, sdkworker.PluginStartWorkerOptions) error { started = true; return nil }
	for i := len(w.plugins) - 1; i >= 0; i-- {
		p, inner := w.plugins[i], next
		next = func(ctx context.Context, o sdkworker.PluginStartWorkerOptions) error {
			return p.StartWorker(ctx, o, inner)
		}
	}
	err := next(context.Background(), sdkworker.PluginStartWorkerOptions{WorkerInstanceKey: w.key, WorkerRegistry: w})
	if err == nil && !started {
		w.t.Fatal("the plugin did not start the worker")
	}
	return err
}

type firer struct{}

func (firer) Fire(context.Context, wire.FireRequest) (workflows.FireRecord, error) {
	return workflows.FireRecord{}, nil
}

func testSet() activities.Set {
	return activities.Set{Acts: &activities.Activities{}, Replies: &activities.Replies{}, Firer: firer{}}
}

func newPlugin(t *testing.T, o Options) *Plugin {
	t.Helper()
	if o.Activities.Acts == nil {
		o.Activities = testSet()
	}
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var allWorkflows = []string{workflows.SessionWorkflowType, workflows.ScheduleFireWorkflowType, workflows.ChatWorkflowType, workflows.DelegateWorkflowType}

func allActivities() []string {
	var out []string
	for _, e := range testSet().Entries() {
		out = append(out, e.Name)
	}
	return out
}

func sameSet(t *testing.T, what string, got, want []string) {
	t.Helper()
	g, w := slices.Clone(got), slices.Clone(want)
	slices.Sort(g)
	slices.Sort(w)
	if !slices.Equal(g, w) {
		t.Errorf("%s registered %v, want %v", what, got, want)
	}
}

// On the agent's task queue the plugin registers the four workflows and
// every activity they call; on a queue fastagent.yaml places a group on,
// that group alone; a worker of neither is refused unless something else
// is registered on it.
func TestPluginRegistersByTaskQueue(t *testing.T) {
	placed := func(context.Context) map[activities.Group]string {
		return map[activities.Group]string{activities.GroupTools: "gpu", activities.GroupModel: "llm"}
	}
	p := newPlugin(t, Options{TaskQueue: "agent", Placement: placed})

	main := newWorker(t, "main", "agent", sdkworker.Options{}, p)
	if err := main.start(); err != nil {
		t.Fatal(err)
	}
	sameSet(t, "the agent's queue", main.names, append(slices.Clone(allWorkflows), allActivities()...))

	gpu := newWorker(t, "gpu", "gpu", sdkworker.Options{}, p)
	if err := gpu.start(); err != nil {
		t.Fatal(err)
	}
	sameSet(t, "the tools queue", gpu.names, []string{workflows.ActivityToolExecute, workflows.ActivityHookRun})

	llm := newWorker(t, "llm", "llm", sdkworker.Options{}, p)
	if err := llm.start(); err != nil {
		t.Fatal(err)
	}
	sameSet(t, "the model queue", llm.names, []string{workflows.ActivityModelGenerate, workflows.ActivityCompact, workflows.ActivityRewind})

	other := newWorker(t, "other", "orders", sdkworker.Options{}, p)
	err := other.start()
	if err == nil || !strings.Contains(err.Error(), `"orders" serves nothing`) || !strings.Contains(err.Error(), `"agent"`) {
		t.Errorf("a worker of another queue with nothing on it: %v, want it refused naming both queues", err)
	}
	// A user's own worker of the same client, with workflows of its own.
	mine := newWorker(t, "mine", "orders", sdkworker.Options{}, p)
	mine.RegisterWorkflowWithOptions(func(workflow.Context) error { return nil }, workflow.RegisterOptions{Name: "Order"})
	if err := mine.start(); err != nil {
		t.Fatalf("a user's worker of another queue: %v", err)
	}
	sameSet(t, "a user's worker", mine.names, []string{"Order"})
}

// Limited to groups, the plugin registers those groups' activities on
// whatever worker it is on, and no workflow.
func TestPluginLimitedToGroups(t *testing.T) {
	p := newPlugin(t, Options{Groups: []activities.Group{activities.GroupTools}})
	w := newWorker(t, "tools", "anything", sdkworker.Options{}, p)
	if err := w.start(); err != nil {
		t.Fatal(err)
	}
	sameSet(t, "a tools worker", w.names, []string{workflows.ActivityToolExecute, workflows.ActivityHookRun})
	if _, err := New(Options{Activities: testSet(), Groups: []activities.Group{"gpus"}}); err == nil {
		t.Error("an unknown group was accepted")
	}
}

// On both the client and the worker, or beside registrations of the user's
// own, the plugin registers each name once; on an activity-only worker,
// no workflow; on a versioned worker without a default behaviour, pinned
// workflows.
func TestPluginRegistersOnce(t *testing.T) {
	p := newPlugin(t, Options{})
	twice := newWorker(t, "twice", workflows.TaskQueue, sdkworker.Options{}, p, p)
	twice.RegisterActivityWithOptions(func(context.Context) error { return nil }, activity.RegisterOptions{Name: workflows.ActivityToolExecute})
	if err := twice.start(); err != nil {
		t.Fatal(err) // a second registration panics (fakeWorker), as in the SDK
	}
	sameSet(t, "a worker with the plugin twice", twice.names, append(slices.Clone(allWorkflows), allActivities()...))
	if got := len(twice.opts.Interceptors); got != 0 {
		t.Errorf("%d interceptors with none configured", got)
	}

	acts := newWorker(t, "acts", workflows.TaskQueue, sdkworker.Options{DisableWorkflowWorker: true}, p)
	if err := acts.start(); err != nil {
		t.Fatal(err)
	}
	sameSet(t, "an activity worker", acts.names, allActivities())

	versioned := newWorker(t, "versioned", workflows.TaskQueue, sdkworker.Options{DeploymentOptions: sdkworker.DeploymentOptions{
		UseVersioning: true, Version: sdkworker.WorkerDeploymentVersion{DeploymentName: "d", BuildID: "b"}}}, p)
	if err := versioned.start(); err != nil {
		t.Fatal(err)
	}
	for _, wf := range allWorkflows {
		if !versioned.pinned[wf] {
			t.Errorf("%s not pinned on a versioned worker without a default behaviour", wf)
		}
	}
}

// With codec keys, a worker starts only on a client made with the plugin
// (or dialled with the codec): nothing is ever written unencrypted.
func TestPluginRefusesAClientWithoutTheCodec(t *testing.T) {
	cdc, err := codec.New([]codec.Key{{ID: "k", Key: make([]byte, 32)}}, false)
	if err != nil {
		t.Fatal(err)
	}
	p := newPlugin(t, Options{Codec: cdc})
	w := newWorker(t, "plain", workflows.TaskQueue, sdkworker.Options{}, p)
	if err := w.start(); err == nil || !strings.Contains(err.Error(), "client.Options.Plugins") {
		t.Fatalf("start without a client made with the plugin: %v, want refused", err)
	} else if len(w.names) != 0 {
		t.Fatalf("refused, yet registered %v", w.names)
	}
	var co client.Options
	if err := p.ConfigureClient(context.Background(), client.PluginConfigureClientOptions{ClientOptions: &co}); err != nil {
		t.Fatal(err)
	}
	if co.DataConverter == nil || co.FailureConverter == nil {
		t.Fatalf("the client got no codec: %+v", co)
	}
	w2 := newWorker(t, "encoded", workflows.TaskQueue, sdkworker.Options{}, p)
	if err := w2.start(); err != nil {
		t.Fatalf("start on a client made with the plugin: %v", err)
	}
	dialled := newPlugin(t, Options{Codec: cdc, ClientEncoded: true})
	if err := newWorker(t, "dialled", workflows.TaskQueue, sdkworker.Options{}, dialled).start(); err != nil {
		t.Fatalf("start on a client dialled with the codec: %v", err)
	}
}

// A workflow replayer with the plugin replays fastagent's workflows.
func TestPluginOnAReplayer(t *testing.T) {
	p := newPlugin(t, Options{})
	var names []string
	reg := replayRegistry{onWorkflow: func(o workflow.RegisterOptions) { names = append(names, o.Name) }}
	err := p.ReplayWorkflow(context.Background(), sdkworker.PluginReplayWorkflowOptions{WorkflowReplayRegistry: reg},
		func(context.Context, sdkworker.PluginReplayWorkflowOptions) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	sameSet(t, "a replayer", names, allWorkflows)
	var _ temporal.SimplePluginRunContextBeforeOptions // the replayer goes through RunContextBefore
}

type replayRegistry struct {
	onWorkflow func(workflow.RegisterOptions)
}

func (r replayRegistry) RegisterWorkflowWithOptions(_ any, o workflow.RegisterOptions) {
	r.onWorkflow(o)
}
func (r replayRegistry) RegisterDynamicWorkflow(any, workflow.DynamicRegisterOptions) {}

// A client made with the plugin does not vouch for the workers of another
// client: a worker with the plugin only in its own options (so not on its
// client) is refused with codec keys, whichever clients the plugin
// configured elsewhere; with the plugin on both its client and its
// options, it starts.
func TestPluginCodecCheckIsPerWorker(t *testing.T) {
	cdc, err := codec.New([]codec.Key{{ID: "k", Key: make([]byte, 32)}}, false)
	if err != nil {
		t.Fatal(err)
	}
	p := newPlugin(t, Options{Codec: cdc})
	var co client.Options // another client of the program, made with the plugin
	if err := p.ConfigureClient(context.Background(), client.PluginConfigureClientOptions{ClientOptions: &co}); err != nil {
		t.Fatal(err)
	}
	onlyInOptions := newWorker(t, "plain-client", workflows.TaskQueue, sdkworker.Options{Plugins: []sdkworker.Plugin{p}}, p)
	if err := onlyInOptions.start(); err == nil || !strings.Contains(err.Error(), "unencrypted") {
		t.Fatalf("start on a client made without the plugin: %v, want refused", err)
	} else if len(onlyInOptions.names) != 0 {
		t.Fatalf("refused, yet registered %v", onlyInOptions.names)
	}
	both := newWorker(t, "plugin-client", workflows.TaskQueue, sdkworker.Options{Plugins: []sdkworker.Plugin{p}}, p, p)
	if err := both.start(); err != nil {
		t.Fatalf("start with the plugin on its client and in its options: %v", err)
	}
	onClient := newWorker(t, "client-only", workflows.TaskQueue, sdkworker.Options{}, p)
	if err := onClient.start(); err != nil {
		t.Fatalf("start with the plugin on its client: %v", err)
	}
}

// On a worker of yours the plugin gives running tool and model calls the
// time fastagent's own workers give them to finish on stop (a tool call
// cancelled by a restart becomes "outcome unknown"); a stop timeout you
// set is kept.
func TestPluginLetsRunningCallsFinishOnStop(t *testing.T) {
	p := newPlugin(t, Options{})
	if w := newWorker(t, "default", workflows.TaskQueue, sdkworker.Options{}, p); w.opts.WorkerStopTimeout != DefaultStopTimeout {
		t.Errorf("WorkerStopTimeout %v on a worker that set none, want %v", w.opts.WorkerStopTimeout, DefaultStopTimeout)
	}
	if w := newWorker(t, "set", workflows.TaskQueue, sdkworker.Options{WorkerStopTimeout: 5 * time.Second}, p); w.opts.WorkerStopTimeout != 5*time.Second {
		t.Errorf("WorkerStopTimeout %v, want the worker's own 5s", w.opts.WorkerStopTimeout)
	}
}

// A worker starting after the plugin was closed is refused: its
// activities' store and feed are gone.
func TestClosedPluginRefusesToStart(t *testing.T) {
	p := newPlugin(t, Options{})
	p.Close()
	w := newWorker(t, "late", workflows.TaskQueue, sdkworker.Options{}, p)
	if err := w.start(); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("start after Close: %v, want refused", err)
	}
}
