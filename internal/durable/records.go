package durable

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// lookupTurn reads a finished turn's outcome from the store's turn records.
func lookupTurn(ctx context.Context, st store.Store, session, key string) (*agentloop.Outcome, error) {
	rec, err := st.Turn(ctx, session, key)
	if err != nil {
		return nil, err
	}
	var out agentloop.Outcome
	if err := json.Unmarshal(rec.Outcome, &out); err != nil {
		return nil, fmt.Errorf("durable: decode the record of turn %q: %w", key, err)
	}
	return &out, nil
}
