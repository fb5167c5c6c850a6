package ingress

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/fastagent/fastagent/agent"
)

// The web chat: a small page (GET /chat/) that talks to the agent through
// the HTTP API in the browser, signed in by a one-time link.
//
// A principal with an API token asks for a link (POST /chat/links, what
// `fastagent chat-link` does); the link carries the principal (its name,
// rights and agents), an expiry and a random nonce, signed with HMAC-SHA256
// under the gate's key. The key is drawn at random when the process starts
// and never leaves it, so links and sessions die with the process: after a
// restart every link and every chat cookie made before it is refused.
// GET /chat/login?t= only shows a sign-in page naming the agent and the
// principal, and consumes nothing; its button POSTs the link to /chat/login,
// which — from the server's own origin only (login CSRF: another site must
// not sign a browser into someone else's account) — opens the link once
// (the nonce is remembered, in memory, until the link's expiry) and sets
// two cookies: the session
// (ChatCookie, HttpOnly, SameSite=Strict, Secure over TLS), signed the same
// way, and the CSRF token (ChatCSRFCookie, readable by the page, derived
// from the session). A request authenticated by the session cookie that
// changes something (any method but GET and HEAD) must repeat the CSRF
// token in the ChatCSRFHeader header (403 otherwise); callers with a bearer
// token are not affected.

// Cookie and header names of the web chat.
const (
	ChatCookie     = "fastagent_chat"
	ChatCSRFCookie = "fastagent_csrf"
	ChatCSRFHeader = "X-CSRF-Token"
)

// Web chat link and session lifetimes.
const (
	DefaultChatLinkTTL = 10 * time.Minute
	MaxChatLinkTTL     = time.Hour
	DefaultChatSession = 12 * time.Hour
)

//go:embed webchat
var chatFiles embed.FS

// chatCSP is the page's Content-Security-Policy: its own script and style
// only, requests to its own origin only, no framing.
const chatCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// chatLoginCSP is chatCSP for the sign-in page, whose one form posts to
// its own origin.
var chatLoginCSP = strings.Replace(chatCSP, "form-action 'none'", "form-action 'self'", 1)

// ChatGate makes and checks the web chat's one-time links and session
// cookies. One gate serves a process (the main agent's Server and its
// Agents share it); the zero value is not usable: NewChatGate.
type ChatGate struct {
	key []byte
	// SessionTTL is how long a chat session lasts (default
	// DefaultChatSession).
	SessionTTL time.Duration
	// Now is the clock (nil: time.Now); tests move it.
	Now func() time.Time

	mu      sync.Mutex
	spent   map[string]time.Time // link nonce → the link's expiry
	revoked map[string]time.Time // session ID → the session's expiry
}

// NewChatGate returns a gate with a fresh random key (so that nothing
// signed by another process, or by this one before a restart, opens).
func NewChatGate() *ChatGate {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return &ChatGate{key: k, spent: map[string]time.Time{}, revoked: map[string]time.Time{}}
}

// chatClaims are what a link and a session cookie carry.
type chatClaims struct {
	// Nonce: a link's one-time nonce, or a session's ID.
	Nonce   string   `json:"n"`
	Name    string   `json:"p"`
	Rights  []Right  `json:"r"`
	Agents  []string `json:"a,omitempty"`
	Agent   string   `json:"g,omitempty"`
	Expires int64    `json:"e"`
}

func (g *ChatGate) clock() time.Time {
	if g.Now != nil {
		return g.Now()
	}
	return time.Now()
}

func (g *ChatGate) mac(purpose string, data []byte) []byte {
	h := hmac.New(sha256.New, g.key)
	h.Write([]byte("fastagent-chat-" + purpose + "\x00"))
	h.Write(data)
	return h.Sum(nil)
}

func (g *ChatGate) sign(purpose string, c chatClaims) string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b) + "." + base64.RawURLEncoding.EncodeToString(g.mac(purpose, b))
}

