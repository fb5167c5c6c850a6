package ingress_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"testing"

	"github.com/fastagent/fastagent/internal/ingress"
	"github.com/fastagent/fastagent/internal/store"
)

// agentStore is one agent's memories in a real store.
type agentStore struct{ st store.Store }

func (a agentStore) Recall(ctx context.Context, q store.MemoryQuery) ([]store.Memory, error) {
	q.Agent = "a"
	return a.st.Recall(ctx, q)
}

func (a agentStore) Forget(ctx context.Context, scope store.MemoryScope, id string) (store.Memory, error) {
	scope.Agent = "a"
	return a.st.Forget(ctx, scope, id)
}

func memoryServer(t *testing.T) (*httptest.Server, map[string]store.Memory, store.Store) {
	t.Helper()
	st, err := store.OpenSQLite(filepath.Join(t.TempDir(), "m.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ms := map[string]store.Memory{}
	for key, m := range map[string]store.Memory{
		"alice":  {Agent: "a", Owner: "alice", Text: "alice likes tea"},
		"bob":    {Agent: "a", Owner: "bob", Text: "bob likes tea too"},
		"shared": {Agent: "a", Text: "the team drinks tea at four"},
		"other":  {Agent: "other", Owner: "alice", Text: "another agent's tea"},
	} {
		if ms[key], err = st.Remember(context.Background(), m, key); err != nil {
			t.Fatal(err)
		}
	}
	hs, _ := authServer(t, func(s *ingress.Server) { s.Memories = agentStore{st} })
	return hs, ms, st
}

func listed(t *testing.T, body string) []string {
	t.Helper()
	var l ingress.MemoryList
	if err := json.Unmarshal([]byte(body), &l); err != nil {
		t.Fatalf("GET /memories body %s: %v", body, err)
	}
	var out []string
	for _, m := range l.Memories {
		out = append(out, m.Text)
	}
	slices.Sort(out)
	return out
}

func TestMemoryRoutesRefuse(t *testing.T) {
	t.Parallel()
	hs, ms, st := memoryServer(t)
	list := call{http.MethodGet, "/memories", ""}
	del := call{http.MethodDelete, "/memories/" + ms["bob"].ID, ""}
	for _, c := range []call{list, del} {
		for _, tok := range []string{"", "wrong-token"} {
			if resp, body := do(t, hs, c, tok, nil); resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s %s with token %q: %d %s, want 401", c.method, c.path, tok, resp.StatusCode, body)
			}
		}
		if resp, body := do(t, hs, c, approverTok, nil); resp.StatusCode != http.StatusForbidden || codeOf(body) != ingress.CodeForbidden {
			t.Errorf("%s %s with only the approve right: %d %s, want 403", c.method, c.path, resp.StatusCode, body)
		}
	}
	// Alice may not delete Bob's memory nor a shared one: 404, as if missing.
	for _, key := range []string{"bob", "shared", "other"} {
		resp, body := do(t, hs, call{http.MethodDelete, "/memories/" + ms[key].ID, ""}, aliceTok, nil)
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("alice deletes %s's memory: %d %s, want 404", key, resp.StatusCode, body)
		}
	}
	if resp, body := do(t, hs, call{http.MethodGet, "/memories?principal=bob", ""}, aliceTok, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("alice lists bob's memories: %d %s, want 403", resp.StatusCode, body)
	}
	for _, q := range []string{"limit=0", "limit=x", "limit=100000"} {
		if resp, body := do(t, hs, call{http.MethodGet, "/memories?" + q, ""}, aliceTok, nil); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("GET /memories?%s: %d %s, want 400", q, resp.StatusCode, body)
		}
	}
	all, err := st.Recall(context.Background(), store.MemoryQuery{MemoryScope: store.MemoryScope{All: true}, Limit: 10})
	if err != nil || len(all) != 4 {
		t.Fatalf("refused requests changed the memories: %d left, %v", len(all), err)
	}
}

func TestMemoryRoutesOwnAndShared(t *testing.T) {
	t.Parallel()
	hs, ms, _ := memoryServer(t)
	resp, body := do(t, hs, call{http.MethodGet, "/memories", ""}, aliceTok, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("alice lists: %d %s", resp.StatusCode, body)
	}
	if got := listed(t, body); !slices.Equal(got, []string{"alice likes tea", "the team drinks tea at four"}) {
		t.Fatalf("alice sees %q, want her own and the shared one", got)
	}
	_, body = do(t, hs, call{http.MethodGet, "/memories?q=tea&principal=shared", ""}, bobTok, nil)
	if got := listed(t, body); !slices.Equal(got, []string{"the team drinks tea at four"}) {
		t.Fatalf("bob's shared listing: %q", got)
	}
	_, body = do(t, hs, call{http.MethodGet, "/memories", ""}, adminTok, nil)
	if got := listed(t, body); len(got) != 3 {
		t.Fatalf("the admin sees %q, want the agent's three", got)
	}
	if resp, body := do(t, hs, call{http.MethodDelete, "/memories/" + ms["alice"].ID, ""}, aliceTok, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("alice deletes her memory: %d %s", resp.StatusCode, body)
	}
	if resp, body := do(t, hs, call{http.MethodDelete, "/memories/" + ms["shared"].ID, ""}, adminTok, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("the admin deletes the shared memory: %d %s", resp.StatusCode, body)
	}
	_, body = do(t, hs, call{http.MethodGet, "/memories", ""}, aliceTok, nil)
	if got := listed(t, body); len(got) != 0 {
		t.Fatalf("alice still sees %q", got)
	}
}

// GET /memories shows the session a memory came from to its owner and to
// an admin only: another principal listing a shared memory does not learn
// which session wrote it.
func TestMemoryListHidesOthersSessions(t *testing.T) {
	t.Parallel()
	hs, _, st := memoryServer(t)
	ctx := context.Background()
	if _, err := st.Remember(ctx, store.Memory{Agent: "a", Text: "the team ships on friday", Session: "alice-private-plans"}, "shared-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Remember(ctx, store.Memory{Agent: "a", Owner: "bob", Text: "bob's own note", Session: "bob-session"}, "bob-2"); err != nil {
		t.Fatal(err)
	}
	sessions := func(tok string) map[string]string {
		t.Helper()
		resp, body := do(t, hs, call{http.MethodGet, "/memories", ""}, tok, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /memories: %d %s", resp.StatusCode, body)
		}
		var l ingress.MemoryList
		if err := json.Unmarshal([]byte(body), &l); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, m := range l.Memories {
			out[m.Text] = m.Session
		}
		return out
	}
	bob := sessions(bobTok)
	if s, ok := bob["the team ships on friday"]; !ok || s != "" {
		t.Errorf("bob sees the shared memory's session %q (listed: %v), want it listed without one", s, ok)
	}
	if s := bob["bob's own note"]; s != "bob-session" {
		t.Errorf("bob's own memory's session: %q, want bob-session", s)
	}
	if s := sessions(adminTok)["the team ships on friday"]; s != "alice-private-plans" {
		t.Errorf("an admin sees the shared memory's session %q, want alice-private-plans", s)
	}
}
