package feishu_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"

	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
)

// TestDuplicatePushesOneTurn: the same message pushed three times (the
// platform re-pushes even after an ACK, with the same or a new event_id)
// reaches the conversation's chat workflow three times and routes one
// turn, to the message's own thread session.
func TestDuplicatePushesOneTurn(t *testing.T) {
	t.Parallel()
	d := door("")
	body := fixture(t, "group_mention.json")
	p, err := d.Parse(req(http.Header{}, body))
	if err != nil || len(p.Messages) != 1 {
		t.Fatalf("Parse: %v, %d messages", err, len(p.Messages))
	}
	first := p.Messages[0]
	again := first
	again.Event = "another-event-id-for-the-same-message"

	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	var routed []wire.RouteInput
	env.RegisterActivityWithOptions(func(_ context.Context, in wire.RouteInput) error {
		routed = append(routed, in)
		return nil
	}, activity.RegisterOptions{Name: workflows.ActivityChatRoute})
	for i, m := range []wire.ChatMessage{first, first, again} {
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(wire.SignalChatMessage, m) }, time.Duration(i+1)*time.Second)
	}
	env.RegisterDelayedCallback(env.CancelWorkflow, 10*time.Second)
	env.ExecuteWorkflow(workflows.ChatWorkflow, workflows.ChatInput{Kind: first.Kind, Chat: first.Chat})
	if len(routed) != 1 {
		t.Fatalf("routed %d turns, want 1: %+v", len(routed), routed)
	}
	// Feishu message IDs are unique across chats: short session names.
	want := "feishu:" + first.ID
	if routed[0].Session != want || len(want) > 64 || routed[0].Delivery.Key != "feishu:"+first.ID {
		t.Errorf("routed %+v, want session %s", routed[0], want)
	}
}
