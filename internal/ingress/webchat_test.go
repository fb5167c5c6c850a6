package ingress_test

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/ingress"
)

// chatServer is authServer with the web chat on, and its gate's clock.
func chatServer(t *testing.T) (*httptest.Server, *recorder, *ingress.ChatGate, *clock) {
	t.Helper()
	g := ingress.NewChatGate()
	clk := &clock{t: time.Now()}
	g.Now = clk.now
	hs, rec := authServer(t, func(s *ingress.Server) { s.Chat = g })
	return hs, rec, g, clk
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// noRedirect is a client that shows redirects instead of following them.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// makeLink asks for a link with token and body, as `fastagent chat-link` does.
func makeLink(t *testing.T, hs *httptest.Server, token, body string) ingress.ChatLink {
	t.Helper()
	resp, b := do(t, hs, call{http.MethodPost, "/chat/links", body}, token, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /chat/links: %d %s", resp.StatusCode, b)
	}
	var l ingress.ChatLink
	if err := json.Unmarshal([]byte(b), &l); err != nil || !strings.HasPrefix(l.Path, "chat/login?t=") || l.URL != hs.URL+"/"+l.Path {
		t.Fatalf("link %s: %+v %v", b, l, err)
	}
	return l
}

// getLink fetches a link (the sign-in page) as a browser, a scanner or
// a preview would: its status, body and the cookies it set by name.
func getLink(t *testing.T, u string) (*http.Response, string, map[string]*http.Cookie) {
	t.Helper()
	resp, err := noRedirect.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), cookiesOf(resp)
}

func cookiesOf(resp *http.Response) map[string]*http.Cookie {
	cs := map[string]*http.Cookie{}
	for _, c := range resp.Cookies() {
		cs[c.Name] = c
	}
	return cs
}

// postLogin posts link u's token to /chat/login with the headers hdr, as
// the sign-in page's button does: the response and the cookies it set.
func postLogin(t *testing.T, u string, hdr map[string]string) (*http.Response, map[string]*http.Cookie) {
	t.Helper()
	lu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	form := url.Values{"t": {lu.Query().Get("t")}}.Encode()
	req, err := http.NewRequest(http.MethodPost, lu.Scheme+"://"+lu.Host+lu.Path, strings.NewReader(form))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, cookiesOf(resp)
}

// openLink opens a link as a browser would: the sign-in page (which must
// set no cookie), then its button, posted from the server's own origin.
// A link the page refuses returns the page's answer.
func openLink(t *testing.T, u string) (*http.Response, map[string]*http.Cookie) {
	t.Helper()
	resp, _, cs := getLink(t, u)
	if len(cs) != 0 {
		t.Fatalf("GET %s set cookies %v", u, cs)
	}
	if resp.StatusCode != http.StatusOK {
		return resp, cs
	}
	lu, _ := url.Parse(u)
	return postLogin(t, u, map[string]string{"Origin": lu.Scheme + "://" + lu.Host})
}

// signIn makes and opens a link for token: the session and CSRF cookies.
func signIn(t *testing.T, hs *httptest.Server, token string) (session, csrf string) {
	t.Helper()
	resp, cs := openLink(t, makeLink(t, hs, token, "").URL)
	if resp.StatusCode != http.StatusSeeOther || cs[ingress.ChatCookie] == nil || cs[ingress.ChatCSRFCookie] == nil {
		t.Fatalf("opening the link: %d, cookies %v", resp.StatusCode, cs)
	}
	return cs[ingress.ChatCookie].Value, cs[ingress.ChatCSRFCookie].Value
}

// withCookie does c with the chat session cookie and the headers hdr.
func withCookie(t *testing.T, hs *httptest.Server, c call, session string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	h := map[string]string{"Cookie": ingress.ChatCookie + "=" + session}
	for k, v := range hdr {
		h[k] = v
	}
	return do(t, hs, c, "", h)
}

