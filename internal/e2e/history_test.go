package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"google.golang.org/protobuf/encoding/protojson"

	sdklog "go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/agent/agenttest"
	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/channels/slack"
	"github.com/fastagent/fastagent/internal/channels/telegram"
	"github.com/fastagent/fastagent/internal/schedules"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/testsupport/fakeslack"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
	"github.com/fastagent/fastagent/internal/waketools"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
	"github.com/fastagent/fastagent/workflows/wakes"
)

// historyDir is where recorded histories are kept and replayed from in CI
// (workflows/replay_test.go). FASTAGENT_RECORD_HISTORIES=1 records the
// scenarios that have no history yet and keeps the others: they are what
// running sessions have, and must keep replaying (docs/testing.md,
// "Changing a workflow"). FASTAGENT_RECORD_HISTORIES=all rewrites every one
// (a new baseline, only for a release that drops the old histories). With
// FASTAGENT_RECORD_HISTORIES_PREFIX=p_ as well, they are written as
// p_<name>.json beside the others (a new SDK's histories next to the old
// SDK's).
const historyDir = "../../workflows/testdata/histories"

// historyScenario is one recorded path through the workflows.
type historyScenario struct {
	name string
	// config is appended to fastRetries in fastagent.yaml.
	config string
	// turnsPerRun is SessionInput.TurnsPerRun (default 3).
	turnsPerRun int
	// setup runs before the worker starts (kit knobs, model scripts).
	setup func(t *testing.T, e *env)
	// ownWorker: run starts the worker itself.
	ownWorker bool
	// run drives the scenario in session and returns the workflow ID to
	// record ("" records the session's workflow).
	run func(t *testing.T, e *env, session string) string
}

