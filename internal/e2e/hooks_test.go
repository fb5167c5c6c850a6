package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	sdklog "go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/workflows"
)

// guardHook is a before_tool hook for bash: it logs each call it sees (one
// line in hooklog.txt, in the workspace) and denies rm -rf, rewrites
// "echo unsafe" to "echo safe", allows the rest.
const guardHook = `#!/bin/sh
in=$(cat)
echo "$in" | grep -o '"id":"[^"]*"' | head -n 1 >> hooklog.txt
case "$in" in
  *'rm -rf'*) echo '{"decision":"deny","reason":"destructive command refused by policy"}' ;;
  *'echo unsafe'*) echo '{"args":{"command":"echo safe"}}' ;;
  *) echo '{"decision":"allow"}' ;;
esac
`

// writeHooks gives the env's agent the hooks the hook tests use: the
// bash guard, a before_agent_start hook adding context, and a broken
// before_tool hook on read whose failure is allowed.
func writeHooks(e *env) {
	e.write("hooks/guard.sh", guardHook)
	e.write("hooks/guard.yaml", "event: before_tool\nmatch: bash\ncommand: ./hooks/guard.sh\n")
	e.write("hooks/intro.sh", "#!/bin/sh\ncat >/dev/null\necho '{\"context\":\"HOOK-CONTEXT: the user is on call\"}'\n")
	e.write("hooks/intro.yaml", "event: before_agent_start\ncommand: ./hooks/intro.sh\n")
	e.write("hooks/broken.sh", "#!/bin/sh\necho 'policy server unreachable' >&2\nexit 7\n")
	e.write("hooks/broken.yaml", "event: before_tool\nmatch: read\ncommand: ./hooks/broken.sh\nonError: allow\n")
	e.write("notes.txt", "NOTES-CONTENT\n")
}

// runFileHooks runs one turn through the hooks of writeHooks: the model
// calls bash twice (one denied, one with its arguments replaced) and read
// once (its hook fails, onError allow), then answers.
func runFileHooks(t *testing.T, e *env, s string) string {
	e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{
			{ID: "b1", Name: "bash", Args: `{"command":"rm -rf /tmp/precious"}`},
			{ID: "b2", Name: "bash", Args: `{"command":"echo unsafe"}`},
			{ID: "r1", Name: "read", Args: `{"path":"notes.txt"}`},
		}},
		modelserver.Reply{Text: []string{"done"}},
	)
	evs := collect(t, e.agent, context.Background(), s, "clean up")
	must(t, evs, agent.TypeCompleted)
	hooks := map[string]agent.Event{}
	for _, ev := range evs {
		if ev.Type == agent.TypeHook {
			hooks[ev.Hook+"/"+ev.ID] = ev
		}
	}
	if h := hooks["guard/b1"]; h.Decision != "deny" || h.HookEvent != "before_tool" || !strings.Contains(h.Reason, "destructive") {
		t.Errorf("hook event for b1: %+v", h)
	}
	if h := hooks["guard/b2"]; h.Decision != "args" {
		t.Errorf("hook event for b2: %+v", h)
	}
	if h := hooks["broken/r1"]; h.Decision != "allow" || !strings.Contains(h.Error, "exit code 7") || !strings.Contains(h.Error, "policy server unreachable") {
		t.Errorf("hook event for r1 (a failed hook, onError allow): %+v", h)
	}
	if h := hooks["intro/"]; h.Decision != "context" || h.HookEvent != "before_agent_start" {
		t.Errorf("hook event of before_agent_start: %+v (all: %+v)", h, hooks)
	}
	reqs := e.kit.Model.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model calls, want 2", len(reqs))
	}
	var sawContext bool
	for _, m := range reqs[0].Messages {
		sawContext = sawContext || (m.Role == "user" && strings.Contains(m.Content, "HOOK-CONTEXT: the user is on call"))
	}
	if !sawContext {
		t.Errorf("the first model call does not carry the before_agent_start context: %+v", reqs[0].Messages)
	}
	res := requestToolResults(reqs[1])
	if !strings.Contains(res["b1"], "denied it: destructive command refused by policy") {
		t.Errorf("the model read for b1: %q, want the hook's reason", res["b1"])
	}
	if strings.TrimSpace(res["b2"]) != "safe" {
		t.Errorf("the model read for b2: %q, want the replaced command's output", res["b2"])
	}
	if !strings.Contains(res["r1"], "NOTES-CONTENT") {
		t.Errorf("the model read for r1: %q, want the file (its failed hook allows)", res["r1"])
	}
	if m := e.toolResult(s, "b1"); m == nil || !m.IsError {
		t.Errorf("stored result of b1: %+v, want an error result", m)
	}
	if got := hookLog(t, e); got != 2 {
		t.Errorf("the guard ran %d times, want 2 (b1, b2)", got)
	}
	return ""
}