// A link signs the principal that made it in: the cookies are HttpOnly
// (the session) and SameSite=Strict, the browser is sent to the page
// without the link, and the cookie then acts as that principal — a
// changing request with the CSRF header, from the page's own origin.
func TestChatLinkSignsIn(t *testing.T) {
	t.Parallel()
	hs, rec, _, _ := chatServer(t)
	l := makeLink(t, hs, aliceTok, `{"ttl":"5m"}`)
	resp, cs := openLink(t, l.URL)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "./" {
		t.Fatalf("open: %d Location %q, want 303 to ./", resp.StatusCode, resp.Header.Get("Location"))
	}
	if rp := resp.Header.Get("Referrer-Policy"); rp != "no-referrer" {
		t.Errorf("Referrer-Policy %q", rp)
	}
	sess, csrf := cs[ingress.ChatCookie], cs[ingress.ChatCSRFCookie]
	if sess == nil || !sess.HttpOnly || sess.SameSite != http.SameSiteStrictMode || sess.Secure || sess.Path != "/" {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict, not Secure over plain HTTP, Path /", sess)
	}
	if csrf == nil || csrf.HttpOnly || csrf.SameSite != http.SameSiteStrictMode || csrf.Value == "" {
		t.Fatalf("CSRF cookie %+v: want readable by the page, SameSite=Strict", csrf)
	}
	r, b := withCookie(t, hs, routes["invoke"], sess.Value, map[string]string{ingress.ChatCSRFHeader: csrf.Value, "Origin": hs.URL})
	if r.StatusCode != http.StatusOK || !strings.Contains(b, "completed") {
		t.Fatalf("invoke with the cookie: %d %s", r.StatusCode, b)
	}
	// The session is alice's: her bearer token reads it, bob's does not.
	if r, b := do(t, hs, routes["state"], aliceTok, nil); r.StatusCode != http.StatusOK {
		t.Errorf("alice reads the session the cookie made: %d %s", r.StatusCode, b)
	}
	if r, _ := do(t, hs, routes["state"], bobTok, nil); r.StatusCode != http.StatusNotFound {
		t.Errorf("bob reads alice's session: %d", r.StatusCode)
	}
	// Reading needs no CSRF header.
	if r, b := withCookie(t, hs, routes["state"], sess.Value, nil); r.StatusCode != http.StatusOK {
		t.Errorf("GET with the cookie: %d %s", r.StatusCode, b)
	}
	if got := rec.took(); len(got) != 1 || !strings.HasPrefix(got[0], "invoke s1 ") {
		t.Errorf("calls %v, want the one invoke", got)
	}
	// A link names only an agent the deployment serves, and a TTL up to 1h.
	if r, b := do(t, hs, call{http.MethodPost, "/chat/links", `{"agent":"elsewhere"}`}, aliceTok, nil); r.StatusCode != http.StatusNotFound || codeOf(b) != ingress.CodeNoSuchAgent {
		t.Errorf("link to an agent not served: %d %s", r.StatusCode, b)
	}
	if r, b := do(t, hs, call{http.MethodPost, "/chat/links", `{"ttl":"2h"}`}, aliceTok, nil); r.StatusCode != http.StatusBadRequest {
		t.Errorf("link for 2h: %d %s, want 400", r.StatusCode, b)
	}
}

