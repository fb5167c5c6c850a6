package ingress_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/ingress"
	"github.com/fastagent/fastagent/internal/sessionstart"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows"
)

// sessionsRecorder adds ingress.Sessions to the recorder.
type sessionsRecorder struct {
	*recorder
	lastQuery store.SessionQuery
}

func (r *sessionsRecorder) ListSessions(_ context.Context, q store.SessionQuery) (store.SessionPage, error) {
	r.record("list " + q.Owner)
	r.lastQuery = q
	return store.SessionPage{Sessions: []store.SessionInfo{{Session: "s1", Owner: q.Owner}}}, nil
}

func (r *sessionsRecorder) Status(context.Context, string) (string, error) { return "open", nil }

func (r *sessionsRecorder) Transcript(_ context.Context, session string, tree bool) (string, []transcript.Entry, error) {
	r.record("transcript " + session)
	return "e1", []transcript.Entry{{ID: "e1", Type: transcript.TypeMessage, Message: &transcript.Message{Role: "user", Text: "hi"}}}, nil
}

func (r *sessionsRecorder) HasEntry(_ context.Context, _, entry string) (bool, error) {
	return entry == "e1", nil
}

func (r *sessionsRecorder) Import(_ context.Context, session string, _ []transcript.Entry) error {
	r.record("import " + session)
	return nil
}

func (r *sessionsRecorder) Rewind(_ context.Context, session, entry string) (workflows.RewindResult, error) {
	r.record("rewind " + session)
	return workflows.RewindResult{Leaf: entry}, nil
}

func (r *sessionsRecorder) SearchSessions(_ context.Context, f sessionstart.Filter, _ int, _ string) (sessionstart.Page, error) {
	r.record("search " + sessionstart.Query(f))
	return sessionstart.Page{Sessions: []sessionstart.Hit{{Session: "s1", Channel: f.Channel, Principal: f.Principal}}}, nil
}

func (r *sessionsRecorder) FollowUp(_ context.Context, session, _, _ string) error {
	r.record("followup " + session)
	return nil
}

func (r *sessionsRecorder) DeleteSession(_ context.Context, session string, force bool) (ingress.DeletedSession, error) {
	r.mu.Lock()
	running := r.running
	r.mu.Unlock()
	if running != "" && !force {
		return ingress.DeletedSession{}, agent.NewError(agent.CodeTurnRunning, "session "+session+" is running turn "+running+"; delete with force")
	}
	r.record(fmt.Sprintf("delete %s force=%v", session, force))
	return ingress.DeletedSession{Session: session, Workflows: []string{"session:" + session}, Entries: 3, SubSessions: []string{}, Running: running}, nil
}

const piFile = `{"type":"session","version":3,"id":"pi-1","timestamp":"2026-01-01T00:00:00Z","cwd":"/"}
{"type":"message","id":"u1","parentId":null,"timestamp":"2026-01-01T00:00:00Z","message":{"role":"user","content":"hi","timestamp":0}}
`

func importBody(session, jsonl string) string {
	b, _ := json.Marshal(ingress.ImportRequest{Session: session, JSONL: jsonl})
	return string(b)
}

// the session routes, with a valid body, on alice's session s1.
var sessionCalls = map[string]call{
	"list":       {http.MethodGet, "/sessions", ""},
	"transcript": {http.MethodGet, "/sessions/s1/transcript?tree=1", ""},
	"export":     {http.MethodGet, "/sessions/s1/export", ""},
	"import":     {http.MethodPost, "/sessions/import", importBody("imported", piFile)},
	"rewind":     {http.MethodPost, "/sessions/s1/rewind", `{"entry":"e1"}`},
	"followup":   {http.MethodPost, "/sessions/s1/followup", `{"text":"then this"}`},
	"delete":     {http.MethodDelete, "/sessions/s1", ""},
}

func sessionsServer(t *testing.T) (*httptest.Server, *sessionsRecorder) {
	t.Helper()
	var sr *sessionsRecorder
	hs, rec := authServer(t, func(s *ingress.Server) {
		sr = &sessionsRecorder{}
		s.Sessions, s.Deleter = sr, sr
	})
	sr.recorder = rec
	return hs, sr
}

