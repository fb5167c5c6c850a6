package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/agent/agenttest"
	"github.com/fastagent/fastagent/internal/actions"
	"github.com/fastagent/fastagent/internal/durable"
	"github.com/fastagent/fastagent/internal/sessionstart"
	"github.com/fastagent/fastagent/internal/tclient"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/workflows"
)

// metricKind maps the server's action types to the kinds internal/actions
// reads from a history. Types not listed are not in any history:
// heartbeats and queries (compared separately), and the server's count of
// individual markers behind command_BatchMarkers.
var metricKind = map[string]string{
	"grpc_ExecuteMultiOperation":                 "start_workflow",
	"grpc_StartWorkflowExecution":                "start_workflow",
	"message_UpdateWorkflowExecution:Acceptance": "accept_workflow_update",
	"command_BatchMarkers":                       "record_markers",
	"command_ScheduleActivityTask":               "schedule_activity",
	"activity_retry":                             "retry_activity",
	"command_StartTimer":                         "start_timer",
	"command_UpsertWorkflowSearchAttributes":     "upsert_workflow_search_attributes",
	"grpc_SignalWorkflowExecution":               "signal_workflow",
	"command_ContinueAsNewWorkflowExecution":     "continue_as_new_workflow",
}

// notInHistory are action types a history cannot show.
var notInHistory = map[string]bool{
	"grpc_RecordActivityTaskHeartbeat":     true,
	"grpc_RecordActivityTaskHeartbeatById": true,
	"grpc_QueryWorkflow":                   true,
	"command_RecordMarker":                 true, // counted per task as command_BatchMarkers
}

// Billable actions counted two independent ways agree: the embedded
// server's own "action" metric, and internal/actions reading the recorded
// history by Temporal Cloud's rules. Turns run in a namespace of their own,
// so nothing else the suite does is counted. A one-step turn, a second
// one-step turn, a turn with a tool step and a 3 s streamed answer (whose
// heartbeats only the server sees), each compared separately.
func TestActionsCountedTwoWays(t *testing.T) {
	e := newEnvInNamespace(t, fmt.Sprintf("actions-%d", time.Now().UnixNano()))
	e.startWorker()
	session := "actions"
	e.kit.Model.Enqueue(
		modelserver.Reply{Text: []string{"one"}},
		modelserver.Reply{Text: []string{"two"}},
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "c1", Name: "counter", Args: `{}`}}},
		modelserver.Reply{Text: []string{"counted"}},
		modelserver.Reply{Text: strings.Fields("a three second answer streamed in ten pieces to show heartbeats"), ChunkDelay: 300 * time.Millisecond},
	)
	id := workflows.WorkflowID(session)
	var deltas []map[string]int64
	prompts := []string{"first", "second", "count once", "stream slowly"}
	for _, prompt := range prompts {
		before := server.Actions(e.namespace)
		if term := agenttest.CheckTerminal(t, collect(t, e.agent, context.Background(), session, prompt)); term.Type != agent.TypeCompleted {
			t.Fatalf("turn %q: %+v", prompt, term)
		}
		settleLatest(t, e.env, id)
		deltas = append(deltas, diff(server.Actions(e.namespace), before))
	}

	h := history(t, e.env, id)
	turns := actions.PerTurn(h)
	if len(turns) != len(prompts) {
		t.Fatalf("the history holds %d turns, want %d", len(turns), len(prompts))
	}
	exempt := changeVersionUpserts(h)
	for i, turn := range turns {
		fromHistory := actions.ByKind(turn)
		fromServer := map[string]int{}
		var outside []string
		for typ, n := range deltas[i] {
			if kind, ok := metricKind[typ]; ok {
				fromServer[kind] += int(n)
			} else if !notInHistory[typ] {
				outside = append(outside, fmt.Sprintf("%s=%d", typ, n))
			}
		}
		// The server counts GetVersion's TemporalChangeVersion upsert, which
		// Temporal Cloud does not bill (and the history count leaves out).
		fromServer["upsert_workflow_search_attributes"] -= exempt[i]
		if fromServer["upsert_workflow_search_attributes"] == 0 {
			delete(fromServer, "upsert_workflow_search_attributes")
		}
		if got, want := format(fromServer), format(fromHistory); got != want {
			t.Errorf("turn %d: the server counted %s, the history shows %s", i+1, got, want)
		}
		if len(outside) > 0 {
			sort.Strings(outside)
			t.Errorf("turn %d: the server counted actions of types no rule maps: %s", i+1, strings.Join(outside, ", "))
		}
		hb := deltas[i]["grpc_RecordActivityTaskHeartbeat"] + deltas[i]["grpc_RecordActivityTaskHeartbeatById"]
		t.Logf("turn %d (%s): %d actions in the history (%s), +%d heartbeats, +%d queries", i+1, prompts[i], actions.Total(turn), format(fromHistory),
			hb, deltas[i]["grpc_QueryWorkflow"])
		if want := []int{7, 6, 8, 6}[i]; actions.Total(turn) != want {
			t.Errorf("turn %d (%s) costs %d actions, documented %d: %s", i+1, prompts[i], actions.Total(turn), want, format(fromHistory))
		}
		if i == 3 && hb == 0 {
			t.Errorf("a 3 s model stream sent no heartbeat the server counted; the heartbeat cost is not measured")
		}
	}
}

