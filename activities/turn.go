package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// BeginTurn is the Turn.Begin (local) activity. A key the store has recorded
// within the window is answered with its outcome and the turn is not run;
// otherwise the turn's user entry is appended (a no-op when a retry already
// stored it) and the result says "new" (no outcome).
func (a *Activities) BeginTurn(ctx context.Context, in workflows.BeginTurnInput) (workflows.BeginTurnResult, error) {
	if in.Key != "" {
		rec, err := a.Store.Turn(ctx, in.Session, in.Key)
		switch {
		case err == nil:
			if in.Window <= 0 || time.Since(rec.Finished) <= in.Window {
				var out agentloop.Outcome
				if err := json.Unmarshal(rec.Outcome, &out); err != nil {
					return workflows.BeginTurnResult{}, storeError(fmt.Errorf("decode turn %q: %w", in.Key, err))
				}
				a.log().Info("turn answered from its record", "session", in.Session, "turn", in.Key)
				return workflows.BeginTurnResult{Outcome: &out}, nil
			}
		case !errors.Is(err, store.ErrNotFound):
			return workflows.BeginTurnResult{}, storeError(err)
		}
	}
	if err := a.Store.Append(ctx, in.Session, in.Entry); err != nil {
		return workflows.BeginTurnResult{}, storeError(err)
	}
	return workflows.BeginTurnResult{}, nil
}

// RecordTurn is the Turn.Record activity: it keeps a finished turn's outcome
// under its key, then publishes it as the turn's last feed message, so that
// consumers of turns nobody holds an update for (follow-ups, wake-ups) get
// their terminal, and a detached consumer's waiter sees the turn end. The
// first record of a key wins, so a retry is harmless.
func (a *Activities) RecordTurn(ctx context.Context, in workflows.RecordTurnInput) error {
	data, err := json.Marshal(in.Outcome)
	if err != nil {
		return fmt.Errorf("record turn %q: %w", in.Key, err)
	}
	rec := store.TurnRecord{Key: in.Key, Outcome: data, Finished: in.Finished}
	if err := a.Store.RecordTurn(ctx, in.Session, rec); err != nil {
		return storeError(err)
	}
	if stored, err := a.Store.Turn(ctx, in.Session, in.Key); err == nil {
		data = stored.Outcome // the first record is the truth
	}
	pub := publisher{bus: a.Feed, session: in.Session, turn: in.Key}
	pub.send(ctx, feed.Message{Kind: feed.KindOutcome, Outcome: data})
	pub.flush(ctx)
	return nil
}
