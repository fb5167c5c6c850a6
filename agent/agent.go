// Package agent is the engine-neutral Agent contract: a caller hands an Agent
// a Scope and a Prompt and receives a stream of Events that ends in exactly
// one terminal event, completed or failed.
//
// Everything in fastagent either calls an Agent (HTTP, channels, schedules,
// self-wakes) or implements one (the in-process loop and the Temporal-backed
// session runtime). This package imports only the standard library.
package agent

import (
	"context"
	"iter"
)

// Scope names the conversation a turn belongs to. Session is opaque and owned
// by the caller; it is reused across the turns of one conversation.
type Scope struct {
	Session string `json:"session"`
	// ParentSession is read only when the session is first created: the new
	// session starts from the parent's transcript.
	ParentSession string `json:"parentSession,omitempty"`
	// BranchHints are best-effort cut points (entry IDs) in the parent.
	BranchHints []string `json:"branchHints,omitempty"`
	// FromEntry forks the parent at this entry (read with ParentSession,
	// when the session is first created; it wins over BranchHints).
	FromEntry string `json:"fromEntry,omitempty"`
}

// Image is an attached picture; engines without vision ignore it.
type Image struct {
	MimeType string `json:"mimeType"`
	Data     string `json:"data"` // base64
}

// Prompt is what the caller says in one turn.
type Prompt struct {
	Text   string  `json:"text"`
	Images []Image `json:"images,omitempty"`
}

// Agent runs one turn per Invoke. The returned sequence yields events in
// order and ends with exactly one terminal event (completed or failed); it
// never panics or reports errors any other way. When the consumer stops
// iterating early, or ctx is cancelled, in-flight work is aborted promptly
// and no terminal is required.
type Agent interface {
	Invoke(ctx context.Context, scope Scope, prompt Prompt) iter.Seq[Event]
}

// AgentFunc adapts a function to the Agent interface.
type AgentFunc func(ctx context.Context, scope Scope, prompt Prompt) iter.Seq[Event]

// Invoke calls f.
func (f AgentFunc) Invoke(ctx context.Context, scope Scope, prompt Prompt) iter.Seq[Event] {
	return f(ctx, scope, prompt)
}
