package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/larksuite/oapi-sdk-go/v3/event/dispatcher/callback"

	"github.com/fastagent/fastagent/internal/channels/feishu"
	"github.com/fastagent/fastagent/internal/testsupport/fakefeishu"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
)

// A gated tool in a Feishu chat is decided with an interactive card:
//   - the card replies to the message in its thread, showing the tool and
//     its arguments, with Approve and Deny buttons bound to the session,
//     the call, its hashes and the chat;
//   - an unsigned click is refused (401) and decides nothing;
//   - a verified click by someone other than the person who asked is
//     answered with an error toast and changes nothing;
//   - the asker's click (delivered twice) approves once: the tool runs
//     once, the card shows who approved, and the answer arrives;
//   - a late click finds nothing waiting.
func TestFeishuApprovalCard(t *testing.T) {
	e := newEnv(t)
	e.writeConfig("tools:\n  counter: {requiresApproval: true}\n")
	s := newFeishuStack(t, e)
	s.startWorker()
	id := s.msgID()
	session := feishu.KindFeishu + ":" + id
	t.Cleanup(func() { s.terminate(session) })
	e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "fs1", Name: testkit.CounterName, Args: `{"note":"from feishu"}`}}},
		modelserver.Reply{Text: []string{"counted in feishu"}},
	)
	s.send(id, "", "count this")

	var ask fakefeishu.Message
	waitFor(t, 90*time.Second, "the approval card", func() bool {
		for _, m := range replyTo(s.fake, id) {
			if strings.Contains(m.Content, `"fa":"approve"`) {
				ask = m
				return true
			}
		}
		return false
	})
	text := s.fake.CardText(ask)
	if !ask.InThread || ask.MsgType != "interactive" || !strings.Contains(text, "**counter**") || !strings.Contains(text, `"note": "from feishu"`) ||
		!strings.Contains(text, "<at id="+feishuUser+"></at>") {
		t.Fatalf("approval card %+v (text %q), want the tool, its arguments and the asker, in the thread", ask, text)
	}
	value := approveValue(t, ask.Content)
	if value["s"] != session || value["c"] != "fs1" || value["chat"] != s.chat ||
		!strings.HasPrefix(value["a"].(string), "sha256:") || !strings.HasPrefix(value["d"].(string), "sha256:") {
		t.Fatalf("button value %+v, want the session, the call, both hashes and the chat", value)
	}

	click := func(event, user string, h http.Header) (int, callback.Toast) {
		t.Helper()
		body := sealed(t, cardClick(s.chat, ask.ID, event, user, value))
		if h == nil {
			h = feishu.Sign(feishuKey, time.Now(), "nonce-"+event, body)
		}
		start := time.Now()
		code, toast := s.postClick(body, h)
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("click %s answered after %v, beyond the platform's 3 s", event, took)
		}
		return code, toast
	}
	// Unsigned: refused before anything is read.
	if code, _ := click("ev_unsigned", feishuUser, http.Header{}); code != http.StatusUnauthorized {
		t.Fatalf("an unsigned click: status %d, want 401", code)
	}
	// Someone else clicks: refused, told in a toast, nothing decided.
	if code, toast := click("ev_stranger", "ou_e2e_stranger", nil); code != http.StatusOK || toast.Type != "error" || !strings.Contains(toast.Content, "may not decide") {
		t.Fatalf("the stranger's click: %d, toast %+v; want an error toast saying they may not decide", code, toast)
	}
	if st, err := e.agent.State(context.Background(), session); err != nil || len(st.Approvals) != 1 {
		t.Fatalf("after refused clicks: state %+v, %v; want the call still waiting", st, err)
	}
	if n := e.kit.Counter.Runs(session); n != 0 {
		t.Fatalf("the counter ran %d times after refused clicks", n)
	}

	// The asker approves; the same click arrives twice.
	for i := 0; i < 2; i++ {
		if code, toast := click("ev_asker", feishuUser, nil); code != http.StatusOK || toast.Type != "success" {
			t.Fatalf("the asker's click (delivery %d): %d, toast %+v; want a success toast", i+1, code, toast)
		}
	}
	want := feishuAnswer(t, e, id, id)
	if want != "counted in feishu" {
		t.Errorf("stored answer %q", want)
	}
	waitFor(t, 30*time.Second, "the answer card settled", func() bool {
		for _, m := range replyTo(s.fake, id) {
			if c, ok := cardOf(s.fake, m); ok && !c.Streaming && c.Text == want {
				return true
			}
		}
		return false
	})
	if n := e.kit.Counter.Runs(session); n != 1 {
		t.Errorf("the approved counter ran %d times, want 1", n)
	}
	waitFor(t, 30*time.Second, "the approval card settled", func() bool {
		for _, m := range s.fake.Messages() {
			if m.ID == ask.ID {
				return s.fake.CardText(m) == "✅ Approved by <at id="+feishuUser+"></at>." && !strings.Contains(m.Content, `"fa":`)
			}
		}
		return false
	})
	// A late click finds nothing waiting.
	if _, toast := click("ev_late", feishuUser, nil); toast.Type != "error" || !strings.Contains(toast.Content, "not applied") {
		t.Errorf("the late click was told %+v, want that it was not applied", toast)
	}
	var asks int
	for _, m := range s.fake.Messages() {
		if m.ID == ask.ID || strings.Contains(m.Content, `"fa":"approve"`) {
			asks++
		}
	}
	if asks != 1 {
		t.Errorf("%d approval cards posted, want 1", asks)
	}
}

