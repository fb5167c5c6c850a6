package workflows_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/workflows"
)

// chatStateBudget is what a chat workflow's continue-as-new input may
// weigh: well under Temporal's 2 MB payload limit.
const chatStateBudget = 1 << 20

// A chat workflow's state stays within its byte budget however large the
// messages it buffers, the IDs it has seen and the turns it routed: its
// continue-as-new input never nears the 2 MB payload limit (a run that
// cannot continue as new is stuck), and what it keeps still folds.
func TestChatStateBoundedInBytes(t *testing.T) {
	t.Parallel()
	h := newChatHarness(t)
	ctxMode := workflows.ChatPolicy{GroupMode: workflows.GroupContext}
	big := strings.Repeat("é", 30<<10) // 60 KB of two-byte runes
	const lines = 60
	for i := range lines {
		// Un-summoned discussion in many places (context mode buffers it).
		h.send(workflows.ChatMessage{ID: fmt.Sprintf("%d.0", i), Root: fmt.Sprintf("r%d", i%3), Text: big, Policy: ctxMode,
			Event: "Ev" + strings.Repeat("x", 2000) + fmt.Sprint(i)})
	}
	h.send(workflows.ChatMessage{ID: "last", Root: "r0", Summoned: true, Text: "sum it up", Policy: ctxMode})
	h.env.RegisterDelayedCallback(func() { h.env.CancelWorkflow() }, h.step+time.Hour)
	h.env.ExecuteWorkflow(workflows.ChatWorkflowType, workflows.ChatInput{Kind: "slack", Chat: h.chat, SignalsPerRun: lines + 1})
	err := h.env.GetWorkflowError()
	var can *workflow.ContinueAsNewError
	if !errors.As(err, &can) {
		t.Fatalf("workflow error = %v, want continue-as-new", err)
	}
	var in workflows.ChatInput
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &in); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(in)
	if len(b) > chatStateBudget {
		t.Errorf("continue-as-new input of %d bytes, want at most %d", len(b), chatStateBudget)
	}
	if got := h.turns(); len(got) != 1 || !strings.Contains(got[0], "sum it up") || !strings.Contains(got[0], "é…") {
		t.Errorf("routed %d turns, want the summons with the buffered discussion folded in: %.300q", len(got), got)
	}
}
