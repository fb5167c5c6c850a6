package durable

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/sessionstart"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// Session statuses ListStatus reports.
const (
	// StatusOpen: the session's workflow is running (idle or serving a turn).
	StatusOpen = "open"
	// StatusStored: the store holds the session but no workflow was ever
	// started for it (an import that has not run a turn yet).
	StatusStored = "stored"
)

func (a *Agent) needStore() error {
	if a.Store == nil {
		return agent.NewError(agent.CodeUnsupportedCapability, "this server has no session store")
	}
	return nil
}

// ListSessions lists a page of sessions from the store.
func (a *Agent) ListSessions(ctx context.Context, q store.SessionQuery) (store.SessionPage, error) {
	if err := a.needStore(); err != nil {
		return store.SessionPage{}, err
	}
	p, err := a.Store.ListSessions(ctx, q)
	if errors.Is(err, store.ErrBadCursor) {
		return p, &agent.Error{Code: agent.CodeInvalidCommand, Message: err.Error(), Err: err}
	}
	return p, err
}

// SearchSessions lists the session workflows whose search attributes match
// f, from Temporal visibility (eventually consistent), newest first.
func (a *Agent) SearchSessions(ctx context.Context, f sessionstart.Filter, limit int, cursor string) (sessionstart.Page, error) {
	if limit <= 0 {
		limit = store.DefaultSessionPage
	}
	p, err := sessionstart.Search(ctx, a.Client, f, limit, cursor)
	if errors.Is(err, sessionstart.ErrBadCursor) {
		return p, &agent.Error{Code: agent.CodeInvalidCommand, Message: err.Error(), Err: err}
	}
	return p, err
}

// Status is a session's workflow status from Temporal visibility: StatusOpen,
// StatusStored, or the closed run's status ("terminated", "failed", …).
func (a *Agent) Status(ctx context.Context, session string) (string, error) {
	d, err := a.Client.DescribeWorkflow(ctx, workflows.WorkflowID(session), "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return StatusStored, nil
	}
	if err != nil {
		return "", fmt.Errorf("durable: describe session %q: %w", session, err)
	}
	st := d.RawResponse.GetWorkflowExecutionInfo().GetStatus()
	if st == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return StatusOpen, nil
	}
	return strings.ToLower(strings.TrimPrefix(st.String(), "WORKFLOW_EXECUTION_STATUS_")), nil
}

// CurrentLeaf is the session's leaf: the workflow's own when it answers,
// else the last recorded turn's, else the newest stored entry.
func (a *Agent) CurrentLeaf(ctx context.Context, session string) (string, error) {
	if v, err := a.State(ctx, session); err == nil {
		// A turn's last model step records the turn, and its answer is
		// out, a moment before the workflow hears of it: its record's
		// leaf is the one a caller holding that answer must read.
		if v.Running != "" {
			if out, err := lookupTurn(ctx, a.Store, session, v.Running); err == nil && out.Leaf != "" {
				return out.Leaf, nil
			}
		}
		return v.Leaf, nil
	} else if agent.CodeOf(err) != agent.CodeNoSuchSession {
		return "", err
	}
	if out, err := a.lastTurnLeaf(ctx, session); err != nil || out != "" {
		return out, err
	}
	return a.Store.Leaf(ctx, session)
}

func (a *Agent) lastTurnLeaf(ctx context.Context, session string) (string, error) {
	last, err := a.Store.LastTurn(ctx, session)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	out, err := lookupTurn(ctx, a.Store, session, last.Key)
	if err != nil {
		return "", err
	}
	return out.Leaf, nil
}

// Transcript returns the session's leaf and its current branch (root
// first), or every entry in append order when tree is set.
func (a *Agent) Transcript(ctx context.Context, session string, tree bool) (string, []transcript.Entry, error) {
	if err := a.needStore(); err != nil {
		return "", nil, err
	}
	if err := a.known(ctx, session); err != nil {
		return "", nil, err
	}
	leaf, err := a.CurrentLeaf(ctx, session)
	if err != nil {
		return "", nil, err
	}
	if tree {
		es, err := a.Store.Entries(ctx, session)
		return leaf, es, err
	}
	if leaf == "" {
		return "", []transcript.Entry{}, nil
	}
	es, err := a.Store.Branch(ctx, session, leaf)
	return leaf, es, err
}

// known is CodeNoSuchSession for a session the store holds no entry of
// and whose workflow is not open (never started, or deleted).
func (a *Agent) known(ctx context.Context, session string) error {
	leaf, err := a.Store.Leaf(ctx, session)
	if err != nil || leaf != "" {
		return err
	}
	st, err := a.Status(ctx, session)
	if err != nil || st == StatusOpen {
		return err
	}
	return agent.NewError(agent.CodeNoSuchSession, fmt.Sprintf("no such session %q", session))
}

