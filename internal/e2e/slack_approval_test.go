package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/slack"
	"github.com/fastagent/fastagent/internal/testsupport/fakeslack"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
	"github.com/fastagent/fastagent/workflows"
)

// A gated tool in a Slack thread is decided with buttons in that thread:
//   - the approval message shows the tool and its arguments, with Approve
//     and Deny buttons bound to the call's hashes;
//   - a signed click from someone other than the person who asked is
//     refused, told to that person only (response_url), and changes nothing;
//   - the asker's click approves: the tool runs once, the message shows who
//     approved, and the answer arrives in the thread;
//   - the same click delivered again, and a late click, are not a second
//     decision.
func TestSlackApprovalButtons(t *testing.T) {
	s := newSlackStack(t)
	s.e.writeConfig("tools:\n  counter: {requiresApproval: true}\n")
	s.startWorker()
	const channel, ts, asker = "C0APPROVE", "1515449600.000100", "U061F7AUR"
	session := slack.SessionID(s.team, channel, ts)
	t.Cleanup(func() { s.terminate(session) })
	s.e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "sl1", Name: testkit.CounterName, Args: `{"note":"from slack"}`}}},
		modelserver.Reply{Text: []string{"counted in slack"}},
	)
	if code, body, _ := s.post(s.event("EvApprove", "app_mention", "", channel, ts, "", "<@U0LAN0Z89> count this"), slackSecret, time.Now(), nil); code != http.StatusOK {
		t.Fatalf("mention: %d %s", code, body)
	}

	// The approval message, with its buttons.
	ask := waitApprovalMessage(t, s, channel)
	m := messageAt(s, channel, ask.ts)
	if m.Thread != ts || !strings.Contains(m.Text, "*counter*") || !strings.Contains(m.Text, `"note": "from slack"`) {
		t.Fatalf("approval message %+v, want the tool and its arguments in the thread %s", m, ts)
	}
	var v struct{ S, C, A, D string }
	if err := json.Unmarshal([]byte(ask.value), &v); err != nil || v.S != session || v.C != "sl1" || !strings.HasPrefix(v.A, "sha256:") || !strings.HasPrefix(v.D, "sha256:") {
		t.Fatalf("button value %s, want the session, the call and both hashes", ask.value)
	}

	click := func(user, actionTS, action string) {
		t.Helper()
		body := interaction(s.team, channel, user, actionTS, action, ask.value, s.fake.srv.URL+"/response/"+actionTS)
		if code, b, took := s.post(body, slackSecret, time.Now(), map[string]string{"Content-Type": "application/x-www-form-urlencoded"}); code != http.StatusOK || took > 3*time.Second {
			t.Fatalf("click by %s: %d %s after %v, want 200 within Slack's 3 s", user, code, b, took)
		}
	}
	// Someone else clicks: refused, told privately, nothing decided.
	click("UINTRUDER", "1700000000.000001", "fastagent_approve")
	notes := s.fake.srv.Calls("response/1700000000.000001")
	if len(notes) != 1 || !strings.Contains(notes[0].Get("text"), "may not decide") || notes[0].Get("response_type") != "ephemeral" {
		t.Fatalf("notes to the refused clicker: %+v, want one ephemeral 'may not decide'", notes)
	}
	if st, err := s.e.agent.State(context.Background(), session); err != nil || len(st.Approvals) != 1 {
		t.Fatalf("after a refused click: state %+v, %v, want the call still waiting", st, err)
	}
	if n := s.e.kit.Counter.Runs(session); n != 0 {
		t.Fatalf("the counter ran %d times after a refused click", n)
	}

	// The asker approves; the same click arrives twice.
	click(asker, "1700000000.000002", "fastagent_approve")
	click(asker, "1700000000.000002", "fastagent_approve")
	waitFor(t, 90*time.Second, "the answer in the thread", func() bool {
		for _, m := range s.fake.replies(channel) {
			if strings.Contains(m.Text, "counted in slack") && !m.Streaming {
				return true
			}
		}
		return false
	})
	// A late click finds nothing waiting.
	click(asker, "1700000000.000003", "fastagent_deny")
	if late := s.fake.srv.Calls("response/1700000000.000003"); len(late) != 1 || !strings.Contains(late[0].Get("text"), "not applied") {
		t.Errorf("the late click was told %+v, want that it was not applied", late)
	}
	if n := s.e.kit.Counter.Runs(session); n != 1 {
		t.Errorf("the approved counter ran %d times, want 1", n)
	}
	if n := len(s.fake.srv.Calls("response/1700000000.000002")); n != 0 {
		t.Errorf("the applied click was answered with %d notes, want none", n)
	}
	waitFor(t, 30*time.Second, "the approval message settled", func() bool {
		return strings.Contains(messageAt(s, channel, ask.ts).Text, "Approved by <@"+asker+">")
	})
	if m := messageAt(s, channel, ask.ts); strings.Contains(m.Text, "wants to run") {
		t.Errorf("the settled approval message still asks: %q", m.Text)
	}
	var asks int
	for _, c := range s.fake.srv.Calls("chat.postMessage") {
		if strings.Contains(c.Get("blocks"), "fastagent_approve") {
			asks++
		}
	}
	if asks != 1 {
		t.Errorf("%d approval messages posted, want 1", asks)
	}
}

