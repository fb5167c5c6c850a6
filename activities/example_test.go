package activities_test

import (
	"context"
	"encoding/json"
	"fmt"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/fastagent/fastagent/activities"
	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/testsupport/exampleenv"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/worker"
)

// lookup is a Go tool that says which task queue ran it.
type lookup struct{}

func (lookup) Spec() agent.ToolSpec {
	return agent.ToolSpec{Name: "lookup", Description: "Looks an order up.", Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (lookup) Run(ctx context.Context, _ agent.ToolCall) (agent.ToolResult, error) {
	fmt.Println("lookup ran on task queue", activity.GetInfo(ctx).TaskQueue)
	return agent.ToolResult{Content: "order 42: shipped"}, nil
}

// The tool calls on a task queue of their own: fastagent.yaml places the
// tools group on "tools", the session's worker (the plugin, on the agent's
// task queue) runs the workflows and the model calls, and a second worker
// — on a machine of its own, in practice, with the same store and feed —
// registers the tools group alone and serves the call.
func ExampleRegister() {
	ctx := context.Background()
	dir, env, done := exampleenv.Agent("activities:\n  tools: {taskQueue: tools}\n",
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "call-1", Name: "lookup", Args: "{}"}}},
		modelserver.Reply{Text: []string{"Order 42 has shipped."}})
	defer done()
	tools := []agent.Tool{lookup{}}

	// The session's worker.
	p, err := worker.New(ctx, worker.Options{Dir: dir, Getenv: env, Tools: tools, TaskQueue: "orders-agent", Logger: exampleenv.Quiet})
	if err != nil {
		fmt.Println("plugin:", err)
		return
	}
	defer p.Close()
	opts := exampleenv.ClientOptions()
	opts.Plugins = []client.Plugin{p}
	c, err := client.Dial(opts)
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	defer c.Close()
	sessions := sdkworker.New(c, "orders-agent", sdkworker.Options{})
	if err := sessions.Start(); err != nil {
		fmt.Println("worker:", err)
		return
	}
	defer sessions.Stop()

	// The tools' worker: the activity set of the same agent, its tools
	// group alone, on the task queue fastagent.yaml names.
	// The session's worker runs in this same process, so the in-process
	// feed reaches it; across machines, Feed names the NATS feed.
	set, err := activities.New(ctx, activities.Options{Dir: dir, Getenv: env, Feed: "inprocess", Tools: tools, Logger: exampleenv.Quiet})
	if err != nil {
		fmt.Println("activities:", err)
		return
	}
	defer set.Close()
	tc, err := client.Dial(exampleenv.ClientOptions())
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	defer tc.Close()
	toolWorker := sdkworker.New(tc, "tools", sdkworker.Options{})
	if err := activities.Register(toolWorker, set, activities.GroupTools); err != nil {
		fmt.Println("register:", err)
		return
	}
	if err := toolWorker.Start(); err != nil {
		fmt.Println("tools worker:", err)
		return
	}
	defer toolWorker.Stop()

	res, err := agent.Collect(p.Agent(c).Invoke(ctx, agent.Scope{Session: "order-42"}, agent.Prompt{Text: "Where is order 42?"}))
	if err != nil {
		fmt.Println("turn:", err)
		return
	}
	fmt.Println(res.Text)
	// Output:
	// lookup ran on task queue tools
	// Order 42 has shipped.
}
