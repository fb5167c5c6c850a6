package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// DefaultIdempotencyWindow is how long a finished turn's key is answered
// from its record when neither the session nor fastagent.yaml
// (idempotencyWindow, FASTAGENT_IDEMPOTENCY_WINDOW) says otherwise.
const DefaultIdempotencyWindow = 24 * time.Hour

// BeginTurn is the Turn.Begin (local) activity. A key the store has recorded
// within the window is answered with its outcome and the turn is not run;
// otherwise (no record, or one older than the window) the turn's user entry
// is appended (a no-op when a retry already stored it) and the result says
// "new" (no outcome): the turn runs, and its record replaces the old one.
func (a *Activities) BeginTurn(ctx context.Context, in wire.BeginTurnInput) (wire.BeginTurnResult, error) {
	if in.Key != "" {
		rec, err := a.Store.Turn(ctx, in.Session, in.Key)
		switch {
		case err == nil:
			if time.Since(rec.Finished) <= a.window(ctx, in.Window) {
				var out agentloop.Outcome
				if err := json.Unmarshal(rec.Outcome, &out); err != nil {
					return wire.BeginTurnResult{}, storeError(fmt.Errorf("decode turn %q: %w", in.Key, err))
				}
				a.log().Info("turn answered from its record", "session", in.Session, "turn", in.Key)
				res := wire.BeginTurnResult{Outcome: &out}
				if out.First != "" && in.Entry.ParentID != "" {
					first, err := a.Store.Get(ctx, in.Session, out.First)
					switch {
					case err == nil:
						res.Extends = first.ParentID == in.Entry.ParentID
					case !errors.Is(err, store.ErrNotFound):
						return wire.BeginTurnResult{}, storeError(err)
					}
				}
				return res, nil
			}
		case !errors.Is(err, store.ErrNotFound):
			return wire.BeginTurnResult{}, storeError(err)
		}
	}
	if err := a.Store.Append(ctx, in.Session, in.Entry); err != nil {
		return wire.BeginTurnResult{}, storeError(err)
	}
	return wire.BeginTurnResult{}, nil
}

// window is the idempotency window: the session's own (SessionInput), else
// the definition's idempotencyWindow, else DefaultIdempotencyWindow.
func (a *Activities) window(ctx context.Context, w time.Duration) time.Duration {
	if w > 0 {
		return w
	}
	if a.Definitions != nil {
		if def, err := a.Definitions.Load(ctx); err == nil && def.Config.IdempotencyWindow > 0 {
			return time.Duration(def.Config.IdempotencyWindow)
		}
	}
	return DefaultIdempotencyWindow
}

// RecordTurn is the Turn.Record activity: it keeps a finished turn's outcome
// under its key, then publishes it as the turn's last feed message, so that
// consumers of turns nobody holds an update for (follow-ups, wake-ups) get
// their terminal, and a detached consumer's waiter sees the turn end. The
// first record of a key wins, so a retry is harmless; a turn that ran again
// after its key's window (in.Started set) replaces the older record. The
// turn's leaf becomes the session's head (where a new workflow chain
// continues).
func (a *Activities) RecordTurn(ctx context.Context, in wire.RecordTurnInput) error {
	data, err := json.Marshal(in.Outcome)
	if err != nil {
		return fmt.Errorf("record turn %q: %w", in.Key, err)
	}
	rec := store.TurnRecord{Key: in.Key, Outcome: data, Finished: in.Finished, Replaces: in.Replaces()}
	if err := a.Store.RecordTurn(ctx, in.Session, rec); err != nil {
		return storeError(err)
	}
	if stored, err := a.Store.Turn(ctx, in.Session, in.Key); err == nil {
		data = stored.Outcome // the first record is the truth
	}
	var out agentloop.Outcome
	if json.Unmarshal(data, &out) == nil && out.Leaf != "" {
		if err := a.Store.SetHead(ctx, in.Session, out.Leaf); err != nil {
			return storeError(err)
		}
	}
	pub := publisher{bus: a.Feed, session: in.Session, turn: in.Key}
	pub.send(ctx, feed.Message{Kind: feed.KindOutcome, Outcome: data})
	pub.flush(ctx)
	return nil
}