// hookLog counts the calls the guard hook logged.
func hookLog(t *testing.T, e *env) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.kit.Dir, "hooklog.txt"))
	if err != nil {
		t.Fatalf("the guard hook left no log: %v", err)
	}
	return len(strings.Fields(string(b)))
}

// hookSteps counts the Hook.Run activities a history scheduled.
func hookSteps(h *historypb.History) int {
	n := 0
	for _, ev := range h.Events {
		if ev.EventType == enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED &&
			ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == workflows.ActivityHookRun {
			n++
		}
	}
	return n
}

// Hooks as files, end to end: a before_tool hook denies a bash call (the
// model reads its reason as the call's result) and replaces another's
// arguments (the tool runs the replaced ones); a failing hook applies its
// onError and the stream says so; a before_agent_start hook's context
// reaches the model. Each hook step is one Hook.Run activity recorded in
// history: the history replays with the workflow replayer, and a worker
// that replays it from the start (its cache purged) to run the next turn
// runs no hook again.
func TestFileHooks(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(fastRetries)
	writeHooks(e)
	e.startWorker()
	s := "file-hooks"
	runFileHooks(t, e, s)

	h := rawHistory(t, e, s)
	// before_agent_start, b1, b2, r1: one step each (the definition has no
	// after_tool, turn_end or before_compact hook: none is scheduled).
	if n := hookSteps(h); n != 4 {
		t.Errorf("%d Hook.Run activities in history, want 4", n)
	}
	replayer := sdkworker.NewWorkflowReplayer()
	replayer.RegisterWorkflowWithOptions(workflows.SessionWorkflow, workflow.RegisterOptions{Name: workflows.SessionWorkflowType})
	logger := sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	if err := replayer.ReplayWorkflowHistory(logger, h); err != nil {
		t.Fatalf("replay: %v", err)
	}
	if got := hookLog(t, e); got != 2 {
		t.Fatalf("after the replay the guard ran %d times, want 2", got)
	}

	// The worker forgets the session: the next turn's workflow task replays
	// the whole history on the live worker, hook steps included.
	sdkworker.PurgeStickyWorkflowCache()
	e.kit.Model.Enqueue(modelserver.Reply{Text: []string{"nothing to do"}})
	must(t, collect(t, e.agent, context.Background(), s, "anything else?"), agent.TypeCompleted)
	if got := hookLog(t, e); got != 2 {
		t.Errorf("after a replay on the worker the guard ran %d times, want 2 (no hook runs twice)", got)
	}
	if n := hookSteps(rawHistory(t, e, s)); n != 5 {
		t.Errorf("%d Hook.Run activities after the second turn, want 5 (its before_agent_start only)", n)
	}
}

// An agent without hook files schedules no hook step.
func TestNoHooksNoHookSteps(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(fastRetries)
	e.startWorker()
	s := "no-hooks"
	e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "b1", Name: "bash", Args: `{"command":"echo hi"}`}}},
		modelserver.Reply{Text: []string{"done"}},
	)
	must(t, collect(t, e.agent, context.Background(), s, "say hi"), agent.TypeCompleted)
	if n := hookSteps(rawHistory(t, e, s)); n != 0 {
		t.Errorf("%d Hook.Run activities, want none", n)
	}
}

