package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/channels/slack"
	"github.com/fastagent/fastagent/internal/httpagent"
	"github.com/fastagent/fastagent/internal/plugin"
	"github.com/fastagent/fastagent/internal/schedules"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// subWaitYAML lets the agent delegate to itself, ask questions, and gates
// the counter tool; subWaitConfig is it with fast retries.
const (
	subWaitYAML   = delegationConfig + "askUser: true\ntools:\n  counter: {requiresApproval: true}\n"
	subWaitConfig = fastRetries + subWaitYAML
)

// runSubAgentWaits: a turn (key subwaits) delegates d1 to a sub-agent that
// asks q1 and then calls the gated counter c1; both are answered on the
// delegating session through the durable agent (history scenario
// delegation_sub_waits).
func runSubAgentWaits(t *testing.T, e *env, s string) string {
	scriptSubAgentWaits(e.kit.Model, "delegate with waits", "SUBHISTORY", true)
	evs := invokeInBackground(t, e.agent, s, "subwaits", "delegate with waits")
	var seen []agent.Event
	ctx := context.Background()
	awaitEvent(t, evs, &seen, agent.TypeQuestionAsked, "d1.q1")
	if err := e.agent.Answer(ctx, s, workflows.AnswerRequest{Call: "d1.q1", Text: "the red one", By: "tester"}); err != nil {
		t.Fatalf("answer: %v", err)
	}
	req := awaitEvent(t, evs, &seen, agent.TypeApprovalRequested, "d1.c1")
	if err := e.agent.Approve(ctx, s, workflows.ApproveRequest{Call: "d1.c1", Approve: true, By: "tester", ArgsHash: req.ArgsHash}); err != nil {
		t.Fatalf("approve: %v", err)
	}
	drain(evs, &seen)
	must(t, seen, agent.TypeCompleted)
	if res := toolResult(t, e, s, "d1"); res == nil || res.Text != "counted" {
		t.Errorf("the delegate call's result = %+v", res)
	}
	return ""
}

// scriptSubAgentWaits scripts a turn (prompt) that delegates (call d1)
// a sub-task (key in its text) whose sub-agent first asks a question (q1)
// when ask is set, then calls the gated counter (c1), then answers
// "counted"; the turn then answers "the sub-agent counted".
func scriptSubAgentWaits(m *modelserver.Server, prompt, key string, ask bool) {
	m.EnqueueFor(prompt,
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{delegateCall("d1", "self", "count it ("+key+")")}},
		modelserver.Reply{Text: []string{"the sub-agent counted"}})
	var child []modelserver.Reply
	if ask {
		child = append(child, modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "q1", Name: "ask_user", Args: `{"question":"Which note?"}`}}})
	}
	child = append(child,
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "c1", Name: testkit.CounterName, Args: `{"note":"from the sub-agent"}`}}},
		modelserver.Reply{Text: []string{"counted"}})
	m.EnqueueFor(key, child...)
}

// invokeInBackground runs one turn through a and sends every event to
// the returned channel, closed at the end of the stream.
func invokeInBackground(t *testing.T, a agent.Agent, session, key, text string) <-chan agent.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	out := make(chan agent.Event, 256)
	go func() {
		defer close(out)
		for ev := range a.Invoke(agent.WithIdempotencyKey(ctx, key), agent.Scope{Session: session}, agent.Prompt{Text: text}) {
			out <- ev
		}
	}()
	return out
}

// awaitEvent reads events until one of type typ with ID id arrives, and
// returns it with the events read; it fails the test if the stream ends
// or nothing comes within a minute.
func awaitEvent(t *testing.T, evs <-chan agent.Event, seen *[]agent.Event, typ, id string) agent.Event {
	t.Helper()
	limit := time.After(time.Minute)
	for {
		select {
		case ev, ok := <-evs:
			if !ok {
				t.Fatalf("the stream ended without %s %s: %s", typ, id, describe(*seen))
			}
			*seen = append(*seen, ev)
			if ev.Type == typ && ev.ID == id {
				return ev
			}
		case <-limit:
			t.Fatalf("no %s for %s on the delegating turn's stream within a minute: %s", typ, id, describe(*seen))
		}
	}
}

// drain reads the rest of a stream.
func drain(evs <-chan agent.Event, seen *[]agent.Event) {
	for ev := range evs {
		*seen = append(*seen, ev)
	}
}

