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
	"github.com/fastagent/fastagent/internal/durable"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows/agentloop"
	"github.com/fastagent/fastagent/workflows/wakes"
)

// OpenSession returns the session's current leaf: its head (Store.Head: set
// by the last recorded turn, rewind or manual compaction), else the last
// recorded turn's leaf when the store holds turn records (a new workflow chain resumes from
// the last finished turn, not from whatever entry was stored last, such as
// a half-run turn's), else the most recently appended entry. A session that has no
// entries yet and names a parent starts from a copy of the parent's
// transcript (up to the last branch hint found in it, else its leaf).
func (a *Activities) OpenSession(ctx context.Context, in wire.OpenInput) (wire.OpenResult, error) {
	res, err := a.openLeaf(ctx, in)
	if err != nil {
		return res, err
	}
	// A broken definition is reported by the first model call, with advice.
	if def, err := a.Definitions.Load(ctx); err == nil {
		res.Settings = a.settingsOf(def)
	}
	return res, nil
}

func (a *Activities) openLeaf(ctx context.Context, in wire.OpenInput) (wire.OpenResult, error) {
	// The head is where the session stood last: its last recorded turn,
	// rewind or manual compaction.
	head, err := a.Store.Head(ctx, in.Session)
	switch {
	case err == nil:
		return wire.OpenResult{Leaf: head}, nil
	case !errors.Is(err, store.ErrNotFound):
		return wire.OpenResult{}, storeError(err)
	}
	last, err := a.Store.LastTurn(ctx, in.Session)
	switch {
	case err == nil:
		var out agentloop.Outcome
		if err := json.Unmarshal(last.Outcome, &out); err != nil {
			return wire.OpenResult{}, storeError(fmt.Errorf("decode turn %q: %w", last.Key, err))
		}
		if out.Leaf != "" {
			return wire.OpenResult{Leaf: out.Leaf}, nil
		}
	case !errors.Is(err, store.ErrNotFound):
		return wire.OpenResult{}, storeError(err)
	}
	leaf, err := a.Store.Leaf(ctx, in.Session)
	if err != nil {
		return wire.OpenResult{}, storeError(err)
	}
	if strings.HasPrefix(leaf, wire.PromptIDPrefix) {
		// The last thing stored is a prompt nothing answered: a first turn
		// whose workflow task was lost after Turn.Begin. The retried task
		// stores the same prompt again below the leaf before it.
		if e, err := a.Store.Get(ctx, in.Session, leaf); err == nil && e.Message != nil && e.Message.Role == transcript.RoleUser {
			leaf = e.ParentID
		}
	}
	if leaf != "" || in.ParentSession == "" {
		return wire.OpenResult{Leaf: leaf}, nil
	}
	cut, err := a.Store.Leaf(ctx, in.ParentSession)
	if err != nil {
		return wire.OpenResult{}, storeError(err)
	}
	for i := len(in.BranchHints) - 1; i >= 0; i-- {
		if _, err := a.Store.Get(ctx, in.ParentSession, in.BranchHints[i]); err == nil {
			cut = in.BranchHints[i]
			break
		}
	}
	if in.FromEntry != "" {
		// The ingress checked it exists; a parent that lost it is an error,
		// not a silently different fork.
		if _, err := a.Store.Get(ctx, in.ParentSession, in.FromEntry); errors.Is(err, store.ErrNotFound) {
			return wire.OpenResult{}, temporal.NewApplicationErrorWithOptions(
				fmt.Sprintf("parent session %q has no entry %q to fork from", in.ParentSession, in.FromEntry),
				agent.CodeNotFound, temporal.ApplicationErrorOptions{NonRetryable: true})
		} else if err != nil {
			return wire.OpenResult{}, storeError(err)
		}
		cut = in.FromEntry
	}
	if cut == "" {
		return wire.OpenResult{}, nil
	}
	branch, err := a.Store.Branch(ctx, in.ParentSession, cut)
	if err != nil {
		return wire.OpenResult{}, storeError(fmt.Errorf("read parent session %q: %w", in.ParentSession, err))
	}
	copied := make([]transcript.Entry, len(branch))
	copy(copied, branch)
	if err := a.Store.Append(ctx, in.Session, copied...); err != nil {
		return wire.OpenResult{}, storeError(err)
	}
	return wire.OpenResult{Leaf: copied[len(copied)-1].ID}, nil
}

// NextWake is the Wake.Next local activity: the next instant of a recurring
// wake-up after the given time, in the wake-up's own time zone.
func (a *Activities) NextWake(ctx context.Context, in wire.NextWakeInput) (time.Time, error) {
	return wakes.Next(in.Cron, in.TZ, in.After)
}

// Expire is the Session.Expire activity: it deletes an idle session's
// stored data — transcript, turn records, replies, head, and its sub-agent
// sessions' — through the same code as DELETE /sessions/{id}
// (durable.DeleteStored), and logs an audit line. It first re-reads the
// definition's sessions.idleTTL: when that is now unset, or longer than
// the session has been idle, it deletes nothing and returns the TTL, so
// the session waits again (a lengthened or removed TTL wins). A definition
// that does not load deletes nothing (non-retryable error).
func (a *Activities) Expire(ctx context.Context, in wire.ExpireInput) (wire.ExpireResult, error) {
	def, err := a.Definitions.Load(ctx)
	if err != nil {
		return wire.ExpireResult{}, temporal.NewNonRetryableApplicationError(
			"session "+in.Session+" kept: the definition does not load, so its idle TTL is unknown: "+err.Error(), "definition", err)
	}
	ttl := time.Duration(def.Config.Sessions.IdleTTL)
	now := in.Now
	if now.IsZero() {
		now = time.Now()
	}
	// The workflow's clock: a worker whose clock lags the server's would
	// otherwise find the session not yet due at every timer, and the
	// session would ask again every second until the clocks agree.
	idle := now.Sub(in.IdleSince)
	if ttl <= 0 || idle < ttl {
		return wire.ExpireResult{IdleTTL: ttl}, nil
	}
	entries, subs, err := durable.DeleteStored(ctx, a.Store, in.Session, nil)
	if err != nil {
		return wire.ExpireResult{}, storeError(err)
	}
	a.log().Info("session deleted", "audit", true, "session", in.Session, "reason", "idle",
		"idleTTL", ttl.String(), "idleSince", in.IdleSince, "entries", entries, "subSessions", subs)
	return wire.ExpireResult{Deleted: true, Entries: entries, SubSessions: subs, IdleTTL: ttl}, nil
}