// TestHistories runs a session (or a schedule fire) end to end for every
// path the workflows take, replays each history against the current
// workflow code, and (when asked) records them for the replay test that
// guards running sessions against incompatible changes. A scenario without
// a recorded history fails: its path would not be replayed in CI.
func TestHistories(t *testing.T) {
	replayer := sdkworker.NewWorkflowReplayer()
	replayer.RegisterWorkflowWithOptions(workflows.SessionWorkflow, workflow.RegisterOptions{Name: workflows.SessionWorkflowType})
	replayer.RegisterWorkflowWithOptions(workflows.ScheduleFireWorkflow, workflow.RegisterOptions{Name: workflows.ScheduleFireWorkflowType})
	replayer.RegisterWorkflowWithOptions(workflows.ChatWorkflow, workflow.RegisterOptions{Name: workflows.ChatWorkflowType})
	replayer.RegisterWorkflowWithOptions(workflows.DelegateWorkflow, workflow.RegisterOptions{Name: workflows.DelegateWorkflowType})
	logger := sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	mode := os.Getenv("FASTAGENT_RECORD_HISTORIES")
	prefix := os.Getenv("FASTAGENT_RECORD_HISTORIES_PREFIX")
	for _, sc := range historyScenarios() {
		t.Run(sc.name, func(t *testing.T) {
			_, err := os.Stat(filepath.Join(historyDir, prefix+sc.name+".json"))
			recorded := err == nil
			record := mode == "all" || (mode == "1" && !recorded)
			if !recorded && !record {
				t.Errorf("scenario %q has no recorded history in workflows/testdata/histories: record it with "+
					"make record-histories HISTORIES=%s (it is then replayed in CI)", sc.name, sc.name)
			}
			if mode == "1" && recorded {
				t.Logf("%s%s.json kept (recorded before; FASTAGENT_RECORD_HISTORIES=all rewrites it)", prefix, sc.name)
			}
			e := newEnv(t)
			e.writeConfig(fastRetries + sc.config)
			e.agent.TurnsPerRun = 3
			if sc.turnsPerRun > 0 {
				e.agent.TurnsPerRun = sc.turnsPerRun
			}
			if sc.setup != nil {
				sc.setup(t, e)
			}
			if !sc.ownWorker {
				e.startWorker()
			}
			session := "history-" + sc.name
			id := sc.run(t, e, session)
			if id == "" {
				id = workflows.WorkflowID(session)
			}
			settleLatest(t, e, id)
			if record {
				// A run count may differ from the last recording.
				stale, _ := filepath.Glob(filepath.Join(historyDir, prefix+sc.name+"_run*.json"))
				for _, f := range stale {
					_ = os.Remove(f)
				}
			}
			for i, runID := range runIDs(t, e, id) {
				hist := fetchHistory(t, e, id, runID)
				if err := replayer.ReplayWorkflowHistory(logger, hist); err != nil {
					t.Fatalf("replay of run %d just recorded failed (non-determinism): %v", i+1, err)
				}
				if !record {
					continue
				}
				b, err := protojson.MarshalOptions{Indent: "  "}.Marshal(hist)
				if err != nil {
					t.Fatal(err)
				}
				name := prefix + sc.name + ".json"
				if i > 0 {
					name = fmt.Sprintf("%s%s_run%d.json", prefix, sc.name, i+1)
				}
				if err := os.WriteFile(filepath.Join(historyDir, name), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func historyScenarios() []historyScenario {
	return []historyScenario{
		{name: "channel_deliveries", ownWorker: true, run: runChannelDeliveries},
		// Hook files: before_agent_start context, a before_tool hook that
		// denies one bash call and replaces another's arguments, a failed
		// hook whose onError allows (one Hook.Run each).
		{name: "file_hooks", setup: func(_ *testing.T, e *env) { writeHooks(e) }, run: runFileHooks},
		// Deliveries queued behind a slow turn, carried across
		// continue-as-new (two turns per run); two refused (no key, an
		// @-key).
		{name: "delivery_queue", run: runDeliveryQueue},
		{name: "chat_routing_chat", ownWorker: true, run: runChatRouting(true)},
		{name: "chat_routing_session", ownWorker: true, run: runChatRouting(false)},
		// A thread reply queued behind a running turn, then deleted: the
		// chat workflow drops it (Chat.Drop), the session aborts it.
		{name: "chat_deletion_chat", ownWorker: true, run: runChatDeletion(true)},
		{name: "chat_deletion_session", ownWorker: true, run: runChatDeletion(false)},
		{
			// Compaction by threshold, after a context overflow (L1), and a
			// manual one, in a 4,000-token window.
			name: "compaction", config: compactionConfig, turnsPerRun: 20, run: runCompaction,
		},
		{
			// The carried queue restored before the handlers: the
			// session's first turn comes with its first workflow task
			// (Update-with-Start) and arms the run's end within the
			// definition's idempotency window once the session opened;
			// two turns per run, and the next run's first task gets a
			// redelivered key (answered from memory) and a new one.
			name: "versions_first", config: "idempotencyWindow: 2h\n", turnsPerRun: 2, run: func(t *testing.T, e *env, s string) string {
				e.kit.Model.Handle(echo)
				for i, key := range []string{"k1", "k2", "k1", "k3"} {
					if out := e.sendTurn(s, key, fmt.Sprintf("turn %d", i), 2); out.Status != agent.TypeCompleted || out.Turn != key {
						t.Fatalf("%s: %+v", key, out)
					}
				}
				if n := len(e.kit.Model.Requests()); n != 3 {
					t.Fatalf("%d model calls, want 3 (k1 answered again without running)", n)
				}
				return ""
			},
		},
		{
			// A key the session store recorded, sent again after a
			// terminate and restart: answered from its record (Turn.Begin),
			// not run; the next key runs below it.
			name: "key_answered_from_record", run: func(t *testing.T, e *env, s string) string {
				e.kit.Model.Handle(echo)
				if out := e.sendTurn(s, "k1", "hello", 0); out.Status != agent.TypeCompleted {
					t.Fatalf("k1: %+v", out)
				}
				if err := e.client.TerminateWorkflow(context.Background(), workflows.WorkflowID(s), "", "history: restart"); err != nil {
					t.Fatal(err)
				}
				calls := len(e.kit.Model.Requests())
				if out := e.sendTurn(s, "k1", "hello", 0); out.Status != agent.TypeCompleted || len(e.kit.Model.Requests()) != calls {
					t.Fatalf("k1 again: %+v, %d model calls (want %d)", out, len(e.kit.Model.Requests()), calls)
				}
				if out := e.sendTurn(s, "k2", "and then", 0); out.Status != agent.TypeCompleted {
					t.Fatalf("k2: %+v", out)
				}
				return ""
			},
		},
		{
			// A queued turn is aborted (and recorded) while another runs.
			name: "abort_queued_turn", run: func(t *testing.T, e *env, s string) string {
				slow := make([]string, 8)
				for i := range slow {
					slow[i] = "slow "
				}
				e.kit.Model.Handle(func(req modelserver.Request) modelserver.Reply {
					if strings.Contains(req.LastUserText(), "take your time") {
						return modelserver.Reply{Text: slow, ChunkDelay: 200 * time.Millisecond}
					}
					return echo(req)
				})
				first, queued := make(chan struct{}), make(chan struct{})
				go func() { defer close(first); e.sendTurn(s, "t1", "take your time", 0) }()
				waitModelCalls(t, e, 1)
				go func() { defer close(queued); e.sendTurn(s, "t2", "dropped", 0) }()
				waitFor(t, time.Minute, "t2 to be queued", func() bool {
					v, err := e.agent.State(context.Background(), s)
					return err == nil && len(v.Queued) == 1
				})
				if _, err := e.agent.Abort(context.Background(), s, "t2", "not needed"); err != nil {
					t.Fatalf("abort: %v", err)
				}
				<-queued
				<-first
				return ""
			},
		},
		{
			// Two turns, a rewind to the first one's end (a branch
			// summary), and a turn on the new branch.
			name: "rewind", run: func(t *testing.T, e *env, s string) string {
				e.kit.Model.Handle(echo)
				a := e.sendTurn(s, "a", "first idea", 0)
				if a.Status != agent.TypeCompleted {
					t.Fatalf("a: %+v", a)
				}
				if b := e.sendTurn(s, "b", "second idea", 0); b.Status != agent.TypeCompleted {
					t.Fatalf("b: %+v", b)
				}
				if _, err := e.agent.Rewind(context.Background(), s, a.Leaf); err != nil {
					t.Fatalf("rewind: %v", err)
				}
				if c := e.sendTurn(s, "c", "third idea", 0); c.Status != agent.TypeCompleted {
					t.Fatalf("c: %+v", c)
				}
				return ""
			},
		},
		// fastagent.yaml places the tools and model groups on task
		// queues of their own, each served by a worker of that group alone.
		{name: "activity_queues", ownWorker: true, run: runActivityQueues},
		{name: "plain_turn", run: func(t *testing.T, e *env, s string) string {
			testkit.Script(e.kit.Model, agenttest.Reply)
			must(t, collect(t, e.agent, context.Background(), s, "hello"), agent.TypeCompleted)
			return ""
		}},
		{name: "tool_turn_with_retry", run: func(t *testing.T, e *env, s string) string {
			testkit.Script(e.kit.Model, agenttest.ToolThenTransient)
			must(t, collect(t, e.agent, context.Background(), s, "count"), agent.TypeCompleted)
			return ""
		}},
		{name: "step_run", run: func(t *testing.T, e *env, s string) string {
			// Two tool steps, each run with the next model call as one
			// Step.Run; the first one's model call fails once and the
			// retried attempt reads the call's stored result.
			e.kit.Model.Enqueue(
				modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "r1", Name: testkit.CounterName, Args: `{"note":"one"}`}}},
				modelserver.Reply{Status: 500, Message: "a transient failure"},
				modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "r2", Name: testkit.CounterName, Args: `{"note":"two"}`}}},
				modelserver.Reply{Text: []string{"counted twice"}},
			)
			must(t, collect(t, e.agent, context.Background(), s, "count twice"), agent.TypeCompleted)
			if n := e.kit.Counter.Runs(s); n != 2 {
				t.Errorf("counter ran %d times, want 2", n)
			}
			return ""
		}},
		{name: "parallel_tools_unknown_tool_and_invalid_args", run: func(t *testing.T, e *env, s string) string {
			e.kit.Model.Enqueue(
				modelserver.Reply{ToolCalls: []modelserver.ToolCall{
					{ID: "p1", Name: "counter", Args: `{}`},
					{ID: "p2", Name: "no_such_tool", Args: `{}`},
					{ID: "p3", Name: "read", Args: `{"path": 7}`},
				}},
				modelserver.Reply{Text: []string{"done"}},
			)
			must(t, collect(t, e.agent, context.Background(), s, "do three things"), agent.TypeCompleted)
			return ""
		}},
		{name: "failed_then_ok", run: func(t *testing.T, e *env, s string) string {
			testkit.Script(e.kit.Model, agenttest.Fail)
			must(t, collect(t, e.agent, context.Background(), s, "fail"), agent.TypeFailed)
			testkit.Script(e.kit.Model, agenttest.Reply)
			must(t, collect(t, e.agent, context.Background(), s, "again"), agent.TypeCompleted)
			return ""
		}},
		{name: "continue_as_new", run: func(t *testing.T, e *env, s string) string {
			for i := 0; i < 4; i++ {
				testkit.Script(e.kit.Model, agenttest.Echo)
				must(t, collect(t, e.agent, context.Background(), s, "turn"), agent.TypeCompleted)
			}
			return ""
		}},
		{
			// A sequential tool's calls of one batch run one after another.
			name:  "sequential_tools",
			setup: func(_ *testing.T, e *env) { e.kit.Counter.Sequential = true },
			run: func(t *testing.T, e *env, s string) string {
				e.kit.Model.Enqueue(
					modelserver.Reply{ToolCalls: []modelserver.ToolCall{
						{ID: "s1", Name: testkit.CounterName, Args: `{"note":"first"}`},
						{ID: "s2", Name: testkit.CounterName, Args: `{"note":"second"}`},
					}},
					modelserver.Reply{Text: []string{"counted twice"}},
				)
				must(t, collect(t, e.agent, context.Background(), s, "count twice"), agent.TypeCompleted)
				if n := e.kit.Counter.Runs(s); n != 2 {
					t.Errorf("counter ran %d times, want 2", n)
				}
				waitIdle(t, e, s, 1)
				if n := toolsScheduledBeforeFirstDone(t, e, workflows.WorkflowID(s)); n != 1 {
					t.Errorf("%d tool activities were scheduled before the first finished, want 1 (sequential)", n)
				}
				return ""
			},
		},
		{
			// A required approval is granted (the tool runs) and, next
			// turn, denied (the model sees an error result).
			name:   "approval_granted_and_denied",
			config: "tools:\n  counter: {requiresApproval: true}\n",
			run: func(t *testing.T, e *env, s string) string {
				e.kit.Model.Enqueue(
					modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "a1", Name: testkit.CounterName, Args: `{}`}}},
					modelserver.Reply{Text: []string{"counted"}},
					modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "a2", Name: testkit.CounterName, Args: `{}`}}},
					modelserver.Reply{Text: []string{"ok, not counting"}},
				)
				for _, d := range []struct {
					call    string
					approve bool
				}{{"a1", true}, {"a2", false}} {
					done := make(chan []agent.Event, 1)
					go func() { done <- collect(t, e.agent, context.Background(), s, "count "+d.call) }()
					waitPendingApproval(t, e, s, d.call)
					if err := e.agent.Approve(context.Background(), s, workflows.ApproveRequest{Call: d.call, Approve: d.approve, Reason: "decided by the test"}); err != nil {
						t.Fatalf("approve %s: %v", d.call, err)
					}
					must(t, <-done, agent.TypeCompleted)
				}
				if n := e.kit.Counter.Runs(s); n != 1 {
					t.Errorf("counter ran %d times, want 1 (granted once, denied once)", n)
				}
				if res := toolResult(t, e, s, "a2"); res == nil || !res.IsError || !strings.Contains(res.Text, "denied") {
					t.Errorf("denied call's result = %+v", res)
				}
				return ""
			},
		},
		{
			// An abort while a tool runs stops it at once (the turn's stop
			// notice) and records the interruption as its result.
			name:  "abort_mid_tool",
			setup: func(_ *testing.T, e *env) { e.kit.Counter.Delay = time.Minute },
			run: func(t *testing.T, e *env, s string) string {
				e.kit.Model.Enqueue(modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "x1", Name: testkit.CounterName, Args: `{}`}}})
				evs := streamUntilTool(t, e, s, "count slowly", func() {
					// tool_started comes just before the tool runs: abort
					// once it runs.
					waitFor(t, 30*time.Second, "the tool to run", func() bool { return e.kit.Counter.Started(s) == 1 })
					if _, err := e.agent.Abort(context.Background(), s, "", "user pressed stop"); err != nil {
						t.Errorf("abort: %v", err)
					}
				})
				term := agenttest.CheckTerminal(t, evs)
				if term.Type != agent.TypeFailed || term.Code != agent.CodeAborted {
					t.Fatalf("want failed{aborted}, got %+v", term)
				}
				if res := toolResult(t, e, s, "x1"); res == nil || !res.IsError || !strings.Contains(res.Text, "interrupted") {
					t.Errorf("aborted call's result = %+v", res)
				}
				// The running tool is stopped by the turn's stop notice (Feed.Stop),
				// well before its first heartbeat (due at 10 s) could carry the
				// cancellation.
				waitFor(t, 5*time.Second, "the running tool stopped", func() bool { return e.kit.Counter.Interrupted(s) == 1 })
				return ""
			},
		},
		{
			// Steering sent while a tool runs reaches the model's next call
			// in the same turn.
			name:  "steering_during_tool",
			setup: func(_ *testing.T, e *env) { e.kit.Counter.Delay = 2 * time.Second },
			run: func(t *testing.T, e *env, s string) string {
				e.kit.Model.Enqueue(
					modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "c1", Name: testkit.CounterName, Args: `{}`}}},
					modelserver.Reply{Text: []string{"steered"}},
				)
				evs := streamUntilTool(t, e, s, "count please", func() {
					if err := e.agent.Steer(context.Background(), s, "also say hi"); err != nil {
						t.Errorf("steer: %v", err)
					}
				})
				must(t, evs, agent.TypeCompleted)
				reqs := e.kit.Model.Requests()
				if last := reqs[len(reqs)-1].LastUserText(); last != "also say hi" {
					t.Errorf("the second model call's last user message = %q, want the steering text", last)
				}
				return ""
			},
		},
		{
			// Steering taken while the only step maxSteps allows runs its
			// tool comes too late for the turn (it stops at maxSteps): it
			// runs as the follow-up turn "@steer:<key>".
			name:   "late_steering_follow_up",
			config: "maxSteps: 1\n",
			run: func(t *testing.T, e *env, s string) string {
				release := e.kit.Counter.Hold("held")
				defer release()
				e.kit.Model.Enqueue(
					modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "c1", Name: testkit.CounterName, Args: `{"note":"held"}`}}},
					modelserver.Reply{Text: []string{"follow-up answer"}},
				)
				done := make(chan []agent.Event, 1)
				go func() {
					done <- collect(t, e.agent, agent.WithIdempotencyKey(context.Background(), "late-key"), s, "talk")
				}()
				waitFor(t, time.Minute, "the tool runs", func() bool { return e.kit.Counter.Started(s) == 1 })
				if err := e.agent.Steer(context.Background(), s, "and one more thing"); err != nil {
					t.Fatalf("steer: %v", err)
				}
				release()
				must(t, <-done, agent.TypeFailed)
				waitIdle(t, e, s, 2)
				reqs := e.kit.Model.Requests()
				if len(reqs) != 2 || reqs[1].LastUserText() != "and one more thing" {
					t.Errorf("the follow-up turn should send the steering text: %d model calls", len(reqs))
				}
				return ""
			},
		},
		{
			// The worker stops mid-call of a non-idempotent tool: the call
			// is not re-run and the model is told its outcome is unknown.
			name:      "lost_tool_unknown_outcome",
			ownWorker: true,
			setup:     func(_ *testing.T, e *env) { e.kit.Counter.Delay = time.Minute },
			run: func(t *testing.T, e *env, s string) string {
				w := e.startWorker(func(c *serve.Config, _ *serve.Components) { c.WorkerStopTimeout = 200 * time.Millisecond })
				e.kit.Model.Enqueue(
					modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "l1", Name: testkit.CounterName, Args: `{}`}}},
					modelserver.Reply{Text: []string{"I will check before counting again"}},
				)
				evs := streamUntilTool(t, e, s, "count once", func() {
					w.Stop() // the call's context is cancelled: no result
					e.startWorker()
				})
				must(t, evs, agent.TypeCompleted)
				if res := toolResult(t, e, s, "l1"); res == nil || !res.IsError || !strings.Contains(res.Text, "unknown") {
					t.Errorf("lost call's result = %+v, want outcome unknown", res)
				}
				if n := e.kit.Counter.Runs(s); n != 0 {
					t.Errorf("counter finished %d runs, want 0 (it was never re-run)", n)
				}
				return ""
			},
		},
		{
			// A one-shot wake-up set by the wake tool fires once.
			name:   "wake_one_shot",
			config: "selfSchedule: true\n",
			setup: func(_ *testing.T, e *env) {
				e.kit.Loader.Wakes = waketools.Options{MinOneShot: time.Second}
			},
			run: func(t *testing.T, e *env, s string) string {
				e.kit.Model.Enqueue(
					modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "k1", Name: wakes.WakeName, Args: `{"in":"2s","prompt":"check the oven"}`}}},
					modelserver.Reply{Text: []string{"I will check in 2 seconds."}},
					modelserver.Reply{Text: []string{"woke up"}},
				)
				must(t, collect(t, e.agent, context.Background(), s, "remind yourself"), agent.TypeCompleted)
				v := waitWakes(t, e, s, 1)
				if len(v.WakeLog) != 1 || v.WakeLog[0].Status != agent.TypeCompleted {
					t.Errorf("wake log = %+v, want one completed woken turn", v.WakeLog)
				}
				return ""
			},
		},
		{
			// A recurring wake-up fires, the session continues as new with
			// it pending, it fires again in the new run, and the woken turn
			// cancels it with unwake.
			name:        "wake_recurring_across_continue_as_new",
			config:      "selfSchedule: true\n",
			turnsPerRun: 2,
			setup: func(_ *testing.T, e *env) {
				e.kit.Loader.Wakes = waketools.Options{MinInterval: time.Second}
			},
			run: func(t *testing.T, e *env, s string) string {
				var woken atomic.Int32
				e.kit.Model.Handle(func(r modelserver.Request) modelserver.Reply {
					if r.Messages[len(r.Messages)-1].Role == "tool" {
						return modelserver.Reply{Text: []string{"noted"}}
					}
					if strings.HasPrefix(r.LastUserText(), "[wake-up") && woken.Add(1) >= 2 {
						return modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: fmt.Sprintf("u%d", woken.Load()), Name: wakes.UnwakeName, Args: `{"id":"w1"}`}}}
					}
					return modelserver.Reply{Text: []string{"tick"}}
				})
				e.kit.Model.Enqueue(
					modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "k1", Name: wakes.WakeName, Args: `{"cron":"@every 3s","prompt":"tick"}`}}},
					modelserver.Reply{Text: []string{"I will tick every 3 seconds."}},
				)
				must(t, collect(t, e.agent, context.Background(), s, "tick for me"), agent.TypeCompleted)
				v := waitWakes(t, e, s, 2)
				for _, r := range v.WakeLog {
					if r.Status != agent.TypeCompleted {
						t.Errorf("woken turn %+v did not complete", r)
					}
				}
				if n := len(runIDs(t, e, workflows.WorkflowID(s))); n < 2 {
					t.Errorf("%d runs, want the wake-up to cross continue-as-new", n)
				}
				return ""
			},
		},
		{
			// A tool call ID reused by the turn's second step is refused
			// (an error result the model reads; the tool runs once).
			name: "repeated_call_id", run: runRepeatedCallID(true),
		},
		{
			// The primary model answers 429 with a Retry-After far longer
			// than retry.fallbackAfter: the step is handed to the next
			// model of the chain, which answers.
			name:   "model_fallback",
			config: "models: [openai/primary, openai/backup]\n",
			run: func(t *testing.T, e *env, s string) string {
				e.kit.Model.Enqueue(
					modelserver.Reply{Status: 429, Message: "slow down", RetryAfter: "600"},
					modelserver.Reply{Text: []string{"from the backup"}},
				)
				evs := collect(t, e.agent, context.Background(), s, "hello")
				must(t, evs, agent.TypeCompleted)
				if got := agent.AnswerText(evs); got != "from the backup" {
					t.Errorf("answer = %q", got)
				}
				reqs := e.kit.Model.Requests()
				if len(reqs) != 2 || reqs[1].Model != "backup" {
					t.Fatalf("model requests %+v, want the second to the backup", reqs)
				}
				return ""
			},
		},
		{
			// Approvals bound to the call: a reply that uses one call ID
			// twice has both calls refused, never put up for approval;
			// next turn, a decision sent with another call's argument
			// hash is refused (call_changed) and the one with the waiting
			// call's hashes runs it.
			name:   "approval_binding",
			config: "tools:\n  counter: {requiresApproval: true}\n",
			run: func(t *testing.T, e *env, s string) string {
				e.kit.Model.Enqueue(
					modelserver.Reply{ToolCalls: []modelserver.ToolCall{
						{ID: "d1", Name: testkit.CounterName, Args: `{"note":"one"}`},
						{ID: "d1", Name: testkit.CounterName, Args: `{"note":"two"}`},
					}},
					modelserver.Reply{Text: []string{"I will use distinct IDs"}},
					modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "b1", Name: testkit.CounterName, Args: `{"note":"bound"}`}}},
					modelserver.Reply{Text: []string{"counted"}},
				)
				must(t, collect(t, e.agent, context.Background(), s, "count twice with one ID"), agent.TypeCompleted)
				if res := toolResults(t, e, s, "d1"); len(res) != 2 || !res[0].IsError || !res[1].IsError {
					t.Errorf("results of d1 = %+v, want both refused", res)
				}
				done := make(chan []agent.Event, 1)
				go func() { done <- collect(t, e.agent, context.Background(), s, "count once") }()
				waitPendingApproval(t, e, s, "b1")
				v, err := e.agent.State(context.Background(), s)
				if err != nil || len(v.Approvals) != 1 {
					t.Fatalf("state %+v, %v", v, err)
				}
				p := v.Approvals[0]
				err = e.agent.Approve(context.Background(), s, workflows.ApproveRequest{Call: "b1", Approve: true, ArgsHash: strings.Repeat("0", len(p.ArgsHash))})
				if agent.CodeOf(err) != agent.CodeCallChanged {
					t.Fatalf("approval with another argument hash: %v, want %s", err, agent.CodeCallChanged)
				}
				if err := e.agent.Approve(context.Background(), s, workflows.ApproveRequest{Call: "b1", Approve: true,
					ArgsHash: p.ArgsHash, DefinitionHash: p.DefinitionHash}); err != nil {
					t.Fatalf("approve b1: %v", err)
				}
				must(t, <-done, agent.TypeCompleted)
				if n := e.kit.Counter.Runs(s); n != 1 {
					t.Errorf("counter ran %d times, want 1 (the bound approval only)", n)
				}
				return ""
			},
		},
		{
			// Approval waits announce themselves and have deadlines:
			// the first call is not decided within its 1s and is
			// denied by the timer; the next one is approved
			// before its deadline and runs. Each wait publishes
			// approval_requested and approval_resolved (Feed.Publish).
			name:   "approval_deadline",
			config: "tools:\n  counter: {requiresApproval: true, approvalTimeout: 1s}\n",
			run: func(t *testing.T, e *env, s string) string {
				e.kit.Model.Enqueue(
					modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "t1", Name: testkit.CounterName, Args: `{"note":"late"}`}}},
					modelserver.Reply{Text: []string{"no one answered"}},
				)
				must(t, collect(t, e.agent, context.Background(), s, "count, but nobody is there"), agent.TypeCompleted)
				if n := e.kit.Counter.Runs(s); n != 0 {
					t.Fatalf("a call denied at its deadline ran %d times", n)
				}
				e.writeConfig("tools:\n  counter: {requiresApproval: true, approvalTimeout: 10m}\n")
				e.kit.Model.Enqueue(
					modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "t2", Name: testkit.CounterName, Args: `{"note":"in time"}`}}},
					modelserver.Reply{Text: []string{"counted"}},
				)
				done := make(chan []agent.Event, 1)
				go func() { done <- collect(t, e.agent, context.Background(), s, "count, someone is there") }()
				waitPendingApproval(t, e, s, "t2")
				if err := e.agent.Approve(context.Background(), s, workflows.ApproveRequest{Call: "t2", Approve: true}); err != nil {
					t.Fatalf("approve t2: %v", err)
				}
				must(t, <-done, agent.TypeCompleted)
				if n := e.kit.Counter.Runs(s); n != 1 {
					t.Errorf("counter ran %d times, want 1 (the approved call)", n)
				}
				return ""
			},
		},
		{
			// ask_user: the question is published, the answer
			// update becomes the call's result, recorded without running
			// a tool.
			name:   "ask_user",
			config: "askUser: true\n",
			run: func(t *testing.T, e *env, s string) string {
				e.kit.Model.Enqueue(
					modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "au1", Name: "ask_user", Args: `{"question":"Which day?"}`}}},
					modelserver.Reply{Text: []string{"Tuesday it is"}},
				)
				done := make(chan []agent.Event, 1)
				go func() { done <- collect(t, e.agent, context.Background(), s, "book a meeting") }()
				waitFor(t, 30*time.Second, "the question", func() bool {
					v, err := e.agent.State(context.Background(), s)
					return err == nil && len(v.Questions) == 1
				})
				if err := e.agent.Answer(context.Background(), s, workflows.AnswerRequest{Call: "au1", Text: "Tuesday"}); err != nil {
					t.Fatalf("answer: %v", err)
				}
				must(t, <-done, agent.TypeCompleted)
				return ""
			},
		},
		{
			// A chat's "/stop" aborts the running turn of its session
			// (Chat.Stop); the chat workflow is recorded.
			name: "chat_stop", ownWorker: true, run: runChatStop,
		},
		{
			// A schedule fire (ScheduleFireWorkflow) runs one turn.
			name: "schedule_fire",
			run: func(t *testing.T, e *env, _ string) string {
				name := scheduleName("history")
				e.deleteScheduleAtEnd(name)
				e.writeSchedule(name+".yaml", schedYAML("0 0 1 1 *", "UTC", "Count the open issues."))
				e.mustReconcile()
				e.kit.Model.Enqueue(modelserver.Reply{Text: []string{"7 open", " issues"}})
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				ex, err := schedules.Trigger(ctx, e.client, name, 0)
				if err != nil {
					t.Fatal(err)
				}
				if rec, err := schedules.Wait(ctx, e.client, ex); err != nil || rec.Outcome != workflows.FireCompleted || rec.Reply != "7 open issues" {
					t.Fatalf("fire = %+v, %v", rec, err)
				}
				return ex.WorkflowID
			},
		},
		{
			// A schedule fire with deliver: sends the answer (Channel.Send,
			// behind the fire-deliver change ID).
			name: "schedule_fire_deliver", ownWorker: true,
			run: func(t *testing.T, e *env, _ string) string {
				fake := fakeslack.New()
				t.Cleanup(fake.Close)
				fake.AddChannel("C0OPS0001", "ops")
				e.startWorker(withRepliers(slack.NewReplier("xoxb-history", fake.APIURL())))
				name := scheduleName("history-deliver")
				e.deleteScheduleAtEnd(name)
				e.writeSchedule(name+".yaml", schedYAML("0 0 1 1 *", "UTC", "Count the open issues.")+"deliver: slack:#ops\n")
				e.mustReconcile()
				e.kit.Model.Enqueue(modelserver.Reply{Text: []string{"7 open", " issues"}})
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				ex, err := schedules.Trigger(ctx, e.client, name, 0)
				if err != nil {
					t.Fatal(err)
				}
				if rec, err := schedules.Wait(ctx, e.client, ex); err != nil || rec.Outcome != workflows.FireCompleted ||
					strings.Join(rec.Delivered, ",") != "slack:#ops" {
					t.Fatalf("fire = %+v, %v", rec, err)
				}
				return ex.WorkflowID
			},
		},
		// ask_user in a Slack thread, answered by the asker's next message.
		{name: "slack_ask_user", config: "askUser: true\n", ownWorker: true, run: runSlackAskUser},
		// Two sub-agents in one step, as child workflows, their answers the
		// tool results; and a turn aborted while its sub-agent streams (its
		// stop notice and its sub-agent's published by the delegating
		// session).
		{name: "delegation", config: delegationConfig, run: runDelegation},
		{name: "delegation_abort", config: delegationConfig, run: runDelegationAbort},
		{name: "delegation_child", config: delegationConfig, run: func(t *testing.T, e *env, s string) string {
			runDelegation(t, e, s)
			return workflows.WorkflowID(agentloop.DelegateSession(s, "cmp", "h1"))
		}},
		// A sub-agent's question and gated call, answered and approved on
		// the delegating session: its history and the sub-agent's.
		{name: "delegation_sub_waits", config: subWaitYAML, run: runSubAgentWaits},
		{name: "delegation_sub_waits_child", config: subWaitYAML, run: func(t *testing.T, e *env, s string) string {
			runSubAgentWaits(t, e, s)
			return workflows.WorkflowID(agentloop.DelegateSession(s, "subwaits", "d1"))
		}},
		// Two sub-agents' questions at once, asked one at a time on the
		// delegating session.
		{name: "delegation_sub_questions_held", config: delegationConfig + "askUser: true\n", run: runSubAgentQuestionsHeld},
	}
}