// after_tool and turn_end hooks, end to end: an after_tool hook rejects a
// result (the model is told so with the results), a turn_end hook's
// context makes the model answer it once more, and with nothing left to
// say the turn ends.
func TestFileHooksAfterToolAndTurnEnd(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(fastRetries)
	e.write("hooks/leak.sh", "#!/bin/sh\nif grep -q SECRET; then echo '{\"decision\":\"deny\",\"reason\":\"the output held a secret; do not repeat it\"}'; fi\n")
	e.write("hooks/leak.yaml", "event: after_tool\nmatch: bash\ncommand: ./hooks/leak.sh\n")
	e.write("hooks/end.sh", "#!/bin/sh\ncat >/dev/null\nif [ -e end.flag ]; then echo '{}'; else touch end.flag; echo '{\"context\":\"Also say goodbye.\"}'; fi\n")
	e.write("hooks/end.yaml", "event: turn_end\ncommand: ./hooks/end.sh\n")
	e.startWorker()
	e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "b1", Name: "bash", Args: `{"command":"echo SECRET-42"}`}}},
		modelserver.Reply{Text: []string{"here it is"}},
		modelserver.Reply{Text: []string{"goodbye"}},
	)
	evs := collect(t, e.agent, context.Background(), "file-hooks-after", "show me")
	must(t, evs, agent.TypeCompleted)
	var decisions []string
	for _, ev := range evs {
		if ev.Type == agent.TypeHook {
			decisions = append(decisions, ev.Hook+":"+ev.HookEvent+":"+ev.Decision)
		}
	}
	if got := strings.Join(decisions, " "); got != "leak:after_tool:deny end:turn_end:context end:turn_end:allow" {
		t.Errorf("hook events %q", got)
	}
	reqs := e.kit.Model.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d model calls, want 3 (the turn_end context answered)", len(reqs))
	}
	userSays := func(r modelserver.Request, want string) bool {
		for _, m := range r.Messages {
			if m.Role == "user" && strings.Contains(m.Content, want) {
				return true
			}
		}
		return false
	}
	if !userSays(reqs[1], "The hook leak rejected the result of the bash call b1: the output held a secret") {
		t.Errorf("the second model call does not carry the rejection: %+v", reqs[1].Messages)
	}
	if res := requestToolResults(reqs[1]); !strings.Contains(res["b1"], "SECRET-42") {
		t.Errorf("the result itself is kept (the tool ran): %q", res["b1"])
	}
	if !userSays(reqs[2], "Also say goodbye.") {
		t.Errorf("the third model call does not carry the turn_end context: %+v", reqs[2].Messages)
	}
}

// A call that needs approval is shown with the arguments a before_tool
// hook gave it, and the approval is bound to their hash: the person
// approves what runs, and it runs with them.
func TestFileHooksArgsBindApproval(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(fastRetries + "tools:\n  bash: {requiresApproval: true}\n")
	e.write("hooks/fix.sh", "#!/bin/sh\ncat >/dev/null\necho '{\"args\":{\"command\":\"echo approved-args\"}}'\n")
	e.write("hooks/fix.yaml", "event: before_tool\nmatch: bash\ncommand: ./hooks/fix.sh\n")
	e.startWorker()
	s := "file-hooks-approval"
	e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "b1", Name: "bash", Args: `{"command":"echo model-args"}`}}},
		modelserver.Reply{Text: []string{"ran"}},
	)
	done := make(chan []agent.Event, 1)
	go func() { done <- collect(t, e.agent, context.Background(), s, "run it") }()
	waitPendingApproval(t, e, s, "b1")
	v, err := e.agent.State(context.Background(), s)
	if err != nil || len(v.Approvals) != 1 {
		t.Fatalf("state %+v, %v", v, err)
	}
	p := v.Approvals[0]
	if string(p.Args) != `{"command":"echo approved-args"}` {
		t.Errorf("the approver is shown %s, want the hook's arguments", p.Args)
	}
	if err := e.agent.Approve(context.Background(), s, workflows.ApproveRequest{Call: "b1", Approve: true,
		ArgsHash: p.ArgsHash, DefinitionHash: p.DefinitionHash}); err != nil {
		t.Fatalf("approve: %v", err)
	}
	must(t, <-done, agent.TypeCompleted)
	if m := e.toolResult(s, "b1"); m == nil || m.IsError || strings.TrimSpace(m.Text) != "approved-args" {
		t.Errorf("stored result of b1: %+v, want the approved arguments' output", m)
	}
}

