package worker_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/proto"

	"github.com/fastagent/fastagent/activities"
	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/ingress"
	"github.com/fastagent/fastagent/internal/plugin"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
	"github.com/fastagent/fastagent/worker"
	"github.com/fastagent/fastagent/workflows"
)

var codecKeys = "k1:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))

// With codec keys, worker.Run on a client made without the plugin is
// refused before anything is written, with what to do instead.
func TestRunRefusesAClientWithoutTheCodec(t *testing.T) {
	dir, env, done := exampleAgent("", modelserver.Reply{Text: []string{"never"}})
	defer done()
	c, err := client.Dial(temporalOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = worker.Run(ctx, c, worker.Options{Dir: dir, Getenv: env, TaskQueue: "codec-refused", CodecKeys: codecKeys, Logger: quiet})
	if err == nil || !strings.Contains(err.Error(), "client.Options.Plugins") || !strings.Contains(err.Error(), "unencrypted") {
		t.Fatalf("Run = %v, want a refusal saying to make the client with the plugin", err)
	}
}

// The plugin on the client encrypts what the agent writes to Temporal: a
// canary in the prompt and the answer appears nowhere in the raw history.
func TestPluginOnTheClientEncrypts(t *testing.T) {
	const canary = "CANARY-4b1d-do-not-leak"
	dir, env, done := exampleAgent("", modelserver.Reply{Text: []string{"echo ", canary}})
	defer done()
	ctx := context.Background()
	p, err := worker.New(ctx, worker.Options{Dir: dir, Getenv: env, TaskQueue: "codec-plugin", CodecKeys: codecKeys, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	opts := temporalOptions()
	opts.Plugins = []client.Plugin{p}
	c, err := client.Dial(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w := sdkworker.New(c, "codec-plugin", sdkworker.Options{})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	res, err := agent.Collect(p.Agent(c).Invoke(ctx, agent.Scope{Session: "codec"}, agent.Prompt{Text: "say " + canary}))
	if err != nil || !strings.Contains(res.Text, canary) {
		t.Fatalf("turn: %q %v", res.Text, err)
	}
	plain, err := client.Dial(temporalOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	it := plain.GetWorkflowHistory(ctx, workflows.WorkflowID("codec"), "", false, 0)
	var raw []byte
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := proto.Marshal(ev)
		raw = append(raw, b...)
	}
	if len(raw) == 0 || bytes.Contains(raw, []byte("CANARY")) {
		t.Fatalf("the canary is in the raw history (%d bytes)", len(raw))
	}
	if !bytes.Contains(raw, []byte("binary/encrypted")) {
		t.Fatalf("no encrypted payload in the raw history")
	}
}

// A plugin limited to a group that fastagent.yaml does not place on a task
// queue of its own has no queue to serve: Run says what to set.
func TestRunActivitiesNeedATaskQueue(t *testing.T) {
	dir, env, done := exampleAgent("")
	defer done()
	c, err := client.Dial(temporalOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = worker.Run(context.Background(), c, worker.Options{Dir: dir, Getenv: env, Feed: "inprocess", Activities: []activities.Group{activities.GroupTools}, Logger: quiet})
	if err == nil || !strings.Contains(err.Error(), "activities: {tools: {taskQueue:") {
		t.Fatalf("Run = %v, want the activities: block named", err)
	}
	err = worker.Run(context.Background(), c, worker.Options{Dir: dir, Getenv: env, Activities: []activities.Group{activities.GroupSession}, TaskQueue: "x", Logger: quiet})
	if err == nil || !strings.Contains(err.Error(), "only the model and tools groups") {
		t.Fatalf("Run of the session group alone = %v, want it refused", err)
	}
}

// The documented default is the one the worker runs with.
func TestDefaultStopTimeout(t *testing.T) {
	if worker.DefaultStopTimeout != plugin.DefaultStopTimeout {
		t.Errorf("worker.DefaultStopTimeout %v, the worker stops with %v", worker.DefaultStopTimeout, plugin.DefaultStopTimeout)
	}
}

// A client made with the plugin elsewhere in the program does not vouch
// for another client: a worker with the plugin in its own options, on a
// client made without it, is refused at start with codec keys, as if no
// client had the plugin.
func TestWorkerOnAnotherClientRefusedWithCodec(t *testing.T) {
	dir, env, done := exampleAgent("", modelserver.Reply{Text: []string{"never"}})
	defer done()
	ctx := context.Background()
	p, err := worker.New(ctx, worker.Options{Dir: dir, Getenv: env, TaskQueue: "codec-two-clients", CodecKeys: codecKeys, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	withPlugin := temporalOptions()
	withPlugin.Plugins = []client.Plugin{p}
	encoded, err := client.Dial(withPlugin)
	if err != nil {
		t.Fatal(err)
	}
	defer encoded.Close()
	plain, err := client.Dial(temporalOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()

	w := sdkworker.New(plain, "codec-two-clients", sdkworker.Options{Plugins: []sdkworker.Plugin{p}})
	if err := w.Start(); err == nil {
		w.Stop()
		t.Fatal("a worker on a client without the codec started: its sessions would be written unencrypted")
	} else if !strings.Contains(err.Error(), "unencrypted") {
		t.Fatalf("start = %v, want the codec refusal", err)
	}
	// Plugin.Run on the plain client is refused the same way.
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := p.Run(rctx, plain); err == nil || !strings.Contains(err.Error(), "unencrypted") {
		t.Fatalf("Run on the plain client = %v, want the codec refusal", err)
	}
	// The worker on the client made with the plugin (plugin on both) starts.
	w2 := sdkworker.New(encoded, "codec-two-clients", sdkworker.Options{Plugins: []sdkworker.Plugin{p}})
	if err := w2.Start(); err != nil {
		t.Fatalf("worker on the plugin's client: %v", err)
	}
	w2.Stop()
}

// A closed plugin says so: its methods return errors (or nothing), never
// a nil-pointer panic.
func TestClosedPluginDoesNotPanic(t *testing.T) {
	dir, env, done := exampleAgent("")
	defer done()
	ctx := context.Background()
	p, err := worker.New(ctx, worker.Options{Dir: dir, Getenv: env, TaskQueue: "closed-plugin", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	p.Close()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("a closed plugin panicked: %v", r)
		}
	}()
	if _, err := p.TaskQueue(ctx); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("TaskQueue of a closed plugin: %v, want an error saying it is closed", err)
	}
	c, err := client.Dial(temporalOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := p.Run(ctx, c); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Run of a closed plugin: %v, want an error saying it is closed", err)
	}
	var zero *worker.Plugin
	zero.Close()
}

// With codec keys, Plugin.Agent on a client made without the plugin fails
// the turn before anything reaches Temporal (the prompt would be written
// unencrypted), saying what to do.
func TestAgentRefusesAClientWithoutTheCodec(t *testing.T) {
	dir, env, done := exampleAgent("", modelserver.Reply{Text: []string{"never"}})
	defer done()
	// No worker polls the queue: a turn that was sent waits until ctx ends.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := worker.New(ctx, worker.Options{Dir: dir, Getenv: env, TaskQueue: "codec-agent", CodecKeys: codecKeys, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	plain, err := client.Dial(temporalOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	_, err = agent.Collect(p.Agent(plain).Invoke(ctx, agent.Scope{Session: "codec-agent"}, agent.Prompt{Text: "secret"}))
	if err == nil || !strings.Contains(err.Error(), "client.Options.Plugins") {
		t.Fatalf("turn through a plain client: %v, want refused", err)
	}
	if _, err := plain.DescribeWorkflowExecution(ctx, workflows.WorkflowID("codec-agent"), ""); err == nil {
		t.Fatal("the refused turn started a session")
	}
}

// A plugin limited to groups that never run apart (session, channels,
// schedules) is refused by New, before it is put on any client: on a
// client it would register them on every worker made from it.
func TestNewRefusesGroupsThatDoNotRunApart(t *testing.T) {
	dir, env, done := exampleAgent("")
	defer done()
	for _, g := range []activities.Group{activities.GroupSession, activities.GroupChannels, activities.GroupSchedules} {
		p, err := worker.New(context.Background(), worker.Options{Dir: dir, Getenv: env, Activities: []activities.Group{g}, TaskQueue: "x", Logger: quiet})
		if err == nil {
			p.Close()
			t.Errorf("New limited to the %s group: no error", g)
		} else if !strings.Contains(err.Error(), "only the model and tools groups") {
			t.Errorf("New limited to the %s group: %v, want it to say which groups run apart", g, err)
		}
	}
}

// New, then Close, leaves no goroutine of the plugin running.
func TestPluginCloseLeavesNoGoroutine(t *testing.T) {
	dir, env, done := exampleAgent("")
	defer done()
	// Warm what starts once per process (the SDK's and the sandbox's).
	if p, err := worker.New(context.Background(), worker.Options{Dir: dir, Getenv: env, Logger: quiet}); err == nil {
		p.Close()
	}
	before := runtime.NumGoroutine()
	for range 3 {
		p, err := worker.New(context.Background(), worker.Options{Dir: dir, Getenv: env, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		p.Close()
	}
	if !wait.Until(10*time.Second, func() bool { return runtime.NumGoroutine() <= before }) {
		buf := make([]byte, 1<<20)
		t.Fatalf("goroutines: %d before, %d after three New/Close\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
	}
}

// With codec keys, the ingress refuses a Temporal client that would send
// the prompts to Temporal unencrypted (one not made with the fastagent
// plugin), saying what to do, and takes one made with the plugin.
func TestIngressNeedsTheCodecOnTheClient(t *testing.T) {
	keys := codecKeys
	dir, env, done := exampleAgent("")
	defer done()
	plain, err := client.Dial(temporalOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	h, err := ingress.New(plain, ingress.Options{Dir: dir, Getenv: env, APIToken: "tok", CodecKeys: keys, Logger: quiet})
	if err == nil {
		_ = h.Close()
		t.Fatal("the ingress took a client without the codec: prompts would reach Temporal unencrypted")
	}
	if !strings.Contains(err.Error(), "client.Options.Plugins") || !strings.Contains(err.Error(), "unencrypted") {
		t.Fatalf("New: %v, want the refusal to say to make the client with the plugin", err)
	}

	p, err := worker.New(context.Background(), worker.Options{Dir: dir, Getenv: env, CodecKeys: keys, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	opts := temporalOptions()
	opts.Plugins = []client.Plugin{p}
	encoded, err := client.Dial(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer encoded.Close()
	h, err = ingress.New(encoded, ingress.Options{Dir: dir, Getenv: env, APIToken: "tok", CodecKeys: keys, Logger: quiet})
	if err != nil {
		t.Fatalf("New with the plugin's client: %v", err)
	}
	_ = h.Close()
}

// A plugin limited to the model or tools group runs apart from the
// sessions: with the in-process feed (Feed unset) their live events and
// aborts would never cross to the sessions' processes, so New refuses it,
// naming the NATS feed; Feed "inprocess" says the sessions run here.
func TestNewRefusesActivitiesApartWithoutAFeed(t *testing.T) {
	dir, env, done := exampleAgent("activities:\n  tools: {taskQueue: tools}\n  model: {taskQueue: llm}\n")
	defer done()
	for _, g := range []activities.Group{activities.GroupTools, activities.GroupModel} {
		p, err := worker.New(context.Background(), worker.Options{Dir: dir, Getenv: env, Activities: []activities.Group{g}, Logger: quiet})
		if err == nil {
			p.Close()
			t.Errorf("New limited to the %s group without a feed: no error", g)
		} else if !strings.Contains(err.Error(), "NATS") || !strings.Contains(err.Error(), "abort") {
			t.Errorf("New limited to the %s group without a feed: %v, want it to say aborts need the NATS feed", g, err)
		}
		p, err = worker.New(context.Background(), worker.Options{Dir: dir, Getenv: env, Feed: "inprocess", Activities: []activities.Group{g}, Logger: quiet})
		if err != nil {
			t.Errorf("New limited to the %s group, Feed inprocess: %v", g, err)
		} else {
			p.Close()
		}
	}
}