func must(t *testing.T, evs []agent.Event, want string) {
	t.Helper()
	if term := agenttest.CheckTerminal(t, evs); term.Type != want {
		t.Fatalf("want %s, got %+v", want, evs)
	}
}

// streamUntilTool runs a turn and calls during once, when its first tool
// has started; it returns the turn's events.
func streamUntilTool(t *testing.T, e *env, session, text string, during func()) []agent.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var evs []agent.Event
	called := false
	for ev := range e.agent.Invoke(ctx, agent.Scope{Session: session}, agent.Prompt{Text: text}) {
		evs = append(evs, ev)
		if ev.Type == agent.TypeToolStarted && !called {
			called = true
			during()
		}
	}
	if !called {
		t.Fatalf("no tool started: %s", describe(evs))
	}
	return evs
}

// toolResult returns the stored result of a tool call, or nil.
// runRepeatedCallID: the model reuses a tool call ID in the turn's second
// step, with other arguments. refused: the reused call is refused (an
// error result the model sees, the tool not run); else it runs again.
func runRepeatedCallID(refused bool) func(t *testing.T, e *env, s string) string {
	return func(t *testing.T, e *env, s string) string {
		e.kit.Model.Enqueue(
			modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "r1", Name: testkit.CounterName, Args: `{"note":"first"}`}}},
			modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "r1", Name: testkit.CounterName, Args: `{"note":"second"}`}}},
			modelserver.Reply{Text: []string{"done"}},
		)
		must(t, collect(t, e.agent, context.Background(), s, "count twice"), agent.TypeCompleted)
		runs, results := 2, toolResults(t, e, s, "r1")
		if refused {
			runs = 1
			if len(results) != 2 || results[0].IsError || !results[1].IsError || !strings.Contains(results[1].Text, "already used") {
				t.Errorf("results of r1 = %+v, want the second refused", results)
			}
		}
		if n := e.kit.Counter.Runs(s); n != runs {
			t.Errorf("counter ran %d times, want %d", n, runs)
		}
		return ""
	}
}