// A sub-agent's gated call and its question are decided where the person
// is: on the delegating session's stream (approval_requested and
// question_asked under "<delegate call>.<call>", naming the sub-agent),
// in its state, and through its HTTP routes, with the delegating session's
// rules: another principal's decision is 404 and changes nothing, a
// decision on other hashes is 409; the owner's answer and approval reach
// the sub-agent, whose tool runs once, and the turn completes with its
// answer.
func TestSubAgentWaitsOverHTTP(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(subWaitConfig)
	e.startWorker()
	hs := e.authIngress(nil)
	const session, key = "sub-waits-http", "subhttp"
	scriptSubAgentWaits(e.kit.Model, "delegate the counting", "SUBHTTP", true)
	child := agentloop.DelegateSession(session, key, "d1")
	alice := &httpagent.Agent{BaseURL: hs.URL, Token: "alice-token"}
	evs := invokeInBackground(t, alice, session, key, "delegate the counting")
	var seen []agent.Event
	post := func(token, path, body string) (int, string) {
		t.Helper()
		st, b, _ := send(t, http.MethodPost, hs.URL+"/sessions/"+session+path, token, body, nil)
		return st, b
	}

	q := awaitEvent(t, evs, &seen, agent.TypeQuestionAsked, "d1.q1")
	if q.Question != "Which note?" || q.Agent != "self" {
		t.Fatalf("question_asked = %+v, want the sub-agent's question, naming the sub-agent self", q)
	}
	if st, b := post("bob-token", "/answers/d1.q1", `{"text":"bob's"}`); st != http.StatusNotFound {
		t.Fatalf("bob answering alice's sub-agent: %d %s, want 404", st, b)
	}
	if st, b := post("alice-token", "/answers/d1.q1", `{"text":"the blue one"}`); st != http.StatusOK {
		t.Fatalf("alice's answer: %d %s", st, b)
	}

	req := awaitEvent(t, evs, &seen, agent.TypeApprovalRequested, "d1.c1")
	if req.Name != testkit.CounterName || req.Agent != "self" || req.ArgsHash != activities.ArgsHash(req.Args) || !strings.Contains(string(req.Args), "from the sub-agent") {
		t.Fatalf("approval_requested = %+v, want the sub-agent's counter call with its arguments and hash", req)
	}
	st, b, _ := send(t, http.MethodGet, hs.URL+"/sessions/"+session, "alice-token", "", nil)
	var view workflows.SessionView
	if st != http.StatusOK || json.Unmarshal([]byte(b), &view) != nil || len(view.Approvals) != 1 {
		t.Fatalf("GET the delegating session: %d %s, want its sub-agent's call waiting", st, b)
	}
	if p := view.Approvals[0]; p.Call != "d1.c1" || p.Agent != "self" || p.SubSession != child || p.ArgsHash != req.ArgsHash {
		t.Fatalf("the waiting call in the state: %+v, want d1.c1 of sub-agent self in %s", p, child)
	}
	bound := func(argsHash string) string {
		return `{"approve":true,"argsHash":"` + argsHash + `","definitionHash":"` + req.DefinitionHash + `"}`
	}
	if st, b := post("bob-token", "/approvals/d1.c1", bound(req.ArgsHash)); st != http.StatusNotFound {
		t.Fatalf("bob approving alice's sub-agent's call: %d %s, want 404", st, b)
	}
	if st, b := post("alice-token", "/approvals/d1.c1", bound("sha256:other")); st != http.StatusConflict || !strings.Contains(b, agent.CodeCallChanged) {
		t.Fatalf("an approval of other arguments: %d %s, want 409 %s", st, b, agent.CodeCallChanged)
	}
	if n := e.kit.Counter.Runs(child); n != 0 {
		t.Fatalf("the sub-agent's counter ran %d times before it was approved", n)
	}
	if st, b := post("alice-token", "/approvals/d1.c1", bound(req.ArgsHash)); st != http.StatusOK {
		t.Fatalf("alice's approval: %d %s", st, b)
	}
	resolved := awaitEvent(t, evs, &seen, agent.TypeApprovalResolved, "d1.c1")
	if !resolved.Approved || resolved.By != "alice" {
		t.Errorf("approval_resolved = %+v, want approved by alice", resolved)
	}
	drain(evs, &seen)
	must(t, seen, agent.TypeCompleted)
	if n := e.kit.Counter.Runs(child); n != 1 {
		t.Errorf("the sub-agent's counter ran %d times, want 1", n)
	}
	if res := toolResult(t, e, session, "d1"); res == nil || res.Text != "counted" {
		t.Errorf("the delegate call's result = %+v, want the sub-agent's answer", res)
	}
	if res := toolResult(t, e, child, "q1"); res == nil || res.Text != "the blue one" {
		t.Errorf("the sub-agent's question's result = %+v, want alice's answer", res)
	}
	if st, b := post("alice-token", "/approvals/d1.c1", bound(req.ArgsHash)); st != http.StatusNotFound {
		t.Errorf("a second approval: %d %s, want 404 (nothing waits)", st, b)
	}
}

