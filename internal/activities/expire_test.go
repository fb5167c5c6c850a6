package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// TestExpire: Session.Expire re-reads sessions.idleTTL from the
// definition. Unset, or longer than the session has been idle, it deletes
// nothing and answers the TTL; once due it deletes the transcript, turn
// records and sub-agent sessions (the DELETE /sessions/{id} code), and
// leaves other sessions alone. A definition that does not load deletes
// nothing.
func TestExpire(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	sub := agentloop.DelegateSession("s1", "k1", "d1")
	for _, s := range []string{"s1", sub, "other"} {
		if err := e.kit.Store.Append(ctx, s, message("u-"+s, "", transcript.Message{Role: transcript.RoleUser, Text: "hi"})); err != nil {
			t.Fatal(err)
		}
	}
	data, _ := json.Marshal(agentloop.Outcome{Turn: "k1", Status: agent.TypeCompleted})
	if err := e.kit.Store.RecordTurn(ctx, "s1", store.TurnRecord{Key: "k1", Outcome: data, Finished: time.Now()}); err != nil {
		t.Fatal(err)
	}
	expire := func(idle time.Duration) (wire.ExpireResult, error) {
		t.Helper()
		var res wire.ExpireResult
		v, err := e.act.ExecuteActivity(workflows.ActivitySessionExpire, wire.ExpireInput{Session: "s1", IdleSince: time.Now().Add(-idle)})
		if err != nil {
			return res, err
		}
		if err := v.Get(&res); err != nil {
			t.Fatal(err)
		}
		return res, nil
	}
	entries := func(s string) int {
		es, err := e.kit.Store.Entries(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		return len(es)
	}

	// No TTL in the definition (removed since the timer was armed).
	if res, err := expire(48 * time.Hour); err != nil || res.Deleted || res.IdleTTL != 0 {
		t.Fatalf("without idleTTL: %+v %v, want nothing deleted", res, err)
	}
	// Lengthened: not idle long enough.
	if err := e.kit.WriteConfig("sessions:\n  idleTTL: 72h\n"); err != nil {
		t.Fatal(err)
	}
	if res, err := expire(48 * time.Hour); err != nil || res.Deleted || res.IdleTTL != 72*time.Hour {
		t.Fatalf("idle 48h under a 72h TTL: %+v %v, want nothing deleted and the TTL", res, err)
	}
	if entries("s1") != 1 || entries(sub) != 1 {
		t.Fatal("data deleted before the session was due")
	}
	// Idle time is measured on the workflow's clock: a worker whose clock
	// lags the server's by an hour still finds the session due.
	{
		server := time.Now().Add(time.Hour)
		var res wire.ExpireResult
		v, err := e.act.ExecuteActivity(workflows.ActivitySessionExpire,
			wire.ExpireInput{Session: "other", IdleSince: server.Add(-72*time.Hour - time.Minute), Now: server})
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Get(&res); err != nil || !res.Deleted {
			t.Fatalf("due on the workflow's clock, behind on the worker's: %+v %v, want deleted", res, err)
		}
		if err := e.kit.Store.Append(ctx, "other", message("u-other", "", transcript.Message{Role: transcript.RoleUser, Text: "hi"})); err != nil {
			t.Fatal(err)
		}
	}
	// Due: deleted, sub-agent session too; another session kept.
	res, err := expire(73 * time.Hour)
	if err != nil || !res.Deleted || res.Entries != 2 || len(res.SubSessions) != 1 || res.SubSessions[0] != sub {
		t.Fatalf("idle 73h under a 72h TTL: %+v %v, want deleted with its sub-agent session", res, err)
	}
	if entries("s1") != 0 || entries(sub) != 0 || entries("other") != 1 {
		t.Errorf("entries after expiry: s1 %d, sub %d, other %d", entries("s1"), entries(sub), entries("other"))
	}
	if _, err := e.kit.Store.LastTurn(ctx, "s1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("turn records after expiry: %v", err)
	}
	// A definition that does not load: nothing deleted, an error.
	if err := e.kit.WriteConfig("sessions: [broken\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := expire(100 * time.Hour); err == nil {
		t.Error("a broken definition: no error")
	}
	if entries("other") != 1 {
		t.Error("a broken definition deleted data")
	}
}
