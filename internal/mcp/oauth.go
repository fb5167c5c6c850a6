package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"
)

// TokenFile is what `fastagent mcp login` stores for one server (owner-only,
// in the agent's state dir, which no tool can read): the client the
// authorization server registered, its token endpoint and the tokens. The
// worker reads it, sends the access token and refreshes it, writing the
// new tokens back.
type TokenFile struct {
	// URL is the MCP server the token is for; a server whose url: changed
	// must log in again.
	URL          string        `json:"url"`
	ClientID     string        `json:"clientId"`
	ClientSecret string        `json:"clientSecret,omitempty"`
	AuthURL      string        `json:"authUrl"`
	TokenURL     string        `json:"tokenUrl"`
	AuthStyle    int           `json:"authStyle,omitempty"`
	Scopes       []string      `json:"scopes,omitempty"`
	Token        *oauth2.Token `json:"token"`
}

func (f *TokenFile) config() *oauth2.Config {
	return &oauth2.Config{ClientID: f.ClientID, ClientSecret: f.ClientSecret, Scopes: f.Scopes,
		Endpoint: oauth2.Endpoint{AuthURL: f.AuthURL, TokenURL: f.TokenURL, AuthStyle: oauth2.AuthStyle(f.AuthStyle)}}
}

// ReadTokenFile reads a stored login.
func ReadTokenFile(path string) (*TokenFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f TokenFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if f.Token == nil || f.TokenURL == "" || f.ClientID == "" {
		return nil, fmt.Errorf("%s is incomplete", path)
	}
	return &f, nil
}

// write stores f at path, owner-only, replacing the file atomically.
func (f *TokenFile) write(path string) error {
	b, err := json.MarshalIndent(f, "", "  ") //nolint:gosec // G117: the token file holds the client's secret on purpose, owner-only in the protected state dir
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".token-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if err := tmp.Chmod(0o600); err != nil {
		_ = tmp.Close()
		return err
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// errNotLoggedIn is wrapped when a server that needs OAuth has no usable
// stored login.
var errNotLoggedIn = errors.New("not logged in")

// fileTokenSource is the worker's token source of a server with OAuth: the
// stored access token while it is valid, else a refresh with the stored
// refresh token, written back to the file.
type fileTokenSource struct {
	server string
	path   string
	client *http.Client

	mu  sync.Mutex
	tf  *TokenFile
	mod time.Time
}

func loadTokenSource(_ context.Context, s Server, base *http.Client) (*fileTokenSource, error) {
	ts := &fileTokenSource{server: s.Name, path: s.OAuthFile, client: base}
	if err := ts.reload(); err != nil {
		return nil, err
	}
	if ts.tf.URL != s.URL {
		return nil, fmt.Errorf("%w: the stored login is for %s, not %s; run: fastagent mcp login %s", errNotLoggedIn, ts.tf.URL, s.URL, s.Name)
	}
	return ts, nil
}

// reload reads the file when it changed (a new login).
func (ts *fileTokenSource) reload() error {
	st, err := os.Stat(ts.path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: this server needs an OAuth login; run: fastagent mcp login %s", errNotLoggedIn, ts.server)
		}
		return err
	}
	if ts.tf != nil && st.ModTime().Equal(ts.mod) {
		return nil
	}
	tf, err := ReadTokenFile(ts.path)
	if err != nil {
		return fmt.Errorf("%w: %w; run: fastagent mcp login %s", errNotLoggedIn, err, ts.server)
	}
	ts.tf, ts.mod = tf, st.ModTime()
	return nil
}

// Token implements oauth2.TokenSource.
func (ts *fileTokenSource) Token() (*oauth2.Token, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if err := ts.reload(); err != nil {
		return nil, err
	}
	if ts.tf.Token.Valid() {
		return ts.tf.Token, nil
	}
	if ts.tf.Token.RefreshToken == "" {
		return nil, fmt.Errorf("%w: the access token expired and there is no refresh token; run: fastagent mcp login %s", errNotLoggedIn, ts.server)
	}
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), oauth2.HTTPClient, ts.client), time.Minute)
	defer cancel()
	tok, err := ts.tf.config().TokenSource(ctx, ts.tf.Token).Token()
	if err != nil {
		return nil, fmt.Errorf("%w: refreshing the access token failed (%w); run: fastagent mcp login %s", errNotLoggedIn, err, ts.server)
	}
	if tok.RefreshToken == "" {
		tok.RefreshToken = ts.tf.Token.RefreshToken
	}
	next := *ts.tf
	next.Token = tok
	if err := next.write(ts.path); err != nil {
		return nil, fmt.Errorf("storing the refreshed token: %w", err)
	}
	ts.tf = &next
	if st, err := os.Stat(ts.path); err == nil {
		ts.mod = st.ModTime()
	}
	return tok, nil
}

// LoginOptions configure Login.
type LoginOptions struct {
	// Open shows the user the authorization URL (prints it, opens a
	// browser); the flow then waits for the redirect to the loopback
	// listener.
	Open func(authURL string) error
	// ClientName is sent in the dynamic client registration.
	ClientName string
}

