package ingress_test

import (
	"context"
	"encoding/json"
	"io"
	"iter"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/ingress"
	"github.com/fastagent/fastagent/workflows"
)

// recorder is an Agent, Control and Attacher that records every call that
// got through the ingress, so a test can assert that nothing started.
type recorder struct {
	mu      sync.Mutex
	calls   []string
	running string
	// approvals are the calls State shows waiting; approves the decisions
	// that got through.
	approvals []workflows.PendingApproval
	approves  []workflows.ApproveRequest
}

func (r *recorder) record(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, s)
}

func (r *recorder) took() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

func (r *recorder) Invoke(ctx context.Context, scope agent.Scope, p agent.Prompt) iter.Seq[agent.Event] {
	r.record("invoke " + scope.Session + " " + agent.IdempotencyKey(ctx))
	return func(yield func(agent.Event) bool) { yield(agent.Completed(nil)) }
}

func (r *recorder) Abort(_ context.Context, session, turn, _ string) (string, error) {
	r.record("abort " + session)
	return turn, nil
}

func (r *recorder) Steer(_ context.Context, session, _ string) error {
	r.record("steer " + session)
	return nil
}

func (r *recorder) Compact(_ context.Context, session string) (workflows.CompactResult, error) {
	r.record("compact " + session)
	return workflows.CompactResult{EntryID: "k1"}, nil
}

func (r *recorder) Resend(_ context.Context, session, turn string) error {
	r.record("resend " + session + " " + turn)
	return nil
}

func (r *recorder) Approve(_ context.Context, session string, req workflows.ApproveRequest) error {
	r.record("approve " + session + " " + req.Call)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.approves = append(r.approves, req)
	return nil
}

func (r *recorder) Answer(_ context.Context, session string, req workflows.AnswerRequest) error {
	r.record("answer " + session + " " + req.Call)
	return nil
}

func (r *recorder) State(_ context.Context, session string) (workflows.SessionView, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return workflows.SessionView{Session: session, Running: r.running, Approvals: r.approvals}, nil
}

func (r *recorder) Attach(_ context.Context, session, key string) (iter.Seq[agent.Event], error) {
	r.record("attach " + session + " " + key)
	return func(yield func(agent.Event) bool) { yield(agent.Completed(nil)) }, nil
}

// Tokens of the test principals.
const (
	adminTok    = "tok-admin"
	aliceTok    = "tok-alice"
	bobTok      = "tok-bob"
	invokerTok  = "tok-invoker"
	approverTok = "tok-approver"
	operatorTok = "tok-operator"
)

func authServer(t *testing.T, mod func(*ingress.Server)) (*httptest.Server, *recorder) {
	t.Helper()
	rec := &recorder{}
	toks := &ingress.Tokens{}
	lines := strings.Join([]string{
		ingress.TokenLine("admin", adminTok, ingress.RightAdmin),
		ingress.TokenLine("alice", aliceTok, ingress.RightInvoke, ingress.RightControl, ingress.RightApprove),
		ingress.TokenLine("bob", bobTok, ingress.RightInvoke, ingress.RightControl, ingress.RightApprove),
		ingress.TokenLine("invoker", invokerTok, ingress.RightInvoke),
		ingress.TokenLine("approver", approverTok, ingress.RightApprove),
		ingress.TokenLine("operator", operatorTok, ingress.RightControl),
	}, "\n")
	if err := toks.Parse(lines); err != nil {
		t.Fatal(err)
	}
	s := &ingress.Server{Agent: rec, Control: rec, Attacher: rec, Tokens: toks}
	if mod != nil {
		mod(s)
	}
	s.SetReady(true)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return hs, rec
}

type call struct {
	method, path, body string
}

