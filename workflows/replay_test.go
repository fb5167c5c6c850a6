package workflows_test

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
)

// historyFiles lists the recorded histories in testdata/histories.
func historyFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "histories", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// replay replays one recorded history against the current workflow code.
func replay(f string) error {
	logger := sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(workflows.SessionWorkflow, workflow.RegisterOptions{Name: workflows.SessionWorkflowType})
	r.RegisterWorkflowWithOptions(workflows.ScheduleFireWorkflow, workflow.RegisterOptions{Name: workflows.ScheduleFireWorkflowType})
	r.RegisterWorkflowWithOptions(workflows.ChatWorkflow, workflow.RegisterOptions{Name: workflows.ChatWorkflowType})
	r.RegisterWorkflowWithOptions(workflows.DelegateWorkflow, workflow.RegisterOptions{Name: workflows.DelegateWorkflowType})
	if err := r.ReplayWorkflowHistoryFromJSONFile(logger, f); err != nil {
		return fmt.Errorf("replay %s: %w", f, err)
	}
	return nil
}

// TestReplayRecordedHistories replays every history recorded by the
// end-to-end tests (internal/e2e, FASTAGENT_RECORD_HISTORIES=1) against the
// current workflow code: a change that would break running sessions fails
// here.
func TestReplayRecordedHistories(t *testing.T) {
	files := historyFiles(t)
	if len(files) < 20 {
		t.Fatalf("found %d recorded histories in testdata/histories, want at least 20; record them with FASTAGENT_RECORD_HISTORIES=1 go test ./internal/e2e -run TestHistories", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			if err := replay(f); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Marker details of workflow.GetVersion, as the Go SDK records them.
const (
	versionMarkerName = "Version"
	versionChangeID   = "change-id"
)

// changeIDs returns the change IDs of the version markers in a history.
func changeIDs(t *testing.T, h *historypb.History) []string {
	t.Helper()
	var ids []string
	for _, ev := range h.GetEvents() {
		m := ev.GetMarkerRecordedEventAttributes()
		if m == nil || m.GetMarkerName() != versionMarkerName {
			continue
		}
		var id string
		if err := converter.GetDefaultDataConverter().FromPayloads(m.GetDetails()[versionChangeID], &id); err != nil {
			t.Fatalf("event %d: version marker change ID: %v", ev.GetEventId(), err)
		}
		ids = append(ids, id)
	}
	return ids
}

// TestReplayCoversBothVersionsOfTurnRecords proves that the versioned
// "turn-records" change replays in both versions: the histories recorded
// before it (v0_*) carry no version marker for it, every session history
// recorded after it carries one, there is at least one of each, and all of
// them replay against the current code.
func TestReplayCoversBothVersionsOfTurnRecords(t *testing.T) {
	const change = "turn-records"
	var old, current []string
	for _, f := range historyFiles(t) {
		r, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		h, err := client.HistoryFromJSON(r, client.HistoryJSONOptions{})
		_ = r.Close()
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if len(h.GetEvents()) == 0 {
			t.Fatalf("%s: empty history", f)
		}
		typ := h.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes().GetWorkflowType().GetName()
		marked := false
		for _, id := range changeIDs(t, h) {
			marked = marked || id == change
		}
		base := filepath.Base(f)
		switch v0 := strings.HasPrefix(base, "v0_"); {
		case v0 && marked:
			t.Errorf("%s is named as recorded before %q but has its version marker", base, change)
		case v0:
			old = append(old, f)
		case typ != workflows.SessionWorkflowType:
			// not a session: the change does not apply
		case marked:
			current = append(current, f)
		case h.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes().GetContinuedExecutionRunId() != "":
			// A later run of a chain started at the new version: the
			// marker is recorded in every run, so it must be here too.
			t.Errorf("%s: a run continued from a new-version run lacks the %q marker", base, change)
		default:
			t.Errorf("%s: session history without the %q marker; name it v0_* if it was recorded before the change", base, change)
		}
	}
	if len(old) == 0 {
		t.Errorf("no history without the %q version marker (v0_*): the old version's replay is not covered", change)
	}
	if len(current) == 0 {
		t.Errorf("no history with the %q version marker: the new version's replay is not covered", change)
	}
	for _, f := range append(old, current...) {
		if err := replay(f); err != nil {
			t.Error(err)
		}
	}
}

// TestReplayCoversCompaction: a recorded session carries the "compaction"
// version marker and a Session.Compact activity, and replays.
func TestReplayCoversCompaction(t *testing.T) {
	f := filepath.Join("testdata", "histories", "compaction.json")
	r, err := os.Open(f)
	if err != nil {
		t.Fatalf("%v; record it with FASTAGENT_RECORD_HISTORIES=1 go test ./internal/e2e -run TestHistories/compaction", err)
	}
	h, err := client.HistoryFromJSON(r, client.HistoryJSONOptions{})
	_ = r.Close()
	if err != nil {
		t.Fatal(err)
	}
	marked := false
	for _, id := range changeIDs(t, h) {
		marked = marked || id == "compaction"
	}
	compacts := 0
	for _, ev := range h.GetEvents() {
		if ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == workflows.ActivityCompact {
			compacts++
		}
	}
	if !marked || compacts < 3 {
		t.Errorf("%s: marker %v, %d Session.Compact activities; want the marker and at least 3 (threshold, overflow, manual)", f, marked, compacts)
	}
	if err := replay(f); err != nil {
		t.Error(err)
	}
}

// TestReplayCoversReusedCallIDs: the "turn-call-ids" change replays in both
// versions — a tool call ID reused by a later step of the turn was run
// before it (v1_repeated_call_id, no marker) and is refused after it
// (repeated_call_id, with the marker).
func TestReplayCoversReusedCallIDs(t *testing.T) {
	const change = "turn-call-ids"
	for file, want := range map[string]bool{"v1_repeated_call_id.json": false, "repeated_call_id.json": true} {
		f, h, marked := markedHistory(t, file, change)
		tools := 0
		for _, ev := range h.GetEvents() {
			if ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == workflows.ActivityToolExecute {
				tools++
			}
		}
		if marked != want || tools != 2 {
			t.Errorf("%s: %q marker %v, %d Tool.Execute activities; want marker %v and 2", file, change, marked, tools, want)
		}
		if err := replay(f); err != nil {
			t.Error(err)
		}
	}
}

// TestReplayCoversChatDurable: the "chat-durable" change of the chat
// workflow replays in both versions — Chat.Route as a local activity
// (v1_chat_routing_chat, no marker) and as a regular activity
// (chat_routing_chat, with the marker).
func TestReplayCoversChatDurable(t *testing.T) {
	const change = "chat-durable"
	for file, want := range map[string]bool{"v1_chat_routing_chat.json": false, "chat_routing_chat.json": true} {
		f, h, marked := markedHistory(t, file, change)
		routes := 0
		for _, ev := range h.GetEvents() {
			if ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == workflows.ActivityChatRoute {
				routes++
			}
		}
		if marked != want || (routes > 0) != want {
			t.Errorf("%s: marker %v, %d Chat.Route activities; want marker %v and regular route activities %v", file, marked, routes, want, want)
		}
		if err := replay(f); err != nil {
			t.Error(err)
		}
	}
}

// TestReplayCoversTurnKeys: the "turn-keys" change replays in both
// versions — every history recorded before it lacks its marker (plain_turn
// stands for them), and the histories of a key answered from its record,
// an aborted queued turn and a rewind carry it.
func TestReplayCoversTurnKeys(t *testing.T) {
	const change = "turn-keys"
	for file, want := range map[string]bool{
		"plain_turn.json": false, "key_answered_from_record.json": true, "abort_queued_turn.json": true, "rewind.json": true,
	} {
		f, _, marked := markedHistory(t, file, change)
		if marked != want {
			t.Errorf("%s: %q marker %v, want %v", file, change, marked, want)
		}
		if err := replay(f); err != nil {
			t.Error(err)
		}
	}
}

// markedHistory reads the recorded history file of testdata/histories and
// says whether it carries change's GetVersion marker; f is its path.
func markedHistory(t *testing.T, file, change string) (f string, h *historypb.History, marked bool) {
	t.Helper()
	f = filepath.Join("testdata", "histories", file)
	r, err := os.Open(f)
	if err != nil {
		t.Fatalf("%v; record it with FASTAGENT_RECORD_HISTORIES=1 go test ./internal/e2e -run TestHistories/%s", err,
			strings.TrimSuffix(strings.TrimPrefix(file, "v1_"), ".json"))
	}
	defer r.Close()
	h, err = client.HistoryFromJSON(r, client.HistoryJSONOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range changeIDs(t, h) {
		marked = marked || id == change
	}
	return f, h, marked
}

// TestReplayCoversVersionedPaths: the recorded histories of a model
// fallback, of approvals bound to their call, and of a chat's "/stop" carry
// their change's GetVersion marker and what the change does, and replay
// against the current code.
func TestReplayCoversVersionedPaths(t *testing.T) {
	for _, tt := range []struct {
		file, change string
		// shows says what the history does, and whether that is the path.
		shows func(t *testing.T, h *historypb.History) (string, bool)
	}{
		{
			// The step ran twice: on the primary, then on the fallback.
			file: "model_fallback.json", change: "model-fallback",
			shows: func(_ *testing.T, h *historypb.History) (string, bool) {
				n := activities(h)[workflows.ActivityModelGenerate]
				return fmt.Sprintf("%d Model.Generate activities", n), n == 2
			},
		},
		{
			// Two calls refused for sharing an ID, both recorded without
			// running; one bound approval run: three Tool.Execute.
			file: "approval_binding.json", change: "approval-binding",
			shows: func(_ *testing.T, h *historypb.History) (string, bool) {
				n := activities(h)[workflows.ActivityToolExecute]
				return fmt.Sprintf("%d Tool.Execute activities", n), n == 3
			},
		},
		{
			// Two approval waits, each announced and resolved through
			// Feed.Publish; the first ended by its deadline's timer.
			file: "approval_deadline.json", change: "approval-events",
			shows: func(t *testing.T, h *historypb.History) (string, bool) {
				n := localActivities(t, h)[workflows.ActivityFeedPublish]
				fired := 0
				for _, ev := range h.GetEvents() {
					if ev.GetTimerFiredEventAttributes() != nil {
						fired++
					}
				}
				return fmt.Sprintf("%d Feed.Publish local activities, %d timers fired", n, fired), n == 4 && fired == 1
			},
		},
		{
			// The question and its answer published; the answer recorded
			// through Tool.Execute (synthetic), no tool run.
			file: "ask_user.json", change: "ask-user",
			shows: func(t *testing.T, h *historypb.History) (string, bool) {
				n := localActivities(t, h)[workflows.ActivityFeedPublish]
				return fmt.Sprintf("%d Feed.Publish local activities", n), n == 2
			},
		},
		{
			// Two deliveries (the mention, the answer in the thread) and
			// one turn of two model steps: the answer was the question's.
			file: "slack_ask_user.json", change: "channel-answers",
			shows: func(_ *testing.T, h *historypb.History) (string, bool) {
				signals := 0
				for _, ev := range h.GetEvents() {
					if ev.GetWorkflowExecutionSignaledEventAttributes().GetSignalName() == workflows.SignalDeliver {
						signals++
					}
				}
				a := activities(h)
				return fmt.Sprintf("%d deliveries, %d Model.Generate, %d Turn.Record", signals, a[workflows.ActivityModelGenerate], a[workflows.ActivityTurnRecord]),
					signals == 2 && a[workflows.ActivityModelGenerate] == 2 && a[workflows.ActivityTurnRecord] == 1
			},
		},
		{
			// An abort while a tool runs: the turn's stop notice published
			// once, the running call's cancellation requested.
			file: "abort_mid_tool.json", change: "turn-stops",
			shows: func(t *testing.T, h *historypb.History) (string, bool) {
				n := localActivities(t, h)[workflows.ActivityFeedStop]
				cancels := 0
				for _, ev := range h.GetEvents() {
					if ev.GetActivityTaskCancelRequestedEventAttributes() != nil {
						cancels++
					}
				}
				return fmt.Sprintf("%d Feed.Stop local activities, %d cancellations requested", n, cancels), n == 1 && cancels == 1
			},
		},
		{
			// A delegation: two Delegate children started by one step.
			file: "delegation.json", change: "delegation",
			shows: func(_ *testing.T, h *historypb.History) (string, bool) {
				n := 0
				for _, ev := range h.GetEvents() {
					if ev.GetStartChildWorkflowExecutionInitiatedEventAttributes().GetWorkflowType().GetName() == workflows.DelegateWorkflowType {
						n++
					}
				}
				return fmt.Sprintf("%d Delegate children", n), n == 2
			},
		},
		{
			// A sub-agent's question and gated call, answered and approved
			// on the delegating session: four waits told by the sub-agent,
			// two decisions handed to it, each wait published here.
			file: "delegation_sub_waits.json", change: "sub-agent-waits",
			shows: func(t *testing.T, h *historypb.History) (string, bool) {
				got, sent := signals(h)
				n := localActivities(t, h)[workflows.ActivityFeedPublish]
				return fmt.Sprintf("%d sub-agent-wait signals, %d decisions sent, %d Feed.Publish", got[wire.SignalSubAgentWait], sent[wire.SignalSubAgentDecision], n),
					got[wire.SignalSubAgentWait] == 4 && sent[wire.SignalSubAgentDecision] == 2 && n == 5
			},
		},
		{
			// The sub-agent's side: its waits told, the decisions received.
			file: "delegation_sub_waits_child.json", change: "sub-agent-waits",
			shows: func(_ *testing.T, h *historypb.History) (string, bool) {
				got, sent := signals(h)
				return fmt.Sprintf("%d waits sent, %d decisions received", sent[wire.SignalSubAgentWait], got[wire.SignalSubAgentDecision]),
					sent[wire.SignalSubAgentWait] == 4 && got[wire.SignalSubAgentDecision] == 2
			},
		},
		{
			// Two sub-agents asking at once: the later question held and
			// asked once the first was answered; four waits told, two
			// answers handed on, each wait and the two delegations'
			// starts published.
			file: "delegation_sub_questions_held.json", change: "sub-agent-questions",
			shows: func(t *testing.T, h *historypb.History) (string, bool) {
				got, sent := signals(h)
				n := localActivities(t, h)[workflows.ActivityFeedPublish]
				return fmt.Sprintf("%d sub-agent-wait signals, %d answers sent, %d Feed.Publish", got[wire.SignalSubAgentWait], sent[wire.SignalSubAgentDecision], n),
					got[wire.SignalSubAgentWait] == 4 && sent[wire.SignalSubAgentDecision] == 2 && n == 6
			},
		},
		{
			// An aborted delegating turn: its own stop notice and its
			// sub-agent's, published by the delegating session.
			file: "delegation_abort_stops.json", change: "sub-agent-stops",
			shows: func(t *testing.T, h *historypb.History) (string, bool) {
				n := localActivities(t, h)[workflows.ActivityFeedStop]
				return fmt.Sprintf("%d Feed.Stop local activities", n), n == 2
			},
		},
		{
			// The first turn came with the first workflow task and was
			// accepted after the run read its versions; it armed the run's
			// end within the definition's 2 h window (less 12 min).
			file: "versions_first.json", change: "versions-first",
			shows: func(_ *testing.T, h *historypb.History) (string, bool) {
				var first, markers int64
				var timer time.Duration
				for _, ev := range h.GetEvents() {
					if m := ev.GetMarkerRecordedEventAttributes(); m != nil && m.GetMarkerName() == versionMarkerName && first == 0 {
						markers = ev.GetEventId()
					}
					if a := ev.GetWorkflowExecutionUpdateAcceptedEventAttributes(); a != nil && first == 0 && a.GetAcceptedRequestSequencingEventId() == 2 {
						first = ev.GetEventId()
					}
					if a := ev.GetTimerStartedEventAttributes(); a != nil && timer == 0 {
						timer = a.GetStartToFireTimeout().AsDuration()
					}
				}
				return fmt.Sprintf("first-task update accepted at event %d (version markers up to %d), window timer %s", first, markers, timer),
					first > markers && markers > 0 && timer == 2*time.Hour-12*time.Minute
			},
		},
		{
			// The chat stopped its session's turn with Chat.Stop.
			file: "chat_stop.json", change: "chat-stop",
			shows: func(t *testing.T, h *historypb.History) (string, bool) {
				n := localActivities(t, h)[workflows.ActivityChatStop]
				return fmt.Sprintf("%d Chat.Stop local activities", n), n == 1
			},
		},
	} {
		t.Run(tt.file, func(t *testing.T) {
			f, h, marked := markedHistory(t, tt.file, tt.change)
			if what, ok := tt.shows(t, h); !marked || !ok {
				t.Errorf("%s: %q marker %v, %s", tt.file, tt.change, marked, what)
			}
			if err := replay(f); err != nil {
				t.Error(err)
			}
		})
	}
}

// signals counts a history's signals by name: received, and sent to
// other workflows.
func signals(h *historypb.History) (got, sent map[string]int) {
	got, sent = map[string]int{}, map[string]int{}
	for _, ev := range h.GetEvents() {
		if a := ev.GetWorkflowExecutionSignaledEventAttributes(); a != nil {
			got[a.GetSignalName()]++
		}
		if a := ev.GetSignalExternalWorkflowExecutionInitiatedEventAttributes(); a != nil {
			sent[a.GetSignalName()]++
		}
	}
	return got, sent
}

// activities counts a history's scheduled activities by type.
func activities(h *historypb.History) map[string]int {
	n := map[string]int{}
	for _, ev := range h.GetEvents() {
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			n[a.GetActivityType().GetName()]++
		}
	}
	return n
}

// localActivities counts a history's local activity markers by type.
func localActivities(t *testing.T, h *historypb.History) map[string]int {
	t.Helper()
	n := map[string]int{}
	for _, ev := range h.GetEvents() {
		m := ev.GetMarkerRecordedEventAttributes()
		if m == nil || m.GetMarkerName() != "LocalActivity" {
			continue
		}
		var data struct{ ActivityType string }
		if err := converter.GetDefaultDataConverter().FromPayloads(m.GetDetails()["data"], &data); err != nil {
			t.Fatalf("event %d: local activity marker: %v", ev.GetEventId(), err)
		}
		n[data.ActivityType]++
	}
	return n
}

// TestReplayCoversChatEdits: the "chat-edits" change of the chat workflow
// replays in both versions — histories without deletions lack its marker
// (chat_routing_chat), and the deletion of a queued turn's message
// (chat_deletion_chat: the marker, then Chat.Drop) carries it; the
// session that dropped the turn (chat_deletion_session) replays too.
func TestReplayCoversChatEdits(t *testing.T) {
	const change = "chat-edits"
	for file, want := range map[string]bool{"chat_routing_chat.json": false, "chat_deletion_chat.json": true} {
		f, _, marked := markedHistory(t, file, change)
		if marked != want {
			t.Errorf("%s: %q marker %v, want %v", file, change, marked, want)
		}
		if err := replay(f); err != nil {
			t.Error(err)
		}
	}
	f, h, _ := markedHistory(t, "chat_deletion_session.json", change)
	aborts := 0
	for _, ev := range h.GetEvents() {
		if ev.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest().GetInput().GetName() == workflows.UpdateAbort {
			aborts++
		}
	}
	if aborts != 1 {
		t.Errorf("chat_deletion_session.json: %d abort updates accepted, want the drop of the queued turn", aborts)
	}
	if err := replay(f); err != nil {
		t.Error(err)
	}
}

// TestReplayUpsertsOnlyOnChange: in the recorded histories of sessions
// started with the search attributes, FastAgentStatus is upserted only on
// change — running at a turn's start, waiting_approval and back around an
// approval, idle when no turn waits — never per step: no value twice in a
// row, and at most two upserts a turn (every turn schedules Turn.Record
// once) plus two an approval wait.
func TestReplayUpsertsOnlyOnChange(t *testing.T) {
	searchable := 0
	for _, f := range historyFiles(t) {
		h := loadHistory(t, f)
		start := h.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes()
		if start.GetWorkflowType().GetName() != workflows.SessionWorkflowType ||
			start.GetSearchAttributes().GetIndexedFields()[workflows.AttrStatus] == nil {
			continue
		}
		searchable++
		var turns, approvals int
		var statuses []string
		for _, ev := range h.GetEvents() {
			if ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == workflows.ActivityTurnRecord {
				turns++
			}
			if ev.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest().GetInput().GetName() == workflows.UpdateApprove {
				approvals++
			}
			// GetVersion upserts TemporalChangeVersion: not counted.
			if p := ev.GetUpsertWorkflowSearchAttributesEventAttributes().GetSearchAttributes().GetIndexedFields()[workflows.AttrStatus]; p != nil {
				var v string
				if err := converter.GetDefaultDataConverter().FromPayload(p, &v); err != nil {
					t.Fatal(err)
				}
				statuses = append(statuses, v)
			}
		}
		// A wait that timed out had no decision: count the waits the
		// history announced (approval_requested and _resolved each).
		approvals = max(approvals, localActivities(t, h)[workflows.ActivityFeedPublish]/2)
		base := filepath.Base(f)
		if len(statuses) > 2*turns+2*approvals {
			t.Errorf("%s: %d status upserts for %d turns and %d approvals, want at most %d", base, len(statuses), turns, approvals, 2*turns+2*approvals)
		}
		for i := 1; i < len(statuses); i++ {
			if statuses[i] == statuses[i-1] {
				t.Errorf("%s: status upserts %v set %s twice in a row", base, statuses, statuses[i])
			}
		}
		if turns > 0 && (len(statuses) == 0 || statuses[0] != workflows.StatusRunning) {
			t.Errorf("%s: status upserts %v, want the first turn to set running", base, statuses)
		}
	}
	if searchable < 5 {
		t.Errorf("%d recorded session histories started with the search attributes, want at least 5; record them with FASTAGENT_RECORD_HISTORIES=1", searchable)
	}
}

// loadHistory reads one recorded history.
func loadHistory(t *testing.T, f string) *historypb.History {
	t.Helper()
	r, err := os.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	h, err := client.HistoryFromJSON(r, client.HistoryJSONOptions{})
	if err != nil || len(h.GetEvents()) == 0 {
		t.Fatalf("%s: %v (or empty)", f, err)
	}
	return h
}

// TestReplayCoversActivityQueues: the "activity-queues" change replays in
// both versions — histories without the setting carry no marker and
// schedule every activity on the session's queue (plain_turn); with
// fastagent.yaml's activities: block the tool call and the model calls
// are scheduled on their groups' task queues behind the marker, the turn's
// record on the session's own (activity_queues).
func TestReplayCoversActivityQueues(t *testing.T) {
	const change = "activity-queues"
	for file, placed := range map[string]bool{"plain_turn.json": false, "activity_queues.json": true} {
		f, h, marked := markedHistory(t, file, change)
		own := h.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes().GetTaskQueue().GetName()
		queues := map[string]string{}
		for _, ev := range h.GetEvents() {
			if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
				queues[a.GetActivityType().GetName()] = a.GetTaskQueue().GetName()
			}
		}
		want := map[string]string{workflows.ActivityModelGenerate: own, workflows.ActivityTurnRecord: own}
		if placed {
			want[workflows.ActivityModelGenerate], want[workflows.ActivityToolExecute] = own+"-model", own+"-tools"
		}
		for name, q := range want {
			if queues[name] != q {
				t.Errorf("%s: %s scheduled on %q, want %q", file, name, queues[name], q)
			}
		}
		if marked != placed {
			t.Errorf("%s: %q marker %v, want %v", file, change, marked, placed)
		}
		if err := replay(f); err != nil {
			t.Error(err)
		}
	}
}
