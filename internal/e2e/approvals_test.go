package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/agent/agenttest"
	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/durable"
	"github.com/fastagent/fastagent/internal/httpagent"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/workflows"
)

// An approval over HTTP binds to what the approver saw: GET /sessions/{id}
// shows the pending call's arguments with their hash and the tool
// definition's hash; an approve request whose hashes differ is refused
// (409 call_changed) and the call stays pending; matching hashes approve
// it; a request without hashes approves as before.
func TestApprovalBoundToWhatWasShown(t *testing.T) {
	e := newEnv(t)
	e.writeConfig("tools:\n  counter: {requiresApproval: true}\n")
	e.startWorker()
	hs := e.ingress()
	const session = "approve-bound"
	e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "b1", Name: "counter", Args: `{"note":"shown"}`}}},
		modelserver.Reply{Text: []string{"counted"}},
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "b2", Name: "counter", Args: `{}`}}},
		modelserver.Reply{Text: []string{"counted again"}},
	)
	done := make(chan []agent.Event, 1)
	go func() { done <- collect(t, e.agent, context.Background(), session, "count once") }()
	waitApproval(t, hs.URL, session, "b1")
	pending := func() []workflows.PendingApproval {
		t.Helper()
		st, b, _ := send(t, http.MethodGet, hs.URL+"/sessions/"+session, "", "", nil)
		var v workflows.SessionView
		if err := json.Unmarshal([]byte(b), &v); st != http.StatusOK || err != nil {
			t.Fatalf("state: %d %s", st, b)
		}
		return v.Approvals
	}
	shown := pending()
	if len(shown) != 1 || string(shown[0].Args) != `{"note":"shown"}` || shown[0].ArgsHash != activities.ArgsHash(shown[0].Args) ||
		!strings.HasPrefix(shown[0].DefinitionHash, "sha256:") {
		t.Fatalf("pending approvals %+v, want b1 with its arguments and both hashes", shown)
	}
	approve := func(call, body string) (int, string) {
		t.Helper()
		st, b, _ := send(t, http.MethodPost, hs.URL+"/sessions/"+session+"/approvals/"+call, "", body, nil)
		return st, b
	}
	other := activities.ArgsHash(json.RawMessage(`{"note":"other"}`))
	for name, body := range map[string]string{
		"other arguments":           `{"approve":true,"argsHash":"` + other + `","definitionHash":"` + shown[0].DefinitionHash + `"}`,
		"other definition":          `{"approve":true,"argsHash":"` + shown[0].ArgsHash + `","definitionHash":"sha256:0000"}`,
		"other arguments only sent": `{"approve":true,"argsHash":"` + other + `"}`,
	} {
		st, b := approve("b1", body)
		if st != http.StatusConflict || !strings.Contains(b, agent.CodeCallChanged) || !strings.Contains(b, "changed") {
			t.Errorf("%s: %d %s, want 409 %s saying the call changed", name, st, b, agent.CodeCallChanged)
		}
	}
	if now := pending(); len(now) != 1 || now[0].Call != "b1" {
		t.Fatalf("after refused approvals: pending %+v, want b1 still waiting", now)
	}
	if n := e.kit.Counter.Runs(session); n != 0 {
		t.Fatalf("the counter ran %d times before its approval", n)
	}
	if st, b := approve("b1", `{"approve":true,"argsHash":"`+shown[0].ArgsHash+`","definitionHash":"`+shown[0].DefinitionHash+`"}`); st != http.StatusOK {
		t.Fatalf("approve with the hashes shown: %d %s", st, b)
	}
	must(t, <-done, agent.TypeCompleted)
	if n := e.kit.Counter.Runs(session); n != 1 {
		t.Errorf("approved call ran %d times, want 1", n)
	}

	// Without hashes: approved as before.
	go func() { done <- collect(t, e.agent, context.Background(), session, "count again") }()
	waitApproval(t, hs.URL, session, "b2")
	if st, b := approve("b2", `{"approve":true}`); st != http.StatusOK {
		t.Fatalf("approve without hashes: %d %s", st, b)
	}
	must(t, <-done, agent.TypeCompleted)
	if n := e.kit.Counter.Runs(session); n != 2 {
		t.Errorf("counter ran %d times, want 2", n)
	}
}