// HasEntry reports whether session holds entry.
func (a *Agent) HasEntry(ctx context.Context, session, entry string) (bool, error) {
	if err := a.needStore(); err != nil {
		return false, err
	}
	_, err := a.Store.Get(ctx, session, entry)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Import creates session from entries (parents before children): they are
// stored before any workflow exists, and the session workflow opens at the
// last one, as it opens a session seeded from a parent. A session that
// has entries or a workflow is CodeSessionExists, and nothing is written.
func (a *Agent) Import(ctx context.Context, session string, entries []transcript.Entry) error {
	if err := a.needStore(); err != nil {
		return err
	}
	if len(entries) == 0 {
		return agent.NewError(agent.CodeInvalidCommand, "the session file holds no entries")
	}
	leaf, err := a.Store.Leaf(ctx, session)
	if err != nil {
		return err
	}
	st, err := a.Status(ctx, session)
	if err != nil {
		return err
	}
	if leaf != "" || st != StatusStored {
		return agent.NewError(agent.CodeSessionExists, fmt.Sprintf("session %q exists; import it under another ID (--as)", session))
	}
	return a.Store.Append(ctx, session, entries...)
}

// Rewind moves the session's leaf to entry between turns (UpdateRewind).
func (a *Agent) Rewind(ctx context.Context, session, entry string) (workflows.RewindResult, error) {
	var res workflows.RewindResult
	err := a.update(ctx, session, workflows.UpdateRewind, workflows.RewindRequest{Entry: entry}, &res)
	return res, err
}

// FollowUp queues text as a turn (idempotency key key) behind the session's
// current one and returns once the session accepted it, without waiting
// for it to run; Attach follows it.
func (a *Agent) FollowUp(ctx context.Context, session, key, text string) error {
	err := a.followUp(ctx, session, key, text, true)
	if sessionstart.Unregistered(err) {
		a.log().Warn(sessionstart.Hint, "error", err)
		err = a.followUp(ctx, session, key, text, false)
	}
	return err
}

func (a *Agent) followUp(ctx context.Context, session, key, text string, search bool) error {
	start := a.Client.NewWithStartWorkflowOperation(a.startOptions(ctx, session, "http", search),
		workflows.SessionWorkflowType, workflows.SessionInput{Session: session, TurnsPerRun: a.TurnsPerRun})
	h, err := a.Client.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateID:     key,
			UpdateName:   workflows.UpdateTurn,
			Args:         []any{workflows.TurnRequest{Prompt: agent.Prompt{Text: text}, Source: "followup"}},
			WaitForStage: client.WorkflowUpdateStageAccepted,
		},
	})
	if err == nil {
		// A rejected update comes back settled; an accepted one would
		// wait for the turn, so its outcome is not asked for.
		done, cancel := context.WithCancel(ctx)
		cancel()
		var app *temporal.ApplicationError
		if gerr := h.Get(done, nil); errors.As(gerr, &app) {
			err = gerr
		}
	}
	var exhausted *serviceerror.ResourceExhausted
	if errors.As(err, &exhausted) {
		return agent.NewError(agent.CodeSessionBusy, "session busy: too many turns in flight; retry later")
	}
	return controlError(session, err)
}

// DeleteOptions say how Delete treats a busy session and which stored
// sessions it leaves alone.
type DeleteOptions struct {
	// Force deletes a session that is running or has queued a turn (the
	// turn is ended with the workflow); without it such a session is
	// CodeTurnRunning and nothing changes.
	Force bool
	// Keep are prefixes of stored sessions that are never removed as
	// sub-agent sessions (another agent's, whose IDs may look like them).
	Keep []string
}

// Deleted says what Delete removed.
type Deleted struct {
	Session string `json:"session"`
	// Workflows are the workflow IDs terminated: the session's and its
	// running sub-agents' (none when the session was not open).
	Workflows []string `json:"workflows"`
	// Entries is the number of transcript entries removed, the sub-agent
	// sessions' included.
	Entries int64 `json:"entries"`
	// SubSessions are the sub-agent sessions removed with it.
	SubSessions []string `json:"subSessions"`
	// Running is the turn that was running (Force), "" when none was.
	Running string `json:"running,omitempty"`
}

