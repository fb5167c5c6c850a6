package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/agent/agenttest"
	"github.com/fastagent/fastagent/internal/durable"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/sessionstart"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// delegateCall is a model's call of the delegate tool.
func delegateCall(id, agentName, task string) modelserver.ToolCall {
	args, _ := json.Marshal(map[string]string{"agent": agentName, "task": task})
	return modelserver.ToolCall{ID: id, Name: agentloop.DelegateTool, Args: string(args)}
}

// requestToolResults returns the tool results a request carries, by call ID.
func requestToolResults(req modelserver.Request) map[string]string {
	out := map[string]string{}
	for _, m := range req.Messages {
		if m.Role == "tool" {
			out[m.ToolCallID] = m.Content
		}
	}
	return out
}

// A turn that delegates two sub-tasks in one step runs both sub-agents as
// child workflows in parallel; their progress streams into the turn's
// events as delegated events; their answers come back as the tool results
// the model's next step reads; each child ran once, under an ID derived
// from the turn and the call, with the session as its parent.
func TestDelegationParallelChildren(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(fastRetries + "delegation:\n  agents:\n    self: {}\n")
	e.startWorker()
	m := e.kit.Model
	m.EnqueueFor("plan the trip",
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{
			delegateCall("d1", "self", "find a flight FLIGHTKEY"),
			delegateCall("d2", "self", "find a hotel HOTELKEY"),
		}},
		modelserver.Reply{Text: []string{"Trip planned."}})
	m.EnqueueFor("FLIGHTKEY", modelserver.Reply{Text: []string{"Flight ", "LH 123"}, ChunkDelay: 20 * time.Millisecond})
	m.EnqueueFor("HOTELKEY", modelserver.Reply{Text: []string{"Hotel ", "Adlon"}, ChunkDelay: 20 * time.Millisecond})

	ctx := agent.WithIdempotencyKey(context.Background(), "trip-1")
	session := e.session("delegating")
	evs := collect(t, e.agent, ctx, session, "plan the trip")
	must(t, evs, agent.TypeCompleted)

	live := map[string]string{}
	ended := map[string]string{}
	for _, ev := range evs {
		switch ev.Type {
		case agent.TypeDelegated:
			if ev.Agent != "self" || ev.Sub == nil {
				t.Errorf("delegated event %+v: want agent self and its event", ev)
				continue
			}
			if ev.Sub.Type == agent.TypeText {
				live[ev.ID] += ev.Sub.Delta
			}
		case agent.TypeToolEnded:
			ended[ev.ID] = ev.Content
		}
	}
	if live["d1"] != "Flight LH 123" || live["d2"] != "Hotel Adlon" {
		t.Errorf("live sub-agent text = %q, want each child's text under its call", live)
	}
	if ended["d1"] != "Flight LH 123" || ended["d2"] != "Hotel Adlon" {
		t.Errorf("tool results on the stream = %q", ended)
	}
	var last modelserver.Request
	for _, r := range m.Requests() {
		if r.LastUserText() == "plan the trip" {
			last = r
		}
	}
	if got := requestToolResults(last); got["d1"] != "Flight LH 123" || got["d2"] != "Hotel Adlon" {
		t.Errorf("the model's second step read %q, want both answers", got)
	}
	for _, key := range []string{"FLIGHTKEY", "HOTELKEY"} {
		n := 0
		for _, r := range m.Requests() {
			if strings.Contains(r.LastUserText(), key) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("sub-agent %s made %d model calls, want 1", key, n)
		}
	}
	// Found by their parent (GET /sessions?parent=, fastagent session list
	// --parent), though they run as Delegate workflows.
	e.searchUntil(t, sessionstart.Filter{Parent: session},
		agentloop.DelegateSession(session, "trip-1", "d1"), agentloop.DelegateSession(session, "trip-1", "d2"))
	parent := "session:" + session
	for _, call := range []string{"d1", "d2"} {
		id := "session:" + agentloop.DelegateSession(session, "trip-1", call)
		d, err := e.client.DescribeWorkflowExecution(context.Background(), id, "")
		if err != nil {
			t.Fatalf("child of %s: %v", call, err)
		}
		info := d.GetWorkflowExecutionInfo()
		if info.GetType().GetName() != "Delegate" || info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED ||
			info.GetParentExecution().GetWorkflowId() != parent {
			t.Errorf("child %s: type %s, status %s, parent %q; want a completed Delegate child of %s",
				id, info.GetType().GetName(), info.GetStatus(), info.GetParentExecution().GetWorkflowId(), parent)
		}
	}
}

