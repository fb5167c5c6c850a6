package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels/slack"
	"github.com/fastagent/fastagent/internal/delivery"
	"github.com/fastagent/fastagent/internal/schedules"
	"github.com/fastagent/fastagent/internal/testsupport/fakeslack"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows"
)

// postThenFail makes the next chat.postMessage post and then answer an
// error, as when Slack carried a call out but its answer was lost.
func postThenFail(fake *fakeslack.Server) {
	once := true
	fake.Wrap("chat.postMessage", func(h fakeslack.Handler) fakeslack.Handler {
		return func(s *fakeslack.Server, c fakeslack.Call) map[string]any {
			out := h(s, c)
			if once {
				once = false
				return map[string]any{"ok": false, "error": "internal_error"}
			}
			return out
		}
	})
}

// TestDeliverySendMessageOnce: a scripted model calls send_message to
// slack:#ops; Slack posts the message but answers an error, so the
// Tool.Execute activity fails and is retried — and the channel still gets
// exactly one message, the retry having found the one posted. A target
// not in delivery.allow is refused with a tool error the model reads, and
// nothing is sent there.
func TestDeliverySendMessageOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fake := fakeslack.New()
	t.Cleanup(fake.Close)
	fake.AddChannel("C0OPS0001", "ops")
	fake.AddChannel("C0GEN0002", "general")
	postThenFail(fake)
	e.writeConfig("delivery:\n  allow: [\"slack:#ops\"]\n")
	e.startWorker(withRepliers(slack.NewReplier("xoxb-e2e-deliver", fake.APIURL())))
	e.kit.Model.EnqueueFor("tell ops",
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{
			{ID: "call_ops", Name: delivery.SendMessageName, Args: `{"to":"slack:#ops","text":"The deploy finished."}`},
			{ID: "call_general", Name: delivery.SendMessageName, Args: `{"to":"slack:#general","text":"hello all"}`},
		}},
		modelserver.Reply{Text: []string{"Told ops."}})

	session := e.session("deliver-once")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := agent.Collect(e.agent.Invoke(ctx, agent.Scope{Session: session}, agent.Prompt{Text: "tell ops the deploy finished"}))
	if err != nil || res.Text != "Told ops." {
		t.Fatalf("turn = %q, %v", res.Text, err)
	}
	msgs := fake.Messages("C0OPS0001")
	if len(msgs) != 1 || msgs[0].Text != "The deploy finished." {
		t.Fatalf("messages in #ops = %+v, want exactly one", msgs)
	}
	if n := len(fake.Calls("chat.postMessage")); n != 1 {
		t.Errorf("chat.postMessage called %d times, want 1", n)
	}
	// The activity ran twice: each attempt looked for an earlier post.
	if n := len(fake.Calls("conversations.history")); n != 2 {
		t.Errorf("conversations.history called %d times, want 2 (one per attempt)", n)
	}
	if m := fake.Messages("C0GEN0002"); len(m) != 0 {
		t.Errorf("a target not allowed got %+v", m)
	}
	results := map[string]transcript.Message{}
	all, err := e.kit.Store.Entries(context.Background(), session)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range all {
		if m := en.Message; m != nil && m.Role == transcript.RoleToolResult {
			results[m.ToolCallID] = *m
		}
	}
	if r := results["call_ops"]; r.IsError || !strings.Contains(r.Text, "Sent the message to slack:#ops") {
		t.Errorf("send_message result = %+v", r)
	}
	if r := results["call_general"]; !r.IsError || !strings.Contains(r.Text, "not an allowed target") {
		t.Errorf("refused send_message result = %+v", r)
	}
}

// TestScheduleDeliversAnswerOnce: a schedule with deliver: slack:#ops is
// triggered; its answer reaches the channel once, although Slack's first
// post answered an error (the Channel.Send activity was retried), and the
// fire's record says where it was delivered.
func TestScheduleDeliversAnswerOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fake := fakeslack.New()
	t.Cleanup(fake.Close)
	fake.AddChannel("C0OPS0001", "ops")
	postThenFail(fake)
	e.startWorker(withRepliers(slack.NewReplier("xoxb-e2e-schedule", fake.APIURL())))
	name := scheduleName("deliver")
	e.deleteScheduleAtEnd(name)
	e.writeSchedule(name+".yaml", schedYAML("0 9 * * *", "UTC", "Count the open issues.")+"deliver: slack:#ops\n")
	if rep := e.mustReconcile(); strings.Join(rep.Created, ",") != name {
		t.Fatalf("reconcile = %+v", rep)
	}
	e.kit.Model.EnqueueFor("Count the open issues", modelserver.Reply{Text: []string{"7 open", " issues"}})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ex, err := schedules.Trigger(ctx, e.client, name, 0)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := schedules.Wait(ctx, e.client, ex)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Outcome != workflows.FireCompleted || rec.Reply != "7 open issues" || strings.Join(rec.Delivered, ",") != "slack:#ops" || rec.DeliveryError != "" {
		t.Fatalf("fire = %+v, want completed and delivered to slack:#ops", rec)
	}
	msgs := fake.Messages("C0OPS0001")
	if len(msgs) != 1 || msgs[0].Text != "7 open issues" {
		t.Fatalf("messages in #ops = %+v, want the answer once", msgs)
	}
	if n := len(fake.Calls("chat.postMessage")); n != 1 {
		t.Errorf("chat.postMessage called %d times, want 1", n)
	}
	if n := len(fake.Calls("conversations.history")); n != 2 {
		t.Errorf("conversations.history called %d times, want 2 (the send was retried once)", n)
	}
}