func TestSessionRoutesRefuse(t *testing.T) {
	t.Parallel()
	hs, rec := sessionsServer(t)
	for name, c := range sessionCalls {
		for _, tok := range []string{"", "wrong-token"} {
			resp, body := do(t, hs, c, tok, nil)
			if resp.StatusCode != http.StatusUnauthorized || codeOf(body) != ingress.CodeUnauthorized {
				t.Errorf("%s with token %q: %d %s, want 401", name, tok, resp.StatusCode, body)
			}
		}
	}
	rights := []struct {
		token   string
		allowed map[string]bool
	}{
		{invokerTok, map[string]bool{"import": true}}, // followup on s1 needs s1: 404 below
		{approverTok, map[string]bool{"list": true}},
		{operatorTok, map[string]bool{"list": true}},
	}
	for _, tc := range rights {
		for name, c := range sessionCalls {
			resp, body := do(t, hs, c, tc.token, nil)
			if tc.allowed[name] {
				if resp.StatusCode/100 != 2 {
					t.Errorf("%s on %s: %d %s, want it allowed", tc.token, name, resp.StatusCode, body)
				}
				continue
			}
			if resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusNotFound {
				t.Errorf("%s on %s: %d %s, want 403 or 404", tc.token, name, resp.StatusCode, body)
			}
		}
	}
	for _, got := range rec.took() {
		if f := strings.Fields(got); f[0] != "list" && f[0] != "import" {
			t.Errorf("a refused request reached the engine: %q", got)
		}
	}
}

func TestSessionRoutesOwnSessionsOnly(t *testing.T) {
	t.Parallel()
	hs, rec := sessionsServer(t)
	if resp, body := do(t, hs, call{http.MethodPost, "/invoke", `{"session":"s1","text":"hi"}`}, aliceTok, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("alice's invoke: %d %s", resp.StatusCode, body)
	}
	before := len(rec.took())
	for name, c := range sessionCalls {
		if name == "list" || name == "import" {
			continue
		}
		if resp, body := do(t, hs, c, bobTok, nil); resp.StatusCode != http.StatusNotFound || codeOf(body) != agent.CodeNoSuchSession {
			t.Errorf("bob %s on alice's session: %d %s, want 404", name, resp.StatusCode, body)
		}
	}
	if got := rec.took()[before:]; len(got) != 0 {
		t.Errorf("bob's requests reached alice's session: %v", got)
	}
	// The list is the caller's own; an admin's is everyone's.
	for _, c := range []struct{ tok, owner string }{{bobTok, "bob"}, {aliceTok, "alice"}, {adminTok, ""}} {
		resp, body := do(t, hs, sessionCalls["list"], c.tok, nil)
		if resp.StatusCode != http.StatusOK || rec.lastQuery.Owner != c.owner || !strings.Contains(body, `"status":"open"`) {
			t.Errorf("list as %s: %d %s, owner filter %q, want %q", c.owner, resp.StatusCode, body, rec.lastQuery.Owner, c.owner)
		}
	}
	for name, c := range sessionCalls {
		if resp, body := do(t, hs, c, aliceTok, nil); resp.StatusCode/100 != 2 {
			t.Errorf("alice %s: %d %s", name, resp.StatusCode, body)
		}
	}
}

func TestSessionRoutesBadInput(t *testing.T) {
	t.Parallel()
	hs, rec := sessionsServer(t)
	if resp, body := do(t, hs, call{http.MethodPost, "/invoke", `{"session":"s1","text":"hi"}`}, aliceTok, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("alice's invoke: %d %s", resp.StatusCode, body)
	}
	before := len(rec.took())
	cases := []struct {
		name   string
		c      call
		status int
		want   string
	}{
		{"import bad line", call{http.MethodPost, "/sessions/import", importBody("x", piFile+"{broken\n")}, 400, `"line":3`},
		{"import no jsonl", call{http.MethodPost, "/sessions/import", `{"session":"x"}`}, 400, "jsonl"},
		{"import nothing", call{http.MethodPost, "/sessions/import", importBody("x", `{"type":"session","version":3,"id":"y"}`)}, 400, "no entries"},
		{"rewind no entry", call{http.MethodPost, "/sessions/s1/rewind", `{}`}, 400, "entry"},
		{"followup no text", call{http.MethodPost, "/sessions/s1/followup", `{"text":" "}`}, 400, "text"},
		{"list bad limit", call{http.MethodGet, "/sessions?limit=0", ""}, 400, "limit"},
		{"fork unknown entry", call{http.MethodPost, "/invoke", `{"session":"f1","text":"hi","parentSession":"s1","fromEntry":"nope"}`}, 404, "no entry"},
		{"fromEntry without parent", call{http.MethodPost, "/invoke", `{"session":"f1","text":"hi","fromEntry":"e1"}`}, 400, "parentSession"},
	}
	for _, c := range cases {
		resp, body := do(t, hs, c.c, aliceTok, nil)
		if resp.StatusCode != c.status || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %s, want %d containing %q", c.name, resp.StatusCode, body, c.status, c.want)
		}
	}
	if got := rec.took()[before:]; len(got) != 0 {
		t.Errorf("bad requests reached the engine: %v", got)
	}
	// f1 and x were not claimed: bob can create them.
	for _, id := range []string{"f1", "x"} {
		if resp, body := do(t, hs, call{http.MethodPost, "/invoke", `{"session":"` + id + `","text":"hi"}`}, bobTok, nil); resp.StatusCode != http.StatusOK {
			t.Errorf("bob creating %s after refused requests: %d %s", id, resp.StatusCode, body)
		}
	}
	// A fork from a known entry goes through.
	if resp, body := do(t, hs, call{http.MethodPost, "/invoke", `{"session":"f2","text":"hi","parentSession":"s1","fromEntry":"e1"}`}, aliceTok, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("fork from e1: %d %s", resp.StatusCode, body)
	}
}

