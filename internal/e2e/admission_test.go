package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/admission"
	"github.com/fastagent/fastagent/internal/ingress"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
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
	waitInFlight(t, lim, 1, "the first turn taking its place")

	st, body, hdr := send(t, http.MethodPost, hs.URL+"/invoke", "admin-token", `{"session":"adm-2","text":"refused turn"}`, nil)
	if ra := hdr.Get("Retry-After"); st != http.StatusTooManyRequests || (ra != "2" && ra != "3" && ra != "4") || !strings.Contains(body, ingress.CodeOverloaded) {
		t.Fatalf("turn past the limit: %d Retry-After=%q %s; want 429, Retry-After 2–4 and code %s", st, ra, body, ingress.CodeOverloaded)
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

// waitInFlight waits until lim holds n places.
func waitInFlight(t *testing.T, lim *admission.Limiter, n int, what string) {
	t.Helper()
	if !wait.Until(30*time.Second, func() bool { return lim.InFlight() == n }) {
		t.Fatalf("%s: %d turns in flight, want %d", what, lim.InFlight(), n)
	}
}

// A turn's place is held until the turn ends, not until its client goes
// away: a client that sends a turn (asking to resume it) and drops the
// connection leaves the place taken while the turn runs. A follow-up
// (POST /sessions/{id}/followup) is admitted like any turn and holds its
// place while it runs.
func TestAdmissionHoldsThePlaceUntilTheTurnEnds(t *testing.T) {
	e := newEnv(t)
	e.agent.DetachGrace = time.Minute
	e.startWorker()
	lim := admission.New(admission.Limits{MaxInFlight: 1, RetryAfter: time.Second}, nil, nil)
	hs := e.authIngress(func(s *ingress.Server) { s.Admission = lim })
	hold, holdFollow := make(chan struct{}), make(chan struct{})
	e.kit.Model.EnqueueFor("held turn", modelserver.Reply{Text: []string{"finally"}, Hold: hold})
	e.kit.Model.EnqueueFor("follow-up turn", modelserver.Reply{Text: []string{"followed"}, Hold: holdFollow})

	// Connect, send, drop.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+"/invoke", strings.NewReader(`{"session":"adm-hold","text":"held turn"}`))
	req.Header.Set("Authorization", "Bearer admin-token")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Resume-Within", "1m")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the first turn: %s", resp.Status)
	}
	waitRunning(t, e, "adm-hold")
	cancel()
	resp.Body.Close()
	// Deliberate: time for the ingress to see the client gone (it leaves no
	// sign: the turn runs on); a place given back then would show below.
	time.Sleep(500 * time.Millisecond)

	if n := lim.InFlight(); n != 1 {
		t.Errorf("after the client dropped, %d turns hold a place; the turn still runs", n)
	}
	st, body, _ := send(t, http.MethodPost, hs.URL+"/invoke", "admin-token", `{"session":"adm-other","text":"refused turn"}`, nil)
	if st != http.StatusTooManyRequests {
		t.Errorf("a turn past the limit while the dropped client's turn runs: %d %s, want 429", st, body)
	}
	st, body, _ = send(t, http.MethodPost, hs.URL+"/sessions/adm-hold/followup", "admin-token", `{"text":"refused follow-up"}`, nil)
	if st != http.StatusTooManyRequests {
		t.Errorf("a follow-up past the limit: %d %s, want 429", st, body)
	}

	close(hold)
	waitTurnsDone(t, e, "adm-hold")
	waitInFlight(t, lim, 0, "after the turn ended")

	st, body, _ = send(t, http.MethodPost, hs.URL+"/sessions/adm-hold/followup", "admin-token", `{"text":"follow-up turn"}`, nil)
	if st != http.StatusAccepted {
		t.Fatalf("follow-up: %d %s", st, body)
	}
	waitInFlight(t, lim, 1, "while the follow-up runs")
	close(holdFollow)
	waitInFlight(t, lim, 0, "after the follow-up ended")
	for _, r := range e.kit.Model.Requests() {
		if strings.Contains(r.LastUserText(), "refused") {
			t.Errorf("the model was called for a refused turn: %q", r.LastUserText())
		}
	}
}