// toolResults are the stored results of the calls with ID call, oldest first.
func toolResults(t *testing.T, e *env, session, call string) []*transcript.Message {
	t.Helper()
	entries, err := e.kit.Store.Entries(context.Background(), session)
	if err != nil {
		t.Fatal(err)
	}
	var out []*transcript.Message
	for _, en := range entries {
		if en.Message != nil && en.Message.ToolCallID == call && en.Message.Role == transcript.RoleToolResult {
			out = append(out, en.Message)
		}
	}
	return out
}

func toolResult(t *testing.T, e *env, session, call string) *transcript.Message {
	t.Helper()
	entries, err := e.kit.Store.Entries(context.Background(), session)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		if en.Message != nil && en.Message.ToolCallID == call && en.Message.Role == transcript.RoleToolResult {
			return en.Message
		}
	}
	return nil
}

func waitPendingApproval(t *testing.T, e *env, session, call string) {
	t.Helper()
	waitFor(t, 30*time.Second, "call "+call+" to wait for approval", func() bool {
		v, err := e.agent.State(context.Background(), session)
		if err != nil {
			return false
		}
		for _, a := range v.Approvals {
			if a.Call == call {
				return true
			}
		}
		return false
	})
}

// waitIdle waits until the session has served turns turns and runs or
// queues none.
func waitIdle(t *testing.T, e *env, session string, turns int64) workflows.SessionView {
	t.Helper()
	var v workflows.SessionView
	var err error
	if !wait.Until(time.Minute, func() bool {
		v, err = e.agent.State(context.Background(), session)
		return err == nil && v.Turns >= turns && v.Running == "" && len(v.Queued) == 0
	}) {
		t.Fatalf("session %s not idle after %d turns: %+v (%v)", session, turns, v, err)
	}
	return v
}