// delegationConfig lets the agent delegate to itself.
const delegationConfig = "delegation:\n  agents:\n    self: {}\n"

// runDelegation: one step delegates to two sub-agents, whose answers the
// next step reads.
func runDelegation(t *testing.T, e *env, s string) string {
	e.kit.Model.EnqueueFor("compare the two",
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{
			delegateCall("h1", "self", "summarize part A (HISTA)"),
			delegateCall("h2", "self", "summarize part B (HISTB)"),
		}},
		modelserver.Reply{Text: []string{"A and B compared."}})
	e.kit.Model.EnqueueFor("HISTA", modelserver.Reply{Text: []string{"A is short."}})
	e.kit.Model.EnqueueFor("HISTB", modelserver.Reply{Text: []string{"B is long."}})
	evs := collect(t, e.agent, agent.WithIdempotencyKey(context.Background(), "cmp"), s, "compare the two")
	must(t, evs, agent.TypeCompleted)
	if res := toolResult(t, e, s, "h1"); res == nil || res.Text != "A is short." {
		t.Errorf("h1's result = %+v", res)
	}
	if res := toolResult(t, e, s, "h2"); res == nil || res.Text != "B is long." {
		t.Errorf("h2's result = %+v", res)
	}
	return ""
}

// runDelegationAbort: the turn is aborted while its sub-agent streams; the
// sub-agent's model call is cancelled, its workflow closes (no orphan),
// and the call records the interruption.
func runDelegationAbort(t *testing.T, e *env, s string) string {
	e.kit.Model.EnqueueFor("start the long job", modelserver.Reply{ToolCalls: []modelserver.ToolCall{
		delegateCall("j1", "self", "a long job (LONGJOB)")}})
	e.kit.Model.EnqueueFor("LONGJOB", modelserver.Reply{Text: []string{"working…"}, Hang: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	aborted := false
	var evs []agent.Event
	for ev := range e.agent.Invoke(agent.WithIdempotencyKey(ctx, "long"), agent.Scope{Session: s}, agent.Prompt{Text: "start the long job"}) {
		evs = append(evs, ev)
		if !aborted && ev.Type == agent.TypeDelegated && ev.Sub != nil && ev.Sub.Type == agent.TypeText {
			aborted = true
			if _, err := e.agent.Abort(context.Background(), s, "", "user pressed stop"); err != nil {
				t.Errorf("abort: %v", err)
			}
		}
	}
	if !aborted {
		t.Fatalf("the sub-agent's text never reached the stream: %s", describe(evs))
	}
	if term := agenttest.CheckTerminal(t, evs); term.Type != agent.TypeFailed || term.Code != agent.CodeAborted {
		t.Fatalf("want failed{aborted}, got %+v", term)
	}
	if err := e.kit.Model.WaitAborted(ctx); err != nil {
		t.Errorf("the sub-agent's model call was not cancelled: %v", err)
	}
	if n := e.kit.Model.Count(); n != 2 {
		t.Errorf("%d model calls, want 2 (the turn's step and the sub-agent's, not retried)", n)
	}
	child := "session:" + agentloop.DelegateSession(s, "long", "j1")
	d, err := e.client.DescribeWorkflowExecution(ctx, child, "")
	if err != nil {
		t.Fatal(err)
	}
	if st := d.GetWorkflowExecutionInfo().GetStatus(); st == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Errorf("the sub-agent's workflow is still running after the abort")
	}
	if res := toolResult(t, e, s, "j1"); res == nil || !res.IsError || !strings.Contains(res.Text, "interrupted") {
		t.Errorf("the delegate call's result = %+v", res)
	}
	return ""
}

// A self-delegating agent is stopped by the depth limit (the deepest
// sub-agent is told it may not delegate and answers itself) and by the
// turn's token budget, which its sub-agents share: each stop is a clear
// message, and the top turn ends with limit_exceeded once the tree spent
// the budget.
func TestDelegationLimits(t *testing.T) {
	recurse := func(req modelserver.Request) modelserver.Reply {
		usage := &modelserver.Usage{PromptTokens: 40, CompletionTokens: 20}
		last := req.Messages[len(req.Messages)-1]
		if last.Role == "tool" {
			return modelserver.Reply{Text: []string{"done: " + last.Content}, Usage: usage}
		}
		return modelserver.Reply{ToolCalls: []modelserver.ToolCall{delegateCall("r1", "self", "recurse deeper "+req.LastUserText())}, Usage: usage}
	}
	t.Run("depth", func(t *testing.T) {
		e := newEnv(t)
		e.writeConfig(fastRetries + delegationConfig + "  maxDepth: 2\n")
		e.startWorker()
		e.kit.Model.Handle(recurse)
		s := e.session("deleg-depth")
		evs := collect(t, e.agent, agent.WithIdempotencyKey(context.Background(), "deep"), s, "go")
		must(t, evs, agent.TypeCompleted)
		refused := 0
		for _, r := range e.kit.Model.Requests() {
			for _, c := range requestToolResults(r) {
				if strings.HasPrefix(c, "Not delegated") && strings.Contains(c, "delegation.maxDepth") {
					refused++
				}
			}
		}
		if refused != 1 {
			t.Errorf("%d model calls read the depth refusal, want 1 (the sub-agent at depth 2)", refused)
		}
		grandchild := "session:" + agentloop.DelegateSession(agentloop.DelegateSession(s, "deep", "r1"), agentloop.DelegateTurn, "r1")
		if _, err := e.client.DescribeWorkflowExecution(context.Background(), grandchild, ""); err != nil {
			t.Errorf("the depth-2 sub-agent: %v", err)
		}
		if got := e.kit.Model.Count(); got != 6 {
			t.Errorf("%d model calls, want 6 (two per level, three levels)", got)
		}
	})
	t.Run("token budget", func(t *testing.T) {
		e := newEnv(t)
		e.writeConfig(fastRetries + delegationConfig + "  maxDepth: 5\nlimits:\n  turnTokens: 100\n")
		e.startWorker()
		e.kit.Model.Handle(recurse)
		s := e.session("deleg-budget")
		evs := collect(t, e.agent, agent.WithIdempotencyKey(context.Background(), "budget"), s, "go")
		requireLimit(t, evs, "limits.turnTokens")
		res := toolResult(t, e, s, "r1")
		if res == nil || !res.IsError || !strings.Contains(res.Text, "limit_exceeded") {
			t.Errorf("the top call's result = %+v, want the sub-agent's limit_exceeded", res)
		}
		if got := e.kit.Model.Count(); got != 2 {
			t.Errorf("%d model calls, want 2 (the top step and the sub-agent's first; the sub-agent is then over its share)", got)
		}
	})
}

// A worker process SIGKILLed while a sub-agent streams: another worker
// takes the child's model call over; the child ran once (one Delegate
// workflow), the turn's model was not asked again, and the client's answer
// is the stored one.
func TestDelegationSurvivesWorkerKill(t *testing.T) {
	t.Parallel() // it mostly waits out a worker's timeouts: shards.sh runs it beside the others
	e := newEnv(t)
	processEnv(t, e)
	e.writeConfig("retry:\n  heartbeat: 3s\n" + delegationConfig)
	slow := make([]string, 20)
	for i := range slow {
		slow[i] = fmt.Sprintf("word%d ", i)
	}
	m := e.kit.Model
	m.EnqueueFor("warm up", modelserver.Reply{Text: []string{"ready"}})
	m.EnqueueFor("research it",
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{delegateCall("k1", "self", "dig deep (DIGKEY)")}},
		modelserver.Reply{Text: []string{"Summary: ", "found it"}})
	m.EnqueueFor("DIGKEY",
		modelserver.Reply{Text: slow, ChunkDelay: 250 * time.Millisecond},
		modelserver.Reply{Text: []string{"the find"}})
	w1 := e.startWorkerProcess(t)
	session := e.session("deleg-crash")
	must(t, collect(t, e.agent, context.Background(), session, "warm up"), agent.TypeCompleted)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	key := durable.NewKey() // the NATS feed outlives test runs
	killed := false
	var evs []agent.Event
	for ev := range e.agent.Invoke(agent.WithIdempotencyKey(ctx, key), agent.Scope{Session: session}, agent.Prompt{Text: "research it"}) {
		evs = append(evs, ev)
		if !killed && ev.Type == agent.TypeDelegated && ev.Sub != nil && strings.HasPrefix(ev.Sub.Delta, "word") {
			killed = true
			w1.kill(t)
			e.startWorkerProcess(t)
		}
	}
	if !killed {
		t.Fatalf("the sub-agent's text never reached the stream: %s", describe(evs))
	}
	must(t, evs, agent.TypeCompleted)
	if stored := recordedAnswer(t, e, session, key); agenttest.TextAfterLastRetry(evs) != stored || stored != "Summary: found it" {
		t.Errorf("client text %q, stored answer %q, want both %q", agenttest.TextAfterLastRetry(evs), stored, "Summary: found it")
	}
	if res := toolResult(t, e, session, "k1"); res == nil || res.Text != "the find" {
		t.Errorf("the delegate call's result = %+v, want the retried sub-agent's answer", res)
	}
	n := 0
	for _, r := range m.Requests() {
		if r.LastUserText() == "research it" {
			n++
		}
	}
	if n != 2 {
		t.Errorf("the turn's model was asked %d times, want 2 (the step that delegated, the step after)", n)
	}
	child := workflows.WorkflowID(agentloop.DelegateSession(session, key, "k1"))
	d, err := e.client.DescribeWorkflowExecution(ctx, child, "")
	if err != nil || d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatalf("the sub-agent's workflow: %v %v", d.GetWorkflowExecutionInfo().GetStatus(), err)
	}
	runs, err := e.client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Query: fmt.Sprintf("WorkflowId = %q", child)})
	if err != nil || len(runs.GetExecutions()) != 1 {
		t.Errorf("the sub-agent ran %d times (%v), want once", len(runs.GetExecutions()), err)
	}
}

