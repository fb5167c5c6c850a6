package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/fastagent/fastagent/workflows"
)

// fakeApprovals serves GET /sessions/s1 with one pending call and records
// the bodies POSTed to its approval; a body whose hashes differ from the
// call's is answered 409 call_changed, as the ingress does.
type fakeApprovals struct {
	pending workflows.PendingApproval
	mu      sync.Mutex
	posted  []map[string]any
}

func (f *fakeApprovals) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/sessions/s1":
		_ = json.NewEncoder(w).Encode(workflows.SessionView{Session: "s1", Approvals: []workflows.PendingApproval{f.pending}})
	case r.Method == http.MethodPost && r.URL.Path == "/sessions/s1/approvals/"+f.pending.Call:
		var body map[string]any
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &body)
		f.mu.Lock()
		f.posted = append(f.posted, body)
		f.mu.Unlock()
		if h, _ := body["argsHash"].(string); h != "" && h != f.pending.ArgsHash {
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"error":"tool call \"c1\" changed","code":"call_changed"}`))
			return
		}
		_, _ = w.Write([]byte(`{"call":"c1","approved":true}`))
	default:
		http.NotFound(w, r)
	}
}

// session approvals shows each pending call's arguments and hashes; session
// approve shows the call and sends the hashes it showed (or the ones
// given), and a call that is not waiting is refused without a POST.
func TestSessionApproveSendsShownHashes(t *testing.T) {
	fake := &fakeApprovals{pending: workflows.PendingApproval{Turn: "t1", Call: "c1", Tool: "deploy",
		Args: json.RawMessage(`{"env":"prod"}`), ArgsHash: "sha256:aaa", DefinitionHash: "sha256:ddd"}}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	t.Setenv("FASTAGENT_API_TOKEN", "")

	out, errOut, code := execute(t, "", "session", "--url", srv.URL, "approvals", "s1")
	if code != 0 {
		t.Fatalf("approvals: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"call c1", "tool deploy", `"env": "prod"`, "sha256:aaa", "sha256:ddd"} {
		if !strings.Contains(out, want) {
			t.Errorf("approvals output lacks %q:\n%s", want, out)
		}
	}

	out, errOut, code = execute(t, "", "session", "--url", srv.URL, "approve", "s1", "c1")
	if code != 0 {
		t.Fatalf("approve: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, `"env": "prod"`) || !strings.Contains(out, "sha256:aaa") || !strings.Contains(out, "approved c1") {
		t.Errorf("approve output does not show the call:\n%s", out)
	}
	_, errOut, code = execute(t, "", "session", "--url", srv.URL, "approve", "s1", "c1", "--args-hash", "sha256:seen-before")
	if code == 0 || !strings.Contains(errOut, "changed") || !strings.Contains(errOut, "call_changed") {
		t.Errorf("approve with another hash: exit %d, %q; want the refusal", code, errOut)
	}
	if _, errOut, code = execute(t, "", "session", "--url", srv.URL, "approve", "s1", "c9"); code == 0 || !strings.Contains(errOut, `"c9"`) {
		t.Errorf("approve of a call not waiting: exit %d, %q", code, errOut)
	}
	// --args approves with edits; arguments that are not an object are
	// refused before anything is sent.
	out, errOut, code = execute(t, "", "session", "--url", srv.URL, "approve", "s1", "c1", "--args", `{"env":"staging"}`)
	if code != 0 || !strings.Contains(out, "approved c1 with edits") {
		t.Errorf("approve --args: exit %d, %q %q", code, out, errOut)
	}
	if _, errOut, code = execute(t, "", "session", "--url", srv.URL, "approve", "s1", "c1", "--args", `["staging"]`); code == 0 || !strings.Contains(errOut, "JSON object") {
		t.Errorf("approve --args with a list: exit %d, %q", code, errOut)
	}
	want := []map[string]any{
		{"approve": true, "argsHash": "sha256:aaa", "definitionHash": "sha256:ddd"},
		{"approve": true, "argsHash": "sha256:seen-before", "definitionHash": "sha256:ddd"},
		{"approve": true, "args": map[string]any{"env": "staging"}, "argsHash": "sha256:aaa", "definitionHash": "sha256:ddd"},
	}
	if got, _ := json.Marshal(fake.posted); string(got) != mustJSON(t, want) {
		t.Errorf("posted %s, want %s", got, mustJSON(t, want))
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
