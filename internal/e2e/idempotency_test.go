package e2e

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/proto"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/agent/agenttest"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// sendTurn sends one turn as the durable agent does (Update-with-Start, the
// key as update ID) and returns the workflow's outcome.
func (e *env) sendTurn(session, key, text string, turnsPerRun int) agentloop.Outcome {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := e.client.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID:                       workflows.WorkflowID(session),
		TaskQueue:                e.queue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
	}, workflows.SessionWorkflowType, workflows.SessionInput{Session: session, TurnsPerRun: turnsPerRun})
	h, err := e.client.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateID:     key,
			UpdateName:   workflows.UpdateTurn,
			Args:         []any{workflows.TurnRequest{Prompt: agent.Prompt{Text: text}, Source: "test"}},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	var out agentloop.Outcome
	if err == nil {
		err = h.Get(ctx, &out)
	}
	if err != nil {
		e.t.Fatalf("turn %s: %v", key, err)
	}
	return out
}

// answerOf is the text of the outcome's last stored entry.
func (e *env) answerOf(session string, out agentloop.Outcome) string {
	e.t.Helper()
	en, err := e.kit.Store.Get(context.Background(), session, out.Leaf)
	if err != nil || en.Message == nil {
		e.t.Fatalf("leaf %q of turn %s: %v", out.Leaf, out.Turn, err)
	}
	return en.Message.Text
}

// userTexts lists the user messages of a model request, in order.
func userTexts(req modelserver.Request) []string {
	var out []string
	for _, m := range req.Messages {
		if m.Role == "user" {
			out = append(out, m.Content)
		}
	}
	return out
}

// echo answers every model request with "answer to <last user text>".
func echo(req modelserver.Request) modelserver.Reply {
	return modelserver.Reply{Text: []string{"answer to " + req.LastUserText()}}
}

// A key redelivered long after its turn — hundreds of turns and dozens of
// continue-as-new later — is answered with its original outcome and never
// runs a second turn; the prompt enters workflow history once per turn.
func TestIdempotencyOutlivesContinueAsNew(t *testing.T) {
	e := newEnv(t)
	e.startWorker()
	e.kit.Model.Handle(echo)
	const session, turns, perRun = "many-turns", 300, 5
	outs := make([]agentloop.Outcome, turns)
	for i := range turns {
		outs[i] = e.sendTurn(session, fmt.Sprintf("k%d", i), fmt.Sprintf("prompt %d", i), perRun)
		if outs[i].Status != agent.TypeCompleted {
			t.Fatalf("turn k%d: %+v", i, outs[i])
		}
		if i == 297 {
			// The prompt is in history once: the update's argument
			// (Turn.Begin's input is a local activity's, which history
			// does not record).
			if n := countInHistory(t, e, session, "prompt 297"); n != 1 {
				t.Errorf("prompt 297 appears %d times in its run's history, want 1", n)
			}
		}
	}
	calls := e.kit.Model.Count()
	if calls != turns {
		t.Fatalf("model called %d times for %d turns", calls, turns)
	}

	for _, i := range []int{0, 1, 63, 64, 150, 298} {
		key := fmt.Sprintf("k%d", i)
		again := e.sendTurn(session, key, fmt.Sprintf("prompt %d", i), perRun)
		if again.Status != agent.TypeCompleted || again.First != outs[i].First || again.Leaf != outs[i].Leaf {
			t.Errorf("redelivered %s = %+v, want the original %+v", key, again, outs[i])
			continue
		}
		if got, want := e.answerOf(session, again), fmt.Sprintf("answer to prompt %d", i); got != want {
			t.Errorf("redelivered %s answers %q, want %q", key, got, want)
		}
	}
	// Through the agent as well: a completed terminal, no new turn.
	e.agent.TurnsPerRun = perRun
	ctx := agent.WithIdempotencyKey(context.Background(), "k0")
	if term := agenttest.CheckTerminal(t, collect(t, e.agent, ctx, session, "prompt 0")); term.Type != agent.TypeCompleted {
		t.Errorf("redelivered k0 through the agent: %+v", term)
	}
	if n := e.kit.Model.Count() - calls; n != 0 {
		t.Errorf("redeliveries made %d model calls, want 0", n)
	}
	if n := len(userEntries(t, e, session)); n != turns {
		t.Errorf("store holds %d user entries, want %d", n, turns)
	}
}

