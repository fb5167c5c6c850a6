package activities_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/transcript"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// TestBeginTurn: a key recorded within the window is answered from its
// record and its user entry is not stored; anything else stores the entry.
func TestBeginTurn(t *testing.T) {
	t.Parallel()
	const session = "s1"
	recorded := agentloop.Outcome{Turn: "k1", Status: agent.TypeCompleted, Steps: 1, First: "x1", Leaf: "x2"}
	tests := []struct {
		name string
		key  string
		// age is how long ago k1 was recorded; 0 records nothing.
		age        time.Duration
		window     time.Duration
		wantRecord bool
	}{
		{name: "new key", key: "k1", window: time.Hour},
		{name: "recorded key within the window", key: "k1", age: time.Minute, window: time.Hour, wantRecord: true},
		{name: "recorded key past the window", key: "k1", age: 2 * time.Hour, window: time.Hour},
		{name: "no window: a recorded key is always answered", key: "k1", age: 365 * 24 * time.Hour, wantRecord: true},
		{name: "no key (a wake-up)", key: "", age: time.Minute, window: time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			if tt.age > 0 {
				data, err := json.Marshal(recorded)
				if err != nil {
					t.Fatal(err)
				}
				rec := store.TurnRecord{Key: "k1", Outcome: data, Finished: time.Now().Add(-tt.age)}
				if err := e.kit.Store.RecordTurn(context.Background(), session, rec); err != nil {
					t.Fatal(err)
				}
			}
			in := workflows.BeginTurnInput{
				Session: session, Key: tt.key, Window: tt.window,
				Entry: message("u1", "", transcript.Message{Role: transcript.RoleUser, Text: "hi"}),
			}
			v, err := e.act.ExecuteActivity(workflows.ActivityTurnBegin, in)
			if err != nil {
				t.Fatalf("BeginTurn: %v", err)
			}
			var res workflows.BeginTurnResult
			if err := v.Get(&res); err != nil {
				t.Fatal(err)
			}
			_, stored := e.stored(session, "u1")
			if tt.wantRecord {
				if res.Outcome == nil || res.Outcome.Turn != recorded.Turn || res.Outcome.Leaf != recorded.Leaf {
					t.Errorf("outcome = %+v, want the recorded %+v", res.Outcome, recorded)
				}
				if stored {
					t.Error("an answered turn stored its user entry")
				}
				return
			}
			if res.Outcome != nil {
				t.Errorf("outcome = %+v, want none (a new turn)", res.Outcome)
			}
			if !stored {
				t.Error("a new turn's user entry was not stored")
			}
		})
	}
}

// TestRecordTurn: the first record of a key wins, and what is published as
// the turn's last feed message is that first record.
func TestRecordTurn(t *testing.T) {
	t.Parallel()
	const session = "s1"
	e := newEnv(t)
	first := agentloop.Outcome{Turn: "k1", Status: agent.TypeCompleted, Steps: 1, Leaf: "a1"}
	second := agentloop.Outcome{Turn: "k1", Status: agent.TypeFailed, Details: "a late retry", Steps: 2, Leaf: "a2"}
	for _, out := range []agentloop.Outcome{first, second} {
		in := workflows.RecordTurnInput{Session: session, Key: "k1", Outcome: out, Finished: time.Now()}
		if _, err := e.act.ExecuteActivity(workflows.ActivityTurnRecord, in); err != nil {
			t.Fatalf("RecordTurn(%s): %v", out.Status, err)
		}
	}
	rec, err := e.kit.Store.Turn(context.Background(), session, "k1")
	if err != nil {
		t.Fatal(err)
	}
	var got agentloop.Outcome
	if err := json.Unmarshal(rec.Outcome, &got); err != nil {
		t.Fatal(err)
	}
	if got.Status != first.Status || got.Leaf != first.Leaf {
		t.Errorf("stored outcome = %+v, want the first record %+v", got, first)
	}
	// Each record publishes; both must carry the first record.
	for _, m := range e.feedUntilN(session, "k1", feed.KindOutcome, 2) {
		if m.Kind != feed.KindOutcome {
			continue
		}
		var published agentloop.Outcome
		if err := json.Unmarshal(m.Outcome, &published); err != nil {
			t.Fatal(err)
		}
		if published.Status != first.Status || published.Leaf != first.Leaf {
			t.Errorf("published outcome = %+v, want the first record %+v", published, first)
		}
	}
}