// open checks a signed value of purpose and its expiry.
func (g *ChatGate) open(purpose, v string) (chatClaims, error) {
	var c chatClaims
	body, sig, ok := strings.Cut(v, ".")
	if !ok {
		return c, errors.New("malformed")
	}
	b, err1 := base64.RawURLEncoding.DecodeString(body)
	s, err2 := base64.RawURLEncoding.DecodeString(sig)
	if err1 != nil || err2 != nil || !hmac.Equal(s, g.mac(purpose, b)) {
		return c, errors.New("bad signature")
	}
	if err := json.Unmarshal(b, &c); err != nil || c.Nonce == "" || c.Name == "" {
		return c, errors.New("malformed")
	}
	if g.clock().Unix() >= c.Expires {
		return c, errors.New("expired")
	}
	return c, nil
}

func randomID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Link returns a new one-time link token for p, valid for ttl, opening the
// page on agent ("" the main one).
func (g *ChatGate) Link(p Principal, agentName string, ttl time.Duration) (string, time.Time) {
	exp := g.clock().Add(ttl).Truncate(time.Second)
	return g.sign("link", chatClaims{Nonce: randomID(), Name: p.Name, Rights: p.Rights, Agents: p.Agents, Agent: agentName,
		Expires: exp.Unix()}), exp
}

// peek checks a link token as redeem does, spending nothing.
func (g *ChatGate) peek(tok string) (chatClaims, error) {
	c, err := g.open("link", tok)
	if err != nil {
		return c, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, used := g.spent[c.Nonce]; used {
		return c, errors.New("already used")
	}
	return c, nil
}

// redeem opens a link token once: a spent nonce, a bad signature or an
// expired link is refused, and nothing is recorded for them.
func (g *ChatGate) redeem(tok string) (chatClaims, error) {
	c, err := g.open("link", tok)
	if err != nil {
		return c, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.clock().Unix()
	for n, exp := range g.spent {
		if now >= exp.Unix() {
			delete(g.spent, n)
		}
	}
	if _, used := g.spent[c.Nonce]; used {
		return c, errors.New("already used")
	}
	g.spent[c.Nonce] = time.Unix(c.Expires, 0)
	return c, nil
}

// session returns a new session cookie value for the link's principal and
// its CSRF token.
func (g *ChatGate) session(link chatClaims) (cookie, csrf string, exp time.Time) {
	ttl := g.SessionTTL
	if ttl <= 0 {
		ttl = DefaultChatSession
	}
	exp = g.clock().Add(ttl).Truncate(time.Second)
	c := chatClaims{Nonce: randomID(), Name: link.Name, Rights: link.Rights, Agents: link.Agents, Expires: exp.Unix()}
	return g.sign("session", c), g.csrf(c.Nonce), exp
}

func (g *ChatGate) csrf(sid string) string {
	return base64.RawURLEncoding.EncodeToString(g.mac("csrf", []byte(sid)))
}

// principal checks a session cookie value.
func (g *ChatGate) principal(v string) (chatClaims, error) {
	c, err := g.open("session", v)
	if err != nil {
		return c, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, out := g.revoked[c.Nonce]; out {
		return c, errors.New("signed out")
	}
	return c, nil
}

func (g *ChatGate) revoke(c chatClaims) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.clock().Unix()
	for n, exp := range g.revoked {
		if now >= exp.Unix() {
			delete(g.revoked, n)
		}
	}
	g.revoked[c.Nonce] = time.Unix(c.Expires, 0)
}

// changes reports whether method may change something (CSRF applies).
func changes(method string) bool {
	return method != http.MethodGet && method != http.MethodHead && method != http.MethodOptions
}

// cookiePrincipal authenticates a request by the chat session cookie,
// when the gate is on, the request carries no Authorization header and
// does carry the cookie (handled false: not such a request; then bad is
// why a chat cookie it carries does not count, for the refusal's message
// should nothing else authenticate it). A changing request without the
// CSRF token is refused here.
func (s *Server) cookiePrincipal(c *gin.Context) (p Principal, handled bool, bad error) {
	if s.Chat == nil || c.GetHeader("Authorization") != "" {
		return Principal{}, false, nil
	}
	ck, err := c.Request.Cookie(ChatCookie)
	if err != nil {
		return Principal{}, false, nil //nolint:nilerr // http.ErrNoCookie: not a chat request, no failure
	}
	claims, err := s.Chat.principal(ck.Value)
	if err != nil {
		return Principal{}, false, &Refusal{Message: "the web chat session is not valid (" + err.Error() + "); open a new link from `fastagent chat-link`",
			Scheme: bearerRealm}
	}
	if changes(c.Request.Method) {
		got := c.GetHeader(ChatCSRFHeader)
		if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(s.Chat.csrf(claims.Nonce))) != 1 {
			abort(c, CodeForbidden, "a request of the web chat that changes something needs the "+ChatCSRFHeader+" header (the "+ChatCSRFCookie+" cookie's value)")
			return Principal{}, true, nil
		}
	}
	c.Set(chatSessionKey, claims)
	return Principal{Name: claims.Name, Rights: claims.Rights, Agents: claims.Agents}, true, nil
}

const chatSessionKey = "fastagent.chat"

// sameOrigin reports whether the request's Origin is the server's own
// (the Host is checked against the allowed hosts already).
func sameOrigin(r *http.Request, origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
		return false
	}
	// An http:// origin is not the https:// site: over TLS (or behind a
	// proxy that says so), a page injected into plain http on the same
	// host must not sign in or post. A proxy that terminates TLS without
	// saying so still sees https origins accepted.
	return u.Scheme == "https" || (u.Scheme == "http" && !secureRequest(r))
}

