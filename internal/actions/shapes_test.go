package actions

import (
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
)

// The costs of the other turn shapes docs/load-and-sizing.md states, each
// read from a recorded history.
const (
	channelTurnActions      = 6 // the session's side of a chat turn with its live reply
	chatRoutingActions      = 3 // the chat workflow's side: the message, its routing, the turn's end
	wakeActions             = 3 // the wake's timer and the turn it runs
	manualCompactionActions = 2 // the update, Session.Compact
	abortActions            = 4 // the abort's update, the stop notice, the call's record, Turn.Record
)

// lastDelivery is the event of the last "deliver" signal in h.
func lastDelivery(t *testing.T, h *historypb.History) int64 {
	t.Helper()
	var at int64
	for _, ev := range h.GetEvents() {
		if ev.GetWorkflowExecutionSignaledEventAttributes().GetSignalName() == "deliver" {
			at = ev.GetEventId()
		}
	}
	if at == 0 {
		t.Fatal("no deliver signal in the history")
	}
	return at
}

// A chat turn (Slack, Feishu, Telegram, GitHub) in a running session: the
// delivery's signal, the turn's markers, the live reply (Channel.Stream),
// Model.Generate (which records the turn), the live reply's settle timer
// and the final Channel.Reply. The chat workflow adds the message's signal,
// Chat.Route and the turn-done signal.
func TestChannelTurn(t *testing.T) {
	h := load(t, "channel_deliveries")
	as := Between(Count(h), lastDelivery(t, h), 1<<62)
	k := ByKind(as)
	if k["signal_workflow"] != 1 || k["start_timer"] != 1 || k["schedule_activity"] != 3 || k["upsert_workflow_search_attributes"] != 0 {
		t.Errorf("a chat turn: %d signals, %d timers, %d activities, %d upserts; want 1, 1, 3, 0: %s",
			k["signal_workflow"], k["start_timer"], k["schedule_activity"], k["upsert_workflow_search_attributes"], kinds(as))
	}
	if n := Total(as); n != channelTurnActions {
		t.Errorf("a chat turn costs %d actions in its session, documented %d: %s", n, channelTurnActions, kinds(as))
	}
	chat := PerTurn(load(t, "chat_routing_chat"))
	routed := append(append([]Action(nil), chat[2]...), chat[3]...) // a routed message, then its turn's end
	if n := Total(routed); n != chatRoutingActions {
		t.Errorf("the chat workflow spends %d actions on a turn, documented %d: %s", n, chatRoutingActions, kinds(routed))
	}
}

// A wake-up the agent set (wake tool): its durable timer, then a one-step
// turn without an update (the turn's markers and Model.Generate, which
// records it).
func TestWake(t *testing.T) {
	h := load(t, "wake_one_shot")
	as := Count(h)
	var timer, fired int64
	for _, a := range as {
		if a.Kind == "start_timer" {
			timer = a.EventID
		}
	}
	for _, ev := range h.GetEvents() {
		if ev.GetEventType() == enumspb.EVENT_TYPE_TIMER_FIRED && ev.GetEventId() > timer {
			fired = ev.GetEventId()
		}
	}
	if timer == 0 || fired == 0 {
		t.Fatalf("no wake timer started and fired: %s", kinds(as))
	}
	wake := append(Between(as, timer, timer), Between(as, fired, 1<<62)...)
	if k := ByKind(wake); k["accept_workflow_update"] != 0 || k["schedule_activity"] != 1 {
		t.Errorf("the wake's turn: %s", kinds(wake))
	}
	if n := Total(wake); n != wakeActions {
		t.Errorf("a wake costs %d actions, documented %d: %s", n, wakeActions, kinds(wake))
	}
}

// A manual compaction between turns; and an abort while a tool runs.
func TestCompactionAndAbort(t *testing.T) {
	h := load(t, "compaction")
	turns := PerTurn(h)
	compact := turns[len(turns)-1]
	if n := Total(compact); n != manualCompactionActions {
		t.Errorf("a manual compaction costs %d actions, documented %d: %s", n, manualCompactionActions, kinds(compact))
	}
	abort := PerTurn(load(t, "abort_mid_tool"))[1]
	if k := ByKind(abort); k["accept_workflow_update"] != 1 || k["record_markers"] != 1 {
		t.Errorf("an abort: %s", kinds(abort))
	}
	if n := Total(abort); n != abortActions {
		t.Errorf("an abort costs %d actions, documented %d: %s", n, abortActions, kinds(abort))
	}
}
