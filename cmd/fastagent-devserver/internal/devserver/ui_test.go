package devserver

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/cmd/fastagent-devserver/internal/uigate"
)

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The Web UI answers nothing — pages, settings (with the codec endpoint),
// the API — without the login cookie; the login link sets it once.
func TestWebUINeedsTheLogin(t *testing.T) {
	base := "http://" + srv.UIAddress()
	anon := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, p := range []string{uigate.SettingsPath, "/namespaces/default/workflows", "/", "/api/v1/namespaces/default/workflows",
		"/_app/version.json", "/login?code=" + strings.Repeat("ab", 32)} {
		st, body := get(t, anon, base+p)
		if st != http.StatusUnauthorized || !strings.Contains(body, "fastagent ui-link") {
			t.Errorf("GET %s without the cookie: %d %.200s", p, st, body)
		}
		if strings.Contains(body, "codec") {
			t.Errorf("GET %s without the cookie shows the codec endpoint", p)
		}
	}

	link, err := srv.UILoginURL()
	if err != nil {
		t.Fatal(err)
	}
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	resp, err := anon.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/namespaces/default/workflows" {
		t.Fatalf("login: %d → %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	sc := resp.Header.Get("Set-Cookie")
	if !strings.Contains(sc, "HttpOnly") || !strings.Contains(sc, "SameSite=Strict") {
		t.Errorf("cookie %q: want HttpOnly and SameSite=Strict", sc)
	}
	u, _ := url.Parse(base)
	jar.SetCookies(u, resp.Cookies())

	st, body := get(t, browser, base+uigate.SettingsPath)
	var settings struct{ Codec struct{ Endpoint string } }
	if st != http.StatusOK || json.Unmarshal([]byte(body), &settings) != nil || settings.Codec.Endpoint != testCodec {
		t.Errorf("settings with the cookie: %d %.300s", st, body)
	}
	if st, body := get(t, browser, base+"/namespaces/default/workflows"); st != http.StatusOK || !strings.Contains(body, "<html") {
		t.Errorf("page with the cookie: %d %.200s", st, body)
	}
	if st, body := get(t, browser, base+"/api/v1/namespaces/default/workflows"); st != http.StatusOK {
		t.Errorf("workflow list through the UI: %d %.300s", st, body)
	}

	// The link is spent: a copy in the browser's history opens nothing.
	if st, body := get(t, anon, link); st != http.StatusUnauthorized || !strings.Contains(body, "already used") {
		t.Errorf("second use of the link: %d %.200s", st, body)
	}
	// A state-changing request from another origin is refused.
	req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/namespaces/default/workflows/x/terminate", strings.NewReader("{}"))
	req.Header.Set("Origin", "http://127.0.0.1:9999")
	if resp, err := browser.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-origin POST: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}

// The UI server behind the gate holds no credential and no codec endpoint:
// reached directly, its settings say nothing and its API is refused.
func TestWebUIInnerServerHoldsNothing(t *testing.T) {
	inner := "http://" + srv.ui.inner
	st, body := get(t, http.DefaultClient, inner+uigate.SettingsPath)
	if st != http.StatusOK || strings.Contains(body, "codec/dev") {
		t.Errorf("inner settings: %d %.300s", st, body)
	}
	if st, body := get(t, http.DefaultClient, inner+"/api/v1/namespaces/default/workflows"); st == http.StatusOK {
		t.Errorf("inner API answered without a credential: %.300s", body)
	}
}

// The raw history download, which the UI server would send without the
// credential, is served by the gate.
func TestWebUIRawHistory(t *testing.T) {
	ctx := context.Background()
	c := dial(t, srv.APIKey())
	id := "session:raw-" + time.Now().Format("150405.000000")
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: "nobody-polls"}, "Nothing")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.TerminateWorkflow(ctx, id, "", "test over") }()
	link, err := srv.UILoginURL()
	if err != nil {
		t.Fatal(err)
	}
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	if st, _ := get(t, browser, link); st != http.StatusOK {
		t.Fatalf("login: %d", st)
	}
	p := "http://" + srv.UIAddress() + "/api/v1/namespaces/default/workflows/" + url.PathEscape(id) + "/run/" + run.GetRunID() + "/history.json"
	st, body := get(t, browser, p)
	var events []map[string]any
	if st != http.StatusOK || json.Unmarshal([]byte(body), &events) != nil || len(events) == 0 || strings.Contains(body, `"error"`) {
		t.Fatalf("raw history: %d %.400s", st, body)
	}
}
