package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	historypb "go.temporal.io/api/history/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/agent/agenttest"
	"github.com/fastagent/fastagent/internal/modelserver"
	"github.com/fastagent/fastagent/internal/testkit"
	"github.com/fastagent/fastagent/workflows"
	sdklog "go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// historyDir is where recorded histories are kept and replayed from in CI
// (workflows/replay_test.go). Set FASTAGENT_RECORD_HISTORIES=1 to rewrite them.
const historyDir = "../../workflows/testdata/histories"

// TestHistories runs representative sessions end to end, replays each
// history against the current workflow code, and (when asked) records them
// for the replay test that guards running sessions against incompatible
// changes.
func TestHistories(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(fastRetries)
	e.agent.TurnsPerRun = 3
	e.startWorker()
	ms := e.kit.Model
	ctx := context.Background()

	scenarios := []struct {
		name  string
		turns func(session string)
	}{
		{"plain_turn", func(s string) {
			testkit.Script(ms, agenttest.Reply)
			must(t, collect(t, e.agent, ctx, s, "hello"), agent.TypeCompleted)
		}},
		{"tool_turn_with_retry", func(s string) {
			testkit.Script(ms, agenttest.ToolThenTransient)
			must(t, collect(t, e.agent, ctx, s, "count"), agent.TypeCompleted)
		}},
		{"parallel_tools_unknown_tool_and_invalid_args", func(s string) {
			ms.Enqueue(
				modelserver.Reply{ToolCalls: []modelserver.ToolCall{
					{ID: "p1", Name: "counter", Args: `{}`},
					{ID: "p2", Name: "no_such_tool", Args: `{}`},
					{ID: "p3", Name: "read", Args: `{"path": 7}`},
				}},
				modelserver.Reply{Text: []string{"done"}},
			)
			must(t, collect(t, e.agent, ctx, s, "do three things"), agent.TypeCompleted)
		}},
		{"failed_then_ok", func(s string) {
			testkit.Script(ms, agenttest.Fail)
			must(t, collect(t, e.agent, ctx, s, "fail"), agent.TypeFailed)
			testkit.Script(ms, agenttest.Reply)
			must(t, collect(t, e.agent, ctx, s, "again"), agent.TypeCompleted)
		}},
		{"continue_as_new", func(s string) {
			for i := 0; i < 4; i++ {
				testkit.Script(ms, agenttest.Echo)
				must(t, collect(t, e.agent, ctx, s, "turn"), agent.TypeCompleted)
			}
		}},
	}
	replayer := sdkworker.NewWorkflowReplayer()
	replayer.RegisterWorkflowWithOptions(workflows.SessionWorkflow, workflow.RegisterOptions{Name: workflows.SessionWorkflowType})
	logger := sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	record := os.Getenv("FASTAGENT_RECORD_HISTORIES") == "1"
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			session := "history-" + sc.name
			sc.turns(session)
			for i, runID := range runIDs(t, e, session) {
				hist := fetchHistory(t, e, session, runID)
				if err := replayer.ReplayWorkflowHistory(logger, hist); err != nil {
					t.Fatalf("replay of run %d just recorded failed (non-determinism): %v", i+1, err)
				}
				if record {
					b, err := protojson.MarshalOptions{Indent: "  "}.Marshal(hist)
					if err != nil {
						t.Fatal(err)
					}
					name := sc.name + ".json"
					if i > 0 {
						name = fmt.Sprintf("%s_run%d.json", sc.name, i+1)
					}
					if err := os.WriteFile(filepath.Join(historyDir, name), b, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
		})
	}
}

func must(t *testing.T, evs []agent.Event, want string) {
	t.Helper()
	if term := agenttest.CheckTerminal(t, evs); term.Type != want {
		t.Fatalf("want %s, got %+v", want, evs)
	}
}

// runIDs lists the session's runs, oldest first (more than one after
// continue-as-new).
func runIDs(t *testing.T, e *env, session string) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	runID := ""
	// Walk back from the latest run through ContinuedAsNew links.
	for {
		d, err := e.client.DescribeWorkflowExecution(ctx, workflows.WorkflowID(session), runID)
		if err != nil {
			t.Fatalf("describe %s: %v", session, err)
		}
		info := d.GetWorkflowExecutionInfo()
		ids = append([]string{info.GetExecution().GetRunId()}, ids...)
		h := fetchHistory(t, e, session, info.GetExecution().GetRunId())
		prev := h.Events[0].GetWorkflowExecutionStartedEventAttributes().GetContinuedExecutionRunId()
		if prev == "" {
			return ids
		}
		runID = prev
	}
}

// fetchHistory returns a run's history once its last workflow task
// completed (the session waits for the next turn).
func fetchHistory(t *testing.T, e *env, session, runID string) *historypb.History {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		iter := e.client.GetWorkflowHistory(ctx, workflows.WorkflowID(session), runID, false, 0)
		h := &historypb.History{}
		for iter.HasNext() {
			ev, err := iter.Next()
			if err != nil {
				t.Fatalf("history of %s: %v", session, err)
			}
			h.Events = append(h.Events, ev)
		}
		if n := len(h.Events); n > 0 {
			last := h.Events[n-1]
			if last.GetWorkflowTaskCompletedEventAttributes() != nil ||
				last.GetWorkflowExecutionUpdateCompletedEventAttributes() != nil ||
				last.GetWorkflowExecutionContinuedAsNewEventAttributes() != nil {
				return h
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("history of %s never settled", session)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