// A sub-agent's gated call is approved from the CLI by the delegating
// session and the call's ID (`fastagent session approve <session>
// d1.c1`), and in `fastagent chat`, where it is asked inline like the
// session's own calls.
func TestSubAgentApprovalFromTheCLI(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(subWaitConfig)
	e.startWorker()
	hs := e.ingress()
	const session = "sub-waits-cli"
	scriptSubAgentWaits(e.kit.Model, "count through a sub-agent", "SUBCLI", false)
	evs := invokeInBackground(t, e.agent, session, "subcli", "count through a sub-agent")
	var seen []agent.Event
	awaitEvent(t, evs, &seen, agent.TypeApprovalRequested, "d1.c1")
	cmd := exec.Command(fastagentBinary(t), "session", "--url", hs.URL, "approve", session, "d1.c1")
	cmd.Env = e.kit.ProcessEnv()
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "approved d1.c1") || !strings.Contains(string(out), "from the sub-agent") {
		t.Fatalf("fastagent session approve: %v\n%s", err, out)
	}
	drain(evs, &seen)
	must(t, seen, agent.TypeCompleted)
	child := agentloop.DelegateSession(session, "subcli", "d1")
	if n := e.kit.Counter.Runs(child); n != 1 {
		t.Errorf("the sub-agent's counter ran %d times, want 1", n)
	}

	// fastagent chat: the sub-agent's call is asked inline.
	const chatSession = "sub-waits-chat"
	scriptSubAgentWaits(e.kit.Model, "count in the chat", "SUBCHAT", false)
	tm := startChat(t, e, hs.URL, chatSession)
	tm.expect("session "+chatSession, 30*time.Second)
	tm.typeLine("count in the chat")
	tm.expect("needs your approval", time.Minute)
	tm.expect(`"note": "from the sub-agent"`, 5*time.Second)
	tm.expect("approve counter? [y/n]", 5*time.Second)
	tm.typeLine("y")
	tm.expectAll(time.Minute, "approved counter", "the sub-agent counted")
	runs := 0
	for _, v := range e.kit.Counter.Sessions() {
		if strings.HasPrefix(v, chatSession+"/") {
			runs += e.kit.Counter.Runs(v)
		}
	}
	if runs != 1 {
		t.Errorf("the chat's sub-agent's counter ran %d times, want 1", runs)
	}
}

