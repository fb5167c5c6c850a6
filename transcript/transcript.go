// Package transcript defines the records a session is made of (pi session
// record v3 in spirit: entries linked by parent IDs, messages, tool results,
// compactions) and how a model context is read off a branch of them.
package transcript

import (
	"encoding/json"
	"time"
)

// Entry types.
const (
	TypeMessage    = "message"
	TypeCompaction = "compaction"
	// TypeCustom holds runtime facts that are not model context (tool
	// activations, approvals); see Custom.
	TypeCustom = "custom"
	// TypeBranchSummary summarizes a branch the session moved away from (a
	// rewind); it enters the model context as a user message.
	TypeBranchSummary = "branch_summary"
)

// Message roles.
const (
	RoleUser       = "user"
	RoleAssistant  = "assistant"
	RoleToolResult = "toolResult"
)

// Assistant stop reasons.
const (
	StopEnd     = "stop"
	StopLength  = "length"
	StopToolUse = "toolUse"
	StopError   = "error"
	StopAborted = "aborted"
)

// Entry is one record of a session. IDs are chosen by the session workflow so
// that a retried append is recognised and ignored.
type Entry struct {
	ID       string    `json:"id"`
	ParentID string    `json:"parentId,omitempty"`
	Type     string    `json:"type"`
	Time     time.Time `json:"timestamp"`

	Message    *Message    `json:"message,omitempty"`
	Compaction *Compaction `json:"compaction,omitempty"`
	Custom     *Custom     `json:"custom,omitempty"`
	// BranchSummary is set on TypeBranchSummary entries.
	BranchSummary *BranchSummary `json:"branchSummary,omitempty"`
}

// BranchSummary says what was tried on an abandoned branch, pi's
// branch_summary: FromID is the leaf the session moved away from.
type BranchSummary struct {
	FromID  string `json:"fromId"`
	Summary string `json:"summary"`
}

// BranchSummaryPrefix and BranchSummarySuffix wrap a branch summary given to
// the model (pi's wording).
const (
	BranchSummaryPrefix = "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n"
	BranchSummarySuffix = "\n</summary>"
)

// BranchSummaryMessage is the user message a branch summary entry becomes
// in the model context.
func BranchSummaryMessage(b BranchSummary) Message {
	return Message{Role: RoleUser, Text: BranchSummaryPrefix + b.Summary + BranchSummarySuffix}
}

// Message is a user prompt, an assistant reply or a tool result.
type Message struct {
	Role string `json:"role"`

	// user and assistant
	Text   string  `json:"text,omitempty"`
	Images []Image `json:"images,omitempty"`

	// assistant
	Thinking string `json:"thinking,omitempty"`
	// ThinkingBlocks are the reply's signed thinking blocks (Anthropic
	// extended thinking), kept to be sent back unchanged: the provider
	// verifies them when a turn continues after tool results. Set by the
	// model step only; Thinking holds their text for people.
	ThinkingBlocks []ThinkingBlock `json:"thinkingBlocks,omitempty"`
	ToolCalls      []ToolCall      `json:"toolCalls,omitempty"`
	Model          string          `json:"model,omitempty"`
	StopReason     string          `json:"stopReason,omitempty"`
	Usage          *Usage          `json:"usage,omitempty"`
	ErrorMessage   string          `json:"errorMessage,omitempty"`

	// toolResult
	ToolCallID string          `json:"toolCallId,omitempty"`
	ToolName   string          `json:"toolName,omitempty"`
	IsError    bool            `json:"isError,omitempty"`
	Details    json.RawMessage `json:"details,omitempty"`
	// AddedToolNames lists deferred tools this call activated (search_tools).
	AddedToolNames []string `json:"addedToolNames,omitempty"`

	// Source says where a user message came from (http, schedule, wake, steer…).
	Source string `json:"source,omitempty"`
}

// Image is an attached picture (base64 data).
type Image struct {
	MimeType string `json:"mimeType"`
	Data     string `json:"data"`
}

// ThinkingBlock is one block of a reply's thinking as the provider signed
// it: Thinking with its Signature, or the encrypted Redacted data of a
// redacted block.
type ThinkingBlock struct {
	Thinking  string `json:"thinking,omitempty"`
	Signature string `json:"signature,omitempty"`
	Redacted  string `json:"redacted,omitempty"`
}