// A gated call announces itself on the HTTP stream and is decided by whom
// the configuration names:
//   - approval_requested carries the full arguments, both hashes, the
//     approvers and the deadline; the owner (alice, not listed) is refused
//     403 not_approver and the call still waits; bob (listed, not the
//     session's owner) approves with the hashes shown; approval_resolved
//     names him; the tool runs once;
//   - a call no one decides is denied at its deadline (2s): approval_resolved
//     says it timed out, the model reads why in the tool result, and the
//     turn completes.
func TestApprovalOnTheStream(t *testing.T) {
	e := newEnv(t)
	e.writeConfig("tools:\n  counter: {requiresApproval: true, approvers: [bob]}\n  bash: {requiresApproval: true, approvalTimeout: 2s}\n")
	e.startWorker()
	hs := e.authIngress(nil)
	const session = "approve-on-stream"
	e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "s1", Name: "counter", Args: `{"note":"streamed"}`}}},
		modelserver.Reply{Text: []string{"counted"}},
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "s2", Name: "bash", Args: `{"command":"echo hi"}`}}},
		modelserver.Reply{Text: []string{"gave up on bash"}},
	)
	client := &httpagent.Agent{BaseURL: hs.URL, Token: "alice-token"}
	approve := func(token, call, body string) (int, string) {
		t.Helper()
		st, b, _ := send(t, http.MethodPost, hs.URL+"/sessions/"+session+"/approvals/"+call, token, body, nil)
		return st, b
	}

	// A listed approver decides; the owner may not.
	var evs []agent.Event
	requested := make(chan agent.Event, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range client.Invoke(ctx, agent.Scope{Session: session}, agent.Prompt{Text: "count once"}) {
			evs = append(evs, ev)
			if ev.Type == agent.TypeApprovalRequested {
				requested <- ev
			}
		}
	}()
	var req agent.Event
	select {
	case req = <-requested:
	case <-ctx.Done():
		t.Fatal("no approval_requested event on the stream")
	}
	if req.ID != "s1" || req.Name != "counter" || string(req.Args) != `{"note":"streamed"}` || req.ArgsHash != activities.ArgsHash(req.Args) ||
		!strings.HasPrefix(req.DefinitionHash, "sha256:") || strings.Join(req.Approvers, ",") != "bob" {
		t.Fatalf("approval_requested = %+v, want s1 with its arguments, both hashes and approvers [bob]", req)
	}
	if left := time.Until(req.Deadline); left < 50*time.Minute || left > time.Hour {
		t.Errorf("deadline %v is %v away, want about an hour (the default)", req.Deadline, left)
	}
	bound := `{"approve":true,"argsHash":"` + req.ArgsHash + `","definitionHash":"` + req.DefinitionHash + `"}`
	if st, b := approve("alice-token", "s1", bound); st != http.StatusForbidden || !strings.Contains(b, agent.CodeNotApprover) || !strings.Contains(b, "bob") {
		t.Fatalf("the owner's approval: %d %s, want 403 %s naming the approvers", st, b, agent.CodeNotApprover)
	}
	if n := e.kit.Counter.Runs(session); n != 0 {
		t.Fatalf("the counter ran %d times after a refused decision", n)
	}
	if st, b := approve("bob-token", "s1", bound); st != http.StatusOK {
		t.Fatalf("bob's approval: %d %s", st, b)
	}
	<-done
	must(t, evs, agent.TypeCompleted)
	var resolved []agent.Event
	order := []string{}
	for _, ev := range evs {
		switch ev.Type {
		case agent.TypeApprovalRequested, agent.TypeApprovalResolved, agent.TypeToolStarted:
			order = append(order, ev.Type)
		}
		if ev.Type == agent.TypeApprovalResolved {
			resolved = append(resolved, ev)
		}
	}
	if strings.Join(order, ",") != "approval_requested,approval_resolved,tool_started" {
		t.Errorf("stream order %v, want the request, the decision, then the tool", order)
	}
	if len(resolved) != 1 || !resolved[0].Approved || resolved[0].By != "bob" || resolved[0].TimedOut {
		t.Errorf("approval_resolved = %+v, want one, approved by bob", resolved)
	}
	if n := e.kit.Counter.Runs(session); n != 1 {
		t.Errorf("the approved counter ran %d times, want 1", n)
	}

	// No one decides: denied at the deadline, the model told why.
	start := time.Now()
	evs = collectWith(t, client, session, "run bash")
	must(t, evs, agent.TypeCompleted)
	var timedOut *agent.Event
	for i, ev := range evs {
		if ev.Type == agent.TypeApprovalResolved {
			timedOut = &evs[i]
		}
	}
	if timedOut == nil || !timedOut.TimedOut || timedOut.Approved || !strings.Contains(timedOut.Reason, "2s") {
		t.Fatalf("approval_resolved = %+v, want a timed-out denial naming the 2s deadline", timedOut)
	}
	if took := time.Since(start); took < 2*time.Second {
		t.Errorf("the turn ended after %v, before the 2s deadline", took)
	}
	reqs := e.kit.Model.Requests()
	last := reqs[len(reqs)-1].Messages
	if tr := last[len(last)-1]; !strings.Contains(tr.Content, "was not run") || !strings.Contains(tr.Content, "within 2s") {
		t.Errorf("the model read %+v after the deadline, want the denial saying why", tr)
	}
}

