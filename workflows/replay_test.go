package workflows_test

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
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
	"github.com/fastagent/fastagent/workflows/agentloop"
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

// maxHistoryBytes bounds one recorded history: the scenarios stay small, so
// that the testdata stays small and the replay fast.
const maxHistoryBytes = 300 << 10

// TestReplayHistoriesStaySmall: no recorded history is over maxHistoryBytes.
func TestReplayHistoriesStaySmall(t *testing.T) {
	total := int64(0)
	for _, f := range historyFiles(t) {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		total += st.Size()
		if st.Size() > maxHistoryBytes {
			t.Errorf("%s: %d KB, more than %d KB: make its scenario smaller", f, st.Size()>>10, maxHistoryBytes>>10)
		}
	}
	t.Logf("%d recorded histories, %d KB", len(historyFiles(t)), total>>10)
}

// TestReplayCoversPaths: the recorded history of every distinct path the
// workflows take shows that path — the commands it issued, the signals and
// updates it took — and replays against the current code. A history that
// no longer shows its path (its scenario drifted, or the workflow stopped
// issuing those commands) fails here, not silently.
func TestReplayCoversPaths(t *testing.T) {
	for _, tt := range []struct {
		file string
		// shows says what the history does, and whether that is the path.
		shows func(t *testing.T, h *historypb.History) (string, bool)
	}{
		{
			// A one-step text turn: the prompt stored by Turn.Begin, the
			// model step, which recorded the turn (no Turn.Record), on the
			// session's queue.
			file: "plain_turn.json",
			shows: func(t *testing.T, h *historypb.History) (string, bool) {
				a, la := activities(h), localActivities(t, h)
				_, byStep := recorded(t, h)
				return fmt.Sprintf("%d Model.Generate (%d recording the turn), %d Turn.Record, %d Turn.Begin", a[workflows.ActivityModelGenerate], byStep, a[workflows.ActivityTurnRecord], la[workflows.ActivityTurnBegin]),
					a[workflows.ActivityModelGenerate] == 1 && byStep == 1 && a[workflows.ActivityTurnRecord] == 0 && la[workflows.ActivityTurnBegin] == 1
			},
		},
		{
			// Hook files: one Hook.Run per event with a hook (the turn's
			// before_agent_start, a before_tool for each of three calls),
			// never retried; the denied call recorded, the others run.
			file: "file_hooks.json",
			shows: func(_ *testing.T, h *historypb.History) (string, bool) {
				a := activities(h)
				return fmt.Sprintf("%d Hook.Run, %d Tool.Execute", a[workflows.ActivityHookRun], a[workflows.ActivityToolExecute]),
					a[workflows.ActivityHookRun] == 4 && a[workflows.ActivityToolExecute] == 3
			},
		},
		{
			// A tool call, then a model step retried after a transient
			// error (one activity, two attempts).
			file: "tool_turn_with_retry.json",
			shows: func(_ *testing.T, h *historypb.History) (string, bool) {
				a := activities(h)
				return fmt.Sprintf("%d Tool.Execute, %d Model.Generate", a[workflows.ActivityToolExecute], a[workflows.ActivityModelGenerate]),
					a[workflows.ActivityToolExecute] == 1 && a[workflows.ActivityModelGenerate] == 2
			},
		},
		{
			// Two tool steps, each with the next model call as one
			// Step.Run (the first retried after a transient model error):
			// no Tool.Execute, one Model.Generate for the turn's first step.
			file: "step_run.json",
			shows: func(_ *testing.T, h *historypb.History) (string, bool) {
				a := activities(h)
				return fmt.Sprintf("%d Step.Run, %d Tool.Execute, %d Model.Generate", a[workflows.ActivityStepRun], a[workflows.ActivityToolExecute], a[workflows.ActivityModelGenerate]),
					a[workflows.ActivityStepRun] == 2 && a[workflows.ActivityToolExecute] == 0 && a[workflows.ActivityModelGenerate] == 1
			},
		},
		{
			// Three calls in one step, run in parallel: a known tool, an
			// unknown one and invalid arguments, each with its result.
			file: "parallel_tools_unknown_tool_and_invalid_args.json",
			shows: func(_ *testing.T, h *historypb.History) (string, bool) {
				n := activities(h)[workflows.ActivityToolExecute]
				return fmt.Sprintf("%d Tool.Execute", n), n == 3
			},
		},
		{
			// A sequential tool's two calls.
			file: "sequential_tools.json",
			shows: func(_ *testing.T, h *historypb.History) (string, bool) {
				n := activities(h)[workflows.ActivityToolExecute]
				return fmt.Sprintf("%d Tool.Execute", n), n == 2
			},
		},
		{
			// A failed turn (recorded by Turn.Record), then one that
			// completes (recorded by its step).
			file: "failed_then_ok.json",
			shows: func(t *testing.T, h *historypb.History) (string, bool) {
				byRecord, byStep := recorded(t, h)
				return fmt.Sprintf("%d Turn.Record, %d recorded by their step", byRecord, byStep), byRecord == 1 && byStep == 1
			},
		},
		{
			// Four turns, three per run: the run continues as new.
			file: "continue_as_new.json",
			shows: func(t *testing.T, h *historypb.History) (string, bool) {
				n := turnsRecorded(t, h)
				return fmt.Sprintf("%d turns recorded, continued as new %v", n, continuedAsNew(h)), n >= 3 && continuedAsNew(h)
			},
		},
		{
			// The step ran twice: on the primary, then on the fallback.
			file: "model_fallback.json",
			shows: func(_ *testing.T, h *historypb.History) (string, bool) {
				n := activities(h)[workflows.ActivityModelGenerate]
				return fmt.Sprintf("%d Model.Generate activities", n), n == 2
			},
		},
		{
			// A call ID reused by the turn's second step: the first call
			// ran, the reused one was recorded as refused.
			file: "repeated_call_id.json",
			shows: func(_ *testing.T, h *historypb.History) (string, bool) {
				a := activities(h)
				return fmt.Sprintf("%d Tool.Execute, %d Model.Generate", a[workflows.ActivityToolExecute], a[workflows.ActivityModelGenerate]),
					a[workflows.ActivityToolExecute] == 2 && a[workflows.ActivityModelGenerate] == 3
			},
		},
		{
			// A required approval granted (the tool runs), then one denied
			// (its result recorded): each wait announced and resolved.
			file: "approval_granted_and_denied.json",
			shows: func(t *testing.T, h *historypb.History) (string, bool) {
				n := localActivities(t, h)[workflows.ActivityFeedPublish]
				u := updates(h)[workflows.UpdateApprove]
				return fmt.Sprintf("%d Feed.Publish, %d approve updates", n, u), n == 4 && u == 2
			},
		},
		{
			// Two calls refused for sharing an ID, both recorded without
			// running; one bound approval run: three Tool.Execute.
			file: "approval_binding.json",
			shows: func(_ *testing.T, h *historypb.History) (string, bool) {
				n := activities(h)[workflows.ActivityToolExecute]
				return fmt.Sprintf("%d Tool.Execute activities", n), n == 3
			},
		},
		{
			// Two approval waits, each announced and resolved through
			// Feed.Publish; the first ended by its deadline's timer.
			file: "approval_deadline.json",
			shows: func(t *testing.T, h *historypb.History) (string, bool) {
				n := localActivities(t, h)[workflows.ActivityFeedPublish]
				fired := timersFired(h)
				return fmt.Sprintf("%d Feed.Publish local activities, %d timers fired", n, fired), n == 4 && fired == 1
			},
		},
		{
			// The question and its answer published; the answer recorded
			// through Tool.Execute (synthetic), no tool run.
			file: "ask_user.json",
			shows: func(t *testing.T, h *historypb.History) (string, bool) {
				n := localActivities(t, h)[workflows.ActivityFeedPublish]
				u := updates(h)[workflows.UpdateAnswer]
				return fmt.Sprintf("%d Feed.Publish local activities, %d answer updates", n, u), n == 2 && u == 1
			},
		},
		{
			// Two deliveries (the mention, the answer in the thread) and
			// one turn of two model steps: the answer was the question's.
			file: "slack_ask_user.json",
			shows: func(t *testing.T, h *historypb.History) (string, bool) {
				got, _ := signals(h)
				a := activities(h)
				n := turnsRecorded(t, h)
				return fmt.Sprintf("%d deliveries, %d Model.Generate, %d turns recorded", got[workflows.SignalDeliver], a[workflows.ActivityModelGenerate], n),
					got[workflows.SignalDeliver] == 2 && a[workflows.ActivityModelGenerate] == 2 && n == 1
			},
		},
		{
			// An abort while a tool runs: the turn's stop notice published
			// once, the running call's cancellation requested.
			file: "abort_mid_tool.json",
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
			// A queued turn aborted while another runs: recorded, never run.
			file: "abort_queued_turn.json",
			shows: func(t *testing.T, h *historypb.History) (string, bool) {
				a, u := activities(h), updates(h)
				n := turnsRecorded(t, h)
				return fmt.Sprintf("%d abort updates, %d turns recorded, %d Model.Generate", u[workflows.UpdateAbort], n, a[workflows.ActivityModelGenerate]),
					u[workflows.UpdateAbort] == 1 && n == 2 && a[workflows.ActivityModelGenerate] == 1
			},
		},
		{
			// Steering during a tool reaches the turn's next step.
			file: "steering_during_tool.json",
			shows: func(t *testing.T, h *historypb.History) (string, bool) {
				u, n := updates(h), turnsRecorded(t, h)
				return fmt.Sprintf("%d steer updates, %d turns recorded", u[workflows.UpdateSteer], n),
					u[workflows.UpdateSteer] == 1 && n == 1
			},
		},
		{
			// Steering too late for its turn runs as the follow-up turn.
			file: "late_steering_follow_up.json",
			shows: func(t *testing.T, h *historypb.History) (string, bool) {
				u, n := updates(h), turnsRecorded(t, h)
				return fmt.Sprintf("%d turn updates, %d steer updates, %d turns recorded", u[workflows.UpdateTurn], u[workflows.UpdateSteer], n),
					u[workflows.UpdateTurn] == 1 && u[workflows.UpdateSteer] == 1 && n == 2
			},
		},
		{
			// A non-idempotent call lost with its worker: not run again, its
			// unknown outcome recorded.
			file: "lost_tool_unknown_outcome.json",
			shows: func(_ *testing.T, h *historypb.History) (string, bool) {
				n := activities(h)[workflows.ActivityToolExecute]
				return fmt.Sprintf("%d Tool.Execute", n), n == 2
			},
		},
		{
			// Compaction by threshold, after an overflow, and by hand.
			file: "compaction.json",
			shows: func(_ *testing.T, h *historypb.History) (string, bool) {
				n := activities(h)[workflows.ActivityCompact]
				u := updates(h)[workflows.UpdateCompact]
				return fmt.Sprintf("%d Session.Compact activities, %d compact updates", n, u), n >= 3 && u == 1
			},
		},
		{
			// A rewind between turns.
			file: "rewind.json",
			shows: func(_ *testing.T, h *historypb.History) (string, bool) {
				n := activities(h)[workflows.ActivityRewind]
				u := updates(h)[workflows.UpdateRewind]
				return fmt.Sprintf("%d Session.Rewind activities, %d rewind updates", n, u), n == 1 && u == 1
			},
		},
		{
			// A one-shot wake-up: its timer fired and its turn ran.
			file: "wake_one_shot.json",
			shows: func(t *testing.T, h *historypb.History) (string, bool) {
				n := turnsRecorded(t, h)
				return fmt.Sprintf("%d timers fired, %d turns recorded", timersFired(h), n), timersFired(h) == 1 && n == 2
			},
		},
		{
			// A recurring wake-up fired, re-armed, and carried across
			// continue-as-new.
			file: "wake_recurring_across_continue_as_new.json",
			shows: func(t *testing.T, h *historypb.History) (string, bool) {
				n := localActivities(t, h)[workflows.ActivityWakeNext]
				return fmt.Sprintf("%d Wake.Next, %d timers fired, continued as new %v", n, timersFired(h), continuedAsNew(h)),
					n == 1 && timersFired(h) == 1 && continuedAsNew(h)
			},
		},
		{
			// The carried wake-up fires again in the next run.
			file: "wake_recurring_across_continue_as_new_run2.json",
			shows: func(_ *testing.T, h *historypb.History) (string, bool) {
				return fmt.Sprintf("%d timers fired", timersFired(h)), timersFired(h) == 1
			},
		},
		{
			// The session's first turn came with its first workflow task
			// (Update-with-Start) and armed the run's end within the
			// definition's 2 h window (less 12 min) once the session
			// opened.
			file: "versions_first.json",
			shows: func(t *testing.T, h *historypb.History) (string, bool) {
				var first, opened int64
				var timer time.Duration
				for _, ev := range h.GetEvents() {
					if a := ev.GetWorkflowExecutionUpdateAcceptedEventAttributes(); a != nil && first == 0 && a.GetAcceptedRequestSequencingEventId() == 2 {
						first = ev.GetEventId()
					}
					if a := ev.GetTimerStartedEventAttributes(); a != nil && timer == 0 {
						timer = a.GetStartToFireTimeout().AsDuration()
					}
				}
				opened = int64(localActivities(t, h)[workflows.ActivitySessionOpen])
				return fmt.Sprintf("first-task update accepted at event %d, %d Session.Open, window timer %s", first, opened, timer),
					first > 0 && opened == 1 && timer == 2*time.Hour-12*time.Minute
			},
		},
		{
			// The next run's first task: a redelivered key answered from
			// the carried snapshot (no model call) and a new one run.
			file: "versions_first_run2.json",
			shows: func(_ *testing.T, h *historypb.History) (string, bool) {
				u, a := updates(h), activities(h)
				return fmt.Sprintf("%d turn updates, %d Model.Generate", u[workflows.UpdateTurn], a[workflows.ActivityModelGenerate]),
					u[workflows.UpdateTurn] == 2 && a[workflows.ActivityModelGenerate] == 1
			},
		},
		{
			// A delegation: two Delegate children started by one step.
			file: "delegation.json",
			shows: func(_ *testing.T, h *historypb.History) (string, bool) {
				n := children(h)
				return fmt.Sprintf("%d Delegate children", n), n == 2
			},
		},
		{
			// A sub-agent's own turn.
			file: "delegation_child.json",
			shows: func(t *testing.T, h *historypb.History) (string, bool) {
				typ := h.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes().GetWorkflowType().GetName()
				n := turnsRecorded(t, h)
				return fmt.Sprintf("a %s workflow, %d turns recorded", typ, n), typ == workflows.DelegateWorkflowType && n == 1
			},
		},
		{
			// An aborted delegating turn: its own stop notice and its
			// sub-agent's, published by the delegating session.
			file: "delegation_abort.json",
			shows: func(t *testing.T, h *historypb.History) (string, bool) {
				n := localActivities(t, h)[workflows.ActivityFeedStop]
				return fmt.Sprintf("%d Delegate children, %d Feed.Stop local activities", children(h), n), children(h) == 1 && n == 2
			},
		},
		{
			// A sub-agent's question and gated call, answered and approved
			// on the delegating session: four waits told by the sub-agent,
			// two decisions handed to it, each wait published here.
			file: "delegation_sub_waits.json",
			shows: func(t *testing.T, h *historypb.History) (string, bool) {
				got, sent := signals(h)
				n := localActivities(t, h)[workflows.ActivityFeedPublish]
				return fmt.Sprintf("%d sub-agent-wait signals, %d decisions sent, %d Feed.Publish", got[wire.SignalSubAgentWait], sent[wire.SignalSubAgentDecision], n),
					got[wire.SignalSubAgentWait] == 4 && sent[wire.SignalSubAgentDecision] == 2 && n == 5
			},
		},
		{
			// The sub-agent's side: its waits told, the decisions received.
			file: "delegation_sub_waits_child.json",
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
			file: "delegation_sub_questions_held.json",
			shows: func(t *testing.T, h *historypb.History) (string, bool) {
				got, sent := signals(h)
				n := localActivities(t, h)[workflows.ActivityFeedPublish]
				return fmt.Sprintf("%d sub-agent-wait signals, %d answers sent, %d Feed.Publish", got[wire.SignalSubAgentWait], sent[wire.SignalSubAgentDecision], n),
					got[wire.SignalSubAgentWait] == 4 && sent[wire.SignalSubAgentDecision] == 2 && n == 6
			},
		},
		{
			// Channel deliveries: live replies while the turns run, final
			// replies after them.
			file: "channel_deliveries.json",
			shows: func(_ *testing.T, h *historypb.History) (string, bool) {
				got, _ := signals(h)
				a := activities(h)
				return fmt.Sprintf("%d deliveries, %d Channel.Stream, %d Channel.Reply", got[workflows.SignalDeliver], a[workflows.ActivityChannelStream], a[workflows.ActivityChannelReply]),
					got[workflows.SignalDeliver] >= 2 && a[workflows.ActivityChannelStream] == 2 && a[workflows.ActivityChannelReply] == 2
			},
		},
		{
			// A chat workflow routes its turns with Chat.Route, a regular
			// activity, and hears back from the session (turn-done).
			file: "chat_routing_chat.json",
			shows: func(_ *testing.T, h *historypb.History) (string, bool) {
				got, _ := signals(h)
				n := activities(h)[workflows.ActivityChatRoute]
				return fmt.Sprintf("%d Chat.Route activities, %d turn-done signals", n, got[wire.SignalTurnDone]), n == 2 && got[wire.SignalTurnDone] == 1
			},
		},
		{
			// The routed session tells the chat how its folded turn ended.
			file: "chat_routing_session.json",
			shows: func(_ *testing.T, h *historypb.History) (string, bool) {
				_, sent := signals(h)
				return fmt.Sprintf("%d turn-done signals sent", sent[wire.SignalTurnDone]), sent[wire.SignalTurnDone] == 1
			},
		},
		{
			// A deleted message's queued turn dropped (Chat.Drop).
			file: "chat_deletion_chat.json",
			shows: func(t *testing.T, h *historypb.History) (string, bool) {
				n := localActivities(t, h)[workflows.ActivityChatDrop]
				return fmt.Sprintf("%d Chat.Drop local activities", n), n == 1
			},
		},
		{
			// The session that dropped it: one abort of the queued turn.
			file: "chat_deletion_session.json",
			shows: func(_ *testing.T, h *historypb.History) (string, bool) {
				n := updates(h)[workflows.UpdateAbort]
				return fmt.Sprintf("%d abort updates accepted", n), n == 1
			},
		},
		{
			// The chat stopped its session's turn with Chat.Stop.
			file: "chat_stop.json",
			shows: func(t *testing.T, h *historypb.History) (string, bool) {
				n := localActivities(t, h)[workflows.ActivityChatStop]
				return fmt.Sprintf("%d Chat.Stop local activities", n), n == 1
			},
		},
		{
			// A schedule's fire workflow runs its turn.
			file: "schedule_fire.json",
			shows: func(_ *testing.T, h *historypb.History) (string, bool) {
				typ := h.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes().GetWorkflowType().GetName()
				n := activities(h)[workflows.ActivityScheduleFire]
				return fmt.Sprintf("a %s workflow, %d Schedule.Fire", typ, n), typ == workflows.ScheduleFireWorkflowType && n == 1
			},
		},
		{
			// A fire with deliver: targets sends the answer after its turn.
			file: "schedule_fire_deliver.json",
			shows: func(_ *testing.T, h *historypb.History) (string, bool) {
				fires, sends := activities(h)[workflows.ActivityScheduleFire], activities(h)[workflows.ActivityChannelSend]
				return fmt.Sprintf("%d Schedule.Fire, %d Channel.Send", fires, sends), fires == 1 && sends == 1
			},
		},
	} {
		t.Run(tt.file, func(t *testing.T) {
			f := filepath.Join("testdata", "histories", tt.file)
			h := loadHistory(t, f)
			if what, ok := tt.shows(t, h); !ok {
				t.Errorf("%s: %s", tt.file, what)
			}
			if err := replay(f); err != nil {
				t.Error(err)
			}
		})
	}
}

