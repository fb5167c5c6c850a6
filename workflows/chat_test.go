package workflows_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
)

// chatHarness runs a ChatWorkflow with a fake Chat.Route that records the
// turns it routes.
type chatHarness struct {
	t      *testing.T
	env    *testsuite.TestWorkflowEnvironment
	mu     sync.Mutex
	routed []wire.RouteInput
	step   time.Duration
	chat   string
	scope  string // ChatInput.Scope: another agent's conversation
}

func newChatHarness(t *testing.T) *chatHarness {
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4}))))
	h := &chatHarness{t: t, env: suite.NewTestWorkflowEnvironment(), chat: "T1:C1"}
	h.env.RegisterWorkflowWithOptions(workflows.ChatWorkflow, workflow.RegisterOptions{Name: workflows.ChatWorkflowType})
	h.env.RegisterActivityWithOptions(func(_ context.Context, in wire.RouteInput) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.routed = append(h.routed, in)
		return nil
	}, activity.RegisterOptions{Name: workflows.ActivityChatRoute})
	return h
}

// send signals m (kind slack, chat T1:C1 unless set) at the next step.
func (h *chatHarness) send(m wire.ChatMessage) {
	if m.Kind == "" {
		m.Kind = "slack"
	}
	if m.Chat == "" {
		m.Chat = h.chat
	}
	h.step += time.Second
	h.env.RegisterDelayedCallback(func() { h.env.SignalWorkflow(wire.SignalChatMessage, m) }, h.step)
}

func (h *chatHarness) done(d workflows.TurnDone) {
	h.step += time.Second
	h.env.RegisterDelayedCallback(func() { h.env.SignalWorkflow(wire.SignalTurnDone, d) }, h.step)
}

func (h *chatHarness) run() workflows.ChatState {
	h.env.RegisterDelayedCallback(func() { h.env.CancelWorkflow() }, h.step+time.Minute)
	var st workflows.ChatState
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(workflows.QueryState)
		if err != nil {
			h.t.Fatalf("query: %v", err)
		}
		if err := v.Get(&st); err != nil {
			h.t.Fatal(err)
		}
	}, h.step+time.Second)
	h.env.ExecuteWorkflow(workflows.ChatWorkflowType, workflows.ChatInput{Kind: "slack", Chat: h.chat, Scope: h.scope})
	return st
}

// turns renders the routed turns as "session|thread|prompt".
func (h *chatHarness) turns() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.routed {
		var tg wire.Target
		_ = json.Unmarshal(r.Delivery.Reply.Data, &tg)
		out = append(out, r.Session+"|"+tg.Thread+"|"+r.Delivery.Prompt.Text)
	}
	return out
}

