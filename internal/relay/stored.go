package relay

import (
	"context"
	"fmt"

	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// StoredSteps reads a finished turn's answer from the session store: the
// text of each assistant reply on the branch between the turn's first entry
// and its leaf, one per model step, in step order.
func StoredSteps(ctx context.Context, st store.Store, session string, o agentloop.Outcome) ([]string, error) {
	if o.First == "" || o.Leaf == "" {
		return nil, fmt.Errorf("relay: turn %q: the outcome names no stored entries", o.Turn)
	}
	branch, err := st.Branch(ctx, session, o.Leaf)
	if err != nil {
		return nil, fmt.Errorf("relay: stored answer of turn %q: %w", o.Turn, err)
	}
	start := -1
	for i, e := range branch {
		if e.ID == o.First {
			start = i
			break
		}
	}
	if start < 0 {
		// The turn stored no reply below its prompt (its first step failed).
		return nil, nil
	}
	var texts []string
	for _, e := range branch[start+1:] {
		if e.Type == transcript.TypeMessage && e.Message != nil && e.Message.Role == transcript.RoleAssistant {
			texts = append(texts, e.Message.Text)
		}
	}
	return texts, nil
}

// StoreReader returns the Options.Stored function over st.
func StoreReader(st store.Store, session string) func(ctx context.Context, o agentloop.Outcome) ([]string, error) {
	if st == nil {
		return nil
	}
	return func(ctx context.Context, o agentloop.Outcome) ([]string, error) {
		return StoredSteps(ctx, st, session, o)
	}
}
