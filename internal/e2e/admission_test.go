package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/ingress"
	"github.com/fastagent/fastagent/internal/admission"
	"github.com/fastagent/fastagent/internal/modelserver"
)

// At the in-flight limit the ingress answers a new turn 429 with
// Retry-After and starts no session for it; the turn holding the place
// completes, and the backlog probe reads the real server's task queue.
func TestAdmissionRefusesPastTheLimit(t *testing.T) {
	e := newEnv(t)
	e.startWorker()
	lim := admission.New(admission.Limits{MaxInFlight: 1, RetryAfter: 2 * time.Second},
		admission.TaskQueueProbe(e.client, server.Namespace(), e.queue), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := lim.Refresh(ctx); err != nil {
		t.Fatalf("backlog probe against the embedded server: %v", err)
	}
	hs := e.authIngress(func(s *ingress.Server) { s.Admission = lim })
	hold := make(chan struct{})
	e.kit.Model.EnqueueFor("held turn", modelserver.Reply{Text: []string{"finally"}, Hold: hold})

	type result struct {
		status int
		body   string
	}
	first := make(chan result, 1)
	go func() {
		st, body, _ := send(t, http.MethodPost, hs.URL+"/invoke", "admin-token", `{"session":"adm-1","text":"held turn"}`, nil)
		first <- result{st, body}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for lim.InFlight() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the first turn never took its place")
		}
		time.Sleep(10 * time.Millisecond)
	}

	st, body, hdr := send(t, http.MethodPost, hs.URL+"/invoke", "admin-token", `{"session":"adm-2","text":"refused turn"}`, nil)
	if st != http.StatusTooManyRequests || hdr.Get("Retry-After") != "2" || !strings.Contains(body, ingress.CodeOverloaded) {
		t.Fatalf("turn past the limit: %d Retry-After=%q %s; want 429, Retry-After 2 and code %s", st, hdr.Get("Retry-After"), body, ingress.CodeOverloaded)
	}
	if e.sessionExists("adm-2") {
		t.Error("the refused turn started a session")
	}

	close(hold)
	r := <-first
	if r.status != http.StatusOK || !strings.Contains(r.body, "finally") || !strings.Contains(r.body, "completed") {
		t.Fatalf("the admitted turn: %d %s", r.status, r.body)
	}
	for _, req := range e.kit.Model.Requests() {
		if strings.Contains(req.LastUserText(), "refused turn") {
			t.Error("the model was called for the refused turn")
		}
	}
}
