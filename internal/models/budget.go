package models

import (
	"encoding/json"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/transcript"
)

// Compaction defaults (pi's).
const (
	DefaultReserveTokens    = 16_384
	DefaultKeepRecentTokens = 20_000
)

// imageTokens is what one image is counted as (pi counts 1,200).
const imageTokens = 1_200

// perMessageTokens covers a message's role and framing on the wire.
const perMessageTokens = 4

// Budget is a session's context budget for one model.
type Budget struct {
	// Window is the model's context window.
	Window int `json:"window"`
	// Reserve is kept free below the window for the reply (and estimate
	// error): the context is compacted once it exceeds Window − Reserve.
	Reserve int `json:"reserve"`
	// KeepRecent is how many tokens of the newest messages a compaction
	// keeps verbatim.
	KeepRecent int `json:"keepRecent"`
}

// NewBudget returns the budget for a window with the configured reserve and
// keep-recent sizes (0: the defaults). Sizes that cannot work with the
// window (the defaults on a small model) are scaled down: a reserve of half
// the window or more to a quarter of it, and keep-recent to at most half of
// what remains, so that a compaction can bring the context under the
// threshold.
func NewBudget(window, reserve, keepRecent int) Budget {
	if window <= 0 {
		window = DefaultContextWindow
	}
	if reserve <= 0 {
		reserve = DefaultReserveTokens
	}
	if keepRecent <= 0 {
		keepRecent = DefaultKeepRecentTokens
	}
	if reserve >= window/2 {
		reserve = window / 4
	}
	if room := window - reserve; keepRecent > room/2 {
		keepRecent = room / 2
	}
	return Budget{Window: window, Reserve: reserve, KeepRecent: keepRecent}
}

// Threshold is the context size above which the context is compacted.
func (b Budget) Threshold() int { return b.Window - b.Reserve }

// Forced is the budget of a forced (second-level) compaction after the
// provider refused a context: a quarter of the usual keep-recent.
func (b Budget) Forced() Budget {
	b.KeepRecent /= 4
	return b
}

// EstimateText estimates the tokens of a text: a token per four bytes, as pi
// does. It over-counts code and English a little and under-counts CJK text,
// which is why ContextTokens takes the provider's count when it is larger.
func EstimateText(s string) int { return (len(s) + 3) / 4 }

// EstimateMessage estimates the tokens one message costs in a request.
func EstimateMessage(m transcript.Message) int {
	n := perMessageTokens + EstimateText(m.Text) + EstimateText(m.Thinking) + len(m.Images)*imageTokens
	for _, tc := range m.ToolCalls {
		n += perMessageTokens + EstimateText(tc.ID) + EstimateText(tc.Name) + EstimateText(string(tc.Args))
	}
	if m.Role == transcript.RoleToolResult {
		n += EstimateText(m.ToolCallID)
	}
	return n
}

// EstimateTools estimates the tokens the tool definitions add to a request.
func EstimateTools(tools []agent.ToolSpec) int {
	n := 0
	for _, t := range tools {
		schema, _ := json.Marshal(t.Parameters)
		n += perMessageTokens + EstimateText(t.Name) + EstimateText(t.Description) + EstimateText(string(schema))
	}
	return n
}

// Estimate estimates a whole request: system prompt, tools and messages.
func Estimate(system string, tools []agent.ToolSpec, msgs []transcript.Message) int {
	n := perMessageTokens + EstimateText(system) + EstimateTools(tools)
	for _, m := range msgs {
		n += EstimateMessage(m)
	}
	return n
}

// ContextTokens sizes a request, correcting the estimate with the usage the
// provider reported: the last assistant reply in msgs that carries usage
// counts as its input plus output tokens, and the messages after it are
// estimated (pi's method). It returns the larger of that and the plain
// estimate: the estimate misses tokenizer surprises, the usage is a step
// old and misses what was added since; taking the larger never under-counts,
// and compacting a little early costs far less than an overflow.
//
// msgs is the context as sent and fresh the index of its first message
// written after the latest compaction (transcript.ContextOf): a kept reply
// from before it reports the usage of the context that was compacted away.
func ContextTokens(system string, tools []agent.ToolSpec, msgs []transcript.Message, fresh int) int {
	est := Estimate(system, tools, msgs)
	for i := len(msgs) - 1; i >= fresh && i >= 0; i-- {
		u := msgs[i].Usage
		if msgs[i].Role != transcript.RoleAssistant || u == nil || u.Input <= 0 {
			continue
		}
		reported := u.Input + u.Output
		if u.Total > reported {
			reported = u.Total
		}
		for _, after := range msgs[i+1:] {
			reported += EstimateMessage(after)
		}
		return max(est, reported)
	}
	return est
}
