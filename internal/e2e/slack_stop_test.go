package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/slack"
	"github.com/fastagent/fastagent/internal/testsupport/fakeslack"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// TestSlackStopButton: a streamed reply in a thread shows a Stop button
// while its turn runs.
//   - a click with a bad signature is refused (401) and changes nothing;
//   - a click by someone who neither started the turn nor is a listed
//     admin is refused, told privately who may stop it, and changes
//     nothing;
//   - the starter clicks twice: the turn is aborted exactly once (one
//     accepted abort update), ends aborted, and the second click is told
//     nothing is running;
//   - when the turn ends the button goes away.
func TestSlackStopButton(t *testing.T) {
	s := newSlackStack(t)
	// The door of a channel file with `admins: [UADMIN01]`.
	s.door.Close()
	s.door = httptest.NewServer(channels.Handler(&slack.Door{SigningSecret: slackSecret, APIURL: s.fake.srv.URL,
		TurnAdmins: []string{"UADMIN01"}}, s.e.client, s.e.queue, nil))
	t.Cleanup(s.door.Close)
	s.startWorker()
	const channel, ts, starter = "C0STOP", "1515449600.000300", "U061F7AUR"
	session := slack.SessionID(s.team, channel, ts)
	t.Cleanup(func() { s.terminate(session) })
	slow := make([]string, 300)
	for i := range slow {
		slow[i] = fmt.Sprintf("w%d ", i)
	}
	s.e.kit.Model.Enqueue(modelserver.Reply{Text: slow, ChunkDelay: 100 * time.Millisecond})
	if code, body, _ := s.post(s.event("EvStop", "app_mention", "", channel, ts, "", "<@U0LAN0Z89> write a long essay"), slackSecret, time.Now(), nil); code != http.StatusOK {
		t.Fatalf("mention: %d %s", code, body)
	}
	var button fakeslack.Message
	waitFor(t, time.Minute, "the live reply's Stop button", func() bool {
		for _, m := range s.fake.replies(channel) {
			if strings.Contains(m.Blocks, "fastagent_stop") {
				button = m
				return true
			}
		}
		return false
	})
	if button.Thread != ts {
		t.Fatalf("the Stop button is in thread %q, want %s", button.Thread, ts)
	}
	value := stopValue(t, button.Blocks)
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	click := func(user, actionTS, secret string) int {
		t.Helper()
		body := interaction(s.team, channel, user, actionTS, "fastagent_stop", value, s.fake.srv.URL+"/response/"+actionTS)
		code, _, took := s.post(body, secret, time.Now(), form)
		if took > 3*time.Second {
			t.Errorf("click by %s answered after %v, want within Slack's 3 s", user, took)
		}
		return code
	}
	running := func() bool {
		st, err := s.e.agent.State(context.Background(), session)
		return err == nil && st.Running != ""
	}

	// A forged click: refused, nothing stops.
	if code := click(starter, "1700000100.000001", "not-the-secret"); code != http.StatusUnauthorized {
		t.Fatalf("forged click: %d, want 401", code)
	}
	// Someone else: refused privately.
	if code := click("UINTRUDER", "1700000100.000002", slackSecret); code != http.StatusOK {
		t.Fatalf("intruder click: %d", code)
	}
	waitFor(t, 30*time.Second, "the intruder's note", func() bool {
		return len(s.fake.srv.Calls("response/1700000100.000002")) == 1
	})
	note := s.fake.srv.Calls("response/1700000100.000002")[0]
	if !strings.Contains(note.Get("text"), "Only <@"+starter+">") || note.Get("response_type") != "ephemeral" {
		t.Errorf("intruder told %q (%s), want an ephemeral 'only <@%s>'", note.Get("text"), note.Get("response_type"), starter)
	}
	if len(s.fake.srv.Calls("response/1700000100.000001")) != 0 {
		t.Errorf("the forged click was answered")
	}
	if !running() {
		t.Fatalf("the turn stopped after refused clicks")
	}
	if n := acceptedAborts(t, s.e, session); n != 0 {
		t.Fatalf("%d aborts after refused clicks", n)
	}

	// The starter clicks twice.
	if code := click(starter, "1700000100.000003", slackSecret); code != http.StatusOK {
		t.Fatalf("first click: %d", code)
	}
	if code := click(starter, "1700000100.000004", slackSecret); code != http.StatusOK {
		t.Fatalf("second click: %d", code)
	}
	key := workflows.ChatTurnKey(slack.Kind, s.team+":"+channel, ts)
	waitFor(t, time.Minute, "the turn aborted", func() bool {
		r, err := s.e.kit.Store.Turn(context.Background(), session, key)
		var o agentloop.Outcome
		return err == nil && json.Unmarshal(r.Outcome, &o) == nil && o.Code == agent.CodeAborted
	})
	waitFor(t, time.Minute, "the second click's answer", func() bool {
		n := 0
		for _, m := range s.fake.replies(channel) {
			if m.Text == activities.NothingRunningText {
				n++
			}
		}
		return n == 1
	})
	waitFor(t, time.Minute, "the Stop button gone and the reply settled", func() bool {
		for _, m := range s.fake.replies(channel) {
			if strings.Contains(m.Blocks, "fastagent_stop") || m.Streaming {
				return false
			}
		}
		return len(s.fake.srv.Deleted()) == 1
	})
	if n := acceptedAborts(t, s.e, session); n != 1 {
		t.Errorf("accepted aborts = %d, want exactly 1", n)
	}
	stopped := false
	for _, m := range s.fake.replies(channel) {
		if m.Stream && strings.Contains(m.Text, "stopped by <@"+starter+">") {
			stopped = true
		}
	}
	if !stopped {
		t.Errorf("replies %+v, want the stream to say it was stopped by <@%s>", s.fake.replies(channel), starter)
	}
	for _, actionTS := range []string{"1700000100.000003", "1700000100.000004"} {
		if n := len(s.fake.srv.Calls("response/" + actionTS)); n != 0 {
			t.Errorf("the starter's click %s was told %d private notes, want none", actionTS, n)
		}
	}
	if n := s.e.kit.Model.Count(); n != 1 {
		t.Errorf("model calls = %d, want 1: clicks are never turns", n)
	}
}

// stopValue is the Stop button's value in a message's blocks.
func stopValue(t *testing.T, blocks string) string {
	t.Helper()
	var bs []struct {
		Elements []struct {
			ActionID string `json:"action_id"`
			Value    string `json:"value"`
		} `json:"elements"`
	}
	if err := json.Unmarshal([]byte(blocks), &bs); err != nil {
		t.Fatalf("blocks %s: %v", blocks, err)
	}
	for _, b := range bs {
		for _, e := range b.Elements {
			if e.ActionID == "fastagent_stop" {
				return e.Value
			}
		}
	}
	t.Fatalf("no Stop button in %s", blocks)
	return ""
}

// acceptedAborts counts the abort updates session's current run accepted.
func acceptedAborts(t *testing.T, e *env, session string) int {
	t.Helper()
	it := e.client.GetWorkflowHistory(context.Background(), workflows.WorkflowID(session), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	n := 0
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatalf("history: %v", err)
		}
		if a := ev.GetWorkflowExecutionUpdateAcceptedEventAttributes(); a != nil && a.GetAcceptedRequest().GetInput().GetName() == workflows.UpdateAbort {
			n++
		}
	}
	return n
}