// Login runs the MCP authorization flow (OAuth 2.1, authorization code with
// PKCE, the authorization server found from the server's protected
// resource metadata, the client registered dynamically) for s, with a
// loopback redirect on 127.0.0.1, stores the tokens at s.OAuthFile and
// checks them by listing the server's tools. It returns how many tools the
// server offers.
func Login(ctx context.Context, s Server, o LoginOptions) (int, error) {
	if err := s.validate(); err != nil {
		return 0, err
	}
	if s.URL == "" || s.OAuthFile == "" {
		return 0, errors.New("only a server with url: and oauth: true logs in")
	}
	base := s.baseClient()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	redirect := fmt.Sprintf("http://%s/callback", l.Addr())
	results := make(chan *auth.AuthorizationResult, 1)
	srv := callbackServer(results)
	go func() { _ = srv.Serve(l) }()
	defer func() { _ = srv.Close() }()

	var (
		captured *oauth2.Config
		token    *oauth2.Token
	)
	name := o.ClientName
	if name == "" {
		name = "fastagent"
	}
	h, err := auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
			ClientName: name, RedirectURIs: []string{redirect},
			GrantTypes: []string{"authorization_code", "refresh_token"}, ResponseTypes: []string{"code"},
			TokenEndpointAuthMethod: "none",
		}},
		RedirectURL:         redirect,
		RequestRefreshToken: true,
		Client:              base,
		AuthorizationCodeFetcher: func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
			if err := o.Open(args.URL); err != nil {
				return nil, err
			}
			select {
			case r := <-results:
				if r.Code == "" {
					return nil, errors.New("the authorization server refused the login")
				}
				return r, nil
			case <-ctx.Done():
				return nil, fmt.Errorf("waiting for the browser to come back: %w", ctx.Err())
			}
		},
		NewTokenSource: func(ctx context.Context, cfg *oauth2.Config, tok *oauth2.Token) (oauth2.TokenSource, error) {
			captured, token = cfg, tok
			return oauth2.StaticTokenSource(tok), nil
		},
	})
	if err != nil {
		return 0, err
	}
	req, resp, err := challenge(ctx, s, base)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusUnauthorized {
		_ = resp.Body.Close()
		return 0, fmt.Errorf("the server answered HTTP %d without asking for authorization: it needs no login (remove oauth: true)", resp.StatusCode)
	}
	if err := h.Authorize(ctx, req, resp); err != nil {
		return 0, fmt.Errorf("authorization: %w", err)
	}
	if captured == nil || token == nil {
		return 0, errors.New("authorization ended without a token")
	}
	tf := &TokenFile{URL: s.URL, ClientID: captured.ClientID, ClientSecret: captured.ClientSecret,
		AuthURL: captured.Endpoint.AuthURL, TokenURL: captured.Endpoint.TokenURL, AuthStyle: int(captured.Endpoint.AuthStyle),
		Scopes: captured.Scopes, Token: token}
	if err := tf.write(s.OAuthFile); err != nil {
		return 0, fmt.Errorf("storing the token: %w", err)
	}
	return checkLogin(ctx, s)
}

// checkLogin lists the server's tools the way the worker will, with the
// token just stored, and returns how many there are.
func checkLogin(ctx context.Context, s Server) (int, error) {
	m := NewManager(nil)
	defer m.Close()
	s.Deferred = false
	tools, diags := m.Tools(ctx, []Server{s})
	if len(diags) > 0 {
		return 0, fmt.Errorf("logged in, but listing the tools failed: %s", diags[0].Message)
	}
	return len(tools), nil
}

// callbackServer answers the browser's redirect on the loopback listener
// and hands the code (or an empty result for a refusal) to results.
func callbackServer(results chan<- *auth.AuthorizationResult) *http.Server {
	return &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/callback" {
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		if e := q.Get("error"); e != "" {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, "<p>Authorization failed: %s</p>", html.EscapeString(e+" "+q.Get("error_description")))
			select {
			case results <- &auth.AuthorizationResult{}:
			default:
			}
			return
		}
		fmt.Fprint(w, "<p>fastagent is logged in; you can close this tab.</p>")
		select {
		case results <- &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}:
		default:
		}
	})}
}

// challenge sends the request that makes the server ask for authorization:
// an initialize request (streamable HTTP) or the event stream's GET (SSE).
func challenge(ctx context.Context, s Server, c *http.Client) (*http.Request, *http.Response, error) {
	var req *http.Request
	var err error
	if s.Transport == TransportSSE {
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, s.URL, nil)
		if err == nil {
			req.Header.Set("Accept", "text/event-stream")
		}
	} else {
		body := []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"fastagent","version":"1.0.0"}}}`)
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, s.URL, bytes.NewReader(body))
		if err == nil {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
		}
	}
	if err != nil {
		return nil, nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("reaching %s: %w", s.URL, err)
	}
	if resp.StatusCode != http.StatusUnauthorized {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	}
	return req, resp, nil
}
