// Package hooks holds the Go hooks a program embedding fastagent runs
// around model and tool calls (fastagent.Options.Hooks).
package hooks

import (
	"context"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/transcript"
)

// Message is a transcript message as hooks see it.
type Message = transcript.Message

// TurnInfo identifies the turn a hook runs for.
type TurnInfo struct {
	Session string
	Turn    string
	Step    int
}

// Hooks let a Go program shape the agent on the worker. Every hook runs
// inside an activity, so it may do I/O; it may also run again when the
// activity is retried, so it must be safe to repeat. A nil hook is skipped.
type Hooks struct {
	// BeforeAgentStart runs before the first model call of a turn; the text
	// it returns is appended to the system prompt of that turn's model calls.
	BeforeAgentStart func(ctx context.Context, turn TurnInfo) (string, error)
	// TransformContext may rewrite the messages sent to the model (the
	// stored transcript is not changed).
	TransformContext func(ctx context.Context, turn TurnInfo, msgs []Message) ([]Message, error)
	// BeforeToolCall may block a call: the model gets an error result with
	// the reason instead, and the tool does not run.
	BeforeToolCall func(ctx context.Context, call agent.ToolCall) (block bool, reason string)
	// AfterToolCall may patch a result (content, isError) before it is
	// stored and shown to the model.
	AfterToolCall func(ctx context.Context, call agent.ToolCall, res agent.ToolResult) agent.ToolResult
}