// every route but /health, with a valid body.
var routes = map[string]call{
	"invoke":  {http.MethodPost, "/invoke", `{"session":"s1","text":"hi"}`},
	"state":   {http.MethodGet, "/sessions/s1", ""},
	"abort":   {http.MethodPost, "/sessions/s1/abort", `{}`},
	"steer":   {http.MethodPost, "/sessions/s1/steer", `{"text":"more"}`},
	"compact": {http.MethodPost, "/sessions/s1/compact", ""},
	"approve": {http.MethodPost, "/sessions/s1/approvals/c1", `{"approve":true}`},
	"answer":  {http.MethodPost, "/sessions/s1/answers/c1", `{"text":"blue"}`},
	"attach":  {http.MethodGet, "/sessions/s1/turns/k1/events", ""},
	"resend":  {http.MethodPost, "/sessions/s1/turns/k1/resend", ""},
}

func do(t *testing.T, hs *httptest.Server, c call, token string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if c.body != "" {
		body = strings.NewReader(c.body)
	}
	req, err := http.NewRequest(c.method, hs.URL+c.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if c.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func codeOf(body string) string {
	var v struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal([]byte(body), &v)
	return v.Code
}

func TestEveryRouteNeedsAToken(t *testing.T) {
	t.Parallel()
	hs, rec := authServer(t, nil)
	for name, c := range routes {
		for _, tok := range []string{"", "wrong-token"} {
			resp, body := do(t, hs, c, tok, nil)
			if resp.StatusCode != http.StatusUnauthorized || codeOf(body) != ingress.CodeUnauthorized {
				t.Errorf("%s with token %q: %d %s, want 401 unauthorized", name, tok, resp.StatusCode, body)
			}
			if !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s: WWW-Authenticate = %q", name, resp.Header.Get("WWW-Authenticate"))
			}
		}
	}
	// Basic auth carrying a valid token is not a bearer token.
	resp, _ := do(t, hs, routes["state"], "", map[string]string{"Authorization": "Basic " + adminTok})
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("Basic scheme: %d, want 401", resp.StatusCode)
	}
	if got := rec.took(); len(got) != 0 {
		t.Errorf("unauthenticated requests reached the agent: %v", got)
	}
	resp, _ = do(t, hs, call{http.MethodGet, "/health", ""}, "", nil)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/health without a token: %d, want 200", resp.StatusCode)
	}
}

func TestNoTokensConfiguredRefusesAll(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	s := &ingress.Server{Agent: rec, Control: rec, Attacher: rec}
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	resp, _ := do(t, hs, routes["invoke"], "anything", nil)
	if resp.StatusCode != http.StatusUnauthorized || len(rec.took()) != 0 {
		t.Errorf("server without tokens: %d, calls %v; want 401 and nothing", resp.StatusCode, rec.took())
	}
}

func TestRightsPerRoute(t *testing.T) {
	t.Parallel()
	cases := []struct {
		token   string
		allowed map[string]bool
	}{
		{invokerTok, map[string]bool{"invoke": true, "answer": true}},
		{approverTok, map[string]bool{"approve": true, "state": true}},
		{operatorTok, map[string]bool{"state": true, "abort": true, "steer": true, "attach": true, "compact": true, "resend": true}},
	}
	for _, tc := range cases {
		hs, rec := authServer(t, nil)
		for name, c := range routes {
			resp, body := do(t, hs, c, tc.token, nil)
			if tc.allowed[name] {
				if resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized {
					t.Errorf("%s on %s: %d %s, want it allowed", tc.token, name, resp.StatusCode, body)
				}
				continue
			}
			if resp.StatusCode != http.StatusForbidden || codeOf(body) != ingress.CodeForbidden {
				t.Errorf("%s on %s: %d %s, want 403 forbidden", tc.token, name, resp.StatusCode, body)
			}
		}
		for _, got := range rec.took() {
			if !tc.allowed[strings.Fields(got)[0]] {
				t.Errorf("%s: a refused route reached the agent: %q", tc.token, got)
			}
		}
	}
}

