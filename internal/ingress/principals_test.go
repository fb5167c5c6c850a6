package ingress_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/internal/ingress"
)

// headerAuth is a resolver of the kind an embedder puts in front: the
// principal is whoever the X-User header names (their own gateway
// authenticated them), with the rights it lists.
type headerAuth struct{}

func (headerAuth) Authenticate(r *http.Request) (ingress.Principal, error) {
	name := r.Header.Get("X-User")
	switch name {
	case "":
		return ingress.Principal{}, errors.New("sign in through the gateway first")
	case "challenged":
		return ingress.Principal{}, challengeErr{}
	case "nameless":
		return ingress.Principal{Rights: []ingress.Right{ingress.RightAdmin}}, nil
	}
	var rights []ingress.Right
	for _, r := range strings.Split(r.Header.Get("X-Rights"), ",") {
		if r != "" {
			rights = append(rights, ingress.Right(r))
		}
	}
	return ingress.Principal{Name: name, Rights: rights}, nil
}

type challengeErr struct{}

func (challengeErr) Error() string     { return "session expired" }
func (challengeErr) Challenge() string { return `Cookie realm="portal"` }

// principalsServer serves the recorder (with the session routes) behind
// headerAuth instead of API tokens.
func principalsServer(t *testing.T) (*httptest.Server, *sessionsRecorder) {
	t.Helper()
	sr := &sessionsRecorder{recorder: &recorder{}}
	s := &ingress.Server{Agent: sr, Control: sr, Attacher: sr, Sessions: sr, Principals: headerAuth{},
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("# metrics\n")) })}
	s.SetReady(true)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return hs, sr
}

// A custom resolver decides who every route acts for: a request it
// refuses is 401 unauthorized on every route, with its message, and
// reaches nothing; a valid API token means nothing to it.
func TestCustomPrincipalsRefuse(t *testing.T) {
	t.Parallel()
	hs, rec := principalsServer(t)
	all := map[string]call{"metrics": {http.MethodGet, "/metrics", ""}}
	for name, c := range routes {
		all[name] = c
	}
	for name, c := range sessionCalls {
		all[name] = c
	}
	for name, c := range all {
		for _, hdr := range []map[string]string{nil, {"X-User": "nameless"}} {
			resp, body := do(t, hs, c, adminTok, hdr)
			if resp.StatusCode != http.StatusUnauthorized || codeOf(body) != ingress.CodeUnauthorized {
				t.Errorf("%s (%v): %d %s, want 401 unauthorized", name, hdr, resp.StatusCode, body)
			}
			if resp.Header.Get("WWW-Authenticate") != `Bearer realm="fastagent"` {
				t.Errorf("%s: WWW-Authenticate = %q", name, resp.Header.Get("WWW-Authenticate"))
			}
		}
	}
	_, body := do(t, hs, routes["state"], "", nil)
	var v struct{ Error string }
	_ = json.Unmarshal([]byte(body), &v)
	if v.Error != "sign in through the gateway first" {
		t.Errorf("the refusal says %q, want the resolver's message", v.Error)
	}
	resp, _ := do(t, hs, routes["state"], "", map[string]string{"X-User": "challenged"})
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != `Cookie realm="portal"` {
		t.Errorf("a refusal with its own challenge: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	if got := rec.took(); len(got) != 0 {
		t.Errorf("refused requests reached the agent: %v", got)
	}
	// Allowed principals reach their routes; rights still apply.
	resp, body = do(t, hs, routes["invoke"], "", map[string]string{"X-User": "carol", "X-Rights": "invoke"})
	if resp.StatusCode != http.StatusOK {
		t.Errorf("carol invoking: %d %s", resp.StatusCode, body)
	}
	resp, body = do(t, hs, routes["abort"], "", map[string]string{"X-User": "carol", "X-Rights": "invoke"})
	if resp.StatusCode != http.StatusForbidden || codeOf(body) != ingress.CodeForbidden {
		t.Errorf("carol aborting without the control right: %d %s", resp.StatusCode, body)
	}
	// Ownership is by the resolver's name: dave does not see carol's session.
	resp, body = do(t, hs, routes["state"], "", map[string]string{"X-User": "dave", "X-Rights": "control"})
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("dave reading carol's session: %d %s, want 404", resp.StatusCode, body)
	}
	resp, _ = do(t, hs, call{http.MethodGet, "/health", ""}, "", nil)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/health: %d, want 200 without a principal", resp.StatusCode)
	}
}

// Mounted under a prefix (http.StripPrefix), the paths the ingress writes
// into its answers carry the prefix, and the agent's own /agents/<name>
// part when the request came that way.
func TestPathsCarryTheMountPrefix(t *testing.T) {
	t.Parallel()
	sr := &sessionsRecorder{recorder: &recorder{}}
	s := &ingress.Server{Agent: sr, Control: sr, Attacher: sr, Sessions: sr, NoAuth: true, Name: "main"}
	s.SetReady(true)
	mux := http.NewServeMux()
	mux.Handle("/api/v1/", http.StripPrefix("/api/v1", s.Handler()))
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	for path, want := range map[string]string{
		"/api/v1/sessions/s1/followup":             "/api/v1/sessions/s1/turns/k%20%2F1/events",
		"/api/v1/agents/main/sessions/s1/followup": "/api/v1/agents/main/sessions/s1/turns/k%20%2F1/events",
	} {
		resp, body := do(t, hs, call{http.MethodPost, path, `{"text":"more"}`}, "", map[string]string{"Idempotency-Key": "k /1"})
		var v struct{ Events string }
		_ = json.Unmarshal([]byte(body), &v)
		if resp.StatusCode != http.StatusAccepted || v.Events != want {
			t.Errorf("POST %s: %d events %q, want 202 %q", path, resp.StatusCode, v.Events, want)
		}
	}
	// At the root nothing is added.
	hs2 := httptest.NewServer(s.Handler())
	t.Cleanup(hs2.Close)
	_, body := do(t, hs2, call{http.MethodPost, "/sessions/s1/followup", `{"text":"more"}`}, "", map[string]string{"Idempotency-Key": "k2"})
	if !strings.Contains(body, `"events":"/sessions/s1/turns/k2/events"`) {
		t.Errorf("at the root: %s", body)
	}
	// No redirect sends a client out of the prefix.
	resp, _ := do(t, hs, call{http.MethodGet, "/api/v1/sessions/", ""}, "", nil)
	if loc := resp.Header.Get("Location"); loc != "" {
		t.Errorf("GET /api/v1/sessions/ redirects to %q", loc)
	}
}

func TestMountPrefix(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ uri, path, want string }{
		{"/agent/invoke", "/invoke", "/agent"},
		{"/agent/sessions/a%2Fb/export?x=1", "/sessions/a/b/export", "/agent"},
		{"/invoke", "/invoke", ""},
		{"http://example.com/x/invoke", "/invoke", "/x"},
		{"/other", "/invoke", ""},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RequestURI = tc.uri
		r.URL.Path = tc.path
		r.URL.RawPath = ""
		if got := ingress.MountPrefix(r); got != tc.want {
			t.Errorf("MountPrefix(%q, %q) = %q, want %q", tc.uri, tc.path, got, tc.want)
		}
	}
}