func TestChatRouting(t *testing.T) {
	t.Parallel()
	ctxMode := wire.ChatPolicy{GroupMode: wire.GroupContext}
	cases := []struct {
		name string
		msgs []wire.ChatMessage
		want []string
	}{
		{"direct messages start thread sessions; a reply continues its thread", []wire.ChatMessage{
			{Chat: "T1:D1", ID: "1.0", Direct: true, Text: "hi"},
			{Chat: "T1:D1", ID: "2.0", Root: "1.0", Direct: true, Text: "more"},
		}, []string{"slack:T1:D1:1.0|1.0|hi", "slack:T1:D1:1.0|1.0|more"}},
		{"continuous direct messages share one session", []wire.ChatMessage{
			{Chat: "T1:D1", ID: "1.0", Direct: true, Text: "hi", Policy: wire.ChatPolicy{DirectSession: wire.SessionContinuous}},
			{Chat: "T1:D1", ID: "2.0", Direct: true, Text: "again", Policy: wire.ChatPolicy{DirectSession: wire.SessionContinuous}},
		}, []string{"slack:T1:D1||hi", "slack:T1:D1||again"}},
		{"redelivered and overlapping events run once", []wire.ChatMessage{
			{ID: "1.0", Event: "Ev1", Summoned: true, Text: "hi"},
			{ID: "1.0", Event: "Ev1", Summoned: true, Text: "hi"},
			{ID: "1.0", Event: "Ev2", Summoned: true, Text: "hi"},
		}, []string{"slack:T1:C1:1.0|1.0|hi"}},
		{"mentions mode: a bare reply in an owned root is not a turn", []wire.ChatMessage{
			{ID: "1.0", Summoned: true, Text: "hi"},
			{ID: "2.0", Root: "1.0", Text: "thanks"},
		}, []string{"slack:T1:C1:1.0|1.0|hi"}},
		{"context mode: a bare reply in an owned root is a turn", []wire.ChatMessage{
			{ID: "1.0", Summoned: true, Text: "hi", Policy: ctxMode},
			{ID: "2.0", Root: "1.0", Text: "and then?", Policy: ctxMode},
		}, []string{"slack:T1:C1:1.0|1.0|hi", "slack:T1:C1:1.0|1.0|and then?"}},
		{"a summons in someone else's thread answers there without adopting it", []wire.ChatMessage{
			{ID: "2.0", Root: "1.0", Summoned: true, Text: "what do you think?", Policy: ctxMode},
			{ID: "3.0", Root: "1.0", Text: "bare reply", Policy: ctxMode},
			{ID: "4.0", Root: "1.0", Summoned: true, Text: "and now?", Policy: ctxMode},
		}, []string{"slack:T1:C1:1.0|1.0|what do you think?",
			"slack:T1:C1:1.0|1.0|Messages in this conversation since you last answered (context, not addressed to you):\n- someone: bare reply\n\nThe message addressed to you:\nand now?"}},
		{"continuous group session", []wire.ChatMessage{
			{ID: "1.0", Summoned: true, Text: "hi", Policy: wire.ChatPolicy{GroupSession: wire.SessionContinuous}},
		}, []string{"slack:T1:C1||hi"}},
		{"empty and foreign messages are ignored", []wire.ChatMessage{
			{ID: "1.0", Summoned: true, Text: "  "},
			{Chat: "T9:C9", ID: "2.0", Summoned: true, Text: "wrong chat"},
			{Summoned: true, Text: "no id"},
		}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newChatHarness(t)
			if c.msgs[0].Chat != "" {
				h.chat = c.msgs[0].Chat
			}
			for _, m := range c.msgs {
				h.send(m)
			}
			h.run()
			if got := h.turns(); strings.Join(got, "\n#\n") != strings.Join(c.want, "\n#\n") {
				t.Errorf("routed:\n%q\nwant:\n%q", got, c.want)
			}
		})
	}
}

// TestChatContextCommit: buffered discussion is folded into the next
// answered turn once, kept when that turn fails (folded again next time)
// and dropped when it completes.
func TestChatContextCommit(t *testing.T) {
	t.Parallel()
	p := wire.ChatPolicy{GroupMode: wire.GroupContext}
	h := newChatHarness(t)
	h.send(wire.ChatMessage{ID: "1.0", User: "U1", UserName: "<@U1>", Text: "lunch?", Policy: p})
	h.send(wire.ChatMessage{ID: "2.0", Summoned: true, Text: "book a table", Policy: p})
	// A second summons while the first turn is open folds nothing twice.
	h.send(wire.ChatMessage{ID: "3.0", Summoned: true, Text: "for four", Policy: p})
	h.done(workflows.TurnDone{Key: "slack:T1:C1:2.0", Completed: false})
	h.send(wire.ChatMessage{ID: "4.0", Summoned: true, Text: "retry", Policy: p})
	h.done(workflows.TurnDone{Key: "slack:T1:C1:4.0", Completed: true})
	h.send(wire.ChatMessage{ID: "5.0", Summoned: true, Text: "thanks", Policy: p})
	st := h.run()

	folded := "Messages in this conversation since you last answered (context, not addressed to you):\n- <@U1>: lunch?\n\nThe message addressed to you:\n"
	want := []string{
		"slack:T1:C1:2.0|2.0|" + folded + "book a table",
		"slack:T1:C1:3.0|3.0|for four",
		"slack:T1:C1:4.0|4.0|" + folded + "retry",
		"slack:T1:C1:5.0|5.0|thanks",
	}
	if got := h.turns(); strings.Join(got, "\n#\n") != strings.Join(want, "\n#\n") {
		t.Errorf("routed:\n%q\nwant:\n%q", got, want)
	}
	h.mu.Lock()
	notify := []string{}
	for _, r := range h.routed {
		notify = append(notify, r.Delivery.Notify)
	}
	h.mu.Unlock()
	equal(t, "notify", strings.Join(notify, ","), "chat:slack:T1:C1,,chat:slack:T1:C1,")
	equal(t, "buffers left", len(st.Buffers), 0)
	equal(t, "owned roots", strings.Join(st.Owned, ","), "2.0,3.0,4.0,5.0")
	equal(t, "routed", st.Routed, 4)
}