// collectWith runs one turn through a and returns its events.
func collectWith(t *testing.T, a agent.Agent, session, text string) []agent.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var evs []agent.Event
	for ev := range a.Invoke(ctx, agent.Scope{Session: session}, agent.Prompt{Text: text}) {
		evs = append(evs, ev)
	}
	return evs
}

// ask_user over HTTP: the question arrives on the stream (question_asked,
// with its deadline); the owner's answer (POST /sessions/{id}/answers/{call})
// becomes the call's result, which the model reads on its next step, once;
// a second answer finds nothing waiting, and another principal's session
// does not exist for them.
func TestAskUserOverHTTP(t *testing.T) {
	e := newEnv(t)
	e.writeConfig("askUser: true\n")
	e.startWorker()
	hs := e.authIngress(nil)
	const session = "ask-user-http"
	e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "q1", Name: "ask_user", Args: `{"question":"Which color?"}`}}},
		modelserver.Reply{Text: []string{"you chose blue"}},
	)
	client := &httpagent.Agent{BaseURL: hs.URL, Token: "alice-token"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	asked := make(chan agent.Event, 1)
	var evs []agent.Event
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range client.Invoke(ctx, agent.Scope{Session: session}, agent.Prompt{Text: "pick a color with me"}) {
			evs = append(evs, ev)
			if ev.Type == agent.TypeQuestionAsked {
				asked <- ev
			}
		}
	}()
	var q agent.Event
	select {
	case q = <-asked:
	case <-ctx.Done():
		t.Fatal("no question_asked event on the stream")
	}
	if q.ID != "q1" || q.Question != "Which color?" || time.Until(q.Deadline) < 50*time.Minute {
		t.Fatalf("question_asked = %+v, want q1 asking which color, an hour to answer", q)
	}
	answer := func(tok, body string) (int, string) {
		st, b, _ := send(t, http.MethodPost, hs.URL+"/sessions/"+session+"/answers/q1", tok, body, nil)
		return st, b
	}
	if st, b := answer("bob-token", `{"text":"red"}`); st != http.StatusNotFound || !strings.Contains(b, agent.CodeNoSuchSession) {
		t.Errorf("bob answering alice's question: %d %s, want 404 %s", st, b, agent.CodeNoSuchSession)
	}
	if st, b := answer("alice-token", `{"text":"blue"}`); st != http.StatusOK {
		t.Fatalf("alice's answer: %d %s", st, b)
	}
	<-done
	must(t, evs, agent.TypeCompleted)
	if st, b := answer("alice-token", `{"text":"green"}`); st != http.StatusNotFound || !strings.Contains(b, agent.CodeNotFound) {
		t.Errorf("a second answer: %d %s, want 404 %s", st, b, agent.CodeNotFound)
	}
	reqs := e.kit.Model.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	last := reqs[1].Messages[len(reqs[1].Messages)-1]
	if last.ToolCallID != "q1" || last.Content != "blue" {
		t.Errorf("the model read %+v, want the answer blue as q1's result", last)
	}
	var answered int
	for _, ev := range evs {
		if ev.Type == agent.TypeQuestionAnswered && ev.By == "alice" && !ev.TimedOut {
			answered++
		}
	}
	if answered != 1 {
		t.Errorf("question_answered by alice %d times on the stream, want 1", answered)
	}
}

