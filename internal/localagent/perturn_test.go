package localagent_test

import (
	"context"
	"sync"
	"testing"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/localagent"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
	"github.com/fastagent/fastagent/internal/workspace"
)

// countingDefinitions counts definition loads.
type countingDefinitions struct {
	activities.Definitions
	mu    sync.Mutex
	loads int
}

func (c *countingDefinitions) Load(ctx context.Context) (*workspace.Definition, error) {
	c.mu.Lock()
	c.loads++
	c.mu.Unlock()
	return c.Definitions.Load(ctx)
}

// countingStore counts session opens (the last-turn lookup only OpenSession
// makes).
type countingStore struct {
	store.Store
	mu    sync.Mutex
	opens map[string]int
}

func (c *countingStore) LastTurn(ctx context.Context, session string) (store.TurnRecord, error) {
	c.mu.Lock()
	c.opens[session]++
	c.mu.Unlock()
	return c.Store.LastTurn(ctx, session)
}

// The baseline does the durable path's per-turn work and no more: a session
// is opened once (as SessionWorkflow opens it once), each model step loads
// the definition once, and later turns still see the earlier ones.
func TestPerTurnWork(t *testing.T) {
	tests := []struct {
		name      string
		sessions  []string // one turn each, in order
		wantOpens map[string]int
		wantLoads int // 1 per open + 1 per model step
		wantLast  string
	}{
		{"one turn", []string{"a"}, map[string]int{"a": 1}, 2, "t1"},
		{"three turns, one session", []string{"a", "a", "a"}, map[string]int{"a": 1}, 4, "t1|t2|t3"},
		{"two sessions interleaved", []string{"a", "b", "a", "b"}, map[string]int{"a": 1, "b": 1}, 6, "t2|t4"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := testkit.New(t)
			bus := feed.NewInProcess()
			t.Cleanup(func() { _ = bus.Close() })
			acts := k.Activities(bus)
			defs := &countingDefinitions{Definitions: acts.Definitions}
			st := &countingStore{Store: acts.Store, opens: map[string]int{}}
			acts.Definitions, acts.Store = defs, st
			a := &localagent.Agent{Acts: acts}
			var last string
			for i, s := range tc.sessions {
				text := "t" + string(rune('1'+i))
				res, err := agent.Collect(a.Invoke(context.Background(), agent.Scope{Session: s}, agent.Prompt{Text: text}))
				if err != nil {
					t.Fatalf("turn %d in %s: %v", i+1, s, err)
				}
				last = res.Text
			}
			for s, want := range tc.wantOpens {
				if got := st.opens[s]; got != want {
					t.Errorf("session %s opened %d times, want %d", s, got, want)
				}
			}
			if defs.loads != tc.wantLoads {
				t.Errorf("definition loaded %d times, want %d", defs.loads, tc.wantLoads)
			}
			if last != tc.wantLast {
				t.Errorf("last turn saw %q, want %q", last, tc.wantLast)
			}
		})
	}
}
