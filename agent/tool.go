package agent

import (
	"context"
	"encoding/json"
	"time"
)

// ToolSpec describes a tool to the model and to the runtime.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"` // JSON Schema of the arguments object
	// Idempotent tools may be retried after a failure or a lost worker; any
	// other tool runs at most once.
	Idempotent bool `json:"idempotent,omitempty"`
	// Sequential forces the whole batch it appears in to run one call at a time.
	Sequential bool `json:"sequential,omitempty"`
	// Deferred tools stay out of the model request until search_tools
	// activates them.
	Deferred bool `json:"deferred,omitempty"`
	// RequiresApproval makes each call wait for a human approve/deny.
	RequiresApproval bool `json:"requiresApproval,omitempty"`
	// Timeout bounds one call; zero means the runtime default.
	Timeout time.Duration `json:"timeout,omitempty"`
}

// ToolResult is what a tool call produced. A tool reports its own failures as
// IsError results; a returned Go error means the call could not be carried out.
type ToolResult struct {
	// Content is what the model sees.
	Content string `json:"content"`
	IsError bool   `json:"isError,omitempty"`
	// Details is kept in the session store but not shown to the model (for
	// example the full output when Content was truncated).
	Details json.RawMessage `json:"details,omitempty"`
}

// Tool is a capability the model can call. Go library users register their
// own on the worker.
type Tool interface {
	Spec() ToolSpec
	Run(ctx context.Context, call ToolCall) (ToolResult, error)
}

// ToolCall is one invocation of a tool.
type ToolCall struct {
	ID      string          `json:"id"`
	Name    string          `json:"name"`
	Args    json.RawMessage `json:"args"`
	Session string          `json:"session"`
	// Dir is the working directory tools are confined to.
	Dir string `json:"dir"`
}