// An agent delegates to another agent: one with its own definition (its
// persona), served by its own worker on its own task queue, sharing the
// deployment's store. The sub-task runs there, with that persona, and its
// answer comes back.
func TestDelegationToAnotherAgent(t *testing.T) {
	e := newEnv(t)
	queue := e.queue + "-reviewer"
	e.writeConfig(fastRetries + "delegation:\n  agents:\n    reviewer: {taskQueue: " + queue + ", description: reviews code}\n")
	e.startWorker()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "persona.md"), []byte("You are the REVIEWER agent."), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	other, err := serve.Assemble(ctx, serve.Config{Dir: dir, TaskQueue: queue, DetachGrace: -1, Getenv: e.kit.Getenv},
		serve.Components{Store: e.kit.Store, Feed: e.bus, Models: e.kit.Models})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	w, err := other.StartWorker(ctx, e.client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)

	m := e.kit.Model
	m.EnqueueFor("review my change",
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{delegateCall("v1", "reviewer", "review the diff (REVIEWKEY)")}},
		modelserver.Reply{Text: []string{"The reviewer approves."}})
	m.EnqueueFor("REVIEWKEY", modelserver.Reply{Text: []string{"LGTM"}})
	s := e.session("deleg-other")
	must(t, collect(t, e.agent, agent.WithIdempotencyKey(ctx, "rev"), s, "review my change"), agent.TypeCompleted)
	if res := toolResult(t, e, s, "v1"); res == nil || res.Text != "LGTM" {
		t.Errorf("the delegate call's result = %+v", res)
	}
	var system string
	for _, r := range m.Requests() {
		if strings.Contains(r.LastUserText(), "REVIEWKEY") && len(r.Messages) > 0 {
			system = r.Messages[0].Content
		}
	}
	if !strings.Contains(system, "You are the REVIEWER agent.") {
		t.Errorf("the sub-task ran without the reviewer's persona; system prompt %q", system)
	}
	d, err := e.client.DescribeWorkflowExecution(ctx, workflows.WorkflowID(agentloop.DelegateSession(s, "rev", "v1")), "")
	if err != nil || d.GetExecutionConfig().GetTaskQueue().GetName() != queue {
		t.Errorf("the sub-agent's workflow ran on %q (%v), want %q", d.GetExecutionConfig().GetTaskQueue().GetName(), err, queue)
	}
}