// TestChatContinueAsNew: a chat workflow starts a fresh history after
// enough signals, carrying its state (seen IDs, owned roots) with it.
func TestChatContinueAsNew(t *testing.T) {
	t.Parallel()
	h := newChatHarness(t)
	h.env.SetTestTimeout(time.Minute)
	h.send(wire.ChatMessage{ID: "root", Summoned: true, Text: "hi"})
	h.env.RegisterDelayedCallback(func() {
		for i := 0; i < 30; i++ {
			h.env.SignalWorkflow(wire.SignalChatMessage, wire.ChatMessage{Kind: "slack", Chat: "T1:C1", ID: fmt.Sprintf("m%d", i), Text: "chatter"})
		}
	}, 2*time.Second)
	h.env.ExecuteWorkflow(workflows.ChatWorkflowType, workflows.ChatInput{Kind: "slack", Chat: "T1:C1", SignalsPerRun: 20})
	var can *workflow.ContinueAsNewError
	if err := h.env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("workflow error %v, want continue-as-new", err)
	}
	var in workflows.ChatInput
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &in); err != nil {
		t.Fatal(err)
	}
	if in.State == nil {
		t.Fatal("continue-as-new without state")
	}
	// The test environment runs the workflow after each signal: the run
	// ends at its 20th; on a server, signals that arrived meanwhile are
	// drained first (or fail the task, which is retried with them).
	equal(t, "seen", len(in.State.Seen), 20)
	equal(t, "owned", strings.Join(in.State.Owned, ","), "root")
	equal(t, "routed", len(h.turns()), 1)
}

// TestChatStop: a stop message (Telegram /stop) aborts the running turn of
// the conversation's continuous session through Chat.Command, once per
// message, and is never a turn; a top-level stop under thread sessions
// names no session (the command answers that nothing runs there).
func TestChatStop(t *testing.T) {
	t.Parallel()
	h := newChatHarness(t)
	var mu sync.Mutex
	var stops []string
	h.env.RegisterActivityWithOptions(func(_ context.Context, in wire.CommandInput) error {
		mu.Lock()
		defer mu.Unlock()
		stops = append(stops, in.Command+"|"+in.Session+"|"+in.Reason+"|"+in.Key)
		return nil
	}, activity.RegisterOptions{Name: workflows.ActivityChatCommand})
	cont := wire.ChatPolicy{DirectSession: wire.SessionContinuous, GroupSession: wire.SessionContinuous}
	h.send(wire.ChatMessage{ID: "1", Summoned: true, Text: "write an essay", Policy: cont})
	h.send(wire.ChatMessage{ID: "2", Event: "u2", Summoned: true, Stop: true, UserName: "@ada", Policy: cont})
	h.send(wire.ChatMessage{ID: "2", Event: "u2", Summoned: true, Stop: true, UserName: "@ada", Policy: cont}) // redelivered
	h.send(wire.ChatMessage{ID: "3", Summoned: true, Stop: true, Policy: wire.ChatPolicy{}})
	h.run()
	mu.Lock()
	defer mu.Unlock()
	// Keyed by the stop message, so a retried Chat.Command is the same abort.
	want := []string{"stop|slack:T1:C1|stopped by @ada in the chat|slack:T1:C1:2", "stop||stopped by someone in the chat|slack:T1:C1:3"}
	if fmt.Sprint(stops) != fmt.Sprint(want) {
		t.Errorf("stops %q, want %q", stops, want)
	}
	if len(h.routed) != 1 || h.routed[0].Delivery.Prompt.Text != "write an essay" {
		t.Errorf("routed %+v, want only the first message", h.routed)
	}
}

