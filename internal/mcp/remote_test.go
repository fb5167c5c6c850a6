package mcp

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fastagent/fastagent/internal/egress"
	"github.com/fastagent/fastagent/internal/testsupport/oauthserver"
)

// bearerOnly wraps h so that it answers only requests carrying token.
func bearerOnly(token string, h http.Handler) http.Handler {
	return auth.RequireBearerToken(func(_ context.Context, got string, _ *http.Request) (*auth.TokenInfo, error) {
		if got != token {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{Expiration: time.Now().Add(time.Hour)}, nil
	}, nil)(h)
}

func diagOf(t *testing.T, m *Manager, s Server) string {
	t.Helper()
	tools, diags := m.Tools(context.Background(), []Server{s})
	if len(diags) != 1 || len(tools) != 0 {
		t.Fatalf("tools %v, diagnostics %v: want one diagnostic and no tools", names(tools), diags)
	}
	return diags[0].Message
}

func TestRemoteLoopbackNeedsAllowPrivate(t *testing.T) {
	srv := newEchoServer("")
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	m := newManager(t)
	if msg := diagOf(t, m, Server{Name: "remote", URL: hs.URL}); !strings.Contains(msg, "set allowPrivate: true") {
		t.Errorf("loopback server without allowPrivate: %q", msg)
	}
	tools := mustTools(t, m, Server{Name: "remote", URL: hs.URL, AllowPrivate: true})
	if res := run(t, toolNamed(t, tools, "echo"), `{"text":"allowed"}`); res.Content != "allowed" {
		t.Errorf("echo = %+v", res)
	}
}

func TestRemoteControlPlaneRefusedEvenWithAllowPrivate(t *testing.T) {
	srv := newEchoServer("")
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	ap := netip.MustParseAddrPort(strings.TrimPrefix(hs.URL, "http://"))
	deny := []egress.Dest{{Prefix: netip.PrefixFrom(ap.Addr(), 32), Port: ap.Port()}}
	m := newManager(t)
	msg := diagOf(t, m, Server{Name: "remote", URL: hs.URL, AllowPrivate: true, ControlPlane: deny})
	if !strings.Contains(msg, "own services") {
		t.Errorf("control-plane address: %q", msg)
	}
	// Another port of the same machine named by "localhost" is refused too.
	u := strings.Replace(hs.URL, "127.0.0.1", "localhost", 1)
	if msg := diagOf(t, m, Server{Name: "remote", URL: u, AllowPrivate: true, ControlPlane: deny}); !strings.Contains(msg, "own services") {
		t.Errorf("control plane by name: %q", msg)
	}
}

func TestStreamableHTTPBearerHeader(t *testing.T) {
	srv := newEchoServer("")
	hs := httptest.NewServer(bearerOnly("s3cret-token", sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)))
	t.Cleanup(hs.Close)
	m := newManager(t)

	// Refused without the header.
	if msg := diagOf(t, m, Server{Name: "gh", URL: hs.URL, AllowPrivate: true}); !strings.Contains(msg, "the server wants credentials") {
		t.Errorf("without a token: %q", msg)
	}
	// The variable unset: said so, nothing sent.
	withHeader := Server{Name: "gh", URL: hs.URL, AllowPrivate: true, Headers: map[string]string{"Authorization": "Bearer ${TEST_MCP_TOKEN}"}}
	if msg := diagOf(t, m, withHeader); !strings.Contains(msg, "TEST_MCP_TOKEN") {
		t.Errorf("unset variable: %q", msg)
	}
	// A wrong token is refused.
	t.Setenv("TEST_MCP_TOKEN", "wrong")
	m2 := newManager(t)
	if msg := diagOf(t, m2, withHeader); !strings.Contains(msg, "refused the configured headers") {
		t.Errorf("wrong token: %q", msg)
	}
	// The right one, expanded by the worker, is accepted.
	t.Setenv("TEST_MCP_TOKEN", "s3cret-token")
	m3 := newManager(t)
	tools := mustTools(t, m3, withHeader)
	if res := run(t, toolNamed(t, tools, "add"), `{"a":1,"b":2}`); res.Content != "3" {
		t.Errorf("add = %+v", res)
	}
}

func TestSSETransport(t *testing.T) {
	srv := newEchoServer("")
	var gets int
	var mu sync.Mutex
	h := sdk.NewSSEHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	hs := httptest.NewServer(bearerOnly("sse-token", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			mu.Lock()
			gets++
			mu.Unlock()
		}
		h.ServeHTTP(w, r)
	})))
	t.Cleanup(hs.Close)
	m := newManager(t)
	s := Server{Name: "legacy", URL: hs.URL, Transport: TransportSSE, AllowPrivate: true}
	if msg := diagOf(t, m, s); !strings.Contains(msg, "401") && !strings.Contains(msg, "Unauthorized") {
		t.Errorf("SSE without a token: %q", msg)
	}
	t.Setenv("SSE_TOKEN", "sse-token")
	s.Headers = map[string]string{"Authorization": "Bearer ${SSE_TOKEN}"}
	tools := mustTools(t, m, s)
	if res := run(t, toolNamed(t, tools, "echo"), `{"text":"over sse"}`); res.Content != "over sse" {
		t.Errorf("echo = %+v", res)
	}
	mu.Lock()
	defer mu.Unlock()
	if gets == 0 {
		t.Error("no event-stream GET: the SSE transport was not used")
	}
}