// In a Slack thread, a sub-agent's gated call is decided with the thread's
// buttons (bound to the delegating session and "<delegate call>.<call>"),
// under the thread's rule: only the person who asked may decide; and the
// sub-agent's question is answered by that person's next message in the
// thread, which is not a new turn.
func TestSubAgentWaitsInSlack(t *testing.T) {
	s := newSlackStack(t)
	s.e.writeConfig(subWaitConfig)
	s.startWorker()
	const channel, ts, asker = "C0SUBWAIT", "1515449800.000100", "U061F7AUR"
	session := slack.SessionID(s.team, channel, ts)
	t.Cleanup(func() { s.terminate(session) })
	scriptSubAgentWaits(s.e.kit.Model, "delegate it", "SUBSLACK", true)
	if code, body, _ := s.post(s.event("EvSub1", "app_mention", "", channel, ts, "", "<@U0LAN0Z89> delegate it"), slackSecret, time.Now(), nil); code != http.StatusOK {
		t.Fatalf("mention: %d %s", code, body)
	}

	// The sub-agent's question, answered by the asker's next message.
	waitFor(t, 90*time.Second, "the sub-agent's question in the thread", func() bool {
		for _, m := range s.fake.replies(channel) {
			if m.Thread == ts && strings.Contains(m.Text, "Which note?") {
				return true
			}
		}
		return false
	})
	answer := s.event("EvSub2", "app_mention", "", channel, "1515449801.000200", ts, "<@U0LAN0Z89> the green one")
	if code, body, _ := s.post(answer, slackSecret, time.Now(), nil); code != http.StatusOK {
		t.Fatalf("answer: %d %s", code, body)
	}

	// The sub-agent's gated call, with buttons in the thread.
	ask := waitApprovalMessage(t, s, channel)
	var v struct{ S, C, A, D string }
	if err := json.Unmarshal([]byte(ask.value), &v); err != nil || v.S != session || v.C != "d1.c1" || !strings.HasPrefix(v.A, "sha256:") {
		t.Fatalf("button value %s, want the delegating session and call d1.c1 with its hashes", ask.value)
	}
	st, err := s.e.agent.State(context.Background(), session)
	if err != nil || len(st.Approvals) != 1 || st.Approvals[0].SubSession == "" {
		t.Fatalf("state %+v, %v: want the sub-agent's call waiting", st, err)
	}
	child := st.Approvals[0].SubSession
	click := func(user, actionTS string) {
		t.Helper()
		body := interaction(s.team, channel, user, actionTS, "fastagent_approve", ask.value, s.fake.srv.URL+"/response/"+actionTS)
		if code, b, _ := s.post(body, slackSecret, time.Now(), map[string]string{"Content-Type": "application/x-www-form-urlencoded"}); code != http.StatusOK {
			t.Fatalf("click by %s: %d %s", user, code, b)
		}
	}
	click("UINTRUDER", "1700000100.000001")
	if notes := s.fake.srv.Calls("response/1700000100.000001"); len(notes) != 1 || !strings.Contains(notes[0].Get("text"), "may not decide") {
		t.Fatalf("notes to the intruder: %+v, want one 'may not decide'", notes)
	}
	if n := s.e.kit.Counter.Runs(child); n != 0 {
		t.Fatalf("the sub-agent's counter ran %d times after a refused click", n)
	}
	click(asker, "1700000100.000002")
	waitFor(t, 90*time.Second, "the answer in the thread", func() bool {
		for _, m := range s.fake.replies(channel) {
			if m.Thread == ts && strings.Contains(m.Text, "the sub-agent counted") && !m.Streaming {
				return true
			}
		}
		return false
	})
	if n := s.e.kit.Counter.Runs(child); n != 1 {
		t.Errorf("the sub-agent's counter ran %d times, want 1", n)
	}
	if res := toolResult(t, s.e, child, "q1"); res == nil || res.Text != "the green one" {
		t.Errorf("the sub-agent's question's result = %+v, want the asker's message", res)
	}
	waitFor(t, 30*time.Second, "the approval message settled", func() bool {
		return strings.Contains(messageAt(s, channel, ask.ts).Text, "Approved by <@"+asker+">")
	})
	turns := 0
	for _, r := range s.e.kit.Model.Requests() {
		if r.LastUserText() != "" && strings.Contains(r.LastUserText(), "the green one") {
			turns++
		}
	}
	if turns != 0 {
		t.Errorf("the answer ran as a turn (%d model calls read it as the prompt)", turns)
	}
}

// startChat runs `fastagent chat` on a pseudo-terminal against url.
func startChat(t *testing.T, e *env, url, session string) *terminal {
	t.Helper()
	cmd := exec.Command(fastagentBinary(t), "chat", "--url", url, "--session", session)
	cmd.Env = e.kit.ProcessEnv()
	return runOnPTY(t, cmd)
}

