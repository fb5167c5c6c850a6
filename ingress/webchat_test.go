package ingress_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/ingress"
	iingress "github.com/fastagent/fastagent/internal/ingress"
)

// Mounted under a prefix with the program's own authentication, the web
// chat works there: the program's principal asks for a link, the link
// opens under the prefix, its cookies are scoped to the prefix, and the
// cookie then authenticates the API (changing requests with the CSRF
// header only).
func TestWebChatMounted(t *testing.T) {
	t.Parallel()
	gateway := ingress.PrincipalsFunc(func(r *http.Request) (ingress.Principal, error) {
		if u := r.Header.Get("X-Gateway-User"); u != "" {
			return ingress.Principal{Name: u, Rights: []ingress.Right{ingress.RightInvoke, ingress.RightControl}}, nil
		}
		return ingress.Principal{}, errors.New("sign in through the gateway first")
	})
	h, err := ingress.New(noClient{}, ingress.Options{Dir: t.TempDir(), Principals: gateway})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	hs := mounted(t, h)

	resp, body := send(t, hs, http.MethodPost, "/agent/chat/links", `{"ttl":"1m"}`, http.Header{"X-Gateway-User": {"carol"}})
	var l iingress.ChatLink
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &l) != nil || l.URL != hs.URL+"/agent/"+l.Path {
		t.Fatalf("link: %d %s", resp.StatusCode, body)
	}
	if resp, _ := send(t, hs, http.MethodPost, "/agent/chat/links", "", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("link without the gateway's principal: %d", resp.StatusCode)
	}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	// The link shows a sign-in page (no cookie yet) whose button posts it
	// from the server's own origin.
	page, err := noFollow.Get(l.URL)
	if err != nil {
		t.Fatal(err)
	}
	page.Body.Close()
	if page.StatusCode != http.StatusOK || len(page.Cookies()) != 0 {
		t.Fatalf("the sign-in page: %d cookies %v", page.StatusCode, page.Cookies())
	}
	lu, err := url.Parse(l.URL)
	if err != nil {
		t.Fatal(err)
	}
	post, err := http.NewRequest(http.MethodPost, hs.URL+lu.Path, strings.NewReader(url.Values{"t": {lu.Query().Get("t")}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	post.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	post.Header.Set("Origin", hs.URL)
	r, err := noFollow.Do(post)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	var sess, csrf *http.Cookie
	for _, c := range r.Cookies() {
		switch c.Name {
		case iingress.ChatCookie:
			sess = c
		case iingress.ChatCSRFCookie:
			csrf = c
		}
	}
	if r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != "./" || sess == nil || csrf == nil || sess.Path != "/agent/" || csrf.Path != "/agent/" {
		t.Fatalf("open: %d %q cookies %v", r.StatusCode, r.Header.Get("Location"), r.Cookies())
	}
	if resp, page := send(t, hs, http.MethodGet, "/agent/chat/", "", nil); resp.StatusCode != http.StatusOK || !strings.Contains(page, "app.js") {
		t.Errorf("page under the prefix: %d", resp.StatusCode)
	}
	cookie := http.Header{"Cookie": {iingress.ChatCookie + "=" + sess.Value}}
	if resp, b := send(t, hs, http.MethodPost, "/agent/sessions/s1/abort", `{}`, cookie); resp.StatusCode != http.StatusForbidden {
		t.Errorf("cookie POST without CSRF: %d %s", resp.StatusCode, b)
	}
	cookie.Set("Cookie", iingress.ChatCookie+"=forged."+sess.Value)
	if resp, b := send(t, hs, http.MethodGet, "/agent/sessions/s1", "", cookie); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("forged cookie: %d %s", resp.StatusCode, b)
	}
}

// Options.NoWebChat leaves the web chat out: its routes are not found.
func TestWebChatOff(t *testing.T) {
	t.Parallel()
	h, err := ingress.New(noClient{}, ingress.Options{Dir: t.TempDir(), APIToken: "tok-admin", NoWebChat: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	hs := mounted(t, h)
	for _, c := range []struct{ method, path string }{{http.MethodGet, "/agent/chat/"}, {http.MethodPost, "/agent/chat/links"}} {
		if resp, _ := send(t, hs, c.method, c.path, "", http.Header{"Authorization": {"Bearer tok-admin"}}); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s %s with the web chat off: %d", c.method, c.path, resp.StatusCode)
		}
	}
}