// A link opens once; a used, expired or forged link, or one made before a
// restart (another gate's key), is refused with 403 and sets no cookie.
// An expired link does not spend its nonce.
func TestChatLinkRefused(t *testing.T) {
	t.Parallel()
	hs, rec, _, clk := chatServer(t)
	used := makeLink(t, hs, aliceTok, "")
	if r, cs := openLink(t, used.URL); r.StatusCode != http.StatusSeeOther || len(cs) != 2 {
		t.Fatalf("first open: %d %v", r.StatusCode, cs)
	}
	if r, cs := openLink(t, used.URL); r.StatusCode != http.StatusForbidden || len(cs) != 0 {
		t.Errorf("reused link: %d cookies %v, want 403 and none", r.StatusCode, cs)
	}

	expiring := makeLink(t, hs, aliceTok, `{"ttl":"1m"}`)
	clk.add(time.Minute + time.Second)
	if r, cs := openLink(t, expiring.URL); r.StatusCode != http.StatusForbidden || len(cs) != 0 {
		t.Errorf("expired link: %d cookies %v, want 403 and none", r.StatusCode, cs)
	}
	clk.add(-2 * time.Minute) // back within its life: the refusal spent nothing
	if r, _ := openLink(t, expiring.URL); r.StatusCode != http.StatusSeeOther {
		t.Errorf("the expired link, within its life again: %d, want it unspent", r.StatusCode)
	}

	// Signed by another process (before a restart).
	other := ingress.NewChatGate()
	tok, _ := other.Link(ingress.Principal{Name: "alice", Rights: []ingress.Right{ingress.RightAdmin}}, "", time.Minute)
	if r, cs := openLink(t, hs.URL+"/chat/login?t="+tok); r.StatusCode != http.StatusForbidden || len(cs) != 0 {
		t.Errorf("another gate's link: %d %v", r.StatusCode, cs)
	}
	// Forged: a link whose claims were edited (admin rights) keeps its MAC.
	fresh := makeLink(t, hs, aliceTok, "")
	t2 := strings.TrimPrefix(fresh.Path, "chat/login?t=")
	body, sig, _ := strings.Cut(t2, ".")
	claims, _ := base64.RawURLEncoding.DecodeString(body)
	edited := strings.Replace(string(claims), `"invoke"`, `"admin"`, 1)
	forged := base64.RawURLEncoding.EncodeToString([]byte(edited)) + "." + sig
	for name, q := range map[string]string{"edited claims": forged, "empty": "", "garbage": "x.y"} {
		if r, cs := openLink(t, hs.URL+"/chat/login?t="+q); r.StatusCode != http.StatusForbidden || len(cs) != 0 {
			t.Errorf("%s: %d %v", name, r.StatusCode, cs)
		}
	}
	if got := rec.took(); len(got) != 0 {
		t.Errorf("calls %v, want none", got)
	}
}

// A cookie the gate did not sign (edited, made up, another process's, or
// signed out) authenticates nothing: 401, and the request does nothing.
func TestChatForgedCookieRefused(t *testing.T) {
	t.Parallel()
	hs, rec, _, clk := chatServer(t)
	sess, csrf := signIn(t, hs, aliceTok)
	body, sig, _ := strings.Cut(sess, ".")
	claims, _ := base64.RawURLEncoding.DecodeString(body)
	asAdmin := strings.Replace(strings.Replace(string(claims), `"alice"`, `"admin"`, 1), `"invoke"`, `"admin"`, 1)
	other := ingress.NewChatGate()
	otherTok, _ := other.Link(ingress.Principal{Name: "alice", Rights: []ingress.Right{ingress.RightInvoke}}, "", time.Minute)
	for name, v := range map[string]string{
		"edited claims":      base64.RawURLEncoding.EncodeToString([]byte(asAdmin)) + "." + sig,
		"made up":            "eyJuIjoiMSJ9.AAAA",
		"a link as a cookie": otherTok,
		"no signature":       body,
	} {
		for _, c := range []call{routes["invoke"], routes["state"], routes["abort"]} {
			r, b := withCookie(t, hs, c, v, map[string]string{ingress.ChatCSRFHeader: csrf})
			if r.StatusCode != http.StatusUnauthorized || codeOf(b) != ingress.CodeUnauthorized {
				t.Errorf("%s, %s %s: %d %s, want 401", name, c.method, c.path, r.StatusCode, b)
			}
		}
	}
	// An expired session, then a signed-out one.
	clk.add(ingress.DefaultChatSession + time.Second)
	if r, _ := withCookie(t, hs, routes["state"], sess, nil); r.StatusCode != http.StatusUnauthorized {
		t.Errorf("expired session: %d", r.StatusCode)
	}
	clk.add(-ingress.DefaultChatSession - time.Second)
	if r, b := withCookie(t, hs, call{http.MethodPost, "/chat/logout", ""}, sess, map[string]string{ingress.ChatCSRFHeader: csrf}); r.StatusCode != http.StatusOK {
		t.Fatalf("sign out: %d %s", r.StatusCode, b)
	}
	if r, _ := withCookie(t, hs, routes["invoke"], sess, map[string]string{ingress.ChatCSRFHeader: csrf}); r.StatusCode != http.StatusUnauthorized {
		t.Errorf("signed-out session: %d", r.StatusCode)
	}
	if got := rec.took(); len(got) != 0 {
		t.Errorf("calls %v, want none", got)
	}
}