// Aborting a delegating turn reaches its sub-agent at once, whatever the
// sub-agent is doing: a running tool (a bash sleep; its interruption is
// recorded in the sub-agent's session) or a wait for approval. The turn ends within seconds, not at the
// sub-agent's timeout, and its call records the interruption.
func TestDelegationAbortReachesTheSubAgent(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(subWaitConfig)
	e.startWorker()
	for _, tc := range []struct{ name, waitFor string }{
		{"running tool", agent.TypeToolStarted},
		{"waiting approval", agent.TypeApprovalRequested},
	} {
		t.Run(tc.name, func(t *testing.T) {
			session := "sub-abort-" + strings.ReplaceAll(tc.name, " ", "-")
			key := "abort-" + strings.ReplaceAll(tc.name, " ", "-")
			marker := strings.ToUpper(strings.ReplaceAll(tc.name, " ", ""))
			e.kit.Model.EnqueueFor("start "+tc.name, modelserver.Reply{ToolCalls: []modelserver.ToolCall{delegateCall("d1", "self", "work ("+marker+")")}})
			child := agentloop.DelegateSession(session, key, "d1")
			tool := modelserver.ToolCall{ID: "c1", Name: testkit.CounterName, Args: `{"note":"slow"}`}
			if tc.waitFor == agent.TypeToolStarted {
				tool = modelserver.ToolCall{ID: "c1", Name: "bash", Args: `{"command":"sleep 600"}`}
			}
			e.kit.Model.EnqueueFor(marker, modelserver.Reply{ToolCalls: []modelserver.ToolCall{tool}})
			evs := invokeInBackground(t, e.agent, session, key, "start "+tc.name)
			var seen []agent.Event
			for {
				ev, ok := <-evs
				if !ok {
					t.Fatalf("the stream ended before the sub-agent waited: %s", describe(seen))
				}
				seen = append(seen, ev)
				if ev.Type == agent.TypeDelegated && ev.Sub != nil && ev.Sub.Type == tc.waitFor {
					break
				}
			}
			start := time.Now()
			if _, err := e.agent.Abort(context.Background(), session, "", "stop now"); err != nil {
				t.Fatalf("abort: %v", err)
			}
			drain(evs, &seen)
			took := time.Since(start)
			if term := seen[len(seen)-1]; term.Type != agent.TypeFailed || term.Code != agent.CodeAborted {
				t.Fatalf("terminal %+v, want failed{aborted}", term)
			}
			if took > 20*time.Second {
				t.Errorf("the aborted turn ended %v after the abort, want within seconds", took)
			}
			if res := toolResult(t, e, session, "d1"); res == nil || !res.IsError || !strings.Contains(res.Text, "interrupted") {
				t.Errorf("the delegate call's result = %+v, want the interruption", res)
			}
			if res := toolResult(t, e, child, "c1"); res == nil || !res.IsError {
				t.Errorf("the sub-agent's call's result = %+v, want its interruption recorded", res)
			}
		})
	}
}

// splitWorkers serves task queue tq with two workers, one for workflow
// tasks (and their local activities) and one for activities, so a test
// can take a sub-agent's workflow worker away while its tool runs.
func splitWorkers(t *testing.T, e *env, tq string) (wf, act sdkworker.Worker) {
	t.Helper()
	wf, act, err := plugin.Split(e.client, tq, activities.Set{Acts: e.kit.Activities(e.bus),
		Replies: activities.NewReplies(e.kit.Store, e.bus, nil, nil), Firer: schedules.NewFirer(e.client, e.bus, e.kit.Store, tq, nil)})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []sdkworker.Worker{wf, act} {
		if err := w.Start(); err != nil {
			t.Fatalf("start worker: %v", err)
		}
		t.Cleanup(w.Stop)
	}
	return wf, act
}

// namedDelegateCall is a delegate call naming a sub-session.
func namedDelegateCall(id, agentName, task, named string) modelserver.ToolCall {
	args, _ := json.Marshal(map[string]string{"agent": agentName, "task": task, "session": named})
	return modelserver.ToolCall{ID: id, Name: agentloop.DelegateTool, Args: string(args)}
}