// A conversation of another agent (ChatInput.Scope) routes its turns to
// that agent's sessions, stops them there, and names its own workflow
// with the scope when a turn must tell it its end.
func TestChatOfAnotherAgent(t *testing.T) {
	t.Parallel()
	h := newChatHarness(t)
	h.scope = "reviewer"
	var mu sync.Mutex
	var stops []string
	h.env.RegisterActivityWithOptions(func(_ context.Context, in wire.CommandInput) error {
		mu.Lock()
		defer mu.Unlock()
		stops = append(stops, in.Session)
		return nil
	}, activity.RegisterOptions{Name: workflows.ActivityChatCommand})
	ctxMode := wire.ChatPolicy{GroupMode: wire.GroupContext}
	h.send(wire.ChatMessage{ID: "0.5", Text: "earlier talk", Policy: ctxMode})
	h.send(wire.ChatMessage{ID: "1.0", Summoned: true, Text: "hi", Policy: ctxMode})
	h.send(wire.ChatMessage{ID: "2.0", Root: "1.0", Summoned: true, Stop: true, Policy: ctxMode})
	h.run()
	if got := h.turns(); len(got) != 1 || !strings.HasPrefix(got[0], "reviewer/slack:T1:C1:1.0|1.0|") {
		t.Errorf("routed %q, want the turn in session reviewer/slack:T1:C1:1.0", got)
	}
	if len(h.routed) == 1 && h.routed[0].Delivery.Notify != "chat:reviewer/slack:T1:C1" {
		t.Errorf("the turn tells %q its end, want chat:reviewer/slack:T1:C1", h.routed[0].Delivery.Notify)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(stops) != 1 || stops[0] != "reviewer/slack:T1:C1:1.0" {
		t.Errorf("stopped %q, want reviewer/slack:T1:C1:1.0", stops)
	}
}

// TestChatRouteOutlastsTemporal: a routed turn whose session cannot be
// reached for minutes (Temporal throttled or restarting) is routed once it
// can be: an acknowledged message is never dropped after a time limit.
func TestChatRouteOutlastsTemporal(t *testing.T) {
	t.Parallel()
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4}))))
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(workflows.ChatWorkflow, workflow.RegisterOptions{Name: workflows.ChatWorkflowType})
	var mu sync.Mutex
	attempts, routed := 0, 0
	env.RegisterActivityWithOptions(func(_ context.Context, in wire.RouteInput) error {
		mu.Lock()
		defer mu.Unlock()
		attempts++
		// Eight failures are about 50 s of back-off. (The test
		// environment caps an unlimited retry policy at 10 attempts.)
		if attempts <= 8 {
			return errors.New("service unavailable: the frontend is restarting")
		}
		routed++
		return nil
	}, activity.RegisterOptions{Name: workflows.ActivityChatRoute})
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(wire.SignalChatMessage, wire.ChatMessage{Kind: "slack", Chat: "T1:C1", ID: "1.0", Summoned: true, Text: "hi"})
	}, time.Second)
	env.RegisterDelayedCallback(func() { env.CancelWorkflow() }, time.Hour)
	env.ExecuteWorkflow(workflows.ChatWorkflowType, workflows.ChatInput{Kind: "slack", Chat: "T1:C1"})
	mu.Lock()
	defer mu.Unlock()
	equal(t, "routed", routed, 1)
	if attempts <= 8 {
		t.Errorf("route attempts %d: gave up before the session was reachable", attempts)
	}
}