// changeVersionUpserts counts, per turn, the upserts that set only
// TemporalChangeVersion.
func changeVersionUpserts(h *historypb.History) []int {
	var starts []int64
	for _, ev := range h.GetEvents() {
		if ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED {
			starts = append(starts, ev.GetEventId())
		}
	}
	out := make([]int, len(starts))
	for _, ev := range h.GetEvents() {
		f := ev.GetUpsertWorkflowSearchAttributesEventAttributes().GetSearchAttributes().GetIndexedFields()
		if _, ok := f["TemporalChangeVersion"]; !ok || len(f) != 1 {
			continue
		}
		i := 0
		for i+1 < len(starts) && ev.GetEventId() >= starts[i+1] {
			i++
		}
		out[i]++
	}
	return out
}

func diff(after, before map[string]int64) map[string]int64 {
	d := map[string]int64{}
	for k, v := range after {
		if n := v - before[k]; n != 0 {
			d[k] = n
		}
	}
	return d
}

func format(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if v != 0 {
			keys = append(keys, fmt.Sprintf("%s=%d", k, v))
		}
	}
	sort.Strings(keys)
	return strings.Join(keys, " ")
}

// history fetches the current run's history of workflowID.
func history(t *testing.T, e *env, workflowID string) *historypb.History {
	t.Helper()
	it := e.client.GetWorkflowHistory(context.Background(), workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	h := &historypb.History{}
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		h.Events = append(h.Events, ev)
	}
	return h
}

// nsEnv is an env whose client, worker and agent use a namespace of their
// own.
type nsEnv struct {
	*env
	namespace string
}

// newEnvInNamespace registers namespace on the embedded server and returns
// an env in it, once the frontend serves it.
func newEnvInNamespace(t *testing.T, namespace string) *nsEnv {
	t.Helper()
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := e.client.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace: namespace, WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour),
	}); err != nil {
		t.Fatalf("register namespace %s: %v", namespace, err)
	}
	c, err := tclient.Dial(ctx, tclient.Config{
		Address: server.FrontendAddress(), APIKey: server.APIKey(), Plaintext: true, Namespace: namespace,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4})),
	})
	if err != nil {
		t.Fatalf("dial %s: %v", namespace, err)
	}
	t.Cleanup(c.Close)
	waitFor(t, time.Minute, "namespace "+namespace, func() bool {
		_, err := c.WorkflowService().CountWorkflowExecutions(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: namespace})
		return err == nil
	})
	// As fastagent dev registers them: sessions carry their search
	// attributes and upsert their status.
	if _, err := sessionstart.Register(ctx, c, namespace); err != nil {
		t.Fatalf("register the search attributes in %s: %v", namespace, err)
	}
	waitFor(t, time.Minute, "the search attributes of "+namespace, func() bool {
		missing, err := sessionstart.Missing(ctx, c, namespace)
		return err == nil && len(missing) == 0
	})
	e.client = c
	e.agent = &durable.Agent{Client: c, Feed: e.bus, TaskQueue: e.queue, Store: e.kit.Store}
	return &nsEnv{env: e, namespace: namespace}
}