// TestDeleteSessionRunningTurn: a running turn refuses the deletion with
// 409 turn_running and a message naming force, and nothing is deleted;
// force=true deletes it; a force that is not a boolean is a 400.
func TestDeleteSessionRunningTurn(t *testing.T) {
	t.Parallel()
	hs, rec := sessionsServer(t)
	if resp, body := do(t, hs, call{http.MethodPost, "/invoke", `{"session":"s1","text":"hi"}`}, aliceTok, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("alice's invoke: %d %s", resp.StatusCode, body)
	}
	rec.mu.Lock()
	rec.running = "k1"
	rec.mu.Unlock()
	before := len(rec.took())
	resp, body := do(t, hs, call{http.MethodDelete, "/sessions/s1", ""}, aliceTok, nil)
	if resp.StatusCode != http.StatusConflict || codeOf(body) != agent.CodeTurnRunning || !strings.Contains(body, "force") {
		t.Errorf("delete during a turn: %d %s, want 409 turn_running naming force", resp.StatusCode, body)
	}
	resp, body = do(t, hs, call{http.MethodDelete, "/sessions/s1?force=maybe", ""}, aliceTok, nil)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "force") {
		t.Errorf("delete with force=maybe: %d %s, want 400", resp.StatusCode, body)
	}
	if got := rec.took()[before:]; len(got) != 0 {
		t.Errorf("refused deletions reached the engine: %v", got)
	}
	resp, body = do(t, hs, call{http.MethodDelete, "/sessions/s1?force=true", ""}, aliceTok, nil)
	var d ingress.DeletedSession
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &d) != nil || d.Running != "k1" || d.Entries != 3 {
		t.Errorf("forced delete: %d %s", resp.StatusCode, body)
	}
	if got := rec.took()[before:]; len(got) != 1 || got[0] != "delete s1 force=true" {
		t.Errorf("forced delete reached the engine as %v", got)
	}
	// A sub-agent's session is deleted with the session that owns it only.
	resp, body = do(t, hs, call{http.MethodDelete, "/sessions/s1%2Fdelegate-0123456789abcdef", ""}, adminTok, nil)
	if resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusNotFound {
		t.Errorf("delete of a sub-agent session: %d %s, want 403 or 404", resp.StatusCode, body)
	}
	if got := rec.took()[before:]; len(got) != 1 {
		t.Errorf("the sub-agent session's deletion reached the engine: %v", got)
	}
}

// With POST /invoke switched off (an agent with channels), importing a
// session is off too: an imported session is the caller's own, and its
// follow-ups would run the turns /invoke may not start. The refusal is
// 404 not_found with the reason, and nothing is imported.
func TestInvokeOffCoversImport(t *testing.T) {
	t.Parallel()
	var sr *sessionsRecorder
	hs, rec := authServer(t, func(s *ingress.Server) {
		sr = &sessionsRecorder{}
		s.Sessions, s.Deleter = sr, sr
		s.InvokeOff = "POST /invoke is off here"
	})
	sr.recorder = rec
	for _, path := range []string{"/sessions/import"} {
		resp, body := do(t, hs, call{http.MethodPost, path, importBody("imported", piFile)}, invokerTok, nil)
		if resp.StatusCode != http.StatusNotFound || codeOf(body) != "not_found" || !strings.Contains(body, "is off here") {
			t.Errorf("POST %s with /invoke off: %d %s, want 404 not_found with the reason", path, resp.StatusCode, body)
		}
	}
	if got := rec.took(); len(got) != 0 {
		t.Errorf("an import went through with /invoke off: %v", got)
	}
}
