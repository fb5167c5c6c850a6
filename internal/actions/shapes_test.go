package actions

import (
	"testing"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/converter"
)

// The costs of the other turn shapes docs/load-and-sizing.md states, each
// read from a recorded history.
const (
	channelTurnActions      = 9 // the session's side of a chat turn with its live reply
	chatRoutingActions      = 3 // the chat workflow's side: the message, its routing, the turn's end
	wakeActions             = 6 // the wake's timer and the turn it runs
	manualCompactionActions = 3 // the update, its markers, Session.Compact
	abortActions            = 5 // the abort's update, the stop notice, the call's record, Turn.Record, status idle
)

// status is the FastAgentStatus value the upsert event id sets.
func status(t *testing.T, h *historypb.History, id int64) string {
	t.Helper()
	for _, ev := range h.GetEvents() {
		if ev.GetEventId() != id {
			continue
		}
		var v string
		p := ev.GetUpsertWorkflowSearchAttributesEventAttributes().GetSearchAttributes().GetIndexedFields()["FastAgentStatus"]
		if err := converter.GetDefaultDataConverter().FromPayload(p, &v); err != nil {
			t.Fatalf("event %d: %v", id, err)
		}
		return v
	}
	t.Fatalf("no event %d", id)
	return ""
}

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
// delivery's signal, the turn's markers, its status upserts, the live reply
// (Channel.Stream), Model.Generate, Turn.Record, the live reply's settle
// timer and the final Channel.Reply. The chat workflow adds the message's
// signal, Chat.Route and the turn-done signal.
func TestChannelTurn(t *testing.T) {
	h := load(t, "channel_deliveries")
	as := Between(Count(h), lastDelivery(t, h), 1<<62)
	// A status upsert to idle before the turn's first one (to running) is
	// the previous turn's return to idle, when the delivery came before
	// it: it is that turn's.
	for i, a := range as {
		if a.Kind != "upsert_workflow_search_attributes" {
			continue
		}
		if status(t, h, a.EventID) == "idle" {
			as = append(as[:i:i], as[i+1:]...)
		}
		break
	}
	k := ByKind(as)
	if k["signal_workflow"] != 1 || k["start_timer"] != 1 || k["schedule_activity"] != 4 {
		t.Errorf("a chat turn: %d signals, %d timers, %d activities; want 1, 1, 4: %s", k["signal_workflow"], k["start_timer"], k["schedule_activity"], kinds(as))
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
// turn without an update (the turn's markers, Model.Generate, Turn.Record
// and the two status upserts).
func TestWake(t *testing.T) {
	as := Count(load(t, "wake_one_shot"))
	var timer int64
	for _, a := range as {
		if a.Kind == "start_timer" {
			timer = a.EventID
		}
	}
	if timer == 0 {
		t.Fatalf("no timer: %s", kinds(as))
	}
	var turnEnd int64 // the first turn's Turn.Record; the wake's turn follows
	for _, a := range as {
		if a.What == "Turn.Record" && a.EventID > timer && turnEnd == 0 {
			turnEnd = a.EventID
		}
	}
	wake := append(Between(as, timer, timer), Between(as, turnEnd+1, 1<<62)...)
	if k := ByKind(wake); k["accept_workflow_update"] != 0 || k["schedule_activity"] != 2 {
		t.Errorf("the wake's turn: %s", kinds(wake))
	}
	// The first turn's status back to idle comes after its Turn.Record.
	if n := Total(wake) - 1; n != wakeActions {
		t.Errorf("a wake costs %d actions, documented %d: %s", n, wakeActions, kinds(wake))
	}
}

// A manual compaction between turns; and an abort while a tool runs.
func TestCompactionAndAbort(t *testing.T) {
	h := load(t, "compaction")
	turns := PerTurn(h)
	compact, before := turns[len(turns)-1], turns[len(turns)-2]
	// The compaction came while the turn before it was being recorded:
	// that turn's return to idle waited for it, and is that turn's.
	if ByKind(before)["upsert_workflow_search_attributes"] == 0 {
		for i, a := range compact {
			if a.Kind == "upsert_workflow_search_attributes" && status(t, h, a.EventID) == "idle" {
				compact = append(compact[:i:i], compact[i+1:]...)
				break
			}
		}
	}
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