// A decision carries who made it, as authenticated: the owner's as theirs;
// another principal's reaches the session only for a call that lists them
// as an approver (marked Listed, so the workflow checks the list again);
// for any other call of the session it does not exist.
func TestApproveCarriesWhoDecided(t *testing.T) {
	t.Parallel()
	hs, rec := authServer(t, nil)
	if resp, body := do(t, hs, call{http.MethodPost, "/invoke", `{"session":"s1","text":"hi"}`}, aliceTok, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("alice's invoke: %d %s", resp.StatusCode, body)
	}
	rec.mu.Lock()
	rec.approvals = []workflows.PendingApproval{{Call: "c1", Tool: "deploy", Approvers: []string{"bob"}}, {Call: "c2", Tool: "deploy"}}
	rec.mu.Unlock()
	decide := func(tok, callID string) (int, string) {
		resp, body := do(t, hs, call{http.MethodPost, "/sessions/s1/approvals/" + callID, `{"approve":true}`}, tok, nil)
		return resp.StatusCode, body
	}
	if st, body := decide(bobTok, "c2"); st != http.StatusNotFound || codeOf(body) != agent.CodeNoSuchSession {
		t.Errorf("bob on a call that does not list him: %d %s, want 404 no_such_session", st, body)
	}
	if st, body := decide(bobTok, "c1"); st != http.StatusOK {
		t.Errorf("bob on the call listing him: %d %s", st, body)
	}
	if st, body := decide(aliceTok, "c1"); st != http.StatusOK {
		t.Errorf("alice on her session: %d %s", st, body)
	}
	rec.mu.Lock()
	got := append([]workflows.ApproveRequest(nil), rec.approves...)
	rec.mu.Unlock()
	want := []workflows.ApproveRequest{
		{Call: "c1", Approve: true, By: "bob", Listed: true},
		{Call: "c1", Approve: true, By: "alice"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decisions that reached the session:\n got %+v\nwant %+v", got, want)
	}
}

func TestAnotherPrincipalsSessionIsNotFound(t *testing.T) {
	t.Parallel()
	hs, rec := authServer(t, nil)
	// alice creates s1 with key k1.
	resp, body := do(t, hs, call{http.MethodPost, "/invoke", `{"session":"s1","text":"hi"}`}, aliceTok, map[string]string{"Idempotency-Key": "k1"})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("alice's invoke: %d %s", resp.StatusCode, body)
	}
	before := len(rec.took())
	bob := map[string]call{
		"invoke": routes["invoke"],
		"fork":   {http.MethodPost, "/invoke", `{"session":"bob-fork","text":"hi","parentSession":"s1"}`},
		"reuse":  routes["invoke"], // alice's key on alice's session
		"state":  routes["state"], "abort": routes["abort"], "steer": routes["steer"],
		"approve": routes["approve"], "attach": routes["attach"], "compact": routes["compact"], "answer": routes["answer"],
		"resend": routes["resend"],
	}
	for name, c := range bob {
		resp, body := do(t, hs, c, bobTok, map[string]string{"Idempotency-Key": "k1"})
		if resp.StatusCode != http.StatusNotFound || codeOf(body) != agent.CodeNoSuchSession {
			t.Errorf("bob %s on alice's session: %d %s, want 404 no_such_session", name, resp.StatusCode, body)
		}
	}
	if got := rec.took()[before:]; len(got) != 0 {
		t.Errorf("bob's requests reached alice's session: %v", got)
	}
	// bob's refused fork did not claim bob-fork for anyone: alice can create it.
	if resp, body := do(t, hs, call{http.MethodPost, "/invoke", `{"session":"bob-fork","text":"hi"}`}, aliceTok, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("alice creating bob-fork after bob's refused fork: %d %s", resp.StatusCode, body)
	}
	// The same key in bob's own session is bob's own turn.
	resp, body = do(t, hs, call{http.MethodPost, "/invoke", `{"session":"s2","text":"hi"}`}, bobTok, map[string]string{"Idempotency-Key": "k1"})
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Idempotency-Key") != "k1" {
		t.Errorf("bob's own session: %d %s key %q", resp.StatusCode, body, resp.Header.Get("Idempotency-Key"))
	}
	// The owner and an admin reach s1.
	for _, tok := range []string{aliceTok, adminTok} {
		for name, c := range routes {
			if resp, body := do(t, hs, c, tok, nil); resp.StatusCode != http.StatusOK {
				t.Errorf("%s %s on s1: %d %s, want 200", tok, name, resp.StatusCode, body)
			}
		}
	}
}

