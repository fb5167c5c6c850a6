package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/ingress"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
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

// TestPrincipalTokensPerDay: limits.perPrincipal.tokensPerDay through a
// worker on the dev server, the scripted model reporting 600 tokens per
// turn. Alice's first turn is charged when it ends; the same key sent
// again is answered, not charged; her second turn (600 of 1000 used)
// runs and is charged; her third is 429 principal_limit with Retry-After
// until 00:00 UTC and starts nothing (no model call, no session). Bob is
// not held back.
func TestPrincipalTokensPerDay(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(fastRetries)
	e.kit.Model.Handle(func(req modelserver.Request) modelserver.Reply {
		return modelserver.Reply{Text: []string{"answer to " + req.LastUserText()}, Usage: &modelserver.Usage{PromptTokens: 500, CompletionTokens: 100}}
	})
	e.startWorker()
	srv := e.runtime(func(cfg *serve.Config, _ *serve.Components) {
		cfg.PerPrincipal = ingress.PrincipalLimits{TokensPerDay: 1000, ExemptAdmins: true}
	}).IngressFor(e.agent)
	toks := &ingress.Tokens{}
	toks.AddToken("alice", "alice-token", ingress.RightInvoke, ingress.RightControl)
	toks.AddToken("bob", "bob-token", ingress.RightInvoke, ingress.RightControl)
	srv.Tokens, srv.Owners = toks, serve.NewOwners(e.kit.Store, e.agent)
	srv.SetReady(true)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	invoke := func(tok, session, key, text string) (int, string, http.Header) {
		t.Helper()
		return send(t, http.MethodPost, hs.URL+"/invoke", tok, `{"session":"`+session+`","text":"`+text+`"}`,
			map[string]string{"Idempotency-Key": key})
	}
	completed := func(what string, st int, body string) {
		t.Helper()
		if st != http.StatusOK || !strings.Contains(body, `"type":"completed"`) || !strings.Contains(body, `"input":500`) {
			t.Fatalf("%s: %d %s, want completed with its usage", what, st, body)
		}
	}
	st, body, _ := invoke("alice-token", "tpd-1", "tpd-k1", "one")
	completed("alice's first turn", st, body)
	st, body, _ = invoke("alice-token", "tpd-1", "tpd-k1", "one")
	completed("alice's first key again", st, body)
	calls := len(e.kit.Model.Requests())
	if calls != 1 {
		t.Fatalf("the model was called %d times for one turn and its key sent again", calls)
	}
	st, body, _ = invoke("alice-token", "tpd-1", "tpd-k2", "two")
	completed("alice's second turn (600 of 1000 tokens used: the repeated key was not charged)", st, body)

	now := time.Now().UTC()
	st, body, hdr := invoke("alice-token", "tpd-2", "tpd-k3", "three")
	if st != http.StatusTooManyRequests || !strings.Contains(body, ingress.CodePrincipalLimit) || !strings.Contains(body, "1200 tokens") ||
		!strings.Contains(body, "tokensPerDay") {
		t.Fatalf("alice past her day's tokens: %d %s, want 429 principal_limit counting 1200 tokens", st, body)
	}
	midnight := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC)
	want := int(midnight.Sub(now).Seconds())
	if ra, err := strconv.Atoi(hdr.Get("Retry-After")); err != nil || ra < want-5 || ra > want+5 {
		t.Errorf("Retry-After %q, want about %d s (until 00:00 UTC)", hdr.Get("Retry-After"), want)
	}
	if n := len(e.kit.Model.Requests()); n != 2 {
		t.Errorf("the model was called %d times, want 2: the refused turn reached it", n)
	}
	if _, err := e.client.DescribeWorkflowExecution(context.Background(), "session:tpd-2", ""); err == nil {
		t.Error("the refused turn started its session's workflow")
	}
	st, body, _ = invoke("bob-token", "tpd-b", "tpd-b1", "bob's")
	completed("bob's turn", st, body)
}

// TestPrincipalTokensChargedAfterDisconnect: a turn whose client went away
// is still charged when it ends — aborted, it is charged what its finished
// model call used plus an estimate for the model call its abort stopped
// while it streamed (the request's size, the streamed characters / 4): the
// streamed text is not free — and the principal's next turn is refused
// once that estimate crossed the limit (the finished call alone did not).
func TestPrincipalTokensChargedAfterDisconnect(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(fastRetries)
	chunk := strings.Repeat("x", 1000)
	e.kit.Model.EnqueueFor("walk away",
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "c1", Name: testkit.CounterName, Args: `{"note":"x"}`}},
			Usage: &modelserver.Usage{PromptTokens: 500, CompletionTokens: 100}},
		modelserver.Reply{Text: []string{chunk, chunk}, Hang: true}) // 2000 characters: about 500 tokens
	e.startWorker()
	srv := e.runtime(func(cfg *serve.Config, _ *serve.Components) {
		cfg.PerPrincipal = ingress.PrincipalLimits{TokensPerDay: 1000, ExemptAdmins: true}
	}).IngressFor(e.agent)
	toks := &ingress.Tokens{}
	toks.AddToken("alice", "alice-token", ingress.RightInvoke, ingress.RightControl)
	srv.Tokens, srv.Owners = toks, serve.NewOwners(e.kit.Store, e.agent)
	srv.SetReady(true)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+"/invoke", strings.NewReader(`{"session":"tpd-gone","text":"walk away"}`))
	req.Header.Set("Authorization", "Bearer alice-token")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	// Read until both chunks of the second call's text were relayed.
	var streamed strings.Builder
	buf := make([]byte, 4096)
	for strings.Count(streamed.String(), "x") < 2000 {
		n, err := resp.Body.Read(buf)
		streamed.Write(buf[:n])
		if err != nil {
			t.Fatalf("the stream ended before the second call's text: %v\n%s", err, streamed.String())
		}
	}
	cancel() // the client goes away while the second model call streams
	resp.Body.Close()
	// 600 (the finished call) + the request's estimate + 500 (the streamed text).
	var used int
	wait.For(t, time.Minute, "the aborted turn's stopped call to be charged", func() bool {
		err := srv.PrincipalLimiter.CheckTokens("alice", false)
		if err == nil {
			return false
		}
		_, after, _ := strings.Cut(err.Error(), "used ")
		used, _ = strconv.Atoi(strings.Fields(after)[0])
		return used > 600+500
	})
	t.Logf("charged %d tokens", used)
	st, body, _ := send(t, http.MethodPost, hs.URL+"/invoke", "alice-token", `{"session":"tpd-gone","text":"again"}`, nil)
	if st != http.StatusTooManyRequests || !strings.Contains(body, ingress.CodePrincipalLimit) {
		t.Errorf("the next turn: %d %s, want 429 principal_limit", st, body)
	}
	if n := len(e.kit.Model.Requests()); n != 2 {
		t.Errorf("the model was called %d times, want 2: the refused turn reached it", n)
	}
}
