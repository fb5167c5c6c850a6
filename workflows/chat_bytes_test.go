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

	"github.com/fastagent/fastagent/internal/wire"
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
	ctxMode := wire.ChatPolicy{GroupMode: wire.GroupContext}
	big := strings.Repeat("é", 30<<10) // 60 KB of two-byte runes
	const lines = 60
	for i := range lines {
		// Un-summoned discussion in many places (context mode buffers it).
		h.send(wire.ChatMessage{ID: fmt.Sprintf("%d.0", i), Root: fmt.Sprintf("r%d", i%3), Text: big, Policy: ctxMode,
			Event: "Ev" + strings.Repeat("x", 2000) + fmt.Sprint(i)})
	}
	h.send(wire.ChatMessage{ID: "last", Root: "r0", Summoned: true, Text: "sum it up", Policy: ctxMode})
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

// The chat state's budgets weigh what continue-as-new carries, encoded:
// buffered lines of markup (each "<", ">" and "&" is six bytes in JSON;
// Telegram and Feishu pass them raw) and files with such names fill the
// buffers' budget at their encoded size, so the input stays within budget.
func TestChatStateBoundedInEncodedBytes(t *testing.T) {
	t.Parallel()
	h := newChatHarness(t)
	ctxMode := wire.ChatPolicy{GroupMode: wire.GroupContext}
	text := strings.Repeat("<", 2000)
	var files []wire.Attachment
	for i := range 20 {
		files = append(files, wire.Attachment{ID: fmt.Sprintf("f%d", i), Name: strings.Repeat("&", 200) + ".txt"})
	}
	const lines = 200
	for i := range lines {
		h.send(wire.ChatMessage{ID: fmt.Sprintf("%d.0", i), Root: fmt.Sprintf("r%d", i%3), Text: text, Attachments: files, Policy: ctxMode})
	}
	h.env.RegisterDelayedCallback(func() { h.env.CancelWorkflow() }, h.step+time.Hour)
	h.env.ExecuteWorkflow(workflows.ChatWorkflowType, workflows.ChatInput{Kind: "slack", Chat: h.chat, SignalsPerRun: lines})
	var can *workflow.ContinueAsNewError
	if err := h.env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("workflow error = %v, want continue-as-new", err)
	}
	n := 0
	for _, p := range can.Input.GetPayloads() {
		n += p.Size()
	}
	if n > chatStateBudget {
		t.Errorf("continue-as-new input of %d bytes encoded, want at most %d", n, chatStateBudget)
	}
}

// An edit of a buffered line is kept as a buffered line is: clipped to what
// a fold shows and within the buffers' budget. Short lines edited into long
// ones (any member of a conversation in context mode can) cannot grow the
// state past its budget.
func TestChatEditedLinesStayWithinBudget(t *testing.T) {
	t.Parallel()
	h := newChatHarness(t)
	ctxMode := wire.ChatPolicy{GroupMode: wire.GroupContext}
	const lines = 150
	for i := range lines {
		h.send(wire.ChatMessage{ID: fmt.Sprintf("%d.0", i), Root: fmt.Sprintf("r%d", i%3), Text: "ok", Policy: ctxMode})
	}
	long := strings.Repeat("x", 40000) // Slack's longest message
	for i := range lines {
		h.send(wire.ChatMessage{ID: fmt.Sprintf("%d.0", i), Root: fmt.Sprintf("r%d", i%3), Edited: true, Event: fmt.Sprintf("Ev%d", i),
			Text: long, Policy: ctxMode})
	}
	h.env.RegisterDelayedCallback(func() { h.env.CancelWorkflow() }, h.step+time.Hour)
	h.env.ExecuteWorkflow(workflows.ChatWorkflowType, workflows.ChatInput{Kind: "slack", Chat: h.chat, SignalsPerRun: 2 * lines})
	var can *workflow.ContinueAsNewError
	if err := h.env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("workflow error = %v, want continue-as-new", err)
	}
	n := 0
	for _, p := range can.Input.GetPayloads() {
		n += p.Size()
	}
	if n > chatStateBudget {
		t.Errorf("continue-as-new input of %d bytes encoded, want at most %d", n, chatStateBudget)
	}
}
