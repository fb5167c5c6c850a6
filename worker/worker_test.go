package worker_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/proto"

	"github.com/fastagent/fastagent/activities"
	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/plugin"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
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
	err = worker.Run(context.Background(), c, worker.Options{Dir: dir, Getenv: env, Activities: []activities.Group{activities.GroupTools}, Logger: quiet})
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
