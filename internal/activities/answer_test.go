package activities_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// delegateSetup stores a delegating turn (parent) whose call d1 records the
// answer of a sub-agent stored in child, and returns that call as the
// workflow records it: by reference, with the placeholder for an answer
// without text.
func delegateSetup(e *env, parent, child string) agentloop.ToolCall {
	call := toolSetup(e, parent, agentloop.DelegateTool, `{"agent":"self","task":"find it"}`)
	e.store(child,
		message("cu1", "", transcript.Message{Role: transcript.RoleUser, Text: "find it"}),
		message("ca1", "cu1", transcript.Message{Role: transcript.RoleAssistant, Text: "the find"}),
	)
	call.Answer = &agentloop.AnswerRef{Session: child, First: "cu1", Leaf: "ca1"}
	call.Synthetic = &agent.ToolResult{Content: "(the sub-agent finished without a text answer)"}
	return call
}

// A sub-agent's answer that cannot be read (the store fails the read) is
// not replaced by the placeholder: the attempt fails retryably with
// nothing recorded, and the next attempt records the real answer.
func TestDelegateAnswerReadRetried(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const parent, child = "deleg-read", "deleg-read/delegate-0011223344556677"
	call := delegateSetup(e, parent, child)
	e.kit.Faults.FailBranch(child, 1)

	_, err := e.execute(call)
	if err == nil {
		got, _ := e.stored(parent, "r1")
		t.Fatalf("the attempt whose read failed succeeded; recorded %+v", got.Message)
	}
	if app := appError(t, err); app.Type() != agent.CodeStore || app.NonRetryable() {
		t.Fatalf("error %v: want a retryable %s error", err, agent.CodeStore)
	}
	if got, ok := e.stored(parent, "r1"); ok {
		t.Fatalf("a result was recorded after the failed read: %+v", got.Message)
	}
	if _, err := e.execute(call); err != nil {
		t.Fatalf("the retried attempt: %v", err)
	}
	got, ok := e.stored(parent, "r1")
	if !ok || got.Message.Text != "the find" || got.Message.IsError {
		t.Fatalf("recorded %+v, want the sub-agent's answer", got.Message)
	}
}

// When the answer still cannot be read on the last attempt, the call is
// recorded as failed, saying so and where the answer is, never as the
// placeholder.
func TestDelegateAnswerUnreadableFailsHonestly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const parent, child = "deleg-unread", "deleg-unread/delegate-8899aabbccddeeff"
	call := delegateSetup(e, parent, child)
	e.kit.Faults.FailBranch(child, 100)
	acts := e.kit.Activities(e.bus)
	res, err := activities.StoredAnswerAt(acts, context.Background(), call, activities.AnswerReadAttempts)
	if err != nil {
		t.Fatalf("the last attempt: %v, want a recorded failure", err)
	}
	if !res.IsError || !strings.Contains(res.Content, "could not be read") || !strings.Contains(res.Content, child) {
		t.Errorf("result %+v, want an error naming the unreadable answer and its session", res)
	}
	if _, err := activities.StoredAnswerAt(acts, context.Background(), call, activities.AnswerReadAttempts-1); err == nil {
		t.Errorf("an earlier attempt recorded a result instead of retrying")
	}
}
