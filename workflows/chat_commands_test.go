package workflows_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"go.temporal.io/sdk/activity"

	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
)

// TestChatCommands: chat commands never reach a model: each runs
// Chat.Command with the session of its place; /new makes the place's
// later turns run in a fresh session (and /stop and /status act on that
// one); the channel's whileBusy travels with every routed turn.
func TestChatCommands(t *testing.T) {
	t.Parallel()
	h := newChatHarness(t)
	var mu sync.Mutex
	var cmds []string
	h.env.RegisterActivityWithOptions(func(_ context.Context, in wire.CommandInput) error {
		mu.Lock()
		defer mu.Unlock()
		cmds = append(cmds, fmt.Sprintf("%s|%s|%s|%v", in.Command, in.Session, in.Fresh, in.Reply != nil))
		return nil
	}, activity.RegisterOptions{Name: workflows.ActivityChatCommand})
	cont := wire.ChatPolicy{DirectSession: wire.SessionContinuous, GroupSession: wire.SessionContinuous, WhileBusy: workflows.WhileBusySteer}
	thread := wire.ChatPolicy{}
	h.send(wire.ChatMessage{ID: "1", Direct: true, Text: "hello", Policy: cont})
	h.send(wire.ChatMessage{ID: "2", Direct: true, Command: wire.CommandNew, Text: "/new", Policy: cont})
	h.send(wire.ChatMessage{ID: "2", Direct: true, Command: wire.CommandNew, Text: "/new", Policy: cont}) // redelivered: nothing more
	h.send(wire.ChatMessage{ID: "3", Direct: true, Text: "again", Policy: cont})
	h.send(wire.ChatMessage{ID: "4", Direct: true, Command: wire.CommandStatus, Policy: cont})
	h.send(wire.ChatMessage{ID: "5", Direct: true, Command: wire.CommandNew, Policy: cont})
	h.send(wire.ChatMessage{ID: "6", Direct: true, Text: "third", Policy: cont})
	h.send(wire.ChatMessage{ID: "7", Direct: true, Command: wire.CommandStop, Policy: cont})
	h.send(wire.ChatMessage{ID: "8", Direct: true, Command: wire.CommandHelp, Policy: cont})
	// Thread sessions: /new in a thread renews that thread's session; at
	// the top level it names none.
	h.send(wire.ChatMessage{ID: "10.0", Summoned: true, Text: "in a thread", Policy: thread})
	h.send(wire.ChatMessage{ID: "11.0", Root: "10.0", Summoned: true, Command: wire.CommandNew, Policy: thread})
	h.send(wire.ChatMessage{ID: "12.0", Root: "10.0", Summoned: true, Text: "more", Policy: thread})
	h.send(wire.ChatMessage{ID: "13.0", Summoned: true, Command: wire.CommandNew, Policy: thread})
	// A stop button's click acts on the session its turn was routed to:
	// the click cannot tell the direct chat (continuous) from a group
	// (threads), nor see that the place was renewed since.
	h.send(wire.ChatMessage{ID: "30.0", Direct: true, Text: "dm turn", Policy: wire.ChatPolicy{DirectSession: wire.SessionContinuous}})
	h.send(wire.ChatMessage{ID: "stop-click:a", Summoned: true, Command: wire.CommandStop, StopTurn: "30.0",
		Policy: wire.ChatPolicy{DirectSession: wire.SessionContinuous}})
	h.send(wire.ChatMessage{ID: "stop-click:b", Root: "10.0", Summoned: true, Command: wire.CommandStop, StopTurn: "10.0", Policy: thread})
	// Context mode: a bare /status in a thread the bot owns is for it; in
	// a thread it does not own, for nobody (not even context).
	ctxMode := wire.ChatPolicy{GroupMode: wire.GroupContext}
	h.send(wire.ChatMessage{ID: "20.0", Summoned: true, Text: "start", Policy: ctxMode})
	h.send(wire.ChatMessage{ID: "21.0", Root: "20.0", Command: wire.CommandStatus, Text: "/status", Policy: ctxMode})
	h.send(wire.ChatMessage{ID: "22.0", Root: "99.0", Command: wire.CommandStatus, Text: "/status", Policy: ctxMode})
	st := h.run()

	// A continuous DM's turns answer at the top level (thread "").
	want := []string{
		"slack:T1:C1||hello", "slack:T1:C1~1||again", "slack:T1:C1~2||third",
		"slack:T1:C1:10.0|10.0|in a thread", "slack:T1:C1:10.0~1|10.0|more", "slack:T1:C1~2||dm turn", "slack:T1:C1:20.0|20.0|start",
	}
	got := h.turns()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("routed %q,\nwant %q", got, want)
	}
	h.mu.Lock()
	for _, r := range h.routed[:3] {
		if r.Delivery.WhileBusy != workflows.WhileBusySteer {
			t.Errorf("turn %s routed with whileBusy %q, want the channel's steer", r.Delivery.Key, r.Delivery.WhileBusy)
		}
	}
	h.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	wantCmds := []string{
		"new|slack:T1:C1|slack:T1:C1~1|true",
		"status|slack:T1:C1~1||true",
		"new|slack:T1:C1~1|slack:T1:C1~2|true",
		"stop|slack:T1:C1~2||true",
		"help|slack:T1:C1~2||true",
		"new|slack:T1:C1:10.0|slack:T1:C1:10.0~1|true",
		"new|||true",
		"stop|slack:T1:C1~2||true",
		"stop|slack:T1:C1:10.0||true",
		"status|slack:T1:C1:20.0||true",
	}
	if fmt.Sprint(cmds) != fmt.Sprint(wantCmds) {
		t.Errorf("commands %q,\nwant %q", cmds, wantCmds)
	}
	if len(st.Buffers) != 0 {
		t.Errorf("a command was buffered as context: %+v", st.Buffers)
	}
	if len(st.Fresh) != 2 {
		t.Errorf("state keeps %d renewed places, want 2: %+v", len(st.Fresh), st.Fresh)
	}
}
