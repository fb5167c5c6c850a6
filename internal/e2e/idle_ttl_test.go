package e2e

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
	"github.com/fastagent/fastagent/workflows"
)

// TestIdleTTLClosesSession: with sessions.idleTTL (3s, allowed because the
// idempotency window is configured to 2s), turns sent back to back keep a
// session open past its TTL (each resets it); once idle for the TTL the
// workflow completes by itself and its transcript and turn records are
// gone. The same ID then starts a fresh session.
func TestIdleTTLClosesSession(t *testing.T) {
	const ttl = 3 * time.Second
	e := newEnv(t)
	e.writeConfig(fastRetries + "idempotencyWindow: 2s\nsessions:\n  idleTTL: 3s\n")
	e.kit.Model.Handle(echo)
	e.startWorker()
	u := e.ingress().URL
	session := e.session("idle")
	invoke := func(text string) {
		t.Helper()
		st, b, _ := send(t, http.MethodPost, u+"/invoke", "", `{"session":"`+session+`","text":"`+text+`"}`, nil)
		if st != http.StatusOK || !strings.Contains(b, `"type":"completed"`) {
			t.Fatalf("invoke %q: %d %s", text, st, b)
		}
	}
	describe := func() (enumspb.WorkflowExecutionStatus, time.Time) {
		t.Helper()
		d, err := e.client.DescribeWorkflowExecution(context.Background(), workflows.WorkflowID(session), "")
		if err != nil {
			t.Fatalf("describe: %v", err)
		}
		info := d.GetWorkflowExecutionInfo()
		return info.GetStatus(), info.GetCloseTime().AsTime()
	}
	entries := func() int {
		t.Helper()
		es, err := e.kit.Store.Entries(context.Background(), session)
		if err != nil {
			t.Fatal(err)
		}
		return len(es)
	}

	// Turns keep it open past one TTL from the first.
	first := time.Now()
	n := 0
	for time.Since(first) < 2*ttl {
		n++
		invoke("keep me " + string(rune('a'+n%26)))
		if st, _ := describe(); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			t.Fatalf("after %s of turns (%d) the session is %v: each turn must reset its idle TTL", time.Since(first), n, st)
		}
	}
	last := time.Now()
	if entries() < 2*n {
		t.Fatalf("%d entries after %d turns", entries(), n)
	}
	t.Logf("%d turns over %s kept the session open", n, last.Sub(first).Round(time.Millisecond))

	// Idle: the workflow closes itself (completed, not terminated) and
	// its data is deleted.
	wait.For(t, time.Minute, "the idle session's workflow to close", func() bool {
		st, _ := describe()
		return st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	})
	st, closed := describe()
	if st != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatalf("the idle session's workflow is %v, want completed", st)
	}
	if idle := closed.Sub(last); idle < ttl {
		t.Errorf("the session closed %s after its last turn, before its idle TTL (%s)", idle, ttl)
	}
	t.Logf("closed %s after the last turn", closed.Sub(last).Round(time.Millisecond))
	if n := entries(); n != 0 {
		t.Errorf("the store still holds %d entries of the expired session", n)
	}
	if _, err := e.kit.Store.LastTurn(context.Background(), session); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the expired session's turn records: %v, want none", err)
	}
	if st, b, _ := send(t, http.MethodGet, u+"/sessions/"+session+"/transcript", "", "", nil); st != http.StatusNotFound {
		t.Errorf("transcript of the expired session: %d %s, want 404", st, b)
	}

	// The ID starts afresh.
	invoke("anew")
	if st, _ := describe(); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("after a new turn the session is %v", st)
	}
	if n := entries(); n != 2 {
		t.Errorf("the fresh session holds %d entries, want 2 (only the new turn)", n)
	}
}