// waitWakes waits until at least fired wake-ups have fired and run, none is
// pending and the session is idle.
func waitWakes(t *testing.T, e *env, session string, fired int) workflows.SessionView {
	t.Helper()
	var v workflows.SessionView
	var err error
	if !wait.Until(time.Minute, func() bool {
		v, err = e.agent.State(context.Background(), session)
		return err == nil && len(v.WakeLog) >= fired && len(v.Wakes) == 0 && v.Running == "" && len(v.Queued) == 0
	}) {
		t.Fatalf("session %s: wake-ups did not settle: %+v (%v)", session, v, err)
	}
	return v
}

// toolsScheduledBeforeFirstDone counts Tool.Execute activities scheduled
// before the first one finished, in the workflow's latest run.
func toolsScheduledBeforeFirstDone(t *testing.T, e *env, workflowID string) int {
	t.Helper()
	ids := runIDs(t, e, workflowID)
	h := fetchHistory(t, e, workflowID, ids[len(ids)-1])
	tools := map[int64]bool{}
	n := 0
	for _, ev := range h.Events {
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == workflows.ActivityToolExecute {
			tools[ev.GetEventId()] = true
			n++
		}
		if a := ev.GetActivityTaskCompletedEventAttributes(); a != nil && tools[a.GetScheduledEventId()] {
			return n
		}
	}
	return n
}

