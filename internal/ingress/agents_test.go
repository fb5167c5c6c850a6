package ingress_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/internal/ingress"
)

// A deployment of two agents: the main one at the root and under
// /agents/main/, the other under /agents/b/. A token limited to b gets the
// same 404 on the main agent's routes as on an agent nobody serves; an
// unlimited token reaches both; each request reaches its own agent.
func TestAgentRoutes(t *testing.T) {
	t.Parallel()
	toks := &ingress.Tokens{}
	lines := ingress.TokenLine("admin", adminTok, ingress.RightAdmin) + "\n" +
		ingress.TokenLineFor("bee", "bee-token", []string{"b"}, ingress.RightInvoke, ingress.RightControl, ingress.RightMetrics)
	if err := toks.Parse(lines); err != nil {
		t.Fatal(err)
	}
	main, other := &recorder{}, &recorder{}
	s := &ingress.Server{Agent: main, Control: main, Tokens: toks, Name: "main",
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("# metrics\n")) }),
		Agents:  map[string]*ingress.Server{"b": {Agent: other, Control: other, Tokens: toks}}}
	s.SetReady(true)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	invoke := func(path string) call { return call{http.MethodPost, path, `{"session":"s1","text":"hi"}`} }
	cases := []struct {
		c      call
		token  string
		status int
		code   string
	}{
		{invoke("/invoke"), "bee-token", 404, ingress.CodeNoSuchAgent},
		{invoke("/agents/main/invoke"), "bee-token", 404, ingress.CodeNoSuchAgent},
		{call{http.MethodGet, "/sessions/s1", ""}, "bee-token", 404, ingress.CodeNoSuchAgent},
		{invoke("/agents/nobody/invoke"), "bee-token", 404, ingress.CodeNoSuchAgent},
		{invoke("/agents/nobody/invoke"), adminTok, 404, ingress.CodeNoSuchAgent},
		{invoke("/agents/b/invoke"), "", 401, ingress.CodeUnauthorized},
		{invoke("/agents/b/invoke"), "bee-token", 200, ""},
		{invoke("/agents/b/invoke"), adminTok, 200, ""},
		{invoke("/agents/main/invoke"), adminTok, 200, ""},
		{invoke("/invoke"), adminTok, 200, ""},
		{call{http.MethodGet, "/metrics", ""}, "bee-token", 200, ""},
	}
	for _, tc := range cases {
		resp, body := do(t, hs, tc.c, tc.token, nil)
		var v struct{ Code string }
		_ = json.Unmarshal([]byte(body), &v)
		if resp.StatusCode != tc.status || v.Code != tc.code {
			t.Errorf("%s %s (%s) = %d %s, want %d %s", tc.c.method, tc.c.path, tc.token, resp.StatusCode, body, tc.status, tc.code)
		}
		if tc.code == ingress.CodeNoSuchAgent && strings.Contains(body, "main") && tc.token == "bee-token" && !strings.Contains(tc.c.path, "main") {
			t.Errorf("the refusal names the agent the token cannot reach: %s", body)
		}
	}
	if got := main.took(); len(got) != 2 || !slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "invoke s1") }) {
		t.Errorf("the main agent was invoked %v, want twice (the admin's two)", got)
	}
	if got := other.took(); len(got) != 2 {
		t.Errorf("agent b was invoked %v, want twice", got)
	}
}

func TestTokensLimitedToAgents(t *testing.T) {
	t.Parallel()
	var tk ingress.Tokens
	if err := tk.Parse(ingress.TokenLineFor("ci", "secret", []string{"support", "reviewer"}, ingress.RightInvoke) + "\n" +
		ingress.TokenLine("ops", "other", ingress.RightAdmin)); err != nil {
		t.Fatal(err)
	}
	ci, _ := tk.Lookup("secret")
	if !ci.Reaches("support") || !ci.Reaches("reviewer") || ci.Reaches("fastagent") {
		t.Errorf("ci reaches %v", ci.Agents)
	}
	if ops, _ := tk.Lookup("other"); !ops.Reaches("anything") {
		t.Error("an unlimited token does not reach every agent")
	}
	for _, bad := range []string{"ci:invoke:" + ingress.HashToken("x") + ":", "ci:invoke:" + ingress.HashToken("x") + ":a,,b",
		"ci:invoke:" + ingress.HashToken("x") + ":a/b", "ci:invoke:" + ingress.HashToken("x") + ":a:b"} {
		if err := (&ingress.Tokens{}).Parse(bad); err == nil {
			t.Errorf("Parse(%q) = nil error, want one", bad)
		}
	}
}

// InvokeOff switches POST /invoke off at the root and under
// /agents/<name>/ alike: 404 not_found with the reason, no turn started;
// another agent keeps its own switch.
func TestInvokeOffCoversTheAgentRoute(t *testing.T) {
	t.Parallel()
	main, other := &recorder{}, &recorder{}
	hs, _ := authServer(t, func(s *ingress.Server) {
		s.Agent, s.Control, s.Name = main, main, "main"
		s.InvokeOff = "POST /invoke is off here"
		s.Agents = map[string]*ingress.Server{"b": {Agent: other, Control: other, Tokens: s.Tokens}}
	})
	for _, path := range []string{"/invoke", "/agents/main/invoke"} {
		resp, body := do(t, hs, call{http.MethodPost, path, `{"session":"s1","text":"hi"}`}, adminTok, nil)
		if resp.StatusCode != http.StatusNotFound || codeOf(body) != "not_found" || !strings.Contains(body, "is off here") {
			t.Errorf("POST %s switched off: %d %s, want 404 not_found with the reason", path, resp.StatusCode, body)
		}
	}
	if got := main.took(); len(got) != 0 {
		t.Errorf("a switched-off /invoke reached the agent: %v", got)
	}
	if resp, body := do(t, hs, call{http.MethodPost, "/agents/b/invoke", `{"session":"s1","text":"hi"}`}, adminTok, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("POST /agents/b/invoke (b keeps it): %d %s", resp.StatusCode, body)
	}
}