// Delete ends session for good: its workflow and its sub-agents' running
// workflows are terminated, then its transcript, turn records, replies
// and head are removed from the store, and so are its sub-agent
// sessions' (its owner is kept: the ID stays the owner's). A session that runs or queues a turn is CodeTurnRunning
// unless opts.Force; a session neither the store nor Temporal knows is
// CodeNoSuchSession. Either refusal changes nothing.
func (a *Agent) Delete(ctx context.Context, session string, opts DeleteOptions) (Deleted, error) {
	out := Deleted{Session: session, Workflows: []string{}, SubSessions: []string{}}
	if err := a.needStore(); err != nil {
		return out, err
	}
	st, err := a.Status(ctx, session)
	if err != nil {
		return out, err
	}
	if st == StatusOpen {
		v, err := a.State(ctx, session)
		if err != nil && agent.CodeOf(err) != agent.CodeNoSuchSession {
			return out, err
		}
		if busy := v.Running != "" || len(v.Queued) > 0; busy && !opts.Force {
			what := fmt.Sprintf("is running turn %q", v.Running)
			if v.Running == "" {
				what = fmt.Sprintf("has %d queued turn(s)", len(v.Queued))
			}
			return out, agent.NewError(agent.CodeTurnRunning, fmt.Sprintf(
				"session %q %s; abort it first, or delete with force (?force=true, fastagent session rm --force) to end it with the session", session, what))
		}
		out.Running = v.Running
	}
	subs, err := a.Store.SubSessions(ctx, session)
	if err != nil {
		return out, err
	}
	leaf, err := a.Store.Leaf(ctx, session)
	if err != nil {
		return out, err
	}
	if st != StatusOpen && leaf == "" && len(subs) == 0 {
		if _, err := a.Store.LastTurn(ctx, session); errors.Is(err, store.ErrNotFound) {
			return out, agent.NewError(agent.CodeNoSuchSession, fmt.Sprintf("no such session %q", session))
		} else if err != nil {
			return out, err
		}
	}
	if st == StatusOpen {
		ended, err := a.terminate(ctx, workflows.WorkflowID(session), "session deleted")
		out.Workflows = append(out.Workflows, ended...)
		if err != nil {
			return out, err
		}
	}
	n, removed, err := deleteStored(ctx, a.Store, session, subs, opts.Keep)
	out.Entries += n
	out.SubSessions = append(out.SubSessions, removed...)
	return out, err
}

// DeleteStored removes what the store keeps of session — its transcript
// (images included), turn records, replies and head — and of its sub-agent
// sessions (except those starting with one of keep), and returns how many
// entries it removed and the sub-agent sessions it removed. It touches no
// workflow: Delete ends them first; a session workflow closing itself
// after its idle TTL calls it from its own activity.
func DeleteStored(ctx context.Context, st store.Store, session string, keep []string) (int64, []string, error) {
	subs, err := st.SubSessions(ctx, session)
	if err != nil {
		return 0, nil, err
	}
	return deleteStored(ctx, st, session, subs, keep)
}

func deleteStored(ctx context.Context, st store.Store, session string, subs, keep []string) (int64, []string, error) {
	var entries int64
	removed := []string{}
	for _, sub := range subs {
		if !subAgentOf(session, sub) || slices.ContainsFunc(keep, func(p string) bool { return strings.HasPrefix(sub, p) }) {
			continue
		}
		n, err := st.DeleteSession(ctx, sub)
		if err != nil {
			return entries, removed, err
		}
		entries += n
		removed = append(removed, sub)
	}
	n, err := st.DeleteSession(ctx, session)
	return entries + n, removed, err
}

// terminate ends workflow id and, after it, the children it had running
// (a sub-agent's own children included), and returns the IDs it ended.
// A workflow that closed meanwhile is not an error.
func (a *Agent) terminate(ctx context.Context, id, reason string) ([]string, error) {
	desc, err := a.Client.DescribeWorkflow(ctx, id, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("durable: describe %q: %w", id, err)
	}
	d := desc.RawResponse
	if d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return nil, nil
	}
	err = a.Client.TerminateWorkflow(ctx, id, "", reason)
	if errors.As(err, &nf) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("durable: terminate %q: %w", id, err)
	}
	ended := []string{id}
	for _, ch := range d.GetPendingChildren() {
		more, err := a.terminate(ctx, ch.GetWorkflowId(), reason)
		ended = append(ended, more...)
		if err != nil {
			return ended, err
		}
	}
	return ended, nil
}

// subAgentOf reports whether stored session sub is a sub-agent session of
// session: every part after session's ID has a sub-agent's shape.
func subAgentOf(session, sub string) bool {
	if !strings.HasPrefix(sub, session+"/") {
		return false
	}
	for sub != session {
		if !agentloop.IsSubAgentSession(sub) {
			return false
		}
		sub = sub[:strings.LastIndexByte(sub, '/')]
	}
	return true
}
