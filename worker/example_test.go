package worker_test

import (
	"context"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/worker"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// The plugin on your own client and worker: the client gets the plugin
// (and with it the codec and tracing, when configured), the worker you
// make from it — beside workflows of your own — serves the agent's
// sessions, and Plugin.Agent sends a turn to one.
func Example() {
	ctx := context.Background()
	dir, env, done := exampleAgent("", modelserver.Reply{Text: []string{"Hello from your own worker."}})
	defer done()

	p, err := worker.New(ctx, worker.Options{Dir: dir, Getenv: env, TaskQueue: "support-agent", Logger: quiet})
	if err != nil {
		fmt.Println("plugin:", err)
		return
	}
	defer p.Close()

	opts := temporalOptions() // HostPort, Namespace, Credentials
	opts.Plugins = []client.Plugin{p}
	c, err := client.Dial(opts)
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	defer c.Close()

	w := sdkworker.New(c, "support-agent", sdkworker.Options{})
	if err := w.Start(); err != nil {
		fmt.Println("worker:", err)
		return
	}
	defer w.Stop()

	res, err := agent.Collect(p.Agent(c).Invoke(ctx, agent.Scope{Session: "example"}, agent.Prompt{Text: "Say hello."}))
	if err != nil {
		fmt.Println("turn:", err)
		return
	}
	fmt.Println(res.Text)
	// Output: Hello from your own worker.
}

// Run is `fastagent worker` in a call: here it serves until the example
// ends. The turn is sent as any Temporal client can send one (the
// workflows package names the contract): Update-with-Start of the
// session's workflow, the update ID being the turn's idempotency key.
func ExampleRun() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	dir, env, done := exampleAgent("", modelserver.Reply{Text: []string{"Served by worker.Run."}})
	defer done()
	c, err := client.Dial(temporalOptions())
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	defer c.Close()
	ran := make(chan error, 1)
	go func() {
		ran <- worker.Run(ctx, c, worker.Options{Dir: dir, Getenv: env, TaskQueue: "run-example", Logger: quiet})
	}()

	start := c.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID: workflows.WorkflowID("example-run"), TaskQueue: "run-example",
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}, workflows.SessionWorkflowType, workflows.SessionInput{Session: "example-run"})
	h, err := c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateID: "turn-1", UpdateName: workflows.UpdateTurn, WaitForStage: client.WorkflowUpdateStageCompleted,
			Args: []any{workflows.TurnRequest{Prompt: agent.Prompt{Text: "Hello?"}}},
		},
	})
	var out agentloop.Outcome
	if err == nil {
		err = h.Get(ctx, &out)
	}
	if err != nil {
		fmt.Println("turn:", err)
		return
	}
	fmt.Println(out.Status, "in", out.Steps, "step")
	stop()
	fmt.Println("stopped:", <-ran)
	// Output:
	// completed in 1 step
	// stopped: <nil>
}