// runIDs lists the workflow's runs, oldest first (more than one after
// continue-as-new).
func runIDs(t *testing.T, e *env, workflowID string) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	runID := ""
	// Walk back from the latest run through ContinuedAsNew links.
	for {
		d, err := e.client.DescribeWorkflowExecution(ctx, workflowID, runID)
		if err != nil {
			t.Fatalf("describe %s: %v", workflowID, err)
		}
		info := d.GetWorkflowExecutionInfo()
		ids = append([]string{info.GetExecution().GetRunId()}, ids...)
		h := fetchHistory(t, e, workflowID, info.GetExecution().GetRunId())
		prev := h.Events[0].GetWorkflowExecutionStartedEventAttributes().GetContinuedExecutionRunId()
		if prev == "" {
			return ids
		}
		runID = prev
	}
}

// fetchHistory returns a run's history once it has settled: closed, or
// waiting with no activity or workflow task pending.
func fetchHistory(t *testing.T, e *env, workflowID, runID string) *historypb.History {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var h *historypb.History
	waitFor(t, 30*time.Second, "run "+runID+" of "+workflowID+" to settle", func() bool {
		if !settled(ctx, e, workflowID, runID) {
			return false
		}
		iter := e.client.GetWorkflowHistory(ctx, workflowID, runID, false, 0)
		h = &historypb.History{}
		var err error
		for iter.HasNext() && err == nil {
			var ev *historypb.HistoryEvent
			if ev, err = iter.Next(); err == nil {
				h.Events = append(h.Events, ev)
			}
		}
		return err == nil && !workflowTaskOpen(h)
	})
	return h
}

