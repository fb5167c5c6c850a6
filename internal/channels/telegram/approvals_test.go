package telegram

import (
	"testing"

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
	if err != nil || dec == nil || dec.Session != "telegram:42" || dec.ID != "telegram:q1" || dec.Request != want {
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
