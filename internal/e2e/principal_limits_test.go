package e2e

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/ingress"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
)

// TestPrincipalLimits: limits.perPrincipal, enforced by the ingress
// before anything starts. While alice's one allowed turn runs,
// her next invoke and follow-up are 429 principal_limit with Retry-After
// and start nothing (no session, no model call); bob and an admin are not
// held back by her turn; past turnsPerMinute she is refused until the
// minute has passed.
func TestPrincipalLimits(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(fastRetries)
	e.startWorker()
	// What fastagent.yaml's limits.perPrincipal sets (TestPrincipalLimitsFromConfig).
	srv := e.runtime(func(cfg *serve.Config, _ *serve.Components) {
		cfg.PerPrincipal = ingress.PrincipalLimits{ConcurrentTurns: 1, TurnsPerMinute: 3, ExemptAdmins: true}
	}).IngressFor(e.agent)
	toks := &ingress.Tokens{}
	toks.AddToken("alice", "alice-token", ingress.RightInvoke, ingress.RightControl)
	toks.AddToken("bob", "bob-token", ingress.RightInvoke, ingress.RightControl)
	toks.AddToken(ingress.AdminPrincipal, "admin-token", ingress.RightAdmin)
	srv.Tokens, srv.Owners = toks, serve.NewOwners(e.kit.Store, e.agent)
	srv.SetReady(true)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	hold := make(chan struct{})
	e.kit.Model.EnqueueFor("held turn", modelserver.Reply{Text: []string{"finally"}, Hold: hold})
	invoke := func(tok, session, text string) (int, string, http.Header) {
		t.Helper()
		return send(t, http.MethodPost, hs.URL+"/invoke", tok, `{"session":"`+session+`","text":"`+text+`"}`, nil)
	}
	modelSaw := func(text string) bool {
		for _, r := range e.kit.Model.Requests() {
			if strings.Contains(r.LastUserText(), text) {
				return true
			}
		}
		return false
	}
	first := make(chan string, 1)
	go func() {
		_, b, _ := invoke("alice-token", "pl-1", "held turn")
		first <- b
	}()
	if !wait.Until(time.Minute, func() bool { return modelSaw("held turn") }) {
		t.Fatal("alice's first turn never reached the model")
	}

	st, body, hdr := invoke("alice-token", "pl-2", "refused turn")
	if st != http.StatusTooManyRequests || hdr.Get("Retry-After") != "1" || !strings.Contains(body, ingress.CodePrincipalLimit) || !strings.Contains(body, "concurrentTurns") {
		t.Errorf("alice's second concurrent turn: %d Retry-After=%q %s; want 429 principal_limit", st, hdr.Get("Retry-After"), body)
	}
	st, body, _ = send(t, http.MethodPost, hs.URL+"/sessions/pl-1/followup", "alice-token", `{"text":"refused follow-up"}`, nil)
	if st != http.StatusTooManyRequests || !strings.Contains(body, ingress.CodePrincipalLimit) {
		t.Errorf("alice's follow-up during her turn: %d %s; want 429 principal_limit", st, body)
	}
	// A Last-Event-ID naming no turn is a new turn, counted like one (it
	// passed every limit when any resume header skipped them).
	st, body, _ = send(t, http.MethodPost, hs.URL+"/invoke", "alice-token", `{"session":"pl-3","text":"made-up resume"}`, map[string]string{"Last-Event-ID": "made-up-key.0"})
	if st != http.StatusTooManyRequests || !strings.Contains(body, ingress.CodePrincipalLimit) {
		t.Errorf("alice's turn behind a made-up Last-Event-ID: %d %s; want 429 principal_limit", st, body)
	}
	if e.sessionExists("pl-2") || e.sessionExists("pl-3") {
		t.Error("a refused turn started a session")
	}
	// Others are not held back by alice's turn; admins are exempt.
	for _, c := range []struct{ tok, session string }{{"bob-token", "pl-bob"}, {"admin-token", "pl-admin"}, {"admin-token", "pl-admin"}} {
		if st, b, _ := invoke(c.tok, c.session, "hello"); st != http.StatusOK || !strings.Contains(b, `"type":"completed"`) {
			t.Errorf("%s during alice's turn: %d %s", c.tok, st, b)
		}
	}
	close(hold)
	if b := <-first; !strings.Contains(b, `"type":"completed"`) {
		t.Fatalf("alice's first turn: %s", b)
	}
	if modelSaw("refused turn") || modelSaw("refused follow-up") {
		t.Error("the model was called for a refused turn")
	}

	// turnsPerMinute: 3; the held turn was the first of this minute.
	for i := 2; i <= 3; i++ {
		if st, b, _ := invoke("alice-token", "pl-1", "turn "+strconv.Itoa(i)); st != http.StatusOK || !strings.Contains(b, `"type":"completed"`) {
			t.Fatalf("alice's turn %d: %d %s", i, st, b)
		}
	}
	st, body, hdr = invoke("alice-token", "pl-1", "fourth in a minute")
	ra, _ := strconv.Atoi(hdr.Get("Retry-After"))
	if st != http.StatusTooManyRequests || ra < 1 || ra > 60 || !strings.Contains(body, ingress.CodePrincipalLimit) || !strings.Contains(body, "turnsPerMinute") {
		t.Errorf("alice's 4th turn in a minute: %d Retry-After=%q %s; want 429 principal_limit, Retry-After 1–60", st, hdr.Get("Retry-After"), body)
	}
	if modelSaw("fourth in a minute") {
		t.Error("the model was called for the turn past turnsPerMinute")
	}
}