// A before_compact hook that denies skips the compaction (the step goes
// to the model as it is); once it allows, the context is compacted. It is
// told why the compaction was due.
func TestFileHooksBeforeCompact(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(fastRetries + compactionConfig)
	e.write("big.txt", bigFile)
	e.write("hooks/compact.sh", "#!/bin/sh\ngrep -o '\"reason\":\"[a-z]*\"' >> compact.log\nif [ -e allow.flag ]; then echo '{}'; else echo '{\"decision\":\"deny\",\"reason\":\"not now\"}'; fi\n")
	e.write("hooks/compact.yaml", "event: before_compact\ncommand: ./hooks/compact.sh\n")
	model := &compactingModel{}
	e.kit.Model.Handle(model.handle)
	e.startWorker()
	const s = "file-hooks-compact"
	denied := false
	for i := 1; i <= 12 && !denied; i++ {
		evs := collect(t, e.agent, context.Background(), s, fmt.Sprintf("turn %d: read big.txt", i))
		must(t, evs, agent.TypeCompleted)
		for _, ev := range evs {
			denied = denied || (ev.Type == agent.TypeHook && ev.HookEvent == "before_compact" && ev.Decision == "deny")
		}
	}
	if !denied {
		t.Fatal("no before_compact hook ran in 12 turns against a 4,000-token window")
	}
	if n := len(compactions(t, e, s)); n != 0 {
		t.Fatalf("%d compactions while the hook denied them", n)
	}
	e.write("allow.flag", "")
	evs := collect(t, e.agent, context.Background(), s, "one more: read big.txt")
	must(t, evs, agent.TypeCompleted)
	allowed := false
	for _, ev := range evs {
		allowed = allowed || (ev.Type == agent.TypeHook && ev.HookEvent == "before_compact" && ev.Decision == "allow")
	}
	if !allowed || len(compactions(t, e, s)) == 0 {
		t.Errorf("hook allowed: %v, compactions %d; want a compaction once the hook allows", allowed, len(compactions(t, e, s)))
	}
	if b, err := os.ReadFile(filepath.Join(e.kit.Dir, "compact.log")); err != nil || !strings.Contains(string(b), `"reason":"threshold"`) {
		t.Errorf("the hook's log %q (%v), want the reason threshold", b, err)
	}
}

// A tool call's ID is the model's (or the provider's) and can be long; the
// hook step's activity ID names the call, and Temporal refuses an ID past
// its limit (1000 bytes by default): the step could not be scheduled, the
// session's workflow task failed on every retry and the turn never ended.
// A long call ID is named by its digest instead; the hook runs and the turn
// completes.
func TestFileHooksLongCallID(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(fastRetries)
	e.write("hooks/guard.sh", guardHook)
	e.write("hooks/guard.yaml", "event: before_tool\nmatch: bash\ncommand: ./hooks/guard.sh\n")
	e.startWorker()
	id := "call_" + strings.Repeat("x", 1200)
	e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: id, Name: "bash", Args: `{"command":"rm -rf /tmp/precious"}`}}},
		modelserver.Reply{Text: []string{"done"}},
	)
	evs := collect(t, e.agent, context.Background(), "long-call-id", "clean up")
	must(t, evs, agent.TypeCompleted)
	denied := false
	for _, ev := range evs {
		denied = denied || (ev.Type == agent.TypeHook && ev.ID == id && ev.Decision == "deny")
	}
	if !denied {
		t.Errorf("the guard's denial of the long-ID call is not on the stream")
	}
}

// The turn's ID is the caller's idempotency key, also of any length up to
// what Temporal takes as an update ID: a hook step's activity ID, which
// names the turn, must stay within the limit too, or a caller's long key
// wedges the session with a workflow task that fails for good.
func TestFileHooksLongTurnKey(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(fastRetries)
	e.write("hooks/intro.sh", "#!/bin/sh\ncat >/dev/null\necho '{\"context\":\"HOOK-CONTEXT\"}'\n")
	e.write("hooks/intro.yaml", "event: before_agent_start\ncommand: ./hooks/intro.sh\n")
	e.startWorker()
	e.kit.Model.Enqueue(modelserver.Reply{Text: []string{"done"}})
	ctx := agent.WithIdempotencyKey(context.Background(), "k"+strings.Repeat("x", 980))
	evs := collect(t, e.agent, ctx, "long-turn-key", "hello")
	must(t, evs, agent.TypeCompleted)
}
