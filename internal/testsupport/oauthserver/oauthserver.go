// Package oauthserver is a minimal OAuth 2.1 authorization server in front
// of an MCP endpoint, for tests of the MCP authorization flow: protected
// resource metadata (RFC 9728), server metadata (RFC 8414), dynamic client
// registration (RFC 7591), authorization with PKCE (S256 required, the
// resource parameter checked), the code and refresh grants. The MCP
// endpoint (/mcp) accepts only the access tokens it currently holds: a
// refresh revokes the old one.
package oauthserver

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// Server is the authorization server and the protected MCP endpoint, at
// URL and URL+"/mcp".
type Server struct {
	URL string

	mu        sync.Mutex
	clients   map[string]string // client_id → redirect_uri
	codes     map[string]codeGrant
	access    map[string]bool
	refresh   map[string]bool
	n         int
	refreshes int
}

type codeGrant struct{ client, challenge, redirect string }

// New serves h at /mcp (and below) behind bearer tokens the server issues;
// it is closed when the test ends.
func New(t testing.TB, h http.Handler) *Server {
	as := &Server{clients: map[string]string{}, codes: map[string]codeGrant{}, access: map[string]bool{}, refresh: map[string]bool{}}
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	as.URL = srv.URL
	base := srv.URL
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
		redirect, ok := as.clients[q.Get("client_id")]
		if !ok || redirect != q.Get("redirect_uri") || q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" ||
			q.Get("response_type") != "code" || q.Get("resource") != base+"/mcp" {
			http.Error(w, "bad authorization request: "+r.URL.RawQuery, http.StatusBadRequest)
			return
		}
		as.n++
		code := "code-" + strconv.Itoa(as.n)
		as.codes[code] = codeGrant{client: q.Get("client_id"), challenge: q.Get("code_challenge"), redirect: redirect}
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

// Refreshes counts the refresh grants answered.
func (as *Server) Refreshes() int {
	as.mu.Lock()
	defer as.mu.Unlock()
	return as.refreshes
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// Browser follows an authorization URL and its redirect to the loopback
// callback, as the user's browser would once the user approved.
func Browser(authURL string) error {
	resp, err := http.Get(authURL) //nolint:noctx,gosec // a test's stand-in browser
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("browser: HTTP %d at %s", resp.StatusCode, resp.Request.URL)
	}
	return nil
}