// TestChatDedupByTime: a redelivery is recognised however many messages
// came in between, as long as it arrives within the platforms' redelivery
// windows; IDs older than the window are forgotten (the state stays
// bounded).
func TestChatDedupByTime(t *testing.T) {
	t.Parallel()
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4}))))
	env := suite.NewTestWorkflowEnvironment()
	env.SetTestTimeout(2 * time.Minute)
	env.RegisterWorkflowWithOptions(workflows.ChatWorkflow, workflow.RegisterOptions{Name: workflows.ChatWorkflowType})
	var mu sync.Mutex
	var routed []string
	env.RegisterActivityWithOptions(func(_ context.Context, in wire.RouteInput) error {
		mu.Lock()
		defer mu.Unlock()
		routed = append(routed, in.Delivery.Key)
		return nil
	}, activity.RegisterOptions{Name: workflows.ActivityChatRoute})
	first := wire.ChatMessage{Kind: "slack", Chat: "T1:C1", ID: "1.0", Event: "Ev1", Summoned: true, Text: "hi"}
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(wire.SignalChatMessage, first) }, time.Second)
	// A busy channel: 2,500 messages (5,000 IDs) within the hour.
	for b := 0; b < 50; b++ {
		env.RegisterDelayedCallback(func() {
			for i := b * 50; i < (b+1)*50; i++ {
				env.SignalWorkflow(wire.SignalChatMessage, wire.ChatMessage{Kind: "slack", Chat: "T1:C1",
					ID: fmt.Sprintf("2.%d", i), Event: fmt.Sprintf("Ev2.%d", i), Text: "chatter"})
			}
		}, time.Duration(2+b)*time.Second)
	}
	// Slack's last retry, about 5 minutes later (a new event ID: the
	// same message through the other subscription).
	redelivered := first
	redelivered.Event = "Ev1-retry"
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(wire.SignalChatMessage, redelivered) }, 6*time.Minute)
	// After the window the old IDs are forgotten.
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(wire.SignalChatMessage, wire.ChatMessage{Kind: "slack", Chat: "T1:C1", ID: "3.0", Text: "tick"})
	}, 30*time.Hour)
	var st workflows.ChatState
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(workflows.QueryState)
		if err != nil {
			t.Errorf("query: %v", err)
			return
		}
		if err := v.Get(&st); err != nil {
			t.Error(err)
		}
	}, 30*time.Hour+time.Minute)
	env.RegisterDelayedCallback(func() { env.CancelWorkflow() }, 31*time.Hour)
	env.ExecuteWorkflow(workflows.ChatWorkflowType, workflows.ChatInput{Kind: "slack", Chat: "T1:C1", SignalsPerRun: 10000})
	mu.Lock()
	defer mu.Unlock()
	equal(t, "routed", fmt.Sprint(routed), fmt.Sprint([]string{"slack:T1:C1:1.0"}))
	// Only the message seen after the window is kept (its ID alone: it
	// has no event ID).
	if len(st.Seen) != 1 || st.Seen[0] != "3.0" {
		t.Errorf("seen after the window: %d IDs (first %q), want only 3.0", len(st.Seen), st.Seen[0])
	}
}

// TestChatContextMentionsOthers: in context mode a bare reply in an owned
// thread that @mentions only other people is their discussion: it is
// buffered, not a turn, and folded into the next answered turn.
func TestChatContextMentionsOthers(t *testing.T) {
	t.Parallel()
	p := wire.ChatPolicy{GroupMode: wire.GroupContext}
	h := newChatHarness(t)
	h.send(wire.ChatMessage{ID: "1.0", Summoned: true, Text: "plan the offsite", Policy: p})
	h.send(wire.ChatMessage{ID: "2.0", Root: "1.0", UserName: "<@U1>", Text: "<@U2> can you book the bus?", MentionsOthers: true, Policy: p})
	h.send(wire.ChatMessage{ID: "3.0", Root: "1.0", Text: "and the hotel?", Policy: p})
	h.run()
	want := []string{
		"slack:T1:C1:1.0|1.0|plan the offsite",
		"slack:T1:C1:1.0|1.0|Messages in this conversation since you last answered (context, not addressed to you):\n- <@U1>: <@U2> can you book the bus?\n\nThe message addressed to you:\nand the hotel?",
	}
	if got := h.turns(); strings.Join(got, "\n#\n") != strings.Join(want, "\n#\n") {
		t.Errorf("routed:\n%q\nwant:\n%q", got, want)
	}
}

// TestChatBufferedFilesAsBackground: the files of buffered discussion
// folded into a turn travel with it as background attachments (resolved
// when the turn runs), not only as their names in the text.
func TestChatBufferedFilesAsBackground(t *testing.T) {
	t.Parallel()
	p := wire.ChatPolicy{GroupMode: wire.GroupContext}
	h := newChatHarness(t)
	chart := wire.Attachment{ID: "F1", Name: "chart.png", Mime: "image/png"}
	h.send(wire.ChatMessage{ID: "1.0", UserName: "<@U1>", Text: "latest numbers", Attachments: []wire.Attachment{chart}, Policy: p})
	h.send(wire.ChatMessage{ID: "2.0", Summoned: true, Text: "what do you make of it?", Policy: p})
	h.run()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.routed) != 1 {
		t.Fatalf("routed %d turns, want 1", len(h.routed))
	}
	var tg wire.Target
	if err := json.Unmarshal(h.routed[0].Delivery.Reply.Data, &tg); err != nil {
		t.Fatal(err)
	}
	equal(t, "background files", fmt.Sprint(tg.Background), fmt.Sprint([]wire.Attachment{chart}))
	equal(t, "primary files", len(tg.Attachments), 0)
}