// An abort reaches a sub-agent's running tool at once even when the
// sub-agent's workflow cannot take its cancellation (its workflow worker
// is gone): the delegating session publishes the stop notice of the
// sub-agent's turn itself, and does not wait for the sub-agent longer than
// a short grace — the turn ends, not at delegation.timeout. The sub-agent
// works in a named sub-session, which takes one task at a time: the next
// turn's delegation to it, while the first task has not stopped, is
// refused as busy (two tasks never write its transcript at once). When a
// worker comes back the sub-agent records its interrupted call, and the
// sub-session takes tasks again.
func TestDelegationAbortWithoutTheSubAgentsWorker(t *testing.T) {
	t.Parallel() // it mostly waits out a worker's timeouts: shards.sh runs it beside the others
	e := newEnv(t)
	queue := e.queue + "-helper"
	e.writeConfig(fastRetries + "delegation:\n  agents:\n    helper: {taskQueue: " + queue + "}\n  timeout: 2m\n")
	e.kit.Counter.Delay = 10 * time.Minute
	e.startWorker()
	wf, _ := splitWorkers(t, e, queue)
	const session, key = "sub-abort-no-worker", "abortnw"
	notes, _ := agentloop.DelegateStore(session, key, "d1", "helper", "notes")
	m := e.kit.Model
	m.EnqueueFor("start the slow helper", modelserver.Reply{ToolCalls: []modelserver.ToolCall{namedDelegateCall("d1", "helper", "count slowly (SLOWHELPER)", "notes")}})
	m.EnqueueFor("SLOWHELPER", modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "c1", Name: testkit.CounterName, Args: `{"note":"slow"}`}}})
	evs := invokeInBackground(t, e.agent, session, key, "start the slow helper")
	var seen []agent.Event
	for started := false; !started; {
		ev, ok := <-evs
		if !ok {
			t.Fatalf("the stream ended before the sub-agent's tool started: %s", describe(seen))
		}
		seen = append(seen, ev)
		started = ev.Type == agent.TypeDelegated && ev.Sub != nil && ev.Sub.Type == agent.TypeToolStarted && ev.Sub.Name == testkit.CounterName
	}
	wf.Stop()
	start := time.Now()
	if _, err := e.agent.Abort(context.Background(), session, "", "stop now"); err != nil {
		t.Fatalf("abort: %v", err)
	}
	waitFor(t, 10*time.Second, "the sub-agent's running tool told to stop", func() bool { return e.kit.Counter.Interrupted(notes) == 1 })
	ended := make(chan struct{})
	go func() { drain(evs, &seen); close(ended) }()
	select {
	case <-ended:
	case <-time.After(40 * time.Second):
		t.Fatalf("the aborted turn had not ended %v after the abort (it waits for a sub-agent that cannot stop)", time.Since(start))
	}
	if term := seen[len(seen)-1]; term.Type != agent.TypeFailed || term.Code != agent.CodeAborted {
		t.Fatalf("terminal %+v, want failed{aborted}", term)
	}
	if res := toolResult(t, e, session, "d1"); res == nil || !res.IsError || !strings.Contains(res.Text, "interrupted") {
		t.Errorf("the delegate call's result = %+v, want the interruption", res)
	}

	// The sub-session has not stopped its first task: a second is refused.
	m.EnqueueFor("more notes", modelserver.Reply{ToolCalls: []modelserver.ToolCall{namedDelegateCall("d2", "helper", "another task (SECONDNOTE)", "notes")}},
		modelserver.Reply{Text: []string{"it was busy"}})
	must(t, collect(t, e.agent, agent.WithIdempotencyKey(context.Background(), "more"), session, "more notes"), agent.TypeCompleted)
	if res := toolResult(t, e, session, "d2"); res == nil || !res.IsError || !strings.Contains(res.Text, "busy") {
		t.Errorf("the second delegation to the busy sub-session = %+v, want it refused as busy", res)
	}
	for _, r := range m.Requests() {
		if strings.Contains(r.LastUserText(), "SECONDNOTE") {
			t.Errorf("a second task ran in the sub-session while its first had not stopped")
		}
	}

	// A worker comes back: the first task records its interruption, and
	// the sub-session takes the next task.
	splitWorkers(t, e, queue)
	waitFor(t, time.Minute, "the sub-agent's interrupted call recorded", func() bool {
		res := toolResult(t, e, notes, "c1")
		return res != nil && res.IsError
	})
	waitFor(t, time.Minute, "the sub-session's first task closed", func() bool {
		d, err := e.client.DescribeWorkflowExecution(context.Background(), workflows.WorkflowID(notes), "")
		return err == nil && d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	})
	m.EnqueueFor("last notes", modelserver.Reply{ToolCalls: []modelserver.ToolCall{namedDelegateCall("d3", "helper", "a quick task (THIRDNOTE)", "notes")}},
		modelserver.Reply{Text: []string{"noted"}})
	m.EnqueueFor("THIRDNOTE", modelserver.Reply{Text: []string{"done quickly"}})
	must(t, collect(t, e.agent, agent.WithIdempotencyKey(context.Background(), "last"), session, "last notes"), agent.TypeCompleted)
	if res := toolResult(t, e, session, "d3"); res == nil || res.Text != "done quickly" {
		t.Errorf("the sub-session's next task = %+v, want its answer", res)
	}
}