// A call whose approvers are slack:admins is decided by the workspace's
// admins and owners, as users.info tells: the asker, a plain member, is
// refused with a note and nothing changes; an admin's click approves and
// the message shows who approved.
func TestSlackAdminsApprove(t *testing.T) {
	s := newSlackStack(t)
	s.e.writeConfig("tools:\n  counter: {requiresApproval: true, approvers: [slack:admins]}\n")
	s.startWorker()
	const channel, ts, asker, admin = "C0ADMINS", "1515449700.000100", "U061F7AUR", "UADMIN01"
	s.fake.srv.AddUser(fakeslack.User{ID: asker, TeamID: s.team})
	s.fake.srv.AddUser(fakeslack.User{ID: admin, TeamID: s.team, Admin: true})
	session := slack.SessionID(s.team, channel, ts)
	t.Cleanup(func() { s.terminate(session) })
	s.e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "sa1", Name: testkit.CounterName, Args: `{"note":"admins"}`}}},
		modelserver.Reply{Text: []string{"counted for the admins"}},
	)
	if code, body, _ := s.post(s.event("EvAdmins", "app_mention", "", channel, ts, "", "<@U0LAN0Z89> count this"), slackSecret, time.Now(), nil); code != http.StatusOK {
		t.Fatalf("mention: %d %s", code, body)
	}
	ask := waitApprovalMessage(t, s, channel)
	if m := messageAt(s, channel, ask.ts); !strings.Contains(m.Text, "the workspace's admins and owners") {
		t.Errorf("approval message %q, want it to name the workspace's admins and owners", m.Text)
	}
	click := func(user, actionTS string) {
		t.Helper()
		body := interaction(s.team, channel, user, actionTS, "fastagent_approve", ask.value, s.fake.srv.URL+"/response/"+actionTS)
		if code, b, _ := s.post(body, slackSecret, time.Now(), map[string]string{"Content-Type": "application/x-www-form-urlencoded"}); code != http.StatusOK {
			t.Fatalf("click by %s: %d %s", user, code, b)
		}
	}
	click(asker, "1700000001.000001")
	notes := s.fake.srv.Calls("response/1700000001.000001")
	if len(notes) != 1 || !strings.Contains(notes[0].Get("text"), "may not decide") {
		t.Fatalf("notes to the member: %+v, want one 'may not decide'", notes)
	}
	if st, err := s.e.agent.State(context.Background(), session); err != nil || len(st.Approvals) != 1 {
		t.Fatalf("after the member's click: state %+v, %v, want the call still waiting", st, err)
	}
	if n := s.e.kit.Counter.Runs(session); n != 0 {
		t.Fatalf("the counter ran %d times after a refused click", n)
	}
	click(admin, "1700000001.000002")
	waitFor(t, 90*time.Second, "the answer in the thread", func() bool {
		for _, m := range s.fake.replies(channel) {
			if strings.Contains(m.Text, "counted for the admins") && !m.Streaming {
				return true
			}
		}
		return false
	})
	if n := s.e.kit.Counter.Runs(session); n != 1 {
		t.Errorf("the approved counter ran %d times, want 1", n)
	}
	if n := len(s.fake.srv.Calls("response/1700000001.000002")); n != 0 {
		t.Errorf("the admin's click was answered with %d notes, want none", n)
	}
	waitFor(t, 30*time.Second, "the approval message settled", func() bool {
		return strings.Contains(messageAt(s, channel, ask.ts).Text, "Approved by <@"+admin+">")
	})
}

// buttonValue is the Approve button's value in a posted blocks parameter.
func buttonValue(t *testing.T, blocks string) string {
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
			if e.ActionID == "fastagent_approve" {
				return e.Value
			}
		}
	}
	t.Fatalf("no approve button in %s", blocks)
	return ""
}