// Two agents served by one process (serve.Config.Agents, what `fastagent
// dev --agent reviewer=./reviewer` sets): the main worker and one for the
// other folder on its own task queue; the main agent delegates to it.
func TestTwoAgentsInOneProcess(t *testing.T) {
	e := newEnv(t)
	name := fmt.Sprintf("rev%d", time.Now().UnixNano()%1_000_000_000)
	e.writeConfig(fastRetries + "delegation:\n  agents:\n    reviewer: {taskQueue: " + name + "}\n")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "persona.md"), []byte("You are the SECOND agent."), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	run, err := e.runtime(func(c *serve.Config, _ *serve.Components) {
		c.Agents, c.Roles = map[string]string{name: dir}, serve.Roles{Worker: true}
	}).Start(ctx, e.client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(run.Stop)
	m := e.kit.Model
	m.EnqueueFor("ask the other one",
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{delegateCall("o1", "reviewer", "say who you are (WHOKEY)")}},
		modelserver.Reply{Text: []string{"It answered."}})
	m.EnqueueFor("WHOKEY", modelserver.Reply{Text: []string{"the second agent"}})
	s := e.session("two-agents")
	must(t, collect(t, e.agent, agent.WithIdempotencyKey(ctx, "who"), s, "ask the other one"), agent.TypeCompleted)
	if res := toolResult(t, e, s, "o1"); res == nil || res.Text != "the second agent" {
		t.Errorf("the delegate call's result = %+v", res)
	}
	for _, r := range m.Requests() {
		if strings.Contains(r.LastUserText(), "WHOKEY") && !strings.Contains(r.Messages[0].Content, "You are the SECOND agent.") {
			t.Errorf("the sub-task ran without the second agent's persona: %q", r.Messages[0].Content)
		}
	}
}