// workflowTaskOpen reports whether the history is empty or its last
// workflow task has not completed (a new run's first one, for example).
func workflowTaskOpen(h *historypb.History) bool {
	open := true
	for _, ev := range h.GetEvents() {
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
			open = true
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			open = false
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
			enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
			enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
			enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
			enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
			enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
			return false
		}
	}
	return open
}

// settleLatest waits until the workflow's latest run has settled and no
// newer run (continue-as-new) has started meanwhile. A turn's outcome reaches
// the client before its run may continue as new.
func settleLatest(t *testing.T, e *env, workflowID string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	waitFor(t, time.Minute, workflowID+" to settle", func() bool {
		d, err := e.client.DescribeWorkflowExecution(ctx, workflowID, "")
		if err != nil {
			return false
		}
		runID := d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
		if !settled(ctx, e, workflowID, runID) {
			return false
		}
		again, err := e.client.DescribeWorkflowExecution(ctx, workflowID, "")
		return err == nil && again.GetWorkflowExecutionInfo().GetExecution().GetRunId() == runID
	})
}

// settled reports whether a run is closed, or open with nothing pending
// but timers.
func settled(ctx context.Context, e *env, workflowID, runID string) bool {
	d, err := e.client.DescribeWorkflowExecution(ctx, workflowID, runID)
	if err != nil {
		return false
	}
	if d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return true
	}
	return len(d.GetPendingActivities()) == 0 && d.GetPendingWorkflowTask() == nil
}