// TestChatDeletion: a deleted (recalled) message that started a turn has
// that turn dropped in its session (Chat.Drop, which aborts it only while
// it waits); a deleted buffered line is not folded into the next turn; a
// redelivered deletion or a late delivery of the deleted message does
// nothing more.
func TestChatDeletion(t *testing.T) {
	t.Parallel()
	p := wire.ChatPolicy{GroupMode: wire.GroupContext}
	h := newChatHarness(t)
	var drops []wire.DropInput
	h.env.RegisterActivityWithOptions(func(_ context.Context, in wire.DropInput) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		drops = append(drops, in)
		return nil
	}, activity.RegisterOptions{Name: workflows.ActivityChatDrop})
	h.send(wire.ChatMessage{ID: "1.0", Event: "E1", Summoned: true, Text: "book a table", Policy: p})
	h.send(wire.ChatMessage{ID: "2.0", Event: "E2", Root: "1.0", Text: "for four", Policy: p})
	h.send(wire.ChatMessage{ID: "3.0", Event: "E3", UserName: "<@U2>", Text: "lunch?", Policy: p})
	h.send(wire.ChatMessage{ID: "2.0", Event: "E4", Deleted: true, Policy: p})
	h.send(wire.ChatMessage{ID: "3.0", Event: "E5", Deleted: true, Policy: p})
	h.send(wire.ChatMessage{ID: "2.0", Event: "E6", Deleted: true, Policy: p})
	h.send(wire.ChatMessage{ID: "2.0", Event: "E7", Root: "1.0", Text: "for four", Policy: p})
	h.send(wire.ChatMessage{ID: "4.0", Event: "E8", Summoned: true, Text: "and a taxi", Policy: p})
	st := h.run()
	want := []string{
		"slack:T1:C1:1.0|1.0|book a table",
		"slack:T1:C1:1.0|1.0|for four",
		"slack:T1:C1:4.0|4.0|and a taxi",
	}
	if got := h.turns(); strings.Join(got, "\n#\n") != strings.Join(want, "\n#\n") {
		t.Errorf("routed:\n%q\nwant:\n%q", got, want)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(drops) != 1 || drops[0].Session != "slack:T1:C1:1.0" || drops[0].Turn != "slack:T1:C1:2.0" || drops[0].Reply == nil {
		t.Errorf("drops = %+v, want one of turn slack:T1:C1:2.0 in session slack:T1:C1:1.0 with its reply target", drops)
	}
	if len(st.Buffers) != 0 {
		t.Errorf("buffers = %+v, want the deleted line gone", st.Buffers)
	}
}

// TestChatEdits: an edited message never starts or re-runs a turn; an
// edit of buffered discussion not yet folded replaces its line, so the
// next answered turn folds the edited text.
func TestChatEdits(t *testing.T) {
	t.Parallel()
	p := wire.ChatPolicy{GroupMode: wire.GroupContext}
	h := newChatHarness(t)
	h.send(wire.ChatMessage{ID: "1.0", Event: "E1", UserName: "<@U2>", Text: "lunch at noon?", Policy: p})
	h.send(wire.ChatMessage{ID: "1.0", Event: "E2", UserName: "<@U2>", Text: "lunch at one?", Edited: true, Policy: p})
	h.send(wire.ChatMessage{ID: "2.0", Event: "E3", Summoned: true, Text: "book it", Policy: p})
	h.send(wire.ChatMessage{ID: "2.0", Event: "E4", Summoned: true, Text: "book it for six", Edited: true, Policy: p})
	h.send(wire.ChatMessage{ID: "9.0", Event: "E5", Summoned: true, Text: "an edit of a message never seen", Edited: true, Policy: p})
	h.run()
	want := []string{
		"slack:T1:C1:2.0|2.0|Messages in this conversation since you last answered (context, not addressed to you):\n- <@U2>: lunch at one?\n\nThe message addressed to you:\nbook it",
	}
	if got := h.turns(); strings.Join(got, "\n#\n") != strings.Join(want, "\n#\n") {
		t.Errorf("routed:\n%q\nwant:\n%q", got, want)
	}
}