// interaction is a block_actions interactivity request as Slack sends it:
// a form whose payload field holds the JSON.
func interaction(team, channel, user, actionTS, actionID, value, responseURL string) []byte {
	p, _ := json.Marshal(map[string]any{
		"type": "block_actions", "team": map[string]any{"id": team}, "user": map[string]any{"id": user},
		"channel": map[string]any{"id": channel}, "response_url": responseURL, "trigger_id": "trig-" + actionTS,
		"actions": []map[string]any{{"action_id": actionID, "block_id": "fastagent_approval", "value": value, "type": "button", "action_ts": actionTS}},
	})
	return []byte("payload=" + url.QueryEscape(string(p)))
}

// messageAt is the fake's message ts of channel.
func messageAt(s *slackStack, channel, ts string) (m struct{ Thread, Text string }) {
	for _, x := range s.fake.replies(channel) {
		if x.TS == ts {
			m.Thread, m.Text = x.Thread, x.Text
		}
	}
	return m
}

// ask_user in a Slack thread: the question is posted in the thread; the
// asker's next message there is the answer (the tool's result, read by the
// model's next step), not a second turn; the same event delivered again
// changes nothing; one answer lands in the thread.
func TestSlackAskUser(t *testing.T) {
	e := newEnv(t)
	e.writeConfig("askUser: true\n")
	runSlackAskUser(t, e, "")
}

// runSlackAskUser drives TestSlackAskUser on env e and returns the
// session's workflow ID (history scenario slack_ask_user).
func runSlackAskUser(t *testing.T, e *env, _ string) string {
	s := &slackStack{e: e, fake: newFakeSlack(t), team: fmt.Sprintf("TASK%d", time.Now().UnixNano())}
	s.reply = slack.NewReplier("xoxb-e2e", s.fake.srv.URL)
	s.door = httptest.NewServer(channels.Handler(&slack.Door{SigningSecret: slackSecret, APIURL: s.fake.srv.URL}, e.client, e.queue, nil))
	t.Cleanup(s.door.Close)
	s.startWorker()
	const channel, ts = "C0ASKUSER", "1515449700.000100"
	session := slack.SessionID(s.team, channel, ts)
	s.e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "sq1", Name: "ask_user", Args: `{"question":"Which city?"}`}}},
		modelserver.Reply{Text: []string{"Booked in Lisbon."}},
	)
	if code, body, _ := s.post(s.event("EvAsk1", "app_mention", "", channel, ts, "", "<@U0LAN0Z89> book me a hotel"), slackSecret, time.Now(), nil); code != http.StatusOK {
		t.Fatalf("mention: %d %s", code, body)
	}
	waitFor(t, 90*time.Second, "the question in the thread", func() bool {
		for _, m := range s.fake.replies(channel) {
			if m.Thread == ts && strings.Contains(m.Text, "Which city?") && strings.Contains(m.Text, "Reply in this thread, mentioning me, to answer") {
				return true
			}
		}
		return false
	})
	// In a channel only mentions reach the agent (groupMode: mentions).
	answer := s.event("EvAsk2", "app_mention", "", channel, "1515449701.000200", ts, "<@U0LAN0Z89> Lisbon")
	for i := 0; i < 2; i++ { // delivered twice
		if code, body, _ := s.post(answer, slackSecret, time.Now(), nil); code != http.StatusOK {
			t.Fatalf("answer: %d %s", code, body)
		}
	}
	waitFor(t, 90*time.Second, "the answer in the thread", func() bool {
		for _, m := range s.fake.replies(channel) {
			if m.Thread == ts && m.Text == "Booked in Lisbon." {
				return true
			}
		}
		return false
	})
	checkAnsweredInTurn(t, s.e, session, "sq1", "Lisbon")
	return workflows.WorkflowID(session)
}

// approvalMessage is the approval message a Slack turn posted: its ts and
// its buttons' value.
type approvalMessage struct{ ts, value string }

// waitApprovalMessage waits for the approval message with its buttons in
// channel.
func waitApprovalMessage(t *testing.T, s *slackStack, channel string) approvalMessage {
	t.Helper()
	var ask approvalMessage
	waitFor(t, 90*time.Second, "the approval message", func() bool {
		for _, c := range s.fake.srv.Calls("chat.postMessage") {
			if strings.Contains(c.Get("blocks"), "fastagent_approve") && c.Get("channel") == channel {
				ask.value = buttonValue(t, c.Get("blocks"))
				for _, m := range s.fake.replies(channel) {
					if strings.Contains(m.Text, "wants to run") {
						ask.ts = m.TS
					}
				}
				return ask.ts != ""
			}
		}
		return false
	})
	return ask
}
