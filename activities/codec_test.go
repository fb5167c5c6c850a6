package activities_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"strings"
	"testing"

	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/fastagent/fastagent/activities"
	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/testsupport/exampleenv"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/worker"
)

var codecKeys = "k1:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32))

// With codec keys, the tool calls of sessions whose payloads are encrypted
// run on a worker of their own registered with Register: the set puts the
// codec on the client made with it, and Register refuses a worker whose
// client lacks it (a plain client, or the set only in the worker's
// options) instead of serving calls it could not decode.
func TestRegisterWithCodecKeys(t *testing.T) {
	ctx := context.Background()
	dir, env, done := exampleenv.Agent("activities:\n  tools: {taskQueue: codec-tools}\n",
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "call-1", Name: "lookup", Args: "{}"}}},
		modelserver.Reply{Text: []string{"Order 42 has shipped."}})
	defer done()
	withKeys := func(k string) string {
		if k == "FASTAGENT_CODEC_KEYS" {
			return codecKeys
		}
		return env(k)
	}
	tools := []agent.Tool{lookup{}}

	set, err := activities.New(ctx, activities.Options{Dir: dir, Getenv: withKeys, Feed: "inprocess", Tools: tools, Logger: exampleenv.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	plain, err := client.Dial(exampleenv.ClientOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	for name, w := range map[string]sdkworker.Worker{
		"a client without the codec": sdkworker.New(plain, "codec-tools", sdkworker.Options{}),
		"the set in the worker's options only": sdkworker.New(plain, "codec-tools",
			sdkworker.Options{Plugins: []sdkworker.Plugin{set}}),
	} {
		if err := activities.Register(w, set, activities.GroupTools); err == nil || !strings.Contains(err.Error(), "client.Options.Plugins") {
			t.Errorf("Register on %s: %v, want it refused, saying to make the client with the set", name, err)
		}
	}

	// The session's worker (the plugin, with the same keys) and the tools'
	// worker on a client made with the set: a turn's tool call is decoded,
	// run and answered.
	p, err := worker.New(ctx, worker.Options{Dir: dir, Getenv: env, CodecKeys: codecKeys, Tools: tools, TaskQueue: "codec-orders", Logger: exampleenv.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	opts := exampleenv.ClientOptions()
	opts.Plugins = []client.Plugin{p}
	c, err := client.Dial(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sessions := sdkworker.New(c, "codec-orders", sdkworker.Options{})
	if err := sessions.Start(); err != nil {
		t.Fatal(err)
	}
	defer sessions.Stop()
	topts := exampleenv.ClientOptions()
	topts.Plugins = []client.Plugin{set}
	tc, err := client.Dial(topts)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	toolWorker := sdkworker.New(tc, "codec-tools", sdkworker.Options{})
	if err := activities.Register(toolWorker, set, activities.GroupTools); err != nil {
		t.Fatalf("Register on a client made with the set: %v", err)
	}
	if err := toolWorker.Start(); err != nil {
		t.Fatal(err)
	}
	defer toolWorker.Stop()
	res, err := agent.Collect(p.Agent(c).Invoke(ctx, agent.Scope{Session: "codec-order-42"}, agent.Prompt{Text: "Where is order 42?"}))
	if err != nil || res.Text != "Order 42 has shipped." {
		t.Fatalf("turn: %q, %v", res.Text, err)
	}
}
