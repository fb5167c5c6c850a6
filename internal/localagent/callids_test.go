package localagent_test

import (
	"context"
	"testing"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/localagent"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
)

// Like the session workflow, the in-process agent records a call that
// reuses an earlier step's ID (or repeats one within its reply) as an error
// result and does not run it.
func TestRefusedCallsAreNotRun(t *testing.T) {
	k := testkit.New(t)
	bus := feed.NewInProcess()
	t.Cleanup(func() { _ = bus.Close() })
	a := &localagent.Agent{Acts: k.Activities(bus)}
	k.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "r1", Name: testkit.CounterName, Args: `{"note":"first"}`}}},
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{
			{ID: "r1", Name: testkit.CounterName, Args: `{"note":"reused"}`},
			{ID: "d1", Name: testkit.CounterName, Args: `{"note":"twice"}`},
			{ID: "d1", Name: testkit.CounterName, Args: `{"note":"twice"}`},
		}},
		modelserver.Reply{Text: []string{"done"}},
	)
	if _, err := agent.Collect(a.Invoke(context.Background(), agent.Scope{Session: "ids"}, agent.Prompt{Text: "count"})); err != nil {
		t.Fatal(err)
	}
	if n := k.Counter.Runs("ids"); n != 1 {
		t.Errorf("counter ran %d times, want 1 (the reused and repeated IDs refused)", n)
	}
}
