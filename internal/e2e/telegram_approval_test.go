package e2e

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
)

// A gated tool in a Telegram chat is decided with an inline keyboard: the
// approval message shows the call with Approve and Deny buttons; a press
// by someone other than the asker is refused with an alert and changes
// nothing; the asker's press (delivered twice) approves once; the tool
// runs once, the message shows the decision without buttons, and the
// answer arrives.
func TestTelegramApprovalButtons(t *testing.T) {
	e := newEnv(t)
	e.writeConfig("tools:\n  counter: {requiresApproval: true}\n")
	s := newTelegramStack(t, e)
	s.startWorker()
	e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "tg1", Name: testkit.CounterName, Args: `{"note":"from telegram"}`}}},
		modelserver.Reply{Text: []string{"counted in telegram"}},
	)
	s.send(telegramUpdate(t, "private.json", s.user, 0))

	var ask struct {
		id   int64
		text string
	}
	waitFor(t, 90*time.Second, "the approval message", func() bool {
		for _, c := range s.fake.Calls("sendMessage") {
			if b, _ := json.Marshal(c.Params["reply_markup"]); strings.Contains(string(b), "fa:approve") {
				ask.text, _ = c.Params["text"].(string)
				for _, m := range s.fake.Messages(s.user) {
					if m.Text == ask.text {
						ask.id = m.MessageID
					}
				}
				return ask.id != 0
			}
		}
		return false
	})
	if !strings.Contains(ask.text, "<b>counter</b>") || !strings.Contains(ask.text, "from telegram") || !strings.Contains(ask.text, "· call tg1") {
		t.Fatalf("approval message %q, want the tool, its arguments and the call", ask.text)
	}
	press := func(qid string, from int64, data string) {
		t.Helper()
		u, _ := json.Marshal(map[string]any{"update_id": time.Now().UnixNano() % 1e9, "callback_query": map[string]any{
			"id": qid, "data": data, "chat_instance": "ci",
			"from":    map[string]any{"id": from, "is_bot": false, "first_name": "Someone"},
			"message": map[string]any{"message_id": ask.id, "chat": map[string]any{"id": s.user, "type": "private"}, "date": 1764614401, "text": ask.text},
		}})
		s.send(u)
	}
	press("q-stranger", 777, "fa:approve")
	alerts := s.fake.Calls("answerCallbackQuery")
	if len(alerts) != 1 || alerts[0].Params["callback_query_id"] != "q-stranger" || !strings.Contains(alerts[0].Params["text"].(string), "may not decide") {
		t.Fatalf("answers to the stranger's press: %+v, want one alert saying they may not decide", alerts)
	}
	if n := e.kit.Counter.Runs(telegramSession(s.user)); n != 0 {
		t.Fatalf("the counter ran %d times after a refused press", n)
	}
	press("q-asker", 424242, "fa:approve")
	press("q-asker", 424242, "fa:approve")
	waitFor(t, 90*time.Second, "the answer", func() bool {
		for _, m := range s.fake.Messages(s.user) {
			if strings.Contains(m.Text, "counted in telegram") {
				return true
			}
		}
		return false
	})
	if n := e.kit.Counter.Runs(telegramSession(s.user)); n != 1 {
		t.Errorf("the approved counter ran %d times, want 1", n)
	}
	waitFor(t, 30*time.Second, "the approval message settled", func() bool {
		for _, m := range s.fake.Messages(s.user) {
			if m.MessageID == ask.id {
				return strings.HasPrefix(m.Text, "✅ Approved by user 424242")
			}
		}
		return false
	})
}

// ask_user in a Telegram chat: the question is posted as a reply to the
// user's message; the asker's next message in the chat is the answer (the
// tool's result, read by the model's next step), not a second turn; the
// same update delivered again changes nothing; one answer arrives.
func TestTelegramAskUser(t *testing.T) {
	e := newEnv(t)
	e.writeConfig("askUser: true\n")
	s := newTelegramStack(t, e)
	s.startWorker()
	e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "tq1", Name: "ask_user", Args: `{"question":"Which city?"}`}}},
		modelserver.Reply{Text: []string{"Booked in Lisbon."}},
	)
	s.send(telegramUpdate(t, "private.json", s.user, 0))
	waitFor(t, 90*time.Second, "the question", func() bool {
		for _, m := range s.fake.Messages(s.user) {
			if strings.Contains(m.Text, "Which city?") && strings.Contains(m.Text, "Reply here to answer") && m.ReplyTo == 11 {
				return true
			}
		}
		return false
	})
	var u map[string]any
	_ = json.Unmarshal(telegramUpdate(t, "private.json", s.user, 0), &u)
	u["update_id"] = 815000102
	msg := u["message"].(map[string]any)
	msg["message_id"], msg["text"], msg["date"] = 12, "Lisbon", 1764614460
	answer, _ := json.Marshal(u)
	s.send(answer)
	s.send(answer) // delivered twice
	waitFor(t, 90*time.Second, "the answer", func() bool {
		for _, m := range s.fake.Messages(s.user) {
			if m.Text == "Booked in Lisbon." {
				return true
			}
		}
		return false
	})
	checkAnsweredInTurn(t, e, telegramSession(s.user), "tq1", "Lisbon")
}

// telegramSession is the session of a private chat.
func telegramSession(chat int64) string { return "telegram:" + strconv.FormatInt(chat, 10) }
