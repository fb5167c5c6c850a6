package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/llm"
	"github.com/fastagent/fastagent/internal/models"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/internal/workspace"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows"
)

// Summary prompts, after pi's (packages/coding-agent compaction): a
// structured checkpoint another model continues from, updated in place when
// an earlier summary exists.
const (
	summarySystemPrompt = "You are a context summarization assistant. Your task is to read a conversation between a user and an AI assistant, " +
		"then produce a structured summary following the exact format specified. Do NOT continue the conversation. " +
		"Do NOT respond to any questions in the conversation. ONLY output the structured summary."

	summaryFormat = `Use this EXACT format:

## Goal
[What is the user trying to accomplish? Can be multiple items if the session covers different tasks.]

## Constraints & Preferences
- [Any constraints, preferences, or requirements mentioned by user]
- [Or "(none)" if none were mentioned]

## Progress
### Done
- [x] [Completed tasks/changes]

### In Progress
- [ ] [Current work]

### Blocked
- [Issues preventing progress, if any]

## Key Decisions
- **[Decision]**: [Brief rationale]

## Next Steps
1. [Ordered list of what should happen next]

## Critical Context
- [Any data, examples, or references needed to continue]
- [Or "(none)" if not applicable]

Keep each section concise. Preserve exact file paths, function names, and error messages.`

	summaryPrompt = "The messages above are a conversation to summarize. Create a structured context checkpoint summary " +
		"that another LLM will use to continue the work.\n\n" + summaryFormat

	updateSummaryPrompt = `The messages above are NEW conversation messages to incorporate into the existing summary provided in <previous-summary> tags.

Update the existing structured summary with new information. RULES:
- PRESERVE all existing information from the previous summary
- ADD new progress, decisions, and context from the new messages
- UPDATE the Progress section: move items from "In Progress" to "Done" when completed
- UPDATE "Next Steps" based on what was accomplished
- PRESERVE exact file paths, function names, and error messages
- If something is no longer relevant, you may remove it

` + summaryFormat
)

// serializedMessageChars bounds one message's text in the conversation given
// to the summarizer (pi truncates tool results the same way).
const serializedMessageChars = 2000

// Compact is the Session.Compact activity.
func (a *Activities) Compact(ctx context.Context, in wire.CompactInput) (workflows.CompactResult, error) {
	stop := a.heartbeat(ctx)
	defer stop()
	ctx, done := stoppable(ctx, a.Feed, in.Session, in.Turn)
	defer done()
	res, err := a.RunCompact(ctx, in)
	err = stoppedError(ctx, err)
	if err == nil && in.Reason == wire.CompactManual && res.EntryID != "" {
		// A manual compaction moves the head between turns; one inside a
		// turn is followed by the turn's record.
		if err := a.Store.SetHead(ctx, in.Session, res.EntryID); err != nil {
			return res, storeError(err)
		}
	}
	return res, err
}