// ToolCall is a call the assistant asked for.
type ToolCall struct {
	ID   string          `json:"id"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

// Usage counts tokens of one model call.
type Usage struct {
	Input  int `json:"input"`
	Output int `json:"output"`
	Total  int `json:"totalTokens"`
	// CacheRead and CacheWrite are prompt tokens read from and written to
	// the provider's prompt cache.
	CacheRead  int `json:"cacheRead,omitempty"`
	CacheWrite int `json:"cacheWrite,omitempty"`
}

// Compaction replaces everything before FirstKeptEntryID with Summary.
type Compaction struct {
	Summary          string `json:"summary"`
	FirstKeptEntryID string `json:"firstKeptEntryId"`
	TokensBefore     int    `json:"tokensBefore"`
}

// Custom is a typed runtime fact; it never enters the model context.
type Custom struct {
	Kind string          `json:"customType"`
	Data json.RawMessage `json:"data,omitempty"`
}

// InterruptedToolResult is the result a tool call that never got one is
// given in the model context (pi's rule): after a rewind or a fork to an
// entry whose calls were not answered, every later request would otherwise
// carry a call without a result, which providers refuse.
const InterruptedToolResult = "interrupted: this tool call got no result (the conversation moved on without it)"

// CompactionPrefix introduces a compaction summary to the model.
const CompactionPrefix = "The conversation history before this point was compacted into the following summary:"

// Context returns the messages a model sees for a branch given root first:
// with a compaction on the path, its summary (as a user message), then the
// kept entries from FirstKeptEntryID, then everything after. A tool call
// that a later message followed without its result is answered with
// InterruptedToolResult, as an error, after the results it has.
func Context(branch []Entry) []Message {
	msgs, _ := ContextOf(branch)
	return msgs
}

// ContextOf is Context that also returns the index in the messages of the
// first one written after the latest compaction (0 without a compaction):
// usage reported by replies before it describes a context that no longer
// exists.
func ContextOf(branch []Entry) (msgs []Message, fresh int) {
	start, at := 0, -1
	var summary *Message
	for i := len(branch) - 1; i >= 0; i-- {
		c := branch[i].Compaction
		if branch[i].Type != TypeCompaction || c == nil {
			continue
		}
		summary = &Message{Role: RoleUser, Text: CompactionPrefix + "\n\n" + c.Summary}
		start, at = i+1, i
		for j := 0; j < i; j++ {
			if branch[j].ID == c.FirstKeptEntryID {
				start = j
				break
			}
		}
		break
	}
	var out []Message
	if summary != nil {
		out = append(out, *summary)
		fresh = 1
	}
	// pending are the tool calls of the last assistant message that have
	// no result yet; a message other than a tool result ends their turn.
	var pending []ToolCall
	for i, e := range branch[start:] {
		var m *Message
		switch {
		case e.Type == TypeMessage && e.Message != nil:
			m = e.Message
		case e.Type == TypeBranchSummary && e.BranchSummary != nil:
			bm := BranchSummaryMessage(*e.BranchSummary)
			m = &bm
		}
		if m != nil {
			if m.Role == RoleToolResult {
				pending = answered(pending, m.ToolCallID)
			} else {
				for _, c := range pending {
					out = append(out, Message{Role: RoleToolResult, ToolCallID: c.ID, ToolName: c.Name,
						Text: InterruptedToolResult, IsError: true})
				}
				pending = nil
			}
			if m.Role == RoleAssistant {
				pending = append([]ToolCall(nil), m.ToolCalls...)
			}
			out = append(out, *m)
			if start+i < at {
				fresh = len(out)
			}
		}
	}
	return out, fresh
}

// answered removes the call with ID id from pending.
func answered(pending []ToolCall, id string) []ToolCall {
	for i, c := range pending {
		if c.ID == id {
			return append(pending[:i:i], pending[i+1:]...)
		}
	}
	return pending
}

// LatestCompaction returns the index of the last compaction entry on the
// branch, or -1.
func LatestCompaction(branch []Entry) int {
	for i := len(branch) - 1; i >= 0; i-- {
		if branch[i].Type == TypeCompaction && branch[i].Compaction != nil {
			return i
		}
	}
	return -1
}
