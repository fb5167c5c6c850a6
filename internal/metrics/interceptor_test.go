package metrics_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/metrics"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// runTool runs the real Tool.Execute activity for a call of tool (stored
// as the assistant's reply) under the metrics interceptor.
func runTool(t *testing.T, m *metrics.Metrics, kit *testkit.Kit, act *testsuite.TestActivityEnvironment, session, tool string, known bool, synthetic *agent.ToolResult) {
	t.Helper()
	now := time.Now().UTC()
	user := transcript.Message{Role: transcript.RoleUser, Text: "go"}
	reply := transcript.Message{Role: transcript.RoleAssistant, StopReason: transcript.StopToolUse,
		ToolCalls: []transcript.ToolCall{{ID: "c1", Name: tool, Args: json.RawMessage(`{"note":"x"}`)}}}
	_ = kit.Store.Append(context.Background(), session,
		transcript.Entry{ID: "u1", Type: transcript.TypeMessage, Time: now, Message: &user},
		transcript.Entry{ID: "a1", ParentID: "u1", Type: transcript.TypeMessage, Time: now, Message: &reply})
	call := agentloop.ToolCall{
		Session: session, Turn: "t1", Step: 1, Synthetic: synthetic,
		Call:             agentloop.Call{ID: "c1", Name: tool, Known: known},
		AssistantEntryID: "a1", ResultEntryID: "r1", ParentID: "a1",
	}
	if _, err := act.ExecuteActivity(workflows.ActivityToolExecute, call); err != nil {
		t.Fatalf("execute %s: %v", tool, err)
	}
}

// The tool metric counts calls that ran, by tools the agent has: a name the
// model made up is "unknown" (the label stays bounded), and a result
// answered from the store (an activity retried after the tool ran) or
// recorded without running anything is not counted again.
func TestToolCallsCountedOnceByKnownName(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	kit := testkit.New(t)
	bus := feed.NewInProcess()
	t.Cleanup(func() { _ = bus.Close() })
	var suite testsuite.WorkflowTestSuite
	act := suite.NewTestActivityEnvironment()
	act.SetWorkerOptions(sdkworker.Options{Interceptors: []interceptor.WorkerInterceptor{m.Interceptor()}})
	kit.Activities(bus).Register(act)

	runTool(t, m, kit, act, "ran", testkit.CounterName, true, nil)
	runTool(t, m, kit, act, "ran", testkit.CounterName, true, nil) // the retry: answered from the store
	runTool(t, m, kit, act, "made-up", "delete_everything_x7", false, nil)
	runTool(t, m, kit, act, "lost", testkit.CounterName, true, &agent.ToolResult{IsError: true, Content: "outcome unknown"})

	body := scrape(t, m)
	for _, want := range []string{
		`fastagent_tool_calls_total{outcome="ok",tool="` + testkit.CounterName + `"} 1`,
		`fastagent_tool_calls_total{outcome="tool_error",tool="unknown"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	if strings.Contains(body, "delete_everything_x7") {
		t.Error("a tool name the model made up became a label value")
	}
	if strings.Contains(body, `outcome="tool_error",tool="`+testkit.CounterName+`"`) {
		t.Error("a recorded (synthetic) result was counted as a call")
	}
}

// A Step.Run's calls are counted as the Tool.Execute and Model.Generate
// attempts of the two-activity path are: the tool call by tool and
// outcome, the model call's attempt by outcome — once: a retry that reads
// the call's stored result and the model's stored reply counts nothing.
// The span the worker's tracing gives each call is TestStepCallSpans's
// (internal/activities).
func TestStepRunCountedAsItsCalls(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	kit := testkit.New(t)
	bus := feed.NewInProcess()
	t.Cleanup(func() { _ = bus.Close() })
	var suite testsuite.WorkflowTestSuite
	act := suite.NewTestActivityEnvironment()
	act.SetWorkerOptions(sdkworker.Options{Interceptors: []interceptor.WorkerInterceptor{m.Interceptor()}})
	kit.Activities(bus).Register(act)

	const session = "step"
	now := time.Now().UTC()
	user := transcript.Message{Role: transcript.RoleUser, Text: "go"}
	reply := transcript.Message{Role: transcript.RoleAssistant, StopReason: transcript.StopToolUse,
		ToolCalls: []transcript.ToolCall{{ID: "c1", Name: testkit.CounterName, Args: json.RawMessage(`{"note":"x"}`)}}}
	_ = kit.Store.Append(context.Background(), session,
		transcript.Entry{ID: "u1", Type: transcript.TypeMessage, Time: now, Message: &user},
		transcript.Entry{ID: "a1", ParentID: "u1", Type: transcript.TypeMessage, Time: now, Message: &reply})
	in := agentloop.StepCall{
		Tools: []agentloop.ToolCall{{
			Session: session, Turn: "t1", Step: 1,
			Call:             agentloop.Call{ID: "c1", Name: testkit.CounterName, Known: true},
			AssistantEntryID: "a1", ResultEntryID: "r1", ParentID: "a1",
		}},
		Model: agentloop.ModelCall{Session: session, Turn: "t1", Step: 2, Leaf: "r1", EntryID: "a2", MaxAttempts: 6, AfterTools: true},
	}
	for range 2 { // the second: a retry, answered from the store
		if _, err := act.ExecuteActivity(workflows.ActivityStepRun, in); err != nil {
			t.Fatalf("Step.Run: %v", err)
		}
	}
	if n := kit.Counter.Runs(session); n != 1 {
		t.Fatalf("the counter ran %d times, want 1", n)
	}
	body := scrape(t, m)
	for _, want := range []string{
		`fastagent_tool_calls_total{outcome="ok",tool="` + testkit.CounterName + `"} 1`,
		`fastagent_model_call_duration_seconds_count{outcome="ok"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %s:\n%s", want, grepFastagent(body))
		}
	}
}

func grepFastagent(body string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "fastagent_") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