// A delivery sent to a running sub-agent's workflow (a channel or a
// client naming its session) is not silently lost: the sender is told the
// session is a sub-agent's and takes only its task, and it never becomes
// a turn.
func TestSubAgentSessionRefusesDeliveries(t *testing.T) {
	s := newSlackStack(t)
	s.e.writeConfig(fastRetries + delegationConfig)
	s.startWorker()
	const session, key, channel = "sub-deliver", "subdel", "C0SUBDELIV"
	s.e.kit.Model.EnqueueFor("delegate while I knock", modelserver.Reply{ToolCalls: []modelserver.ToolCall{delegateCall("d1", "self", "work long (SUBDELIVER)")}})
	s.e.kit.Model.EnqueueFor("SUBDELIVER", modelserver.Reply{Text: []string{"working…"}, Hang: true})
	evs := invokeInBackground(t, s.e.agent, session, key, "delegate while I knock")
	var seen []agent.Event
	for working := false; !working; {
		ev, ok := <-evs
		if !ok {
			t.Fatalf("the stream ended before the sub-agent worked: %s", describe(seen))
		}
		seen = append(seen, ev)
		working = ev.Type == agent.TypeDelegated && ev.Sub != nil && ev.Sub.Type == agent.TypeText
	}
	child := agentloop.DelegateSession(session, key, "d1")
	target, _ := json.Marshal(wire.Target{Chat: s.team + ":" + channel, Thread: "1515449900.000100", Message: "1515449900.000100", User: "U061F7AUR"})
	if err := s.e.client.SignalWorkflow(context.Background(), workflows.WorkflowID(child), "", workflows.SignalDeliver, workflows.Delivery{
		Key: "slack:knock", Prompt: agent.Prompt{Text: "KNOCK KNOCK"}, Reply: &workflows.ReplyTarget{Kind: slack.Kind, Data: target}}); err != nil {
		t.Fatalf("deliver to the sub-agent: %v", err)
	}
	waitFor(t, time.Minute, "the refusal in the sender's thread", func() bool {
		for _, m := range s.fake.replies(channel) {
			if strings.Contains(m.Text, "sub-agent's session") {
				return true
			}
		}
		return false
	})
	if _, err := s.e.agent.Abort(context.Background(), session, "", "enough"); err != nil {
		t.Fatalf("abort: %v", err)
	}
	drain(evs, &seen)
	for _, r := range s.e.kit.Model.Requests() {
		if strings.Contains(r.LastUserText(), "KNOCK KNOCK") {
			t.Errorf("the delivery to the sub-agent ran as a turn")
		}
	}
}

// A model that gives one of its own gated calls the ID of its sub-agent's
// waiting call ("d1.c1") gets neither decided by that ID: a decision could
// otherwise approve a call the person never saw (one click approved both).
// Both wait for their deadline and are denied.
func TestSubAgentCallIDCollisionDecidesNothing(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(subWaitConfig + "approvals:\n  timeout: 3s\n")
	e.startWorker()
	const session, key = "sub-collide", "collide"
	e.kit.Model.EnqueueFor("two at once",
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{delegateCall("d1", "self", "count (COLLIDE)"),
			{ID: "d1.c1", Name: testkit.CounterName, Args: `{"note":"the turn's own, unseen"}`}}},
		modelserver.Reply{Text: []string{"neither ran"}})
	e.kit.Model.EnqueueFor("COLLIDE",
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "c1", Name: testkit.CounterName, Args: `{"note":"the sub-agent's"}`}}},
		modelserver.Reply{Text: []string{"not counted"}})
	evs := invokeInBackground(t, e.agent, session, key, "two at once")
	var seen []agent.Event
	child := agentloop.DelegateSession(session, key, "d1")
	waitFor(t, time.Minute, "both calls waiting under d1.c1", func() bool {
		st, err := e.agent.State(context.Background(), session)
		return err == nil && len(st.Approvals) == 2
	})
	err := e.agent.Approve(context.Background(), session, workflows.ApproveRequest{Call: "d1.c1", Approve: true, By: "tester"})
	if err == nil || agent.CodeOf(err) != agent.CodeInvalidCommand {
		t.Errorf("approving the ambiguous ID: %v, want %s", err, agent.CodeInvalidCommand)
	}
	drain(evs, &seen)
	must(t, seen, agent.TypeCompleted)
	if a, b := e.kit.Counter.Runs(session), e.kit.Counter.Runs(child); a != 0 || b != 0 {
		t.Errorf("the counter ran %d times in the turn and %d in the sub-agent, want neither", a, b)
	}
}