// secureRequest reports whether the client reached the server over TLS
// (directly, or as a proxy in front says).
func secureRequest(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// chatRoutes serves the page, the login and the link and sign-out routes.
func (s *Server) chatRoutes(r *gin.Engine) {
	page, _ := fs.Sub(chatFiles, "webchat")
	files := map[string]string{"/chat/": "index.html", "/chat/app.js": "app.js", "/chat/app.css": "app.css"}
	types := map[string]string{"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8", "app.css": "text/css; charset=utf-8"}
	for route, name := range files {
		body, err := fs.ReadFile(page, name)
		if err != nil {
			panic(fmt.Sprintf("ingress: web chat file %s: %v", name, err))
		}
		ctype := types[name]
		r.GET(route, s.hostOnly, func(c *gin.Context) {
			chatHeaders(c)
			c.Header("Cache-Control", "no-cache")
			c.Data(http.StatusOK, ctype, body)
		})
	}
	r.GET("/chat", s.hostOnly, func(c *gin.Context) {
		c.Header("Location", "chat/")
		c.Status(http.StatusFound)
	})
	r.GET("/chat/login", s.hostOnly, s.chatLoginPage)
	r.POST("/chat/login", s.hostOnly, s.chatLogin)
	r.GET("/chat/me", s.deploymentGuard(), s.chatMe)
	r.POST("/chat/links", s.deploymentGuard(RightInvoke, RightControl, RightApprove), s.chatLink)
	r.POST("/chat/logout", s.deploymentGuard(), s.chatLogout)
}

func chatHeaders(c *gin.Context) {
	chatHeadersCSP(c, chatCSP)
}

func chatHeadersCSP(c *gin.Context, csp string) {
	c.Header("Content-Security-Policy", csp)
	c.Header("X-Content-Type-Options", "nosniff")
	c.Header("Referrer-Policy", "no-referrer")
	c.Header("X-Frame-Options", "DENY")
}

// hostOnly refuses a Host this server does not answer for (421).
func (s *Server) hostOnly(c *gin.Context) {
	if !s.hostAllowed(c.Request.Host) {
		abort(c, CodeMisdirected, "this server does not answer for host "+fmt.Sprintf("%q", c.Request.Host)+" (configure http.allowedHosts)")
	}
}

// cookiePath is where the chat cookies are sent: the whole API, under the
// prefix the handler is mounted at.
func cookiePath(r *http.Request) string {
	return MountPrefix(r) + "/"
}

// chatLinkRefused is the answer to a link that does not open.
func (s *Server) chatLinkRefused(c *gin.Context, err error) {
	s.log().Info("web chat link refused", "reason", err.Error())
	c.Data(http.StatusForbidden, "text/plain; charset=utf-8", []byte("This web chat link does not open: it was used already, it expired, "+
		"or it was made before the server restarted.\nRun `fastagent chat-link` for a new one.\n"))
}

// chatLoginTemplate is the sign-in page: no script, one form that posts
// the link to this origin (the link stays out of every other URL, and no
// referrer is sent).
var chatLoginTemplate = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>Sign in to {{.Agent}} · fastagent chat</title>
<link rel="stylesheet" href="app.css">
</head>
<body>
<header><strong>fastagent</strong></header>
<main class="signin">
<h1 id="signin-title">Sign in to {{.Agent}} as {{.Principal}}</h1>
<p>This one-time link signs this browser in as <strong>{{.Principal}}</strong>: everything you type
in the chat runs as {{.Principal}} and can be read by whoever holds {{.Principal}}'s token.
Continue only if you asked for this link yourself.</p>
{{if .Current}}<p class="banner">This browser is signed in as <strong>{{.Current}}</strong> now; signing in here replaces that.</p>
{{end}}<form method="post" action="login">
<input type="hidden" name="t" value="{{.Token}}">
<button id="signin" type="submit">Sign in as {{.Principal}}</button>
</form>
<p class="muted">The link opens once, until {{.Expires}}.</p>
</main>
</body>
</html>
`))

// chatLoginPage serves GET /chat/login?t=<link>: a page naming the agent
// and the principal the link signs in, whose button posts the link. It
// spends nothing and sets no cookie, so a link scanner or a preview that
// fetches the link leaves it usable, and another site cannot sign a
// browser in by sending it there.
func (s *Server) chatLoginPage(c *gin.Context) {
	chatHeadersCSP(c, chatLoginCSP)
	c.Header("Cache-Control", "no-store")
	tok := c.Query("t")
	claims, err := s.Chat.peek(tok)
	if err != nil {
		s.chatLinkRefused(c, err)
		return
	}
	agentName := claims.Agent
	if agentName == "" {
		agentName = s.Name
	}
	if agentName == "" {
		agentName = "the agent"
	}
	current := ""
	if ck, err := c.Request.Cookie(ChatCookie); err == nil {
		if cur, err := s.Chat.principal(ck.Value); err == nil && cur.Name != claims.Name {
			current = cur.Name
		}
	}
	c.Status(http.StatusOK)
	c.Header("Content-Type", "text/html; charset=utf-8")
	if err := chatLoginTemplate.Execute(c.Writer, map[string]string{
		"Agent": agentName, "Principal": claims.Name, "Current": current, "Token": tok,
		"Expires": time.Unix(claims.Expires, 0).UTC().Format("15:04 MST"),
	}); err != nil {
		s.log().Warn("web chat sign-in page", "error", err.Error())
	}
}

// loginFromOwnOrigin reports whether a sign-in POST came from a page of
// this server: its Origin is this server's. A browser that sends no
// origin ("null", as it does for a form posted under no-referrer) counts
// only when it says the request is same-origin (Sec-Fetch-Site, which
// pages cannot set).
func loginFromOwnOrigin(r *http.Request) bool {
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		return sameOrigin(r, o)
	}
	return r.Header.Get("Sec-Fetch-Site") == "same-origin"
}

// chatLogin serves POST /chat/login (form field t, the link): from this
// server's own origin only, it opens the link once, sets the session and
// CSRF cookies, and sends the browser to the page.
func (s *Server) chatLogin(c *gin.Context) {
	chatHeaders(c)
	c.Header("Cache-Control", "no-store")
	if !loginFromOwnOrigin(c.Request) {
		s.log().Info("web chat sign-in refused", "reason", "not from the server's own origin", "origin", c.GetHeader("Origin"),
			"fetchSite", c.GetHeader("Sec-Fetch-Site"))
		c.Data(http.StatusForbidden, "text/plain; charset=utf-8", []byte("This sign-in did not come from this server's own sign-in page. "+
			"Open the link in your browser and press Sign in.\n"))
		return
	}
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, 16<<10)
	claims, err := s.Chat.redeem(c.PostForm("t"))
	if err != nil {
		s.chatLinkRefused(c, err)
		return
	}
	cookie, csrf, exp := s.Chat.session(claims)
	secure, path := secureRequest(c.Request), cookiePath(c.Request)
	// Secure only over TLS: `fastagent dev` serves plain HTTP on loopback.
	// The CSRF cookie is read by the page (that is the double submit).
	http.SetCookie(c.Writer, &http.Cookie{Name: ChatCookie, Value: cookie, Path: path, Expires: exp, HttpOnly: true, Secure: secure, SameSite: http.SameSiteStrictMode}) //nolint:gosec // G124: Secure when the request came over TLS
	http.SetCookie(c.Writer, &http.Cookie{Name: ChatCSRFCookie, Value: csrf, Path: path, Expires: exp, Secure: secure, SameSite: http.SameSiteStrictMode})               //nolint:gosec // G124: read by the page by design; Secure over TLS
	s.log().Info("web chat signed in", "principal", claims.Name)
	loc := "./"
	if claims.Agent != "" {
		loc += "?agent=" + url.QueryEscape(claims.Agent)
	}
	c.Header("Location", loc)
	c.Status(http.StatusSeeOther)
}

// ChatMe is the answer of GET /chat/me.
type ChatMe struct {
	// Principal is the name of who the request is signed in as.
	Principal string `json:"principal"`
}

// chatMe serves GET /chat/me: who the caller is signed in as (the page
// shows it in its header).
func (s *Server) chatMe(c *gin.Context) {
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, ChatMe{Principal: principalOf(c).Name})
}

// ChatLinkRequest is the body of POST /chat/links.
type ChatLinkRequest struct {
	// Agent opens the page on that agent of the deployment ("": the main one).
	Agent string `json:"agent,omitempty"`
	// TTL is how long the link opens (a Go duration; default 10m, at most 1h).
	TTL string `json:"ttl,omitempty"`
}

// ChatLink is the answer of POST /chat/links.
type ChatLink struct {
	// Path is the link relative to where the API is served
	// ("chat/login?t=…"); URL is it as this request reached the server.
	Path    string    `json:"path"`
	URL     string    `json:"url"`
	Expires time.Time `json:"expires"`
}

// chatLink serves POST /chat/links: a one-time link for the caller, who
// must have authenticated otherwise than by a chat cookie.
func (s *Server) chatLink(c *gin.Context) {
	if _, ok := c.Get(chatSessionKey); ok {
		abort(c, CodeForbidden, "a web chat session cannot make login links; use an API token (fastagent chat-link)")
		return
	}
	var req ChatLinkRequest
	if !bindOptional(c, &req) {
		return
	}
	ttl := DefaultChatLinkTTL
	if req.TTL != "" {
		d, err := time.ParseDuration(req.TTL)
		if err != nil || d <= 0 || d > MaxChatLinkTTL {
			abort(c, agent.CodeInvalidCommand, fmt.Sprintf("ttl %q: want a duration up to %s (e.g. 10m)", req.TTL, MaxChatLinkTTL))
			return
		}
		ttl = d
	}
	p := principalOf(c)
	if req.Agent != "" && ((req.Agent != s.Name && s.Agents[req.Agent] == nil) || !p.Reaches(req.Agent)) {
		abort(c, CodeNoSuchAgent, noSuchAgent(req.Agent))
		return
	}
	if req.Agent == "" && !p.Reaches(s.Name) {
		abort(c, CodeNoSuchAgent, noSuchAgent(""))
		return
	}
	tok, exp := s.Chat.Link(p, req.Agent, ttl)
	path := "chat/login?t=" + tok
	scheme := "http"
	if secureRequest(c.Request) {
		scheme = "https"
	}
	s.log().Info("web chat link made", "principal", p.Name, "agent", req.Agent, "expires", exp)
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, ChatLink{Path: path, URL: scheme + "://" + c.Request.Host + MountPrefix(c.Request) + "/" + path, Expires: exp})
}

// chatLogout serves POST /chat/logout: the session cookie stops working
// (until the process ends, which ends it anyway) and is cleared.
func (s *Server) chatLogout(c *gin.Context) {
	v, ok := c.Get(chatSessionKey)
	if !ok {
		abort(c, CodeForbidden, "only a web chat session signs out")
		return
	}
	claims, _ := v.(chatClaims)
	s.Chat.revoke(claims)
	path := cookiePath(c.Request)
	for _, n := range []string{ChatCookie, ChatCSRFCookie} {
		http.SetCookie(c.Writer, &http.Cookie{Name: n, Value: "", Path: path, MaxAge: -1, HttpOnly: n == ChatCookie, //nolint:gosec // G124: clears the cookies login set
			Secure: secureRequest(c.Request), SameSite: http.SameSiteStrictMode})
	}
	c.JSON(http.StatusOK, gin.H{"signedOut": true})
}
