package webhook

import (
	"net/http"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/workflows"
)

// An endpoint's sessions stay in its own namespace, hook:<name>: a session
// template that could name any other session (another channel's, another
// agent's, another endpoint's) stops loading with an error saying what to
// write.
func TestSessionTemplateMustStayInItsNamespace(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"T": "tok"}
	for tmpl, ok := range map[string]bool{
		"":                                     true, // the default, hook:orders
		"hook:orders":                          true,
		"hook:orders:{{.body.customer}}":       true,
		"  hook:orders:{{.body.customer}}":     true,
		"hook:orders:eu-{{.body.customer}}":    true,
		"stripe:{{.body.customer}}":            false, // today's docs' example: any session
		"{{.body.session}}":                    false,
		"{{.body.agent}}/hook:orders":          false, // another agent's
		"hook:orders{{.body.customer}}":        false, // hook:orders2 is another endpoint
		"hook:{{.name}}:{{.body.customer}}":    false, // not provably this endpoint's
		"hook:other:{{.body.customer}}":        false,
		"slack:T1:C1":                          false,
		`{{"hook:orders:"}}{{.body.customer}}`: false,
	} {
		file := "scheme: token\nsecretEnv: T\n"
		if tmpl != "" {
			file += "session: '" + tmpl + "'\n"
		}
		_, err := New("orders", []byte(file), env(vars))
		switch {
		case ok && err != nil:
			t.Errorf("session %q: %v; want it loaded", tmpl, err)
		case !ok && (err == nil || !strings.Contains(err.Error(), "session:") || !strings.Contains(err.Error(), `"hook:orders:`)):
			t.Errorf("session %q: %v; want a load error saying the session must start with hook:orders:", tmpl, err)
		}
	}
}

// A value that would take the rendered session out of the endpoint's own
// sessions — into a sub-agent's (…/delegate-…), a named sub-session
// (…/<agent>:<name>) or any path below a session — is refused: 422, with
// the reason, and no turn.
func TestSessionValuesCannotEscape(t *testing.T) {
	t.Parallel()
	srv, st, _ := serve(t, "orders", "scheme: token\nsecretEnv: T\nsession: 'hook:orders:{{.body.customer}}'\n", map[string]string{"T": "tok"})
	send := func(customer string) (int, string) {
		body := []byte(`{"customer":"` + customer + `"}`)
		code, resp := post(t, srv.URL, http.Header{"Authorization": {"Bearer tok"}}, body)
		return code, string(resp)
	}
	for _, v := range []string{"c1/delegate-0123456789abcdef", "c1/researcher:notes", "../../slack:T1:C1", "c1/x", ""} {
		if code, resp := send(v); code != http.StatusUnprocessableEntity || !strings.Contains(resp, "session:") {
			t.Errorf("customer %q: %d %q; want 422 saying why", v, code, resp)
		}
	}
	if st.n() != 0 {
		t.Fatalf("escaping values started %d turns: %v", st.n(), st.ids)
	}
	if code, resp := send("cus_9"); code != http.StatusAccepted || st.n() != 1 || st.ids[0] != workflows.WorkflowID("hook:orders:cus_9") {
		t.Errorf("a plain value: %d %s, %v; want session hook:orders:cus_9", code, resp, st.ids)
	}
}