// A sub-agent's own sub-agent's gated call reaches the top: it waits on
// the top session as "d1.d2.c1" (each level adds its delegate call) and
// the top session's owner approves it there; the decision travels down two
// levels and the call runs once.
func TestNestedSubAgentApprovalReachesTheTop(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(subWaitConfig)
	e.startWorker()
	hs := e.authIngress(nil)
	const session, key = "sub-nested", "nested"
	m := e.kit.Model
	m.EnqueueFor("go two deep", modelserver.Reply{ToolCalls: []modelserver.ToolCall{delegateCall("d1", "self", "delegate again (LEVELONE)")}},
		modelserver.Reply{Text: []string{"two levels done"}})
	m.EnqueueFor("LEVELONE", modelserver.Reply{ToolCalls: []modelserver.ToolCall{delegateCall("d2", "self", "count it (LEVELTWO)")}},
		modelserver.Reply{Text: []string{"level one done"}})
	m.EnqueueFor("LEVELTWO", modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "c1", Name: testkit.CounterName, Args: `{"note":"deep"}`}}},
		modelserver.Reply{Text: []string{"counted deep"}})
	alice := &httpagent.Agent{BaseURL: hs.URL, Token: "alice-token"}
	evs := invokeInBackground(t, alice, session, key, "go two deep")
	var seen []agent.Event
	req := awaitEvent(t, evs, &seen, agent.TypeApprovalRequested, "d1.d2.c1")
	if req.Agent != "self" || !strings.Contains(string(req.Args), "deep") {
		t.Fatalf("approval_requested = %+v, want the grandchild's counter call", req)
	}
	st, b, _ := send(t, http.MethodPost, hs.URL+"/sessions/"+session+"/approvals/d1.d2.c1", "alice-token",
		`{"approve":true,"argsHash":"`+req.ArgsHash+`","definitionHash":"`+req.DefinitionHash+`"}`, nil)
	if st != http.StatusOK {
		t.Fatalf("alice's approval: %d %s", st, b)
	}
	drain(evs, &seen)
	must(t, seen, agent.TypeCompleted)
	grandchild := agentloop.DelegateSession(agentloop.DelegateSession(session, key, "d1"), agentloop.DelegateTurn, "d2")
	if n := e.kit.Counter.Runs(grandchild); n != 1 {
		t.Errorf("the grandchild's counter ran %d times, want 1", n)
	}
	if res := toolResult(t, e, session, "d1"); res == nil || res.Text != "level one done" {
		t.Errorf("d1's result = %+v", res)
	}
}

// runSubAgentQuestionsHeld: a turn (key subheld) delegates d1 and d2 at
// once, each sub-agent asking a question (q1); the delegating session asks
// them one at a time (history scenario delegation_sub_questions_held):
// the second question_asked comes after the first is answered, and each
// answer reaches its own sub-agent.
func runSubAgentQuestionsHeld(t *testing.T, e *env, s string) string {
	e.kit.Model.EnqueueFor("two ask at once",
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{
			delegateCall("d1", "self", "ask one (HELDA)"),
			delegateCall("d2", "self", "ask two (HELDB)"),
		}},
		modelserver.Reply{Text: []string{"both answered"}})
	for _, key := range []string{"HELDA", "HELDB"} {
		e.kit.Model.EnqueueFor(key,
			modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "q1", Name: "ask_user", Args: `{"question":"Which one for ` + key + `?"}`}}},
			modelserver.Reply{Text: []string{"done " + key}})
	}
	evs := invokeInBackground(t, e.agent, s, "subheld", "two ask at once")
	var seen []agent.Event
	answered := map[string]string{}
	for len(answered) < 2 {
		ev, ok := <-evs
		if !ok {
			t.Fatalf("the stream ended with %d of 2 questions answered: %s", len(answered), describe(seen))
		}
		seen = append(seen, ev)
		if ev.Type != agent.TypeQuestionAsked {
			continue
		}
		if n := len(answered); n == 1 && !slices.ContainsFunc(seen, func(x agent.Event) bool { return x.Type == agent.TypeQuestionAnswered }) {
			t.Fatalf("%s asked before the first question was answered: %s", ev.ID, describe(seen))
		}
		text := "answer for " + ev.ID
		if err := e.agent.Answer(context.Background(), s, workflows.AnswerRequest{Call: ev.ID, Text: text, By: "tester"}); err != nil {
			t.Fatalf("answer %s: %v", ev.ID, err)
		}
		answered[ev.ID] = text
	}
	drain(evs, &seen)
	must(t, seen, agent.TypeCompleted)
	for id, text := range answered {
		d, call, _ := strings.Cut(id, ".")
		if res := toolResult(t, e, agentloop.DelegateSession(s, "subheld", d), call); res == nil || res.Text != text {
			t.Errorf("%s's result = %+v, want %q", id, res, text)
		}
	}
	return ""
}

// Two sub-agents' questions are asked one at a time on the delegating
// session, each answer reaching its own sub-agent.
func TestSubAgentQuestionsHeld(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(fastRetries + delegationConfig + "askUser: true\n")
	e.startWorker()
	runSubAgentQuestionsHeld(t, e, "sub-questions-held")
}
