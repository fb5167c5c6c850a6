package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/fastagent/fastagent/internal/egress"
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
	if msg := diagOf(t, m, Server{Name: "gh", URL: hs.URL, AllowPrivate: true}); !strings.Contains(msg, "Unauthorized") && !strings.Contains(msg, "401") {
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
	if msg := diagOf(t, m2, withHeader); !strings.Contains(msg, "Unauthorized") && !strings.Contains(msg, "401") {
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

// testAS is a minimal OAuth 2.1 authorization server in front of an MCP
// server: protected resource metadata, server metadata, dynamic client
// registration, authorization with PKCE (S256 required), the code and
// refresh grants; the MCP endpoint accepts only its current access tokens.
type testAS struct {
	t   *testing.T
	srv *httptest.Server

	mu        sync.Mutex
	clients   map[string]string // client_id → redirect_uri
	codes     map[string]codeGrant
	access    map[string]bool
	refresh   map[string]bool
	n         int
	refreshes int
	authorize int
}

type codeGrant struct{ client, challenge, redirect, resource string }

func newTestAS(t *testing.T, mcpSrv *sdk.Server) *testAS {
	return newTestASWith(t, sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return mcpSrv }, nil))
}

// newTestASWith is newTestAS in front of the MCP handler h (served at /mcp
// and below).
func newTestASWith(t *testing.T, h http.Handler) *testAS {
	as := &testAS{t: t, clients: map[string]string{}, codes: map[string]codeGrant{}, access: map[string]bool{}, refresh: map[string]bool{}}
	mux := http.NewServeMux()
	as.srv = httptest.NewServer(mux)
	t.Cleanup(as.srv.Close)
	base := as.srv.URL
	mux.Handle("/.well-known/oauth-protected-resource/mcp", auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource: base + "/mcp", AuthorizationServers: []string{base}, ScopesSupported: []string{"tools"}}))
	mux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{
			"issuer": base, "authorization_endpoint": base + "/authorize", "token_endpoint": base + "/token",
			"registration_endpoint": base + "/register", "response_types_supported": []string{"code"},
			"grant_types_supported": []string{"authorization_code", "refresh_token"}, "code_challenge_methods_supported": []string{"S256"},
			"token_endpoint_auth_methods_supported": []string{"none"}, "scopes_supported": []string{"tools", "offline_access"},
		})
	})
	mux.HandleFunc("/register", func(w http.ResponseWriter, r *http.Request) {
		var md struct {
			RedirectURIs []string `json:"redirect_uris"`
		}
		if err := json.NewDecoder(r.Body).Decode(&md); err != nil || len(md.RedirectURIs) != 1 {
			http.Error(w, "bad registration", http.StatusBadRequest)
			return
		}
		as.mu.Lock()
		as.n++
		id := "client-" + strconv.Itoa(as.n)
		as.clients[id] = md.RedirectURIs[0]
		as.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		writeJSON(w, map[string]any{"client_id": id, "redirect_uris": md.RedirectURIs, "token_endpoint_auth_method": "none"})
	})
	mux.HandleFunc("/authorize", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		as.mu.Lock()
		defer as.mu.Unlock()
		as.authorize++
		redirect, ok := as.clients[q.Get("client_id")]
		if !ok || redirect != q.Get("redirect_uri") || q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" ||
			q.Get("response_type") != "code" || q.Get("resource") != base+"/mcp" {
			http.Error(w, "bad authorization request: "+r.URL.RawQuery, http.StatusBadRequest)
			return
		}
		as.n++
		code := "code-" + strconv.Itoa(as.n)
		as.codes[code] = codeGrant{client: q.Get("client_id"), challenge: q.Get("code_challenge"), redirect: redirect, resource: q.Get("resource")}
		http.Redirect(w, r, redirect+"?code="+code+"&state="+url.QueryEscape(q.Get("state")), http.StatusFound)
	})
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		as.mu.Lock()
		defer as.mu.Unlock()
		switch r.PostForm.Get("grant_type") {
		case "authorization_code":
			g, ok := as.codes[r.PostForm.Get("code")]
			delete(as.codes, r.PostForm.Get("code"))
			sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
			if !ok || g.client != r.PostForm.Get("client_id") || g.redirect != r.PostForm.Get("redirect_uri") ||
				base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge {
				w.WriteHeader(http.StatusBadRequest)
				writeJSON(w, map[string]any{"error": "invalid_grant"})
				return
			}
		case "refresh_token":
			if !as.refresh[r.PostForm.Get("refresh_token")] {
				w.WriteHeader(http.StatusBadRequest)
				writeJSON(w, map[string]any{"error": "invalid_grant"})
				return
			}
			delete(as.refresh, r.PostForm.Get("refresh_token"))
			as.refreshes++
			clear(as.access) // the old access token stops working
		default:
			w.WriteHeader(http.StatusBadRequest)
			writeJSON(w, map[string]any{"error": "unsupported_grant_type"})
			return
		}
		as.n++
		at, rt := fmt.Sprintf("access-%d", as.n), fmt.Sprintf("refresh-%d", as.n)
		as.access[at], as.refresh[rt] = true, true
		writeJSON(w, map[string]any{"access_token": at, "token_type": "Bearer", "expires_in": 3600, "refresh_token": rt})
	})
	verifier := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		as.mu.Lock()
		defer as.mu.Unlock()
		if !as.access[token] {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{Expiration: time.Now().Add(time.Hour)}, nil
	}
	mux.Handle("/mcp", auth.RequireBearerToken(verifier, &auth.RequireBearerTokenOptions{
		ResourceMetadataURL: base + "/.well-known/oauth-protected-resource/mcp"})(h))
	return as
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// browser follows the authorization URL and its redirect to the loopback
// callback, as the user's browser would after the user approved.
func browser(authURL string) error {
	resp, err := http.Get(authURL) //nolint:noctx // a test's stand-in browser
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("browser: HTTP %d at %s", resp.StatusCode, resp.Request.URL)
	}
	return nil
}

func TestOAuthLoginAndRefresh(t *testing.T) {
	as := newTestAS(t, newEchoServer(""))
	file := filepath.Join(t.TempDir(), ".fastagent", "mcp-oauth", "remote.json")
	s := Server{Name: "remote", URL: as.srv.URL + "/mcp", AllowPrivate: true, OAuthFile: file}

	// Before the login: a diagnostic that says what to run.
	m := newManager(t)
	if msg := diagOf(t, m, s); !strings.Contains(msg, "fastagent mcp login remote") {
		t.Errorf("before login: %q", msg)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := Login(ctx, s, LoginOptions{Open: browser})
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
	as.mu.Lock()
	refreshes := as.refreshes
	as.mu.Unlock()
	if refreshes != 1 {
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
	other.URL = as.srv.URL + "/mcp?v=2"
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
	as := newTestASWith(t, sdk.NewSSEHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	s := Server{Name: "legacy", URL: as.srv.URL + "/mcp", Transport: TransportSSE, AllowPrivate: true,
		OAuthFile: filepath.Join(t.TempDir(), "legacy.json")}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := Login(ctx, s, LoginOptions{Open: browser}); err != nil {
		t.Fatal(err)
	}
	tools := mustTools(t, newManager(t), s)
	if res := run(t, toolNamed(t, tools, "echo"), `{"text":"sse with oauth"}`); res.Content != "sse with oauth" {
		t.Errorf("echo = %+v", res)
	}
}