// cardClick is a card.action.trigger callback (schema 2.0): user clicked
// the button with value on card message msg in chat.
func cardClick(chat, msg, event, user string, value map[string]any) []byte {
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	b, _ := json.Marshal(map[string]any{
		"schema": "2.0",
		"header": map[string]any{"event_id": event, "event_type": feishu.EventCardAction, "token": feishuToken,
			"create_time": now, "app_id": feishuAppID, "tenant_key": "tk_e2e"},
		"event": map[string]any{
			"operator": map[string]any{"open_id": user, "tenant_key": "tk_e2e"},
			"token":    "c-" + event,
			"action":   map[string]any{"value": value, "tag": "button"},
			"host":     "im_message",
			"context":  map[string]any{"open_message_id": msg, "open_chat_id": chat},
		},
	})
	return b
}

// postClick sends a card callback to the door and returns the status and
// the answer's toast.
func (s *feishuStack) postClick(body []byte, h http.Header) (int, callback.Toast) {
	s.e.t.Helper()
	code, raw := s.postRaw(body, h)
	var ans callback.CardActionTriggerResponse
	if code == http.StatusOK {
		if err := json.Unmarshal(raw, &ans); err != nil {
			s.e.t.Fatalf("callback answer %q: %v", raw, err)
		}
	}
	if ans.Toast == nil {
		return code, callback.Toast{}
	}
	return code, *ans.Toast
}

// approveValue is the callback value of the Approve button of a card.
func approveValue(t *testing.T, content string) map[string]any {
	t.Helper()
	var card struct {
		Body struct {
			Elements []struct {
				Columns []struct {
					Elements []struct {
						Behaviors []struct {
							Value map[string]any `json:"value"`
						} `json:"behaviors"`
					} `json:"elements"`
				} `json:"columns"`
			} `json:"elements"`
		} `json:"body"`
	}
	if err := json.Unmarshal([]byte(content), &card); err != nil {
		t.Fatalf("card %s: %v", content, err)
	}
	for _, e := range card.Body.Elements {
		for _, c := range e.Columns {
			for _, b := range c.Elements {
				for _, bh := range b.Behaviors {
					if bh.Value["fa"] == "approve" {
						return bh.Value
					}
				}
			}
		}
	}
	t.Fatalf("no Approve button in %s", content)
	return nil
}

// ask_user in a Feishu chat: the question is posted as a card replying to
// the user's message in its thread; the asker's next message in the
// thread is the answer (the tool's result, read by the model's next
// step), not a second turn; the same event delivered again changes
// nothing; one answer arrives.
func TestFeishuAskUser(t *testing.T) {
	e := newEnv(t)
	e.writeConfig("askUser: true\n")
	s := newFeishuStack(t, e)
	s.startWorker()
	id, answer := s.msgID(), s.msgID()
	session := feishu.KindFeishu + ":" + id
	t.Cleanup(func() { s.terminate(session) })
	e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "fq1", Name: "ask_user", Args: `{"question":"Which city?"}`}}},
		modelserver.Reply{Text: []string{"Booked in Lisbon."}},
	)
	s.send(id, "", "book me a trip")
	waitFor(t, 90*time.Second, "the question", func() bool {
		for _, m := range replyTo(s.fake, id) {
			text := s.fake.CardText(m)
			if strings.Contains(text, "❓ Which city?") && strings.Contains(text, "Reply in this thread to answer") && m.InThread {
				return true
			}
		}
		return false
	})
	s.send(answer, id, "Lisbon")
	s.send(answer, id, "Lisbon") // delivered twice (the same event_id)
	waitFor(t, 90*time.Second, "the answer", func() bool {
		for _, m := range replyTo(s.fake, id) {
			if c, ok := cardOf(s.fake, m); ok && !c.Streaming && c.Text == "Booked in Lisbon." {
				return true
			}
		}
		return false
	})
	checkAnsweredInTurn(t, e, session, "fq1", "Lisbon")
	if r := replyTo(s.fake, answer); len(r) != 0 {
		t.Errorf("the answer was replied to as a turn: %+v", r)
	}
}