// countInHistory counts occurrences of s in the current run's history.
func countInHistory(t *testing.T, e *env, session, s string) int {
	t.Helper()
	it := e.client.GetWorkflowHistory(context.Background(), workflows.WorkflowID(session), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	n := 0
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatalf("history: %v", err)
		}
		b, err := proto.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		n += bytes.Count(b, []byte(s))
	}
	return n
}

// A session terminated mid-turn and started again at once goes on from its
// last completed turn: the next model request holds the completed turns
// (not the half-run one), and no entry ID collides with the old chain's.
func TestRestartAfterTerminateKeepsCompletedTurns(t *testing.T) {
	e := newEnv(t)
	e.startWorker()
	const session = "terminated"
	slow := make([]string, 40)
	for i := range slow {
		slow[i] = "slow "
	}
	e.kit.Model.Handle(func(req modelserver.Request) modelserver.Reply {
		if strings.Contains(req.LastUserText(), "never finishes") {
			return modelserver.Reply{Text: slow, ChunkDelay: 500 * time.Millisecond}
		}
		return echo(req)
	})
	for i, text := range []string{"remember alpha", "remember beta"} {
		if out := e.sendTurn(session, fmt.Sprintf("t%d", i), text, 0); out.Status != agent.TypeCompleted {
			t.Fatalf("turn %d: %+v", i, out)
		}
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for range e.agent.Invoke(agent.WithIdempotencyKey(ctx, "t-mid"), agent.Scope{Session: session}, agent.Prompt{Text: "never finishes"}) {
		}
	}()
	waitModelCalls(t, e, 3)
	if err := e.client.TerminateWorkflow(context.Background(), workflows.WorkflowID(session), "", "test: terminate mid-turn"); err != nil {
		t.Fatalf("terminate: %v", err)
	}
	out := e.sendTurn(session, "t-after", "what did I say?", 0)
	if out.Status != agent.TypeCompleted {
		t.Fatalf("turn after the restart: %+v", out)
	}
	reqs := e.kit.Model.Requests()
	last := reqs[len(reqs)-1]
	want := []string{"remember alpha", "remember beta", "what did I say?"}
	if got := userTexts(last); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("model saw user messages %q after the restart, want %q", got, want)
	}
	if got := assistantTexts(last); strings.Join(got, "|") != "answer to remember alpha|answer to remember beta" {
		t.Errorf("model saw assistant messages %q after the restart, want both earlier answers", got)
	}
	// Every stored entry ID is unique and parent links resolve.
	all, err := e.kit.Store.Entries(context.Background(), session)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.kit.Store.Branch(context.Background(), session, out.Leaf); err != nil {
		t.Errorf("branch of the new leaf: %v", err)
	}
	seen := map[string]bool{}
	for _, en := range all {
		if seen[en.ID] {
			t.Errorf("entry ID %s stored twice", en.ID)
		}
		seen[en.ID] = true
	}
}

func assistantTexts(req modelserver.Request) []string {
	var out []string
	for _, m := range req.Messages {
		if m.Role == "assistant" && m.Content != "" {
			out = append(out, m.Content)
		}
	}
	return out
}

func waitModelCalls(t *testing.T, e *env, n int) {
	t.Helper()
	if !wait.Until(time.Minute, func() bool { return e.kit.Model.Count() >= n }) {
		t.Fatalf("model called %d times, waited for %d", e.kit.Model.Count(), n)
	}
}

