// Package uigate puts the embedded Temporal Web UI of `fastagent dev`
// behind a login only the operator's browser holds.
//
// The Web UI is a full client of the control plane (it lists, reads,
// signals, updates and terminates workflows) and its /api/v1/settings
// publishes the codec endpoint, so on loopback it must not answer a tool
// process of the agent. The gate sits on the UI's public port in front of
// the UI server (which listens on an internal loopback port and holds no
// credential of its own):
//
//   - A login link (/login?code=…) carries a one-time code signed with the
//     run's Temporal credential; it sets an HttpOnly, SameSite=Strict
//     session cookie and redirects into the UI. A spent code is refused, so
//     a link left in the browser's history opens nothing.
//   - Without the cookie every path — pages, assets, /api/v1/* — is 401.
//   - With it, the request is proxied with "Authorization: Bearer <key>",
//     which the UI server forwards to the frontend; the settings get the
//     codec endpoint; the raw history download, which the UI server would
//     send without the header, is served here.
//   - A state-changing request from another origin is 403.
//
// Whoever reaches the internal port directly gets the UI's static files
// and settings without a codec endpoint; its API calls reach the frontend
// without a credential and are refused there.
package uigate

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
)

// LoginPath is where a login link points.
const LoginPath = "/login"

// SettingsPath is the UI server's settings route (it holds the codec
// endpoint).
const SettingsPath = "/api/v1/settings"

// Config configures a Gate.
type Config struct {
	// Key is the embedded Temporal server's credential: it signs login
	// codes and session cookies, and the proxy sends it upstream.
	Key string
	// Upstream is the UI server's base URL (an internal loopback port).
	Upstream *url.URL
	// Port is the public port; it names the cookie, so that two dev
	// servers on one host keep their own.
	Port int
	// Home is where a login lands, e.g. /namespaces/default/workflows.
	Home string
	// CodecEndpoint is put into the settings the UI reads ("" leaves them).
	CodecEndpoint string
	// History serves the raw history download (nil: 404).
	History http.Handler
	// Logger reports proxy failures; default slog.Default().
	Logger *slog.Logger
}

// Gate is the http.Handler on the UI's public port.
type Gate struct {
	cfg    Config
	cookie string // the session cookie's value
	proxy  *httputil.ReverseProxy
	mux    *http.ServeMux

	mu    sync.Mutex
	spent map[string]bool // nonces of login codes already used
}

// New returns the gate for cfg.
func New(cfg Config) (*Gate, error) {
	if cfg.Key == "" || cfg.Upstream == nil {
		return nil, errors.New("uigate: a key and an upstream are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Home == "" {
		cfg.Home = "/"
	}
	g := &Gate{cfg: cfg, cookie: hex.EncodeToString(mac(cfg.Key, "session", nil)), spent: map[string]bool{}}
	g.proxy = &httputil.ReverseProxy{
		Rewrite:        g.rewrite,
		ModifyResponse: g.modifyResponse,
		FlushInterval:  -1,
		ErrorLog:       slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	g.mux = http.NewServeMux()
	if cfg.History != nil {
		g.mux.Handle("GET /api/v1/namespaces/{namespace}/workflows/{workflow}/run/{runid}/history.json", cfg.History)
	}
	g.mux.Handle("/", g.proxy)
	return g, nil
}

// CookieName is the session cookie's name for the UI on port.
func CookieName(port int) string { return "fastagent_ui_" + strconv.Itoa(port) }

// ServeHTTP implements http.Handler.
func (g *Gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if r.URL.Path == LoginPath {
		g.login(w, r)
		return
	}
	if !g.signedIn(r) {
		refuse(w, http.StatusUnauthorized, "This Temporal Web UI needs a login.")
		return
	}
	if !safeMethod(r.Method) && !sameOrigin(r) {
		refuse(w, http.StatusForbidden, "A request from another site was refused.")
		return
	}
	g.mux.ServeHTTP(w, r)
}

// LoginURL returns a new one-time login link to the UI at base (e.g.
// http://127.0.0.1:8233) for the server whose credential is key.
func LoginURL(base, key string) (string, error) {
	nonce := make([]byte, 16)
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("uigate: draw a login code: %w", err)
	}
	code := hex.EncodeToString(nonce) + hex.EncodeToString(mac(key, "login", nonce)[:16])
	return strings.TrimRight(base, "/") + LoginPath + "?code=" + code, nil
}

func (g *Gate) login(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		refuse(w, http.StatusMethodNotAllowed, "Open the login link in the browser.")
		return
	}
	if g.signedIn(r) {
		http.Redirect(w, r, g.cfg.Home, http.StatusSeeOther)
		return
	}
	switch err := g.spend(r.URL.Query().Get("code")); {
	case errors.Is(err, errSpent):
		refuse(w, http.StatusUnauthorized, "This login link was already used.")
		return
	case err != nil:
		refuse(w, http.StatusUnauthorized, "This login link is not valid for this run of fastagent dev.")
		return
	}
	// Not Secure: the embedded UI is plain HTTP on loopback, where a Secure
	// cookie would never be sent back.
	http.SetCookie(w, &http.Cookie{ //nolint:gosec // G124: see above; HttpOnly and SameSite=Strict are set
		Name:     CookieName(g.cfg.Port),
		Value:    g.cookie,
		Path:     "/",
		HttpOnly: true,
		SameSite: http.SameSiteStrictMode,
	})
	http.Redirect(w, r, g.cfg.Home, http.StatusSeeOther)
}

