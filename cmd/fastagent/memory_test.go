package main

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/internal/ingress"
	"github.com/fastagent/fastagent/internal/store"
)

type oneAgent struct{ st store.Store }

func (a oneAgent) Recall(ctx context.Context, q store.MemoryQuery) ([]store.Memory, error) {
	q.Agent = "a"
	return a.st.Recall(ctx, q)
}

func (a oneAgent) Forget(ctx context.Context, s store.MemoryScope, id string) (store.Memory, error) {
	s.Agent = "a"
	return a.st.Forget(ctx, s, id)
}

// memory list, export and rm against a real ingress: alice sees and
// deletes her own memories, never bob's.
func TestMemoryCommands(t *testing.T) {
	st, err := store.OpenSQLite(filepath.Join(t.TempDir(), "m.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ctx := context.Background()
	mine, _ := st.Remember(ctx, store.Memory{Agent: "a", Owner: "alice", Text: "alice deploys on fridays", Tags: []string{"ops"}}, "1")
	bobs, _ := st.Remember(ctx, store.Memory{Agent: "a", Owner: "bob", Text: "bob deploys on mondays"}, "2")
	toks := &ingress.Tokens{}
	toks.AddToken("alice", "alice-tok", ingress.RightInvoke, ingress.RightControl)
	srv := &ingress.Server{Tokens: toks, Memories: oneAgent{st}}
	srv.SetReady(true)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	t.Setenv("FASTAGENT_API_TOKEN", "alice-tok")

	out, errOut, code := execute(t, "", "memory", "--url", hs.URL, "list", "-q", "deploys")
	if code != 0 || !strings.Contains(out, mine.ID) || !strings.Contains(out, "fridays") || strings.Contains(out, "mondays") {
		t.Fatalf("memory list: code %d, out %q, err %q", code, out, errOut)
	}
	file := filepath.Join(t.TempDir(), "m.jsonl")
	if _, errOut, code = execute(t, "", "memory", "--url", hs.URL, "export", "-o", file); code != 0 {
		t.Fatalf("memory export: code %d, err %q", code, errOut)
	}
	if b, err := os.ReadFile(file); err != nil || strings.Count(string(b), "\n") != 1 || !strings.Contains(string(b), `"tags":["ops"]`) {
		t.Fatalf("export file %q, %v", b, err)
	}
	if _, errOut, code = execute(t, "", "memory", "--url", hs.URL, "rm", bobs.ID); code == 0 || !strings.Contains(errOut, "no memory") {
		t.Fatalf("rm of bob's memory: code %d, err %q", code, errOut)
	}
	if out, errOut, code = execute(t, "", "memory", "--url", hs.URL, "rm", mine.ID); code != 0 || !strings.Contains(out, "forgot "+mine.ID) {
		t.Fatalf("rm: code %d, out %q, err %q", code, out, errOut)
	}
	if _, _, code = execute(t, "", "memory", "--url", hs.URL, "list", "--limit", "0"); code == 0 {
		t.Fatal("memory list --limit 0 succeeded")
	}
	left, _ := st.Recall(ctx, store.MemoryQuery{MemoryScope: store.MemoryScope{All: true}})
	if len(left) != 1 || left[0].ID != bobs.ID {
		t.Fatalf("left %+v, want bob's memory only", left)
	}
}
