package ingress_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/ingress"
	"github.com/fastagent/fastagent/internal/channels/webhook"
)

// noClient is a Temporal client nothing may call: a refused request
// reaches no workflow.
type noClient struct{ client.Client }

// every route of the API but /health, with a valid body.
var apiRoutes = []struct{ method, path, body string }{
	{http.MethodPost, "/invoke", `{"session":"s1","text":"hi"}`},
	{http.MethodGet, "/sessions", ""},
	{http.MethodPost, "/sessions/import", `{"jsonl":"{}"}`},
	{http.MethodGet, "/sessions/s1", ""},
	{http.MethodPost, "/sessions/s1/abort", `{}`},
	{http.MethodPost, "/sessions/s1/steer", `{"text":"more"}`},
	{http.MethodPost, "/sessions/s1/compact", ""},
	{http.MethodPost, "/sessions/s1/approvals/c1", `{"approve":true}`},
	{http.MethodPost, "/sessions/s1/answers/c1", `{"text":"blue"}`},
	{http.MethodGet, "/sessions/s1/turns/k1/events", ""},
	{http.MethodPost, "/sessions/s1/turns/k1/resend", ""},
	{http.MethodGet, "/sessions/s1/transcript", ""},
	{http.MethodGet, "/sessions/s1/export", ""},
	{http.MethodPost, "/sessions/s1/rewind", `{"entry":"e1"}`},
	{http.MethodPost, "/sessions/s1/followup", `{"text":"then"}`},
	{http.MethodGet, "/metrics", ""},
	{http.MethodPost, "/agents/fastagent/invoke", `{"session":"s1","text":"hi"}`},
}

// mounted serves h under /agent/ in a plain net/http server.
func mounted(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/agent/", http.StripPrefix("/agent", h))
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return hs
}