// runCompaction drives the compaction scenario: turns with large tool
// outputs until the context is compacted, a turn whose first request
// overflows, then a manual compaction.
func runCompaction(t *testing.T, e *env, s string) string {
	// Twice the long session's output, so that the second turn compacts
	// and the recorded history stays small.
	if err := os.WriteFile(filepath.Join(e.kit.Dir, "big.txt"), []byte(bigFile+bigFile), 0o644); err != nil {
		t.Fatal(err)
	}
	model := &compactingModel{}
	e.kit.Model.Handle(model.handle)
	for i := 0; i < 2; i++ {
		must(t, collect(t, e.agent, context.Background(), s, fmt.Sprintf("turn %d", i)), agent.TypeCompleted)
	}
	before := len(compactions(t, e, s))
	if before == 0 {
		t.Fatal("two turns of large outputs in a 4,000-token window ran no compaction")
	}
	model.forceOverflow()
	must(t, collect(t, e.agent, context.Background(), s, "overflow"), agent.TypeCompleted)
	if len(compactions(t, e, s)) == before {
		t.Fatal("the overflow was recovered without a compaction")
	}
	if res, err := e.agent.Compact(context.Background(), s); err != nil || res.EntryID == "" {
		t.Fatalf("manual compaction: %+v %v", res, err)
	}
	return ""
}

// runChatStop drives a Telegram group: a mention starts a slow turn, and
// "/stop" in the group stops it before it answers. It returns the chat
// workflow's ID.
func runChatStop(t *testing.T, e *env, _ string) string {
	s := newTelegramStack(t, e)
	s.startWorker()
	slow := make([]string, 60)
	for i := range slow {
		slow[i] = fmt.Sprintf("w%d ", i)
	}
	e.kit.Model.EnqueueFor("summarize the thread", modelserver.Reply{Text: slow, ChunkDelay: 200 * time.Millisecond})
	s.send(telegramUpdate(t, "group_mention.json", s.group, 0))
	waitFor(t, time.Minute, "the preview", func() bool { return len(s.fake.Messages(s.group)) == 1 })
	s.send(telegramUpdate(t, "group_stop.json", s.group, 0))
	waitFor(t, time.Minute, "the stopped turn's note", func() bool {
		m := s.fake.Messages(s.group)
		return len(m) == 1 && strings.Contains(m[0].Text, "stopped by @ada")
	})
	if n := e.kit.Model.Count(); n != 1 {
		t.Errorf("model calls = %d: /stop must not be a turn", n)
	}
	return workflows.ChatWorkflowID(telegram.Kind, strconv.FormatInt(s.group, 10))
}

// runActivityQueues runs a tool turn with the tools and model groups on
// task queues of their own (<queue>-tools, <queue>-model), each served by a
// worker of that group alone beside the session's worker.
func runActivityQueues(t *testing.T, e *env, s string) string {
	queues := map[activities.Group]string{activities.GroupTools: e.queue + "-tools", activities.GroupModel: e.queue + "-model"}
	e.writeConfig(fastRetries + fmt.Sprintf("activities:\n  tools: {taskQueue: %s}\n  model: {taskQueue: %s}\n",
		queues[activities.GroupTools], queues[activities.GroupModel]))
	e.startWorker()
	for g, q := range queues {
		w, err := e.runtime(func(c *serve.Config, _ *serve.Components) { c.TaskQueue, c.ActivityGroups = q, []activities.Group{g} }).StartWorker(context.Background(), e.client)
		if err != nil {
			t.Fatalf("%s worker: %v", g, err)
		}
		t.Cleanup(w.Stop)
	}
	e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "q1", Name: testkit.CounterName, Args: `{"note":"placed"}`}}},
		modelserver.Reply{Text: []string{"counted ", "elsewhere"}},
	)
	must(t, collect(t, e.agent, context.Background(), s, "count on the tools queue"), agent.TypeCompleted)
	return ""
}