// A named sub-session keeps its context across the delegating session's
// turns: the second delegation to it continues the first's conversation
// (the model reads both tasks), while an unnamed one starts fresh.
func TestDelegationNamedSubSession(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(fastRetries + delegationConfig)
	e.startWorker()
	m := e.kit.Model
	named := func(id, task string) modelserver.ToolCall {
		args, _ := json.Marshal(map[string]string{"agent": "self", "task": task, "session": "notes"})
		return modelserver.ToolCall{ID: id, Name: agentloop.DelegateTool, Args: string(args)}
	}
	m.EnqueueFor("first job", modelserver.Reply{ToolCalls: []modelserver.ToolCall{named("n1", "remember 42 (MEMO1)")}},
		modelserver.Reply{Text: []string{"noted"}})
	m.EnqueueFor("MEMO1", modelserver.Reply{Text: []string{"I will remember 42."}})
	m.EnqueueFor("second job", modelserver.Reply{ToolCalls: []modelserver.ToolCall{named("n2", "what number? (MEMO2)")}},
		modelserver.Reply{Text: []string{"it said 42"}})
	m.EnqueueFor("MEMO2", modelserver.Reply{Text: []string{"42"}})
	ctx := context.Background()
	s := e.session("deleg-named")
	must(t, collect(t, e.agent, ctx, s, "first job"), agent.TypeCompleted)
	evs := collect(t, e.agent, ctx, s, "second job")
	must(t, evs, agent.TypeCompleted)
	var second modelserver.Request
	for _, r := range m.Requests() {
		if strings.Contains(r.LastUserText(), "MEMO2") {
			second = r
		}
	}
	var seen []string
	for _, msg := range second.Messages {
		seen = append(seen, msg.Role+": "+msg.Content)
	}
	if got := strings.Join(seen, " | "); !strings.Contains(got, "remember 42 (MEMO1)") || !strings.Contains(got, "I will remember 42.") {
		t.Errorf("the sub-session's second task did not see its first: %s", got)
	}
	if res := toolResult(t, e, s, "n2"); res == nil || res.Text != "42" {
		t.Errorf("n2's result = %+v", res)
	}
	live := ""
	for _, ev := range evs {
		if ev.Type == agent.TypeDelegated && ev.ID == "n2" && ev.Sub != nil && ev.Sub.Type == agent.TypeText {
			live += ev.Sub.Delta
		}
	}
	if live != "42" {
		t.Errorf("the named sub-session's live text = %q, want 42", live)
	}
}