var (
	errSpent   = errors.New("uigate: login code already used")
	errBadCode = errors.New("uigate: not a login code of this run")
)

// spend checks a login code and marks it used.
func (g *Gate) spend(code string) error {
	raw, err := hex.DecodeString(code)
	if err != nil || len(raw) != 32 {
		return errBadCode
	}
	nonce, sig := raw[:16], raw[16:]
	if !hmac.Equal(sig, mac(g.cfg.Key, "login", nonce)[:16]) {
		return errBadCode
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.spent[string(nonce)] {
		return errSpent
	}
	g.spent[string(nonce)] = true
	return nil
}

func (g *Gate) signedIn(r *http.Request) bool {
	c, err := r.Cookie(CookieName(g.cfg.Port))
	return err == nil && subtle.ConstantTimeCompare([]byte(c.Value), []byte(g.cookie)) == 1
}

// rewrite sends a signed-in request to the UI server with the credential.
// The Host is kept, so the UI server sees what the browser sent.
func (g *Gate) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(g.cfg.Upstream)
	pr.Out.Host = pr.In.Host
	pr.Out.Header.Set("Authorization", "Bearer "+g.cfg.Key)
	if pr.In.URL.Path == SettingsPath {
		pr.Out.Header.Del("Accept-Encoding") // the settings are rewritten below
	}
}

// modifyResponse puts the codec endpoint into the settings.
func (g *Gate) modifyResponse(resp *http.Response) error {
	if resp.Request.URL.Path != SettingsPath || resp.StatusCode != http.StatusOK || g.cfg.CodecEndpoint == "" {
		return nil
	}
	if enc := resp.Header.Get("Content-Encoding"); enc != "" {
		return fmt.Errorf("uigate: settings arrived %s-encoded", enc)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	if err != nil {
		return fmt.Errorf("uigate: read settings: %w", err)
	}
	out, err := withCodec(body, g.cfg.CodecEndpoint)
	if err != nil {
		return err
	}
	resp.Body = io.NopCloser(bytes.NewReader(out))
	resp.ContentLength = int64(len(out))
	resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
	return nil
}

// withCodec sets Codec.Endpoint in the UI server's settings JSON, keeping
// every other field as it is.
func withCodec(settings []byte, endpoint string) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(settings, &top); err != nil {
		return nil, fmt.Errorf("uigate: settings: %w", err)
	}
	codec := map[string]any{}
	if raw, ok := top["Codec"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &codec); err != nil {
			return nil, fmt.Errorf("uigate: settings codec: %w", err)
		}
	}
	codec["Endpoint"] = endpoint
	raw, err := json.Marshal(codec)
	if err != nil {
		return nil, fmt.Errorf("uigate: settings codec: %w", err)
	}
	top["Codec"] = raw
	out, err := json.Marshal(top)
	if err != nil {
		return nil, fmt.Errorf("uigate: settings: %w", err)
	}
	return out, nil
}

// mac is HMAC-SHA256 under key of a purpose label and data.
func mac(key, purpose string, data []byte) []byte {
	h := hmac.New(sha256.New, []byte(key))
	h.Write([]byte("fastagent-ui-" + purpose + "\x00"))
	h.Write(data)
	return h.Sum(nil)
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// sameOrigin: a browser's Origin, when it sends one, names this host.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && strings.EqualFold(u.Host, r.Host)
}

// refuse answers a short page saying how to get in.
func refuse(w http.ResponseWriter, status int, why string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	fmt.Fprintf(w, refusedPage, why)
}

const refusedPage = `<!doctype html>
<meta charset="utf-8">
<title>Temporal Web UI · fastagent dev</title>
<p>%s</p>
<p>This Web UI belongs to <code>fastagent dev</code>. Open the <b>Web UI</b>
login link it printed when it started, or run <code>fastagent ui-link</code>
in the agent's directory for a new one (each link works once).</p>
`
