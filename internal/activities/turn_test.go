package activities_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/transcript"
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
		{name: "no window given: answered within the default 24 h", key: "k1", age: 23 * time.Hour, wantRecord: true},
		{name: "no window given: runs again after the default 24 h", key: "k1", age: 25 * time.Hour},
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
			in := wire.BeginTurnInput{
				Session: session, Key: tt.key, Window: tt.window,
				Entry: message("u1", "", transcript.Message{Role: transcript.RoleUser, Text: "hi"}),
			}
			v, err := e.act.ExecuteActivity(workflows.ActivityTurnBegin, in)
			if err != nil {
				t.Fatalf("BeginTurn: %v", err)
			}
			var res wire.BeginTurnResult
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
		in := wire.RecordTurnInput{Session: session, Key: "k1", Outcome: out, Finished: time.Now()}
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

// TestTurnKeyRule: one rule per key. Within the window a key is answered
// from its record; after it the key runs again, its record replaces the old
// one and what is published is the new outcome (not the stale terminal);
// a retry of the new record changes nothing. The window comes from the
// session, else fastagent.yaml (idempotencyWindow), else 24 h.
func TestTurnKeyRule(t *testing.T) {
	t.Parallel()
	const session = "s1"
	e := newEnv(t)
	if err := e.kit.WriteConfig("idempotencyWindow: 2h\n"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	old := agentloop.Outcome{Turn: "k1", Status: agent.TypeCompleted, Steps: 1, First: "o1", Leaf: "o2"}
	data, _ := json.Marshal(old)
	if err := e.kit.Store.RecordTurn(ctx, session, store.TurnRecord{Key: "k1", Outcome: data, Finished: time.Now().Add(-3 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	begin := func(window time.Duration) wire.BeginTurnResult {
		t.Helper()
		in := wire.BeginTurnInput{Session: session, Key: "k1", Window: window,
			Entry: message("n1", "", transcript.Message{Role: transcript.RoleUser, Text: "hi again"})}
		v, err := e.act.ExecuteActivity(workflows.ActivityTurnBegin, in)
		if err != nil {
			t.Fatalf("BeginTurn: %v", err)
		}
		var res wire.BeginTurnResult
		if err := v.Get(&res); err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := begin(4 * time.Hour); res.Outcome == nil {
		t.Fatal("a 3 h old record was not answered within the session's 4 h window")
	}
	if res := begin(0); res.Outcome != nil {
		t.Fatalf("a 3 h old record was answered past fastagent.yaml's 2 h window: %+v", res.Outcome)
	}
	started := time.Now()
	fresh := agentloop.Outcome{Turn: "k1", Status: agent.TypeFailed, Details: "the second run", Steps: 1, First: "n1", Leaf: "n2"}
	for i := 0; i < 2; i++ { // the second is a retry
		in := wire.RecordTurnInput{Session: session, Key: "k1", Outcome: fresh, Finished: time.Now(), Started: started}
		if _, err := e.act.ExecuteActivity(workflows.ActivityTurnRecord, in); err != nil {
			t.Fatalf("RecordTurn: %v", err)
		}
	}
	rec, err := e.kit.Store.Turn(ctx, session, "k1")
	if err != nil {
		t.Fatal(err)
	}
	var got agentloop.Outcome
	if err := json.Unmarshal(rec.Outcome, &got); err != nil {
		t.Fatal(err)
	}
	if got.Details != fresh.Details || got.Leaf != fresh.Leaf {
		t.Errorf("stored outcome = %+v, want the second run's %+v", got, fresh)
	}
	for _, m := range e.feedUntilN(session, "k1", feed.KindOutcome, 2) {
		if m.Kind != feed.KindOutcome {
			continue
		}
		var published agentloop.Outcome
		if err := json.Unmarshal(m.Outcome, &published); err != nil {
			t.Fatal(err)
		}
		if published.Details != fresh.Details {
			t.Errorf("published outcome = %+v, want the second run's (not the stale terminal)", published)
		}
	}
	if head, err := e.kit.Store.Head(ctx, session); err != nil || head != "n2" {
		t.Errorf("head = %q, %v; want the recorded turn's leaf n2", head, err)
	}
}

// TestBeginTurnSaysWhetherTheRecordExtendsTheLeaf: a recorded key is
// answered with Extends set when its prompt hangs below the leaf the new
// attempt would extend (a reset replayed the session to before the turn).
func TestBeginTurnSaysWhetherTheRecordExtendsTheLeaf(t *testing.T) {
	t.Parallel()
	const session = "s1"
	e := newEnv(t)
	e.store(session,
		message("j1", "", transcript.Message{Role: transcript.RoleUser, Text: "j"}),
		message("j2", "j1", transcript.Message{Role: transcript.RoleAssistant, Text: "J"}),
		message("k1", "j2", transcript.Message{Role: transcript.RoleUser, Text: "k"}),
		message("k2", "k1", transcript.Message{Role: transcript.RoleAssistant, Text: "K"}))
	data, _ := json.Marshal(agentloop.Outcome{Turn: "k", Status: agent.TypeCompleted, Steps: 1, First: "k1", Leaf: "k2"})
	if err := e.kit.Store.RecordTurn(context.Background(), session, store.TurnRecord{Key: "k", Outcome: data, Finished: time.Now()}); err != nil {
		t.Fatal(err)
	}
	for parent, want := range map[string]bool{"j2": true, "k2": false} {
		in := wire.BeginTurnInput{Session: session, Key: "k", Window: time.Hour,
			Entry: message("x", parent, transcript.Message{Role: transcript.RoleUser, Text: "k"})}
		v, err := e.act.ExecuteActivity(workflows.ActivityTurnBegin, in)
		if err != nil {
			t.Fatal(err)
		}
		var res wire.BeginTurnResult
		if err := v.Get(&res); err != nil {
			t.Fatal(err)
		}
		if res.Outcome == nil || res.Extends != want {
			t.Errorf("from leaf %s: outcome %+v, extends %v; want the record, extends %v", parent, res.Outcome, res.Extends, want)
		}
	}
}

// TestOpenSessionAtTheHead: a session opened again (a new workflow chain
// after a terminate) continues from its head — set by a rewind or a manual
// compaction after the last recorded turn — not from the last turn's leaf.
func TestOpenSessionAtTheHead(t *testing.T) {
	t.Parallel()
	const session = "s1"
	e := newEnv(t)
	e.store(session,
		message("a1", "", transcript.Message{Role: transcript.RoleUser, Text: "a"}),
		message("a2", "a1", transcript.Message{Role: transcript.RoleAssistant, Text: "A"}),
		message("b1", "a2", transcript.Message{Role: transcript.RoleUser, Text: "b"}),
		message("b2", "b1", transcript.Message{Role: transcript.RoleAssistant, Text: "B"}))
	out := agentloop.Outcome{Turn: "kb", Status: agent.TypeCompleted, Steps: 1, First: "b1", Leaf: "b2"}
	in := wire.RecordTurnInput{Session: session, Key: "kb", Outcome: out, Finished: time.Now()}
	if _, err := e.act.ExecuteActivity(workflows.ActivityTurnRecord, in); err != nil {
		t.Fatal(err)
	}
	open := func() string {
		t.Helper()
		v, err := e.act.ExecuteActivity(workflows.ActivitySessionOpen, wire.OpenInput{Session: session, IDPrefix: "p"})
		if err != nil {
			t.Fatal(err)
		}
		var res wire.OpenResult
		if err := v.Get(&res); err != nil {
			t.Fatal(err)
		}
		return res.Leaf
	}
	if got := open(); got != "b2" {
		t.Fatalf("opened at %q, want the last turn's leaf b2", got)
	}
	// A rewind to a2 with nothing to summarize (the target is on the
	// branch... of a2 only: b1, b2 are abandoned, so a summary is made).
	rw := wire.RewindInput{Session: session, Leaf: "b2", Entry: "a2", EntryID: "r1"}
	v, err := e.act.ExecuteActivity(workflows.ActivityRewind, rw)
	if err != nil {
		t.Fatalf("rewind: %v", err)
	}
	var res workflows.RewindResult
	if err := v.Get(&res); err != nil {
		t.Fatal(err)
	}
	if got := open(); got != res.Leaf || got == "b2" {
		t.Errorf("after a rewind to a2 (new leaf %q) the session opens at %q", res.Leaf, got)
	}
}

// TestOpenSessionCarriesActivityQueues: fastagent.yaml's activities: block
// reaches the session workflow in the settings Session.Open returns, so it
// schedules tool and model calls on their task queues.
func TestOpenSessionCarriesActivityQueues(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := e.kit.WriteConfig("activities:\n  tools: {taskQueue: gpu}\n  model: {taskQueue: llm}\n"); err != nil {
		t.Fatal(err)
	}
	v, err := e.act.ExecuteActivity(workflows.ActivitySessionOpen, wire.OpenInput{Session: "s1", IDPrefix: "p"})
	if err != nil {
		t.Fatal(err)
	}
	var res wire.OpenResult
	if err := v.Get(&res); err != nil {
		t.Fatal(err)
	}
	if res.Settings.ToolTaskQueue != "gpu" || res.Settings.ModelTaskQueue != "llm" {
		t.Errorf("settings %+v, want tools on gpu and models on llm", res.Settings)
	}
}