// A changing request authenticated by the chat cookie needs the CSRF
// header: without it, or with another session's, 403 and nothing done; a
// cross-site origin is 403 too. Bearer callers need no CSRF header, and a
// chat session cannot make links.
func TestChatPostWithoutCSRFRefused(t *testing.T) {
	t.Parallel()
	hs, rec, _, _ := chatServer(t)
	sess, csrf := signIn(t, hs, aliceTok)
	_, otherCSRF := signIn(t, hs, aliceTok)
	for name, c := range routes {
		if c.method == http.MethodGet {
			continue
		}
		for label, hdr := range map[string]map[string]string{
			"no header":               nil,
			"another session's token": {ingress.ChatCSRFHeader: otherCSRF},
			"cookie value only":       {ingress.ChatCSRFHeader: ""},
		} {
			r, b := withCookie(t, hs, c, sess, hdr)
			if r.StatusCode != http.StatusForbidden || codeOf(b) != ingress.CodeForbidden {
				t.Errorf("%s, %s: %d %s, want 403", name, label, r.StatusCode, b)
			}
		}
	}
	if r, b := withCookie(t, hs, routes["invoke"], sess, map[string]string{ingress.ChatCSRFHeader: csrf, "Origin": "https://evil.example"}); r.StatusCode != http.StatusForbidden ||
		codeOf(b) != ingress.CodeForbiddenOrigin {
		t.Errorf("cross-site origin: %d %s", r.StatusCode, b)
	}
	if r, b := withCookie(t, hs, call{http.MethodPost, "/chat/links", ""}, sess, map[string]string{ingress.ChatCSRFHeader: csrf}); r.StatusCode != http.StatusForbidden {
		t.Errorf("a chat session makes a link: %d %s", r.StatusCode, b)
	}
	if got := rec.took(); len(got) != 0 {
		t.Fatalf("calls %v, want none", got)
	}
	// A bearer caller is not affected (a stale cookie beside the token too).
	r, b := do(t, hs, routes["abort"], aliceTok, map[string]string{"Cookie": ingress.ChatCookie + "=garbage"})
	if r.StatusCode != http.StatusOK && r.StatusCode != http.StatusNotFound {
		t.Errorf("bearer abort: %d %s", r.StatusCode, b)
	}
}

// The page is served without a token, with a strict CSP; a server without
// the chat has no such route.
func TestChatPage(t *testing.T) {
	t.Parallel()
	hs, _, _, _ := chatServer(t)
	for path, ctype := range map[string]string{"/chat/": "text/html", "/chat/app.js": "text/javascript", "/chat/app.css": "text/css"} {
		r, b := do(t, hs, call{http.MethodGet, path, ""}, "", nil)
		if r.StatusCode != http.StatusOK || !strings.HasPrefix(r.Header.Get("Content-Type"), ctype) || len(b) < 100 {
			t.Errorf("%s: %d %q", path, r.StatusCode, r.Header.Get("Content-Type"))
		}
		csp := r.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
			t.Errorf("%s: CSP %q", path, csp)
		}
	}
	// The script never parses data as HTML.
	_, js := do(t, hs, call{http.MethodGet, "/chat/app.js", ""}, "", nil)
	for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"} {
		if strings.Contains(js, sink) {
			t.Errorf("app.js uses %s", sink)
		}
	}
	if r, _ := do(t, hs, call{http.MethodGet, "/chat/", ""}, "", map[string]string{"Host": "evil.example"}); r.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("page for another Host: %d", r.StatusCode)
	}
	plain, _ := authServer(t, nil)
	for _, c := range []call{{http.MethodGet, "/chat/", ""}, {http.MethodPost, "/chat/links", ""}} {
		if r, _ := do(t, plain, c, aliceTok, nil); r.StatusCode != http.StatusNotFound {
			t.Errorf("%s %s without the chat: %d", c.method, c.path, r.StatusCode)
		}
	}
	if r, _ := do(t, hs, call{http.MethodPost, "/chat/links", ""}, "", nil); r.StatusCode != http.StatusUnauthorized {
		t.Errorf("link without a token: %d", r.StatusCode)
	}
}