// A session workflow reset to an earlier workflow task (between a tool call
// and the model step after it) re-runs from there with the same entry IDs:
// the re-run model step and the next turn see the full branch.
func TestResetKeepsFullBranch(t *testing.T) {
	e := newEnv(t)
	e.startWorker()
	const session = "reset"
	e.kit.Model.Handle(func(req modelserver.Request) modelserver.Reply {
		if req.LastUserText() == "count once" && !hasToolResult(req) {
			return modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "call_c1", Name: testkit.CounterName, Args: `{"note":"once"}`}}}
		}
		return echo(req)
	})
	if out := e.sendTurn(session, "r1", "count once", 0); out.Status != agent.TypeCompleted {
		t.Fatalf("r1: %+v", out)
	}
	// The workflow task that scheduled the model step after the tool
	// result: after Tool.Execute, the one that took its result in; when
	// the tool step ran as one Step.Run (its call, then that model step),
	// the one that scheduled the Step.Run — no workflow task comes between
	// the call's result and the model step then (that is the action it
	// saves). Either way the reset run schedules the model step again with
	// the same entry IDs.
	ctx := context.Background()
	desc, err := e.client.DescribeWorkflowExecution(ctx, workflows.WorkflowID(session), "")
	if err != nil {
		t.Fatal(err)
	}
	runID := desc.WorkflowExecutionInfo.Execution.RunId
	resetAt, lastTask := int64(0), int64(0)
	toolScheduled, sawTool := false, false
	it := e.client.GetWorkflowHistory(ctx, workflows.WorkflowID(session), runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() && resetAt == 0 {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		switch ev.EventType {
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			switch ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() {
			case workflows.ActivityToolExecute:
				toolScheduled = true
			case workflows.ActivityStepRun:
				resetAt = lastTask
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
			sawTool = sawTool || toolScheduled
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			lastTask = ev.EventId
			if sawTool {
				resetAt = ev.EventId
			}
		}
	}
	if resetAt == 0 {
		t.Fatal("no workflow task completed after the tool result")
	}
	before := e.kit.Model.Count()
	if _, err := e.client.ResetWorkflowExecution(ctx, &workflowservice.ResetWorkflowExecutionRequest{
		Namespace:                 server.Namespace(),
		WorkflowExecution:         desc.WorkflowExecutionInfo.Execution,
		Reason:                    "test: reset to the step after the tool",
		WorkflowTaskFinishEventId: resetAt,
		RequestId:                 fmt.Sprintf("reset-%d", time.Now().UnixNano()),
	}); err != nil {
		t.Fatalf("reset: %v", err)
	}
	// The reset run repeats the model step after the tool with the same
	// entry IDs, so that step finds its stored reply (no new model call)
	// and r2 hangs below r1's real leaf.
	out := e.sendTurn(session, "r2", "and now?", 0)
	if out.Status != agent.TypeCompleted {
		t.Fatalf("r2: %+v", out)
	}
	reqs := e.kit.Model.Requests()
	last := reqs[len(reqs)-1]
	if !hasToolResult(last) || strings.Join(userTexts(last), "|") != "count once|and now?" {
		t.Errorf("r2's model request = %+v, want r1 (with its tool result) and r2", last.Messages)
	}
	if _, err := e.kit.Store.Branch(ctx, session, out.Leaf); err != nil {
		t.Errorf("branch of r2's leaf: %v", err)
	}
	if n := e.kit.Model.Count() - before; n != 1 {
		t.Errorf("after the reset the model was called %d times, want 1 (r2 only)", n)
	}
	if n := e.kit.Counter.Runs(session); n != 1 {
		t.Errorf("the counter ran %d times, want 1: the reset run read its stored result", n)
	}
}

func hasToolResult(req modelserver.Request) bool {
	for _, m := range req.Messages {
		if m.Role == "tool" {
			return true
		}
	}
	return false
}
