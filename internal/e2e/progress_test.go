package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/agent/agenttest"
	"github.com/fastagent/fastagent/internal/channels/slack"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
)

// stepsCommand prints a line every 1.2 s: each is the call's progress for a
// while, longer than the one-a-second throttle.
const stepsCommand = `for i in 1 2 3; do echo step $i; sleep 1.2; done`

// invokeRequest is POST /invoke for session with text, authenticated.
func invokeRequest(t *testing.T, base, session, text string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/invoke", strings.NewReader(fmt.Sprintf(`{"session":%q,"text":%q}`, session, text)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+e2eToken)
	return req
}

// progressOf returns the messages of call's tool_progress events, checking
// that each came before the call's tool_ended and the terminal and names
// the call and its tool.
func progressOf(t *testing.T, evs []agent.Event, call, tool string) []string {
	t.Helper()
	var msgs []string
	ended := false
	for _, ev := range evs {
		switch {
		case ev.Type == agent.TypeToolEnded && ev.ID == call:
			ended = true
		case ev.Type == agent.TypeToolProgress && ev.ID == call:
			if ended {
				t.Errorf("tool_progress %q came after the call's tool_ended: %s", ev.Content, describe(evs))
			}
			if ev.Name != tool || ev.Seq != 0 {
				t.Errorf("tool_progress %+v: want tool %s and no SSE id", ev, tool)
			}
			msgs = append(msgs, ev.Content)
		}
	}
	return msgs
}

// TestToolProgress: a scripted model calls bash with a command printing a
// line every 1.2 s. The SSE client of POST /invoke receives tool_progress
// events carrying those lines (at least two different ones) while the
// call runs, before its tool_ended and the terminal. The progress never
// enters the workflow's history: a call printing 50 lines adds exactly the
// history events of one printing nothing for as long.
func TestToolProgress(t *testing.T) {
	e := newEnv(t)
	e.startWorker()
	hs := e.ingress()

	e.kit.Model.Enqueue(
		modelserver.Reply{Text: []string{"Running it."}, ToolCalls: []modelserver.ToolCall{{
			ID: "call_steps", Name: "bash", Args: fmt.Sprintf(`{"command":%q}`, stepsCommand)}}},
		modelserver.Reply{Text: []string{"All three steps ran."}},
	)
	evs := readAll(t, invokeRequest(t, hs.URL, e.session("progress-sse"), "run the steps"))
	if term := agenttest.CheckTerminal(t, evs); term.Type != agent.TypeCompleted {
		t.Fatalf("turn: %s", describe(evs))
	}
	msgs := progressOf(t, evs, "call_steps", "bash")
	var distinct []string
	for _, m := range msgs {
		if !strings.HasPrefix(m, "step ") {
			t.Errorf("progress %q is not a line of the output", m)
		}
		if !slices.Contains(distinct, m) {
			distinct = append(distinct, m)
		}
	}
	if len(distinct) < 2 {
		t.Fatalf("tool_progress messages %q, want at least two of step 1..3: %s", msgs, describe(evs))
	}
	if !slices.IsSorted(distinct) {
		t.Errorf("tool_progress out of order: %q", distinct)
	}
	t.Logf("tool_progress: %q", msgs)

	// History: 50 lines over about 3 s against 3 s of silence.
	chatty, quiet := e.session("progress-chatty"), e.session("progress-quiet")
	for _, c := range []struct{ session, command string }{
		{chatty, `for i in $(seq 1 50); do echo line $i; sleep 0.06; done`},
		{quiet, `sleep 3`},
	} {
		e.kit.Model.Enqueue(
			modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "call_h", Name: "bash", Args: fmt.Sprintf(`{"command":%q}`, c.command)}}},
			modelserver.Reply{Text: []string{"done"}},
		)
		evs := readAll(t, invokeRequest(t, hs.URL, c.session, "run it"))
		if term := agenttest.CheckTerminal(t, evs); term.Type != agent.TypeCompleted {
			t.Fatalf("turn of %s: %s", c.session, describe(evs))
		}
		n := len(progressOf(t, evs, "call_h", "bash"))
		switch {
		case c.session == chatty && n < 2:
			t.Fatalf("the 50-line call sent %d tool_progress events, want at least 2: %s", n, describe(evs))
		case c.session == quiet && n != 0:
			t.Fatalf("the silent call sent %d tool_progress events", n)
		case c.session == chatty:
			t.Logf("the 50-line call sent %d tool_progress events (throttled)", n)
		}
	}
	// Workflow task events are left out of the comparison: a loaded
	// machine can time one out and schedule it again, progress or not.
	types := func(session string) []string {
		var out []string
		for _, ev := range rawHistory(t, e, session).Events {
			if name := ev.GetEventType().String(); !strings.Contains(name, "WorkflowTask") {
				out = append(out, name)
			}
		}
		return out
	}
	hc, hq := types(chatty), types(quiet)
	if !slices.Equal(hc, hq) {
		t.Fatalf("history of the 50-line call (%d events) differs from the silent one's (%d):\n%s\n%s",
			len(hc), len(hq), strings.Join(hc, " "), strings.Join(hq, " "))
	}
	t.Logf("history events (workflow tasks aside) of a turn with a 50-line tool call: %d, the same as without output", len(hc))
}

// TestSlackShowsToolProgress: while bash runs in a Slack turn, the live
// reply's task for the call carries the latest line of its output.
func TestSlackShowsToolProgress(t *testing.T) {
	s := newSlackStack(t)
	s.e.kit.Model.Enqueue(
		modelserver.Reply{Text: []string{"Running it."}, ToolCalls: []modelserver.ToolCall{{
			ID: "call_steps", Name: "bash", Args: fmt.Sprintf(`{"command":%q}`, stepsCommand)}}},
		modelserver.Reply{Text: []string{"All three steps ran."}},
	)
	s.startWorker()
	const channel, ts = "C0PROGRESS", "1515449900.000777"
	session := slack.SessionID(s.team, channel, ts)
	t.Cleanup(func() { s.terminate(session) })
	if code, _, _ := s.post(s.event("EvProgress", "app_mention", "", channel, ts, "", "<@U0LAN0Z89> run the steps"), slackSecret, time.Now(), nil); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	waitFor(t, 2*time.Minute, "the stream stopped", func() bool { return s.fake.settled(1) })
	replies := s.fake.replies("")
	if len(replies) != 1 {
		t.Fatalf("replies = %+v, want one", replies)
	}
	var details []string
	for _, task := range replies[0].Tasks {
		if task.ID == "call_steps" && task.Details != "" {
			details = append(details, task.Details)
		}
	}
	if !slices.ContainsFunc(details, func(d string) bool { return strings.HasPrefix(d, "step ") }) {
		t.Fatalf("task updates %+v: no progress line of call_steps", replies[0].Tasks)
	}
	t.Logf("progress lines shown: %q", details)
}
