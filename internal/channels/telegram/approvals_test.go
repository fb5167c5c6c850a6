package telegram

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
)

// A press of an approval button decides the call its message names, by
// the user who pressed; other callbacks are nothing, and a press on a
// message that names no call is an error (nothing is decided).
func TestDecisionOfAPress(t *testing.T) {
	t.Parallel()
	d := &Door{}
	msg := &Message{MessageID: 5, Chat: Chat{ID: 42}, Text: "⏸ deploy wants to run with:\n{}\nsession telegram:42 · call c1"}
	from := &User{ID: 7, FirstName: "Ada"}
	dec, err := d.Decision(Update{CallbackQuery: &CallbackQuery{ID: "q1", From: from, Message: msg, Data: dataDeny}})
	want := workflows.ApproveRequest{Call: "c1", By: "telegram:7", Door: Kind, Reason: "denied in Telegram by Ada"}
	if err != nil || dec == nil || dec.Session != "telegram:42" || dec.ID != "telegram:q1" || !reflect.DeepEqual(dec.Request, want) {
		t.Fatalf("deny press: %+v, %v; want %+v in telegram:42", dec, err, want)
	}
	if dec, err := d.Decision(Update{CallbackQuery: &CallbackQuery{ID: "q2", From: from, Message: msg, Data: "other"}}); dec != nil || err != nil {
		t.Errorf("another button: %+v, %v; want nothing", dec, err)
	}
	plain := &Message{MessageID: 6, Chat: Chat{ID: 42}, Text: "just a message"}
	if dec, err := d.Decision(Update{CallbackQuery: &CallbackQuery{ID: "q3", From: from, Message: plain, Data: dataApprove}}); dec != nil || err == nil {
		t.Errorf("a press on a message naming no call: %+v, %v; want an error", dec, err)
	}
}

// The agent's question is a reply to the user's message, HTML-escaped,
// saying how to answer: in a private chat any message, in a group a reply
// to it; its reference names the chat and the message.
func TestQuestionMessage(t *testing.T) {
	t.Parallel()
	r, fake := newTestReplier(t)
	deadline := time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC)
	for _, c := range []struct {
		chat, how string
	}{
		{"424242", "Reply here to answer (until 03:04 UTC, Jan 2)."},
		{"-100123", "Reply to this message to answer (until 03:04 UTC, Jan 2)."},
	} {
		ref, err := r.Question(context.Background(), wire.Target{Chat: c.chat, Message: "11"}, agent.QuestionAsked("q1", "Which <city>?", deadline))
		if err != nil {
			t.Fatal(err)
		}
		calls := fake.Calls("sendMessage")
		last := calls[len(calls)-1].Params
		text, _ := last["text"].(string)
		reply, _ := last["reply_parameters"].(map[string]any)
		if !strings.HasPrefix(text, "❓ Which &lt;city&gt;?") || !strings.Contains(text, "<i>"+c.how+"</i>") || last["parse_mode"] != "HTML" ||
			reply == nil || fmt.Sprint(reply["message_id"]) != "11" {
			t.Errorf("chat %s: sent %+v, want the escaped question replying to 11 with %q", c.chat, last, c.how)
		}
		if !strings.HasPrefix(ref, c.chat+"/") {
			t.Errorf("chat %s: reference %q", c.chat, ref)
		}
	}
}