// updates counts a history's accepted updates by name.
func updates(h *historypb.History) map[string]int {
	n := map[string]int{}
	for _, ev := range h.GetEvents() {
		if a := ev.GetWorkflowExecutionUpdateAcceptedEventAttributes(); a != nil {
			n[a.GetAcceptedRequest().GetInput().GetName()]++
		}
	}
	return n
}

// children counts a history's Delegate children.
func children(h *historypb.History) int {
	n := 0
	for _, ev := range h.GetEvents() {
		if ev.GetStartChildWorkflowExecutionInitiatedEventAttributes().GetWorkflowType().GetName() == workflows.DelegateWorkflowType {
			n++
		}
	}
	return n
}

// timersFired counts a history's fired timers.
func timersFired(h *historypb.History) int {
	n := 0
	for _, ev := range h.GetEvents() {
		if ev.GetTimerFiredEventAttributes() != nil {
			n++
		}
	}
	return n
}

// continuedAsNew reports whether the run continued as new.
func continuedAsNew(h *historypb.History) bool {
	for _, ev := range h.GetEvents() {
		if ev.GetWorkflowExecutionContinuedAsNewEventAttributes() != nil {
			return true
		}
	}
	return false
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

// recorded counts the turns a history recorded: by Turn.Record (scheduled)
// and by the model step that ended them (a Model.Generate whose result says
// Recorded).
func recorded(t *testing.T, h *historypb.History) (byRecord, byStep int) {
	t.Helper()
	types := map[int64]string{}
	for _, ev := range h.GetEvents() {
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			types[ev.GetEventId()] = a.GetActivityType().GetName()
			if a.GetActivityType().GetName() == workflows.ActivityTurnRecord {
				byRecord++
			}
		}
		c := ev.GetActivityTaskCompletedEventAttributes()
		if c == nil || types[c.GetScheduledEventId()] != workflows.ActivityModelGenerate {
			continue
		}
		var res agentloop.ModelResult
		if err := converter.GetDefaultDataConverter().FromPayloads(c.GetResult(), &res); err != nil {
			t.Fatalf("event %d: model result: %v", ev.GetEventId(), err)
		}
		if res.Recorded {
			byStep++
		}
	}
	return byRecord, byStep
}