func TestBrowserDefence(t *testing.T) {
	t.Parallel()
	hs, rec := authServer(t, func(s *ingress.Server) {
		s.AllowedOrigins = []string{"https://app.example.com"}
		s.AllowedHosts = []string{"agent.example.com"}
	})
	invoke := routes["invoke"]
	cases := []struct {
		name   string
		body   string
		hdr    map[string]string
		status int
		code   string
	}{
		{"cross-origin text/plain", invoke.body, map[string]string{"Origin": "https://evil.example", "Content-Type": "text/plain"}, 403, ingress.CodeForbiddenOrigin},
		{"cross-origin json", invoke.body, map[string]string{"Origin": "https://evil.example"}, 403, ingress.CodeForbiddenOrigin},
		{"null origin", invoke.body, map[string]string{"Origin": "null"}, 403, ingress.CodeForbiddenOrigin},
		{"form post", invoke.body, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415, ingress.CodeUnsupportedMedia},
		{"text/plain", invoke.body, map[string]string{"Content-Type": "text/plain"}, 415, ingress.CodeUnsupportedMedia},
		{"no content type", invoke.body, map[string]string{"Content-Type": ""}, 415, ingress.CodeUnsupportedMedia},
		{"rebound host", invoke.body, map[string]string{"Host": "attacker.example:8787"}, 421, ingress.CodeMisdirected},
		{"allowed origin", invoke.body, map[string]string{"Origin": "https://app.example.com"}, 200, ""},
		{"json with charset", invoke.body, map[string]string{"Content-Type": "application/json; charset=utf-8"}, 200, ""},
		{"configured host", invoke.body, map[string]string{"Host": "agent.example.com"}, 200, ""},
		{"localhost", invoke.body, map[string]string{"Host": "localhost:8787"}, 200, ""},
	}
	for _, c := range cases {
		before := len(rec.took())
		resp, body := do(t, hs, call{http.MethodPost, "/invoke", c.body}, adminTok, c.hdr)
		if resp.StatusCode != c.status || (c.code != "" && codeOf(body) != c.code) {
			t.Errorf("%s: %d %s, want %d %s", c.name, resp.StatusCode, body, c.status, c.code)
		}
		if started := len(rec.took()) - before; c.status != 200 && started != 0 {
			t.Errorf("%s: refused request started %d calls", c.name, started)
		}
	}
}

func TestLimits(t *testing.T) {
	t.Parallel()
	hs, rec := authServer(t, func(s *ingress.Server) {
		s.Limits = ingress.Limits{SteerBytes: 10, SteersPerTurn: 2, BranchHints: 2, SessionsPerMinute: 2}
	})
	rec.running = "turn-1"
	post := func(path, body string) (int, string) {
		resp, b := do(t, hs, call{http.MethodPost, path, body}, aliceTok, nil)
		return resp.StatusCode, b
	}
	if st, b := post("/invoke", `{"session":"a","text":"x","branchHints":["1","2","3"]}`); st != 400 || codeOf(b) != agent.CodeInvalidCommand {
		t.Errorf("3 branch hints: %d %s", st, b)
	}
	for _, s := range []string{"a", "b"} {
		if st, b := post("/invoke", `{"session":"`+s+`","text":"x"}`); st != 200 {
			t.Fatalf("session %s: %d %s", s, st, b)
		}
	}
	if st, b := post("/invoke", `{"session":"c","text":"x"}`); st != 429 || codeOf(b) != ingress.CodeRateLimited {
		t.Errorf("third session in a minute: %d %s", st, b)
	}
	if st, b := post("/invoke", `{"session":"a","text":"again"}`); st != 200 {
		t.Errorf("a turn in an existing session is not a new session: %d %s", st, b)
	}
	if st, b := post("/sessions/a/steer", `{"text":"01234567890"}`); st != 413 || codeOf(b) != ingress.CodeTooLarge {
		t.Errorf("11-byte steer: %d %s", st, b)
	}
	for i := 0; i < 2; i++ {
		if st, b := post("/sessions/a/steer", `{"text":"ok"}`); st != 200 {
			t.Fatalf("steer %d: %d %s", i, st, b)
		}
	}
	if st, b := post("/sessions/a/steer", `{"text":"ok"}`); st != 429 || codeOf(b) != ingress.CodeLimitExceeded {
		t.Errorf("third steer of one turn: %d %s", st, b)
	}
	rec.mu.Lock()
	rec.running = "turn-2"
	rec.mu.Unlock()
	if st, b := post("/sessions/a/steer", `{"text":"ok"}`); st != 200 {
		t.Errorf("steer of the next turn: %d %s", st, b)
	}
	steers := 0
	for _, c := range rec.took() {
		if strings.HasPrefix(c, "steer") {
			steers++
		}
		if strings.HasPrefix(c, "invoke c") {
			t.Errorf("the rate-limited session started: %q", c)
		}
	}
	if steers != 3 {
		t.Errorf("%d steers reached the session, want 3", steers)
	}
}