// GET /chat/login only shows who the link signs in, to which agent, with a
// button that posts the link: it sets no cookie and spends nothing, so a
// scanner or a preview fetching the link leaves it usable. The page runs
// no script, loads nothing that carries the link, and sends no referrer.
func TestChatLoginPageSpendsNothing(t *testing.T) {
	t.Parallel()
	g := ingress.NewChatGate()
	hs, rec := authServer(t, func(s *ingress.Server) { s.Chat, s.Name = g, "helper" })
	l := makeLink(t, hs, aliceTok, "")
	tok := strings.TrimPrefix(l.Path, "chat/login?t=")
	for i := range 3 {
		resp, body, cs := getLink(t, l.URL)
		if resp.StatusCode != http.StatusOK || len(cs) != 0 || resp.Header.Get("Set-Cookie") != "" {
			t.Fatalf("GET %d: %d cookies %v, want 200 and none", i, resp.StatusCode, cs)
		}
		if !strings.Contains(body, "Sign in to helper as alice") || !strings.Contains(body, `<form method="post" action="login">`) ||
			!strings.Contains(body, `name="t" value="`+tok+`"`) {
			t.Fatalf("sign-in page:\n%s", body)
		}
		if strings.Contains(strings.ToLower(body), "<script") || strings.Count(body, tok) != 1 {
			t.Errorf("the page runs a script or names the link outside its form:\n%s", body)
		}
		csp := resp.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "form-action 'self'") ||
			!strings.Contains(csp, "frame-ancestors 'none'") || strings.Contains(csp, "unsafe") {
			t.Errorf("CSP %q", csp)
		}
		if resp.Header.Get("Referrer-Policy") != "no-referrer" || resp.Header.Get("X-Frame-Options") != "DENY" || resp.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("headers %v", resp.Header)
		}
	}
	// A principal's name is text on the page, never markup.
	odd, _ := g.Link(ingress.Principal{Name: `<img src=x>"`, Rights: []ingress.Right{ingress.RightInvoke}}, "", time.Minute)
	resp, body, _ := getLink(t, hs.URL+"/chat/login?t="+odd)
	if resp.StatusCode != http.StatusOK || strings.Contains(body, "<img") || !strings.Contains(body, "as &lt;img src=x&gt;&#34;") {
		t.Errorf("page for an odd name: %d\n%s", resp.StatusCode, body)
	}
	// A browser signed in as bob is told that alice's link replaces him.
	bobSess, _ := signIn(t, hs, bobTok)
	if r, b := withCookie(t, hs, call{http.MethodGet, "/chat/login?t=" + tok, ""}, bobSess, nil); r.StatusCode != http.StatusOK ||
		!strings.Contains(b, "signed in as <strong>bob</strong> now") || r.Header.Get("Set-Cookie") != "" {
		t.Errorf("the page with bob's cookie: %d\n%s", r.StatusCode, b)
	}
	// The link still signs in, once.
	if r, cs := openLink(t, l.URL); r.StatusCode != http.StatusSeeOther || len(cs) != 2 {
		t.Fatalf("sign in after the GETs: %d %v", r.StatusCode, cs)
	}
	if r, _, cs := getLink(t, l.URL); r.StatusCode != http.StatusForbidden || len(cs) != 0 {
		t.Errorf("the page for a used link: %d %v, want 403", r.StatusCode, cs)
	}
	if got := rec.took(); len(got) != 0 {
		t.Errorf("calls %v, want none", got)
	}
}

