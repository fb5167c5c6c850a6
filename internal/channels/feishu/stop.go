package feishu

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/larksuite/oapi-sdk-go/v3/event/dispatcher/callback"

	"github.com/fastagent/fastagent/internal/wire"
)

// actionStop is the action a live reply's Stop button carries.
const actionStop = "stop"

// stopElement is the element ID of the live card's Stop button.
const stopElement = "stop"

// stopValue is the callback value of the Stop button of the turn that
// answers target's message (nil when the target does not say which
// message and whose turn it is): the answered message (the turn), the
// thread its session lives in, who started it and the chat.
func stopValue(t wire.Target) *buttonValue {
	if t.Message == "" || t.User == "" || t.Chat == "" {
		return nil
	}
	return &buttonValue{Action: actionStop, Message: t.Message, User: t.User, Root: t.Thread, Chat: t.Chat}
}

// stopButton is the live card's Stop button element.
func stopButton(v *buttonValue) map[string]any {
	return map[string]any{
		"tag": "button", "element_id": stopElement, "type": "danger", "size": "small",
		"text":      map[string]any{"tag": "plain_text", "content": "⏹ Stop"},
		"behaviors": []any{map[string]any{"type": "callback", "value": v}},
	}
}

// plainEscaper keeps a name shown in a toast as text: no mention tag, no
// entity, whatever the name holds.
var plainEscaper = markdownEscaper

// StopClick turns a click on a live reply's Stop button (card.action.trigger,
// webhook or long connection) into the stop command for that reply's turn,
// with the toast that answers the click: the same path as /stop in the
// chat, so a second click finds the turn stopping and is told nothing is
// running. Only the person who started the turn, or one of the channel
// file's admins, may stop it; anyone else gets an error toast and nothing
// stops. A click on another button is (nil, nil, nil).
func (d *Door) StopClick(ev *callback.CardActionTriggerEvent) (*wire.ChatMessage, *Toast, error) {
	kind := d.Profile.Kind
	if ev == nil || ev.Event == nil || ev.Event.Action == nil {
		return nil, nil, nil
	}
	v, ok := valueOf(ev.Event.Action.Value)
	if !ok || v.Action != actionStop {
		return nil, nil, nil
	}
	if v.Message == "" || v.User == "" || v.Chat == "" {
		return nil, nil, fmt.Errorf("%s: stop button without a turn: %+v", kind, v)
	}
	user := ""
	if ev.Event.Operator != nil {
		user = ev.Event.Operator.OpenID
	}
	id := eventIDOf(ev.EventV2Base)
	if user == "" || id == "" {
		return nil, nil, fmt.Errorf("%s: %s without the operator's open_id or an event_id", kind, EventCardAction)
	}
	if c := ev.Event.Context; c == nil || c.OpenChatID != v.Chat {
		return nil, newToast(toastError, "This reply belongs to another chat: stop it there."), nil
	}
	if user != v.User && !slices.Contains(d.Admins, user) {
		who := plainEscaper.Replace(v.User)
		if len(d.Admins) > 0 {
			return nil, newToast(toastError, "Only "+who+" (who asked) or an admin of this bot can stop this."), nil
		}
		return nil, newToast(toastError, "Only "+who+" (who asked) can stop this."), nil
	}
	m := &wire.ChatMessage{
		Kind: kind, UniqueIDs: true, Chat: v.Chat,
		// One click is one command: a redelivered callback (same event)
		// is deduplicated by the chat workflow.
		ID: "stop-click:" + id, Event: id, Root: v.Root, Summoned: true,
		Command: wire.CommandStop, StopTurn: v.Message,
		User: user, UserName: user, Policy: d.Policy,
	}
	return m, newToast(toastInfo, "Stopping…"), nil
}

// valueOf reads a button's callback value (false for another app's).
func valueOf(value any) (buttonValue, bool) {
	var v buttonValue
	raw, err := json.Marshal(value)
	if err != nil || json.Unmarshal(raw, &v) != nil {
		return buttonValue{}, false
	}
	return v, strings.TrimSpace(v.Action) != ""
}