// RunCompact summarizes the older part of the branch ending at in.Leaf with
// one model call and appends a compaction entry (ID in.EntryID, below
// in.Leaf) naming the first kept entry; the stored transcript is never
// rewritten. An entry already stored under in.EntryID (an earlier attempt
// whose worker died) is the result. With nothing to summarize, or automatic
// compaction off, it appends nothing and says why in Skipped.
func (a *Activities) RunCompact(ctx context.Context, in wire.CompactInput) (workflows.CompactResult, error) {
	if prev, err := a.Store.Get(ctx, in.Session, in.EntryID); err == nil && prev.Compaction != nil {
		return workflows.CompactResult{EntryID: prev.ID, FirstKept: prev.Compaction.FirstKeptEntryID, TokensBefore: prev.Compaction.TokensBefore}, nil
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		return workflows.CompactResult{}, storeError(err)
	}
	def, err := a.Definitions.Load(ctx)
	if err != nil {
		return workflows.CompactResult{}, temporal.NewApplicationErrorWithOptions(
			"the agent definition could not be loaded: "+err.Error(), agent.CodeDefinition, temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	if in.Reason != wire.CompactManual && !def.Config.Compaction.On() {
		return workflows.CompactResult{Skipped: "compaction is disabled (compaction.enabled: false in fastagent.yaml)"}, nil
	}
	budget := BudgetOf(def, def.Config.ModelFor(false)[0])
	if in.Force {
		budget = budget.Forced()
	}
	branch, err := a.Store.Branch(ctx, in.Session, in.Leaf)
	if err != nil {
		return workflows.CompactResult{}, storeError(err)
	}
	tools := def.SessionSpecs(in.Session, nil)
	msgs, fresh := transcript.ContextOf(branch)
	before := models.ContextTokens(def.SystemPrompt(), tools, msgs, fresh)
	plan := planCompaction(branch, budget.KeepRecent)
	if plan.cut < 0 {
		return workflows.CompactResult{TokensBefore: before, Skipped: "nothing to compact: the newest messages alone fill the part kept verbatim"}, nil
	}
	msg, err := a.summarize(ctx, def, in.Session, func(b models.Budget) llm.Request {
		if in.Force {
			b = b.Forced()
		}
		return summaryRequest(plan, b)
	})
	if err != nil {
		return workflows.CompactResult{}, err
	}
	summary := strings.TrimSpace(msg.Text)
	if summary == "" {
		return workflows.CompactResult{}, temporal.NewApplicationErrorWithOptions("the model returned an empty summary", agent.CodeModel,
			temporal.ApplicationErrorOptions{})
	}
	entry := transcript.Entry{
		ID:       in.EntryID,
		ParentID: in.Leaf,
		Type:     transcript.TypeCompaction,
		Time:     time.Now().UTC(),
		Compaction: &transcript.Compaction{
			Summary:          summary,
			FirstKeptEntryID: branch[plan.cut].ID,
			TokensBefore:     before,
		},
	}
	if err := a.Store.Append(ctx, in.Session, entry); err != nil {
		return workflows.CompactResult{}, storeError(err)
	}
	// A concurrent attempt may have stored its entry first; it is the truth.
	if stored, err := a.Store.Get(ctx, in.Session, in.EntryID); err == nil && stored.Compaction != nil {
		entry = stored
	}
	after, _ := transcript.ContextOf(append(branch, entry))
	res := workflows.CompactResult{
		EntryID:      entry.ID,
		FirstKept:    entry.Compaction.FirstKeptEntryID,
		TokensBefore: before,
		TokensAfter:  models.ContextTokens(def.SystemPrompt(), tools, after, len(after)),
		Summarized:   len(plan.summarize),
		Usage:        usageOf(&msg),
	}
	a.log().Info("session compacted", "session", in.Session, "reason", in.Reason, "force", in.Force,
		"tokensBefore", res.TokensBefore, "tokensAfter", res.TokensAfter, "summarized", res.Summarized)
	return res, nil
}

// summarize writes a summary with the chat model, falling back along its
// chain (models: in fastagent.yaml) at once when a model fails in a way
// that may pass (a rate limit, an overload, a timeout): the turn waiting
// for the summary is not held for a Retry-After while another model can
// answer. build makes the request for the budget of the model asked, so a
// fallback with a smaller window gets a request that fits it. When every
// model failed, the first model's error is returned (Temporal retries it).
func (a *Activities) summarize(ctx context.Context, def *workspace.Definition, session string, build func(models.Budget) llm.Request) (transcript.Message, error) {
	chain := def.Config.ModelFor(false)
	var first error
	for i, spec := range chain {
		model, err := a.Models.Model(spec)
		if err != nil {
			return transcript.Message{}, temporal.NewApplicationErrorWithOptions(err.Error(), agent.CodeModelConfig,
				temporal.ApplicationErrorOptions{NonRetryable: true})
		}
		msg, err := model.Generate(ctx, build(BudgetOf(def, model.Name())), nil)
		if err == nil {
			return msg, nil
		}
		serr := a.summaryError(ctx, session, err)
		if first == nil {
			first = serr
		}
		var app *temporal.ApplicationError
		if ctx.Err() != nil || !errors.As(serr, &app) || app.NonRetryable() || i == len(chain)-1 {
			break
		}
		a.log().Warn("summary call failed; asking the next model of the chain", "session", session, "model", spec, "next", chain[i+1], "error", err)
	}
	return transcript.Message{}, first
}

// usageOf is what the provider reported for reply msg (nil: nothing).
func usageOf(msg *transcript.Message) *agent.Usage {
	u := msg.Usage
	if u == nil || u.Input+u.Output <= 0 {
		return nil
	}
	return &agent.Usage{Input: int64(u.Input), Output: int64(u.Output), CacheRead: int64(u.CacheRead), CacheWrite: int64(u.CacheWrite), Calls: 1}
}

// BudgetOf is the context budget of the definition's model (spec as
// resolved, "provider/model"): contextWindow from fastagent.yaml, else the
// catalog's window, with the compaction settings.
func BudgetOf(def *workspace.Definition, spec string) models.Budget {
	window := def.Config.ContextWindow
	if window <= 0 {
		window = models.Lookup(spec).ContextWindow
	}
	c := def.Config.Compaction
	return models.NewBudget(window, c.ReserveTokens, c.KeepRecentTokens)
}

// summaryError classifies a failed summary call like a model step's.
func (a *Activities) summaryError(ctx context.Context, session string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var le *llm.Error
	if !errors.As(err, &le) {
		le = &llm.Error{Retryable: true, Kind: "unknown", Message: err.Error()}
	}
	if le.Kind == llm.KindContextOverflow {
		return temporal.NewApplicationErrorWithOptions("the summary request itself is too long: "+le.Error(), agent.CodeContextOverflow,
			temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	if !le.Retryable {
		return temporal.NewApplicationErrorWithOptions("summarizing the conversation failed: "+le.Error(), agent.CodeModel,
			temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	a.log().Warn("summary call failed", "session", session, "error", le.Error())
	return temporal.NewApplicationErrorWithOptions("summarizing the conversation failed: "+le.Error(), agent.CodeModel,
		temporal.ApplicationErrorOptions{NextRetryDelay: le.RetryAfter})
}

// compactionPlan is what one compaction summarizes and keeps.
type compactionPlan struct {
	// previous is the summary of the latest compaction on the branch.
	previous string
	// summarize are the messages folded into the new summary, oldest first.
	summarize []transcript.Message
	// cut is the branch index of the first kept entry (-1: nothing to do).
	cut int
}

// planCompaction is pi's cut: walking back from the newest message, it
// keeps about keepRecent tokens and cuts at the nearest user or assistant
// message (never at a tool result, which must follow its call); what lies
// between the previous compaction's first kept entry and the cut is
// summarized. A newest message larger than keepRecent is kept whole, cut
// before it.
func planCompaction(branch []transcript.Entry, keepRecent int) compactionPlan {
	plan := compactionPlan{cut: -1}
	from := 0
	if prev := transcript.LatestCompaction(branch); prev >= 0 {
		c := branch[prev].Compaction
		plan.previous = c.Summary
		from = prev + 1
		for i := 0; i < prev; i++ {
			if branch[i].ID == c.FirstKeptEntryID {
				from = i
				break
			}
		}
	}
	isCut := func(e transcript.Entry) bool {
		return e.Type == transcript.TypeMessage && e.Message != nil &&
			(e.Message.Role == transcript.RoleUser || e.Message.Role == transcript.RoleAssistant)
	}
	acc, cut := 0, -1
	for i := len(branch) - 1; i >= from; i-- {
		e := branch[i]
		if e.Type != transcript.TypeMessage || e.Message == nil {
			continue
		}
		acc += models.EstimateMessage(*e.Message)
		if acc < keepRecent {
			continue
		}
		for c := i; c < len(branch); c++ {
			if isCut(branch[c]) {
				cut = c
				break
			}
		}
		if cut < 0 {
			for c := i - 1; c >= from; c-- {
				if isCut(branch[c]) {
					cut = c
					break
				}
			}
		}
		break
	}
	if cut <= from {
		return plan
	}
	for _, e := range branch[from:cut] {
		if e.Type == transcript.TypeMessage && e.Message != nil {
			plan.summarize = append(plan.summarize, *e.Message)
		}
	}
	if len(plan.summarize) == 0 {
		return plan
	}
	plan.cut = cut
	return plan
}

// summaryRequest builds the summary call (pi's prompt shape: the
// conversation in <conversation> tags, the previous summary in
// <previous-summary> tags, then the instructions), sized so that the
// request stays under the compaction threshold: long messages are cut to
// serializedMessageChars and, if that is not enough, the oldest messages
// are left out (the previous summary covers what came before them).
func summaryRequest(plan compactionPlan, b models.Budget) llm.Request {
	instructions := summaryPrompt
	previous := plan.previous
	if previous != "" {
		instructions = updateSummaryPrompt
	}
	budget := b.Threshold() - models.EstimateText(summarySystemPrompt) - models.EstimateText(instructions) - 64
	if maxPrev := budget / 3; models.EstimateText(previous) > maxPrev {
		previous = truncate(previous, maxPrev*4)
	}
	budget -= models.EstimateText(previous)
	parts := make([]string, len(plan.summarize))
	for i, m := range plan.summarize {
		parts[i] = serializeMessage(m)
	}
	total := 0
	first := len(parts)
	for first > 0 {
		n := models.EstimateText(parts[first-1]) + 1
		if total+n > budget {
			break
		}
		total += n
		first--
	}
	conv := strings.Join(parts[first:], "\n\n")
	if first > 0 {
		conv = fmt.Sprintf("[%d earlier messages left out]\n\n", first) + conv
	}
	var text strings.Builder
	text.WriteString("<conversation>\n" + conv + "\n</conversation>\n\n")
	if previous != "" {
		text.WriteString("<previous-summary>\n" + previous + "\n</previous-summary>\n\n")
	}
	text.WriteString(instructions)
	maxOut := b.Reserve * 8 / 10
	return llm.Request{
		System:    summarySystemPrompt,
		Messages:  []transcript.Message{{Role: transcript.RoleUser, Text: text.String()}},
		MaxTokens: maxOut,
	}
}

// serializeMessage renders one message for the summarizer (pi's format).
func serializeMessage(m transcript.Message) string {
	var parts []string
	switch m.Role {
	case transcript.RoleUser:
		t := m.Text
		if n := len(m.Images); n > 0 {
			t += fmt.Sprintf(" [%d image(s)]", n)
		}
		parts = append(parts, "[User]: "+truncate(t, serializedMessageChars))
	case transcript.RoleAssistant:
		if m.Thinking != "" {
			parts = append(parts, "[Assistant thinking]: "+truncate(m.Thinking, serializedMessageChars))
		}
		if m.Text != "" {
			parts = append(parts, "[Assistant]: "+truncate(m.Text, serializedMessageChars))
		}
		if len(m.ToolCalls) > 0 {
			calls := make([]string, len(m.ToolCalls))
			for i, tc := range m.ToolCalls {
				calls[i] = tc.Name + "(" + truncate(compactJSON(tc.Args), serializedMessageChars/4) + ")"
			}
			parts = append(parts, "[Assistant tool calls]: "+strings.Join(calls, "; "))
		}
	case transcript.RoleToolResult:
		label := "[Tool result]"
		if m.IsError {
			label = "[Tool error]"
		}
		parts = append(parts, label+": "+truncate(m.Text, serializedMessageChars))
	}
	return strings.Join(parts, "\n")
}

func compactJSON(raw json.RawMessage) string {
	return strings.Join(strings.Fields(string(raw)), " ")
}

// truncate cuts s to about n bytes (on a rune boundary), saying so.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n < 0 {
		n = 0
	}
	cut := n
	for cut > 0 && cut < len(s) && !utf8RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf(" […%d more characters]", len(s)-cut)
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