// A worker process SIGKILLed while a turn waits for approval: the wait
// lives in the workflow, so another worker serves the decision; the
// approved (non-idempotent) tool runs once and the turn completes with
// the stored answer.
func TestApprovalSurvivesWorkerKill(t *testing.T) {
	t.Parallel() // it mostly waits out a worker's timeouts: shards.sh runs it beside the others
	e := newEnv(t)
	processEnv(t, e)
	side := filepath.Join(e.kit.Dir, "deploys.txt")
	e.writeConfig("retry:\n  heartbeat: 3s\ntools:\n  bash: {requiresApproval: true}\n")
	e.kit.Model.EnqueueFor("deploy it",
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "k1", Name: "bash", Args: fmt.Sprintf(`{"command":"echo deployed >> %s"}`, side)}}},
		modelserver.Reply{Text: []string{"Deployed."}})
	w1 := e.startWorkerProcess(t)
	session := e.session("approve-kill")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	key := durable.NewKey() // the NATS feed outlives test runs
	asked := make(chan agent.Event, 1)
	var evs []agent.Event
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range e.agent.Invoke(agent.WithIdempotencyKey(ctx, key), agent.Scope{Session: session}, agent.Prompt{Text: "deploy it"}) {
			evs = append(evs, ev)
			if ev.Type == agent.TypeApprovalRequested {
				asked <- ev
			}
		}
	}()
	var q agent.Event
	select {
	case q = <-asked:
	case <-ctx.Done():
		t.Fatal("no approval_requested on the stream")
	}
	w1.kill(t)
	e.startWorkerProcess(t)
	// The event can come from a workflow task the killed worker never
	// completed: the call waits again once another worker has redone it,
	// which the session's state shows.
	waitFor(t, time.Minute, "the call waiting again", func() bool {
		st, err := e.agent.State(ctx, session)
		return err == nil && len(st.Approvals) == 1 && st.Approvals[0].Call == "k1"
	})
	req := workflows.ApproveRequest{Call: "k1", Approve: true, ArgsHash: q.ArgsHash, DefinitionHash: q.DefinitionHash}
	if err := e.agent.Approve(ctx, session, req); err != nil {
		t.Fatalf("approve: %v", err)
	}
	if err := e.agent.Approve(ctx, session, req); err == nil {
		t.Error("a second decision on the decided call was accepted")
	}
	<-done
	must(t, evs, agent.TypeCompleted)
	if stored := recordedAnswer(t, e, session, key); agenttest.TextAfterLastRetry(evs) != stored || stored != "Deployed." {
		t.Errorf("client text %q, stored %q, want Deployed.", agenttest.TextAfterLastRetry(evs), stored)
	}
	b, _ := os.ReadFile(side)
	if n := strings.Count(string(b), "deployed"); n != 1 {
		t.Errorf("the approved tool ran %d times, want 1", n)
	}
}

// checkAnsweredInTurn checks that a question answered in a conversation
// (the answer delivered twice) was the call's result, not a turn: two model
// calls, the second reading want as call's result, still two a second after
// the redelivery, and session with one turn and nothing queued.
func checkAnsweredInTurn(t *testing.T, e *env, session, call, want string) {
	t.Helper()
	reqs := e.kit.Model.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2 (the answer was a turn of its own?)", len(reqs))
	}
	if last := reqs[1].Messages[len(reqs[1].Messages)-1]; last.ToolCallID != call || last.Content != want {
		t.Errorf("the model read %+v, want %s as %s's result", last, want, call)
	}
	time.Sleep(time.Second) // deliberate: a redelivery that became a turn would have asked the model by now
	if n := e.kit.Model.Count(); n != 2 {
		t.Errorf("%d model calls after the redelivery, want 2", n)
	}
	st, err := e.agent.State(context.Background(), session)
	if err != nil || st.Turns != 1 || len(st.Queued) != 0 {
		t.Errorf("session state %+v (%v), want one turn and nothing queued", st, err)
	}
}
