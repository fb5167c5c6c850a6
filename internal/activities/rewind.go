package activities

import (
	"context"
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
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows"
)

// branchSummaryPrompt asks for what an abandoned branch tried (pi's
// branch summary shape).
const branchSummaryPrompt = `The messages above are a branch of a conversation that the user is moving away from: they rewound to an earlier point and will continue from there.

Summarize what was tried on this branch so the conversation does not repeat it. Use this EXACT format:

## Goal
[What the user was trying to accomplish on this branch]

## What was tried
- [Approaches, commands, edits, with exact file paths, function names and error messages]

## Outcome
- [What worked, what failed and why, what was left unfinished]

Keep it concise.`

// Rewind is the Session.Rewind activity.
func (a *Activities) Rewind(ctx context.Context, in wire.RewindInput) (workflows.RewindResult, error) {
	stop := a.heartbeat(ctx)
	defer stop()
	res, err := a.RunRewind(ctx, in)
	if err == nil && res.Leaf != "" {
		// A session started again after a terminate opens here, not at
		// its last turn's leaf.
		if err := a.Store.SetHead(ctx, in.Session, res.Leaf); err != nil {
			return res, storeError(err)
		}
	}
	return res, err
}

// RunRewind moves a session from in.Leaf to in.Entry: the messages of the
// current branch that the target's branch does not hold are summarized with
// one model call into a branch-summary entry (ID in.EntryID, parent
// in.Entry), which becomes the leaf. With nothing abandoned the target
// itself is the leaf. An entry already stored under in.EntryID (an earlier
// attempt) is the result. An unknown entry is CodeNotFound.
func (a *Activities) RunRewind(ctx context.Context, in wire.RewindInput) (workflows.RewindResult, error) {
	res := workflows.RewindResult{Entry: in.Entry, From: in.Leaf}
	if prev, err := a.Store.Get(ctx, in.Session, in.EntryID); err == nil && prev.BranchSummary != nil {
		res.Leaf, res.SummaryEntry, res.Summary = prev.ID, prev.ID, prev.BranchSummary.Summary
		return res, nil
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		return res, storeError(err)
	}
	target, err := a.Store.Branch(ctx, in.Session, in.Entry)
	if errors.Is(err, store.ErrNotFound) {
		return res, temporal.NewApplicationErrorWithOptions(fmt.Sprintf("session %q has no entry %q", in.Session, in.Entry),
			agent.CodeNotFound, temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	if err != nil {
		return res, storeError(err)
	}
	current, err := a.Store.Branch(ctx, in.Session, in.Leaf)
	if err != nil {
		return res, storeError(err)
	}
	kept := make(map[string]bool, len(target))
	for _, e := range target {
		kept[e.ID] = true
	}
	var abandoned []transcript.Message
	for _, e := range current {
		if kept[e.ID] {
			continue
		}
		switch {
		case e.Type == transcript.TypeMessage && e.Message != nil:
			abandoned = append(abandoned, *e.Message)
		case e.Type == transcript.TypeBranchSummary && e.BranchSummary != nil:
			abandoned = append(abandoned, transcript.BranchSummaryMessage(*e.BranchSummary))
		}
	}
	res.Abandoned = len(abandoned)
	if len(abandoned) == 0 {
		res.Leaf = in.Entry
		return res, nil
	}
	def, err := a.Definitions.Load(ctx)
	if err != nil {
		return res, temporal.NewApplicationErrorWithOptions(
			"the agent definition could not be loaded: "+err.Error(), agent.CodeDefinition, temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	msg, err := a.summarize(ctx, def, in.Session, func(b models.Budget) llm.Request {
		req := summaryRequest(compactionPlan{summarize: abandoned}, b)
		text := req.Messages[0].Text
		req.Messages[0].Text = text[:strings.LastIndex(text, "</conversation>")+len("</conversation>")] + "\n\n" + branchSummaryPrompt
		return req
	})
	if err != nil {
		return res, err
	}
	summary := strings.TrimSpace(msg.Text)
	if summary == "" {
		return res, temporal.NewApplicationErrorWithOptions("the model returned an empty branch summary", agent.CodeModel, temporal.ApplicationErrorOptions{})
	}
	entry := transcript.Entry{
		ID: in.EntryID, ParentID: in.Entry, Type: transcript.TypeBranchSummary, Time: time.Now().UTC(),
		BranchSummary: &transcript.BranchSummary{FromID: in.Leaf, Summary: summary},
	}
	if err := a.Store.Append(ctx, in.Session, entry); err != nil {
		return res, storeError(err)
	}
	if stored, err := a.Store.Get(ctx, in.Session, in.EntryID); err == nil && stored.BranchSummary != nil {
		entry = stored
	}
	res.Leaf, res.SummaryEntry, res.Summary = entry.ID, entry.ID, entry.BranchSummary.Summary
	res.Usage = usageOf(&msg)
	a.log().Info("session rewound", "session", in.Session, "entry", in.Entry, "from", in.Leaf, "abandoned", res.Abandoned,
		"summaryTokens", models.EstimateText(summary))
	return res, nil
}