func TestOAuthLoginAndRefresh(t *testing.T) {
	echo := newEchoServer("")
	as := oauthserver.New(t, sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return echo }, nil))
	file := filepath.Join(t.TempDir(), ".fastagent", "mcp-oauth", "remote.json")
	s := Server{Name: "remote", URL: as.URL + "/mcp", AllowPrivate: true, OAuthFile: file}

	// Before the login: a diagnostic that says what to run.
	m := newManager(t)
	if msg := diagOf(t, m, s); !strings.Contains(msg, "fastagent mcp login remote") {
		t.Errorf("before login: %q", msg)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := Login(ctx, s, LoginOptions{Open: oauthserver.Browser})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Error("login listed no tools")
	}
	st, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v, want 0600", st.Mode().Perm())
	}
	tf, err := ReadTokenFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if tf.ClientID != "client-1" || tf.Token.RefreshToken == "" || tf.URL != s.URL {
		t.Errorf("stored login %+v", tf)
	}

	// The worker uses the stored token.
	m2 := newManager(t)
	tools := mustTools(t, m2, s)
	if res := run(t, toolNamed(t, tools, "echo"), `{"text":"with oauth"}`); res.Content != "with oauth" {
		t.Errorf("echo = %+v", res)
	}

	// The access token expires: the next request refreshes it and writes
	// the new tokens back; the old access token no longer works.
	old := tf.Token.AccessToken
	tf.Token.Expiry = time.Now().Add(-time.Minute)
	if err := tf.write(file); err != nil {
		t.Fatal(err)
	}
	if res := run(t, toolNamed(t, tools, "add"), `{"a":2,"b":3}`); res.Content != "5" {
		t.Errorf("add after expiry = %+v", res)
	}
	if refreshes := as.Refreshes(); refreshes != 1 {
		t.Errorf("refreshes = %d, want 1", refreshes)
	}
	tf2, err := ReadTokenFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if tf2.Token.AccessToken == old || !tf2.Token.Valid() {
		t.Errorf("after refresh the file holds %+v", tf2.Token)
	}

	// A URL other than the one logged in to is refused.
	other := s
	other.URL = as.URL + "/mcp?v=2"
	if msg := diagOf(t, newManager(t), other); !strings.Contains(msg, "stored login is for") {
		t.Errorf("other URL: %q", msg)
	}

	// A refresh the server refuses says to log in again.
	tf2.Token.Expiry = time.Now().Add(-time.Minute)
	tf2.Token.RefreshToken = "revoked"
	if err := tf2.write(file); err != nil {
		t.Fatal(err)
	}
	if msg := diagOf(t, newManager(t), s); !strings.Contains(msg, "fastagent mcp login remote") {
		t.Errorf("refused refresh: %q", msg)
	}
}

func TestLoginRefusesServerWithoutAuth(t *testing.T) {
	srv := newEchoServer("")
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	_, err := Login(context.Background(), Server{Name: "open", URL: hs.URL, AllowPrivate: true, OAuthFile: filepath.Join(t.TempDir(), "x.json")},
		LoginOptions{Open: func(string) error { return errors.New("no browser should open") }})
	if err == nil || !strings.Contains(err.Error(), "needs no login") {
		t.Errorf("err = %v", err)
	}
}

// The login and the token work over the legacy SSE transport too: the
// event stream's GET is what asks for authorization.
func TestOAuthLoginSSE(t *testing.T) {
	srv := newEchoServer("")
	as := oauthserver.New(t, sdk.NewSSEHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	s := Server{Name: "legacy", URL: as.URL + "/mcp", Transport: TransportSSE, AllowPrivate: true,
		OAuthFile: filepath.Join(t.TempDir(), "legacy.json")}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := Login(ctx, s, LoginOptions{Open: oauthserver.Browser}); err != nil {
		t.Fatal(err)
	}
	tools := mustTools(t, newManager(t), s)
	if res := run(t, toolNamed(t, tools, "echo"), `{"text":"sse with oauth"}`); res.Content != "sse with oauth" {
		t.Errorf("echo = %+v", res)
	}
}

// TestHeadersNeverLeaveTheServersHost: a server that redirects to another
// host (here another port: another host to HTTP) does not hand that host
// the configured headers; the hop is not followed.
func TestHeadersNeverLeaveTheServersHost(t *testing.T) {
	var mu sync.Mutex
	var leaked []string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		leaked = append(leaked, r.Header.Get("X-Secret"))
		mu.Unlock()
		http.Error(w, "no", http.StatusNotFound)
	}))
	t.Cleanup(other.Close)
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirect.Close)
	t.Setenv("TEST_MCP_SECRET", "s3cret-header")
	m := newManager(t)
	s := Server{Name: "r", URL: redirect.URL, AllowPrivate: true, Headers: map[string]string{"X-Secret": "${TEST_MCP_SECRET}"}}
	_ = diagOf(t, m, s)
	mu.Lock()
	defer mu.Unlock()
	for _, h := range leaked {
		if h != "" {
			t.Errorf("the other host got the header %q", h)
		}
	}
	// The transport itself refuses a request to another host.
	tr := &authTransport{base: http.DefaultTransport, headers: http.Header{"X-Secret": {"v"}}, scheme: "http", host: "127.0.0.1:1"}
	req, _ := http.NewRequest(http.MethodGet, other.URL, nil)
	if _, err := tr.RoundTrip(req); err == nil || !strings.Contains(err.Error(), "not the configured server") {
		t.Errorf("a request to another host: %v", err)
	}
}
