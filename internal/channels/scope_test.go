package channels_test

import (
	"context"
	"testing"

	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
)

// started records Signal-With-Start calls.
type started struct {
	ids  []string
	args []any
}

func (s *started) SignalWithStartWorkflow(_ context.Context, id, _ string, _ any, _ client.StartWorkflowOptions, _ any, args ...any) (client.WorkflowRun, error) {
	s.ids = append(s.ids, id)
	s.args = append(s.args, args...)
	return nil, nil
}

// A door serving another agent hands its messages to that agent's chat
// workflows and its deliveries to that agent's sessions; the main
// agent's doors keep the plain names.
func TestDoorsOfAnotherAgent(t *testing.T) {
	msg := wire.ChatMessage{Kind: "slack", Chat: "T1:C1", ID: "1.0001"}
	dl := channels.Delivery{Kind: "github", ID: "d1", Session: "github:o/r#7", Prompt: agent.Prompt{Text: "hi"}}
	for _, tc := range []struct {
		agent            string
		chat, session    string
		scope, inSession string
	}{
		{"", "chat:slack:T1:C1", "session:github:o/r#7", "", "github:o/r#7"},
		{"reviewer", "chat:reviewer/slack:T1:C1", "session:reviewer/github:o/r#7", "reviewer", "reviewer/github:o/r#7"},
	} {
		var s started
		ctx := context.Background()
		if tc.agent != "" {
			ctx = channels.ForAgent(ctx, tc.agent)
		}
		if err := channels.Dispatch(ctx, &s, "q", channels.Parsed{Messages: []wire.ChatMessage{msg}, Deliveries: []channels.Delivery{dl}}); err != nil {
			t.Fatal(err)
		}
		if len(s.ids) != 2 || s.ids[0] != tc.chat || s.ids[1] != tc.session {
			t.Fatalf("agent %q: started %v, want [%s %s]", tc.agent, s.ids, tc.chat, tc.session)
		}
		if in, ok := s.args[0].(workflows.ChatInput); !ok || in.Scope != tc.scope {
			t.Errorf("agent %q: chat input %+v, want scope %q", tc.agent, s.args[0], tc.scope)
		}
		if in, ok := s.args[1].(workflows.SessionInput); !ok || in.Session != tc.inSession {
			t.Errorf("agent %q: session input %+v, want session %q", tc.agent, s.args[1], tc.inSession)
		}
	}
}