func TestTokensParse(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, text string
		ok         bool
	}{
		{"valid", ingress.TokenLine("ci", "secret", ingress.RightInvoke, ingress.RightControl) + "\n# comment\n\n", true},
		{"semicolons", ingress.TokenLine("a", "x", ingress.RightAdmin) + ";" + ingress.TokenLine("b", "y", ingress.RightInvoke), true},
		{"raw token instead of hash", "ci:invoke:secret", false},
		{"unknown right", "ci:root:" + ingress.HashToken("x"), false},
		{"missing field", "ci:" + ingress.HashToken("x"), false},
		{"empty principal", ":invoke:" + ingress.HashToken("x"), false},
	}
	for _, c := range cases {
		var tk ingress.Tokens
		err := tk.Parse(c.text)
		if (err == nil) != c.ok {
			t.Errorf("%s: err = %v, want ok=%v", c.name, err, c.ok)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the error repeats the token: %v", c.name, err)
		}
	}
	var tk ingress.Tokens
	if err := tk.Parse(ingress.TokenLine("ci", "secret", ingress.RightInvoke)); err != nil {
		t.Fatal(err)
	}
	if p, ok := tk.Lookup("secret"); !ok || p.Name != "ci" || !p.Has(ingress.RightInvoke) || p.Has(ingress.RightControl) {
		t.Errorf("Lookup(secret) = %+v %v", p, ok)
	}
	for _, bad := range []string{"", "secre", "secret ", ingress.HashToken("secret")} {
		if _, ok := tk.Lookup(bad); ok {
			t.Errorf("Lookup(%q) accepted", bad)
		}
	}
}

// Session IDs of channels and schedules cannot be created by a principal over
// HTTP (only by an admin), so nobody can pre-empt a Slack thread's session.
func TestReservedSessionPrefixes(t *testing.T) {
	t.Parallel()
	hs, rec := authServer(t, nil)
	for _, id := range []string{"slack:T1:C1:1700000000.0001", "schedule:daily", "github:o/r#1"} {
		body := `{"session":"` + id + `","text":"hi"}`
		resp, got := do(t, hs, call{http.MethodPost, "/invoke", body}, aliceTok, nil)
		if resp.StatusCode != http.StatusForbidden || codeOf(got) != ingress.CodeForbidden {
			t.Errorf("alice creating %s: %d %s, want 403 forbidden", id, resp.StatusCode, got)
		}
	}
	if n := len(rec.took()); n != 0 {
		t.Fatalf("a refused request reached the agent: %v", rec.took())
	}
	if resp, got := do(t, hs, call{http.MethodPost, "/invoke", `{"session":"slack:T1:C1:1","text":"hi"}`}, adminTok, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("admin: %d %s", resp.StatusCode, got)
	}
}