func send(t *testing.T, hs *httptest.Server, method, path, body string, hdr http.Header) (*http.Response, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, hs.URL+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// The ingress behind the program's own resolver, mounted under /agent/:
// a request it refuses is 401 unauthorized on every route, with its
// message, exactly as a request without a valid token is — an API token
// means nothing to it — and /health needs no principal.
func TestRefusedByYourOwnPrincipals(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	refuse := ingress.PrincipalsFunc(func(r *http.Request) (ingress.Principal, error) {
		calls.Add(1)
		if r.Header.Get("X-Session-Cookie") == "nameless" {
			return ingress.Principal{Admin: true}, nil
		}
		return ingress.Principal{}, errors.New("sign in at /login first")
	})
	h, err := ingress.New(noClient{}, ingress.Options{Dir: t.TempDir(), Principals: refuse, APIToken: "tok-admin"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	hs := mounted(t, h)
	for _, rt := range apiRoutes {
		for _, hdr := range []http.Header{{"Authorization": {"Bearer tok-admin"}}, {"X-Session-Cookie": {"nameless"}}} {
			resp, body := send(t, hs, rt.method, "/agent"+rt.path, rt.body, hdr)
			var v struct{ Error, Code string }
			_ = json.Unmarshal([]byte(body), &v)
			if resp.StatusCode != http.StatusUnauthorized || v.Code != "unauthorized" {
				t.Errorf("%s %s (%v): %d %s, want 401 unauthorized", rt.method, rt.path, hdr, resp.StatusCode, body)
			}
			if resp.Header.Get("WWW-Authenticate") != `Bearer realm="fastagent"` {
				t.Errorf("%s %s: WWW-Authenticate %q", rt.method, rt.path, resp.Header.Get("WWW-Authenticate"))
			}
			if hdr.Get("Authorization") != "" && v.Error != "sign in at /login first" {
				t.Errorf("%s %s: the refusal says %q, want the resolver's message", rt.method, rt.path, v.Error)
			}
		}
	}
	if n := int(calls.Load()); n != 2*len(apiRoutes) {
		t.Errorf("the resolver was asked %d times for %d requests", n, 2*len(apiRoutes))
	}
	if resp, _ := send(t, hs, http.MethodGet, "/agent/health", "", nil); resp.StatusCode != http.StatusOK {
		t.Errorf("/agent/health: %d, want 200", resp.StatusCode)
	}
}

// Without Principals the API tokens authenticate, as `fastagent ingress`
// does; with neither, New refuses to build an ingress anyone could use.
func TestTokensByDefault(t *testing.T) {
	t.Parallel()
	if _, err := ingress.New(noClient{}, ingress.Options{Dir: t.TempDir()}); !errors.Is(err, ingress.ErrNoPrincipals) {
		t.Fatalf("New without principals or tokens: %v, want ErrNoPrincipals", err)
	}
	h, err := ingress.New(noClient{}, ingress.Options{Dir: t.TempDir(), APIToken: "tok-admin"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	hs := mounted(t, h)
	for _, tok := range []string{"", "wrong"} {
		hdr := http.Header{}
		if tok != "" {
			hdr.Set("Authorization", "Bearer "+tok)
		}
		resp, body := send(t, hs, http.MethodGet, "/agent/sessions/s1", "", hdr)
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") ||
			!strings.Contains(body, `"code":"unauthorized"`) {
			t.Errorf("token %q: %d %s", tok, resp.StatusCode, body)
		}
	}
	// The admin token passes authentication: the metrics right is its.
	resp, body := send(t, hs, http.MethodGet, "/agent/metrics", "", http.Header{"Authorization": {"Bearer tok-admin"}})
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics with the admin token: %d %.200s", resp.StatusCode, body)
	}
}

// Tokens is the built-in resolver as a value: a program can put it behind
// its own (try a session cookie, then the API tokens).
func TestTokensPrincipals(t *testing.T) {
	t.Parallel()
	p, err := ingress.Tokens("tok-admin", "ci:invoke,control:"+sha256hex("tok-ci")+":reviewer")
	if err != nil {
		t.Fatal(err)
	}
	req := func(tok string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/sessions", nil)
		if tok != "" {
			r.Header.Set("Authorization", "Bearer "+tok)
		}
		return r
	}
	got, err := p.Principal(req("tok-ci"))
	if err != nil || got.Name != "ci" || got.Admin || !slices.Equal(got.Rights, []ingress.Right{ingress.RightInvoke, ingress.RightControl}) ||
		!slices.Equal(got.Agents, []string{"reviewer"}) {
		t.Errorf("ci's token: %+v %v", got, err)
	}
	if got, err := p.Principal(req("tok-admin")); err != nil || got.Name != "admin" || !got.Admin || len(got.Rights) != 0 {
		t.Errorf("the admin token: %+v %v", got, err)
	}
	_, err = p.Principal(req("nope"))
	var ch interface{ Challenge() string }
	if err == nil || !errors.As(err, &ch) || !strings.Contains(ch.Challenge(), "invalid_token") {
		t.Errorf("a wrong token: %v", err)
	}
	if _, err := ingress.Tokens("", "ci:fly:abc"); err == nil || !strings.Contains(err.Error(), "unknown right") {
		t.Errorf("a bad tokens line: %v", err)
	}
}

// A tokens file that does not exist or does not parse is an error naming it.
func TestBadTokensFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "tokens")
	if err := os.WriteFile(bad, []byte("alice:invoke:not-a-hash\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{bad, filepath.Join(dir, "missing")} {
		if _, err := ingress.New(noClient{}, ingress.Options{Dir: dir, TokensFile: f}); err == nil || !strings.Contains(err.Error(), "tokens file") {
			t.Errorf("tokens file %s: %v", f, err)
		}
	}
}

func sha256hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// starter is a Temporal client that records Signal-With-Start, the one
// call a channel door makes; any other call panics.
type starter struct {
	client.Client
	mu  sync.Mutex
	ids []string
}

func (s *starter) SignalWithStartWorkflow(_ context.Context, id, _ string, _ any, _ client.StartWorkflowOptions, _ any, _ ...any) (client.WorkflowRun, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids = append(s.ids, id)
	return nil, nil
}

// A channel's webhook endpoint authenticates by the sender's signature,
// never by Principals: behind a resolver that refuses everyone, a signed
// delivery under the mount prefix is accepted (202, its events route
// under the prefix) and a badly signed one refused (401), and the
// resolver is never asked.
func TestWebhooksAuthenticateBySignatureNotPrincipals(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "channels", "webhooks"), 0o755); err != nil {
		t.Fatal(err)
	}
	yaml := "scheme: standard\nsecretEnv: ORDERS_SECRET\nsession: \"hook:orders:{{.body.customer}}\"\nprompt: \"order {{.body.id}}\"\nkey: \"{{.body.id}}\"\n"
	if err := os.WriteFile(filepath.Join(dir, "channels", "webhooks", "orders.yaml"), []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	var asked atomic.Int32
	nobody := ingress.PrincipalsFunc(func(*http.Request) (ingress.Principal, error) {
		asked.Add(1)
		return ingress.Principal{}, errors.New("nobody gets in")
	})
	st := &starter{}
	h, err := ingress.New(st, ingress.Options{Dir: dir, Principals: nobody,
		Getenv: func(k string) string { return map[string]string{"ORDERS_SECRET": secret}[k] }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	hs := mounted(t, h)
	body := `{"id":"o1","customer":"c7"}`
	for _, tc := range []struct {
		secret string
		status int
	}{{secret, http.StatusAccepted}, {"whsec_d3Jvbmcgc2VjcmV0IGZvciB0aGUgdGVzdA==", http.StatusUnauthorized}} {
		sig, err := webhook.SignStandard([]string{tc.secret}, "msg_1", time.Now(), []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		sig.Set("Content-Type", "application/json")
		resp, got := send(t, hs, http.MethodPost, "/agent/hooks/orders", body, sig)
		if resp.StatusCode != tc.status {
			t.Errorf("webhook signed with %s: %d %s, want %d", tc.secret, resp.StatusCode, got, tc.status)
		}
		if tc.status == http.StatusAccepted && !strings.Contains(got, `"events":"/agent/sessions/hook:orders:c7/turns/hook:orders:o1/events"`) {
			t.Errorf("the 202 names its events route outside the prefix: %s", got)
		}
	}
	if n := asked.Load(); n != 0 {
		t.Errorf("the resolver was asked %d times for webhook deliveries", n)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.ids) != 1 {
		t.Errorf("hand-offs %v, want the signed delivery's only", st.ids)
	}
	if resp, _ := send(t, hs, http.MethodGet, "/agent/sessions/hook:orders:c7", "", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the API route beside it: %d, want 401", resp.StatusCode)
	}
}

// A nil PrincipalsFunc is refused by New, not found out by the first
// request (a panic, answered 500).
func TestNilPrincipalsFunc(t *testing.T) {
	t.Parallel()
	var f ingress.PrincipalsFunc
	h, err := ingress.New(noClient{}, ingress.Options{Dir: t.TempDir(), Principals: f})
	if err == nil {
		_ = h.Close()
		t.Fatal("New took a nil PrincipalsFunc")
	}
	if !strings.Contains(err.Error(), "Principals") {
		t.Fatalf("New: %v, want the error to name Options.Principals", err)
	}
}