// POST /chat/login signs in only from the server's own origin: another
// origin, no origin at all, or an opaque one without the browser saying
// same-origin is refused with 403, sets no cookie and spends nothing —
// the link then still signs in from the right origin. A form posted under
// no-referrer (Origin: null) counts when Sec-Fetch-Site says same-origin.
func TestChatLoginCrossOriginRefused(t *testing.T) {
	t.Parallel()
	hs, _, _, _ := chatServer(t)
	l := makeLink(t, hs, aliceTok, "")
	for name, hdr := range map[string]map[string]string{
		"another origin":              {"Origin": "https://evil.example"},
		"another origin, same-origin": {"Origin": "https://evil.example", "Sec-Fetch-Site": "same-origin"},
		"another port":                {"Origin": strings.Replace(hs.URL, "127.0.0.1:", "127.0.0.1:1", 1)},
		"no origin":                   nil,
		"no origin, cross-site":       {"Sec-Fetch-Site": "cross-site"},
		"null origin":                 {"Origin": "null"},
		"null origin, cross-site":     {"Origin": "null", "Sec-Fetch-Site": "cross-site"},
		"null origin, same-site":      {"Origin": "null", "Sec-Fetch-Site": "same-site"},
		"not a URL":                   {"Origin": "127.0.0.1"},
		// A page on plain http of the same host is not the https site.
		"http origin, https request": {"Origin": hs.URL, "X-Forwarded-Proto": "https"},
	} {
		if r, cs := postLogin(t, l.URL, hdr); r.StatusCode != http.StatusForbidden || len(cs) != 0 {
			t.Errorf("%s: %d cookies %v, want 403 and none", name, r.StatusCode, cs)
		}
	}
	if r, cs := postLogin(t, l.URL, map[string]string{"Origin": hs.URL}); r.StatusCode != http.StatusSeeOther || len(cs) != 2 || r.Header.Get("Location") != "./" {
		t.Fatalf("the refused link from the right origin: %d %v", r.StatusCode, cs)
	}
	if r, cs := postLogin(t, l.URL, map[string]string{"Origin": hs.URL}); r.StatusCode != http.StatusForbidden || len(cs) != 0 {
		t.Errorf("the link again: %d %v, want 403", r.StatusCode, cs)
	}
	// What a browser sends for the page's form under no-referrer.
	l2 := makeLink(t, hs, aliceTok, "")
	if r, cs := postLogin(t, l2.URL, map[string]string{"Origin": "null", "Sec-Fetch-Site": "same-origin"}); r.StatusCode != http.StatusSeeOther || len(cs) != 2 {
		t.Errorf("opaque origin, same-origin fetch: %d %v", r.StatusCode, cs)
	}
	// Behind a proxy terminating TLS: the browser's https origin.
	l3 := makeLink(t, hs, aliceTok, "")
	https := strings.Replace(hs.URL, "http://", "https://", 1)
	if r, cs := postLogin(t, l3.URL, map[string]string{"Origin": https, "X-Forwarded-Proto": "https"}); r.StatusCode != http.StatusSeeOther || len(cs) != 2 {
		t.Errorf("https origin behind a TLS proxy: %d %v", r.StatusCode, cs)
	}
}

// GET /chat/me names who the caller is signed in as (the page's header);
// it needs a session or a token.
func TestChatMe(t *testing.T) {
	t.Parallel()
	hs, _, _, _ := chatServer(t)
	sess, _ := signIn(t, hs, aliceTok)
	me := call{http.MethodGet, "/chat/me", ""}
	if r, b := withCookie(t, hs, me, sess, nil); r.StatusCode != http.StatusOK || b != `{"principal":"alice"}` {
		t.Errorf("with the cookie: %d %s", r.StatusCode, b)
	}
	if r, b := do(t, hs, me, bobTok, nil); r.StatusCode != http.StatusOK || !strings.Contains(b, `"bob"`) {
		t.Errorf("with bob's token: %d %s", r.StatusCode, b)
	}
	if r, b := do(t, hs, me, "", nil); r.StatusCode != http.StatusUnauthorized {
		t.Errorf("anonymous: %d %s, want 401", r.StatusCode, b)
	}
	if r, b := withCookie(t, hs, me, sess, map[string]string{"Origin": "https://evil.example"}); r.StatusCode != http.StatusForbidden {
		t.Errorf("from another origin: %d %s, want 403", r.StatusCode, b)
	}
}