// A sub-agent's session (its ID ends as the delegating session gives it:
// "/delegate-<hex>" or "/<agent>:<name>") belongs to the session that
// delegated to it: nobody, an admin included, may open it with a turn or
// a fork (a principal who did could read a named sub-session's work or
// feed it text, and squat its workflow ID).
func TestSubAgentSessionsTakeNoTurns(t *testing.T) {
	t.Parallel()
	hs, rec := authServer(t, nil)
	for _, id := range []string{"s1/self:notes", "s1/delegate-0123456789abcdef", "s1/delegate-0123456789abcdef/reviewer:draft"} {
		for _, tok := range []string{aliceTok, bobTok, adminTok} {
			for _, c := range []call{
				{http.MethodPost, "/invoke", `{"session":"` + id + `","text":"hi"}`},
				{http.MethodPost, "/invoke", `{"session":"` + id + `","text":"hi","parentSession":"s0"}`},
			} {
				resp, got := do(t, hs, c, tok, nil)
				if resp.StatusCode != http.StatusForbidden || codeOf(got) != ingress.CodeForbidden || !strings.Contains(got, "sub-agent") {
					t.Errorf("%s %s %s: %d %s, want 403 forbidden naming the sub-agent's session", tok, c.path, id, resp.StatusCode, got)
				}
			}
		}
	}
	if n := len(rec.took()); n != 0 {
		t.Fatalf("a refused request reached the agent: %v", rec.took())
	}
	// An ID that only looks a little like one is a session like any other.
	if resp, got := do(t, hs, call{http.MethodPost, "/invoke", `{"session":"team/notes","text":"hi"}`}, aliceTok, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("alice creating team/notes: %d %s", resp.StatusCode, got)
	}
}

// TestCompactRoute: POST /sessions/{id}/compact answers the compaction's
// result; a malformed body is refused before the session is touched.
func TestCompactRoute(t *testing.T) {
	t.Parallel()
	hs, rec := authServer(t, nil)
	resp, body := do(t, hs, call{http.MethodPost, "/sessions/s1/compact", `{not json`}, adminTok, nil)
	if resp.StatusCode != http.StatusBadRequest || codeOf(body) != agent.CodeInvalidCommand || len(rec.took()) != 0 {
		t.Errorf("malformed body: %d %s, calls %v; want 400 invalid_command and nothing", resp.StatusCode, body, rec.took())
	}
	resp, body = do(t, hs, call{http.MethodPost, "/sessions/s1/compact", `{}`}, adminTok, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"compacted":true`) || !strings.Contains(body, `"entryId":"k1"`) {
		t.Errorf("compact: %d %s", resp.StatusCode, body)
	}
	if got := rec.took(); len(got) != 1 || got[0] != "compact s1" {
		t.Errorf("calls %v, want one compact of s1", got)
	}
}

// GET /health is public and minimal; GET /health?details (the tool
// sandbox's status) answers only a valid token, whatever its rights.
func TestHealthDetailsNeedAToken(t *testing.T) {
	t.Parallel()
	hs, _ := authServer(t, func(s *ingress.Server) {
		s.Details = func() map[string]any { return map[string]any{"toolSandbox": "landlock-abi-6"} }
	})
	details := call{http.MethodGet, "/health?details", ""}
	for _, tok := range []string{"", "wrong-token"} {
		resp, body := do(t, hs, details, tok, nil)
		if resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, "landlock") {
			t.Errorf("/health?details with token %q: %d %s, want 401 without the details", tok, resp.StatusCode, body)
		}
	}
	for _, tok := range []string{approverTok, adminTok} {
		resp, body := do(t, hs, details, tok, nil)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, "landlock-abi-6") {
			t.Errorf("/health?details with a valid token: %d %s, want 200 with the details", resp.StatusCode, body)
		}
	}
	resp, body := do(t, hs, call{http.MethodGet, "/health", ""}, "", nil)
	if resp.StatusCode != http.StatusOK || body != "ok" {
		t.Errorf("/health without a token: %d %q, want 200 ok", resp.StatusCode, body)
	}
}