// turnsRecorded is how many turns a history recorded, either way.
func turnsRecorded(t *testing.T, h *historypb.History) int {
	a, b := recorded(t, h)
	return a + b
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

// TestReplayUpsertsOnlyOnChange: in the recorded histories of sessions
// started with the search attributes, FastAgentStatus is upserted only
// around the waits for a person — waiting_approval (or waiting_answer) when
// one begins, idle when none is left — never per turn or per step: no
// value twice in a row, no other value, and at most two upserts a wait.
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
		var statuses []string
		for _, ev := range h.GetEvents() {
			// Only AttrStatus is counted (a workflow.GetVersion call
			// upserts TemporalChangeVersion).
			if p := ev.GetUpsertWorkflowSearchAttributesEventAttributes().GetSearchAttributes().GetIndexedFields()[workflows.AttrStatus]; p != nil {
				var v string
				if err := converter.GetDefaultDataConverter().FromPayload(p, &v); err != nil {
					t.Fatal(err)
				}
				statuses = append(statuses, v)
			}
		}
		// Each wait announces itself and its end (approval_requested and
		// _resolved, question_asked and _answered) on the stream.
		waits := localActivities(t, h)[workflows.ActivityFeedPublish] / 2
		base := filepath.Base(f)
		if len(statuses) > 2*waits {
			t.Errorf("%s: %d status upserts for %d waits for a person, want at most %d: %v", base, len(statuses), waits, 2*waits, statuses)
		}
		for i, v := range statuses {
			if v != workflows.StatusIdle && v != workflows.StatusWaiting && v != workflows.StatusAsking {
				t.Errorf("%s: status upserts %v set %q", base, statuses, v)
			}
			if i > 0 && v == statuses[i-1] {
				t.Errorf("%s: status upserts %v set %s twice in a row", base, statuses, v)
			}
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

// TestReplayCoversActivityQueues: histories without the setting schedule
// every activity on the session's queue (plain_turn); with fastagent.yaml's
// activities: block the tool call and the model calls are scheduled on
// their groups' task queues (activity_queues). Their turns' records were
// made by their last model steps: no Turn.Record is scheduled at all.
func TestReplayCoversActivityQueues(t *testing.T) {
	for file, placed := range map[string]bool{"plain_turn.json": false, "activity_queues.json": true} {
		f := filepath.Join("testdata", "histories", file)
		h := loadHistory(t, f)
		own := h.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes().GetTaskQueue().GetName()
		queues := map[string]string{}
		for _, ev := range h.GetEvents() {
			if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
				queues[a.GetActivityType().GetName()] = a.GetTaskQueue().GetName()
			}
		}
		want := map[string]string{workflows.ActivityModelGenerate: own, workflows.ActivityTurnRecord: ""}
		if placed {
			want[workflows.ActivityModelGenerate], want[workflows.ActivityToolExecute] = own+"-model", own+"-tools"
		}
		for name, q := range want {
			if queues[name] != q {
				t.Errorf("%s: %s scheduled on %q, want %q", file, name, queues[name], q)
			}
		}
		if err := replay(f); err != nil {
			t.Error(err)
		}
	}
}
