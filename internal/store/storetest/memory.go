package storetest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/internal/store"
)

func memoryTexts(ms []store.Memory) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Text
	}
	return out
}

func alice(agent string) store.MemoryScope {
	return store.MemoryScope{Agent: agent, Owners: []string{"alice", ""}}
}

// testMemories: remember is idempotent by key, recall ranks by relevance
// and stems, forget deletes once.
func testMemories(t *testing.T, s store.Store) {
	ctx := context.Background()
	m := store.Memory{Agent: "a", Owner: "alice", Text: "Alice's favourite colour is teal", Tags: []string{"prefs"}, Session: "s1"}
	first, err := s.Remember(ctx, m, "s1/e1")
	if err != nil {
		t.Fatal(err)
	}
	if first.ID != store.MemoryID("a", "s1/e1") || first.Created.IsZero() || first.Owner != "alice" || !slices.Equal(first.Tags, []string{"prefs"}) {
		t.Fatalf("remembered %+v", first)
	}
	m.Text = "a retried call with other text"
	again, err := s.Remember(ctx, m, "s1/e1")
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != first.ID || again.Text != first.Text {
		t.Fatalf("a retried remember stored again: %+v", again)
	}
	for i, text := range []string{"The deploy runs on Fridays", "Bob likes coffee", "Colours of the office walls are grey"} {
		if _, err := s.Remember(ctx, store.Memory{Agent: "a", Owner: "alice", Text: text}, "k"+string(rune('0'+i))); err != nil {
			t.Fatal(err)
		}
	}
	all, err := s.Recall(ctx, store.MemoryQuery{MemoryScope: alice("a"), Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 4 || all[0].Text != "Colours of the office walls are grey" {
		t.Fatalf("listing (newest first) = %q", memoryTexts(all))
	}
	got, err := s.Recall(ctx, store.MemoryQuery{MemoryScope: alice("a"), Text: "what is my favourite colour?"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 || got[0].ID != first.ID {
		t.Fatalf("recall favourite colour = %q, want the teal memory first", memoryTexts(got))
	}
	if slices.Contains(memoryTexts(got), "Bob likes coffee") {
		t.Fatalf("recall returned an unrelated memory: %q", memoryTexts(got))
	}
	// Stemming: "deploys" finds "deploy"; the tag is searchable.
	if got, _ := s.Recall(ctx, store.MemoryQuery{MemoryScope: alice("a"), Text: "deploys"}); len(got) != 1 || !strings.Contains(got[0].Text, "deploy") {
		t.Fatalf("recall deploys = %q", memoryTexts(got))
	}
	if got, _ := s.Recall(ctx, store.MemoryQuery{MemoryScope: alice("a"), Text: "prefs"}); len(got) != 1 || got[0].ID != first.ID {
		t.Fatalf("recall by tag = %q", memoryTexts(got))
	}
	if got, _ := s.Recall(ctx, store.MemoryQuery{MemoryScope: alice("a"), Text: "zebra"}); len(got) != 0 {
		t.Fatalf("recall zebra = %q, want none", memoryTexts(got))
	}
	if got, _ := s.Recall(ctx, store.MemoryQuery{MemoryScope: alice("a"), Limit: 2}); len(got) != 2 {
		t.Fatalf("limit 2 gave %d", len(got))
	}
	gone, err := s.Forget(ctx, alice("a"), first.ID)
	if err != nil || gone.ID != first.ID {
		t.Fatalf("forget = %+v, %v", gone, err)
	}
	if _, err := s.Forget(ctx, alice("a"), first.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("forget twice: %v, want ErrNotFound", err)
	}
	if got, _ := s.Recall(ctx, store.MemoryQuery{MemoryScope: alice("a"), Text: "teal"}); len(got) != 0 {
		t.Fatalf("a forgotten memory is recalled: %q", memoryTexts(got))
	}
	for _, bad := range []store.Memory{{Agent: "a", Text: " "}, {Agent: "", Text: "x"}, {Agent: "a", Text: strings.Repeat("x", store.MaxMemoryBytes+1)}, {Agent: "a", Text: "x", Tags: []string{""}}} {
		if _, err := s.Remember(ctx, bad, "bad"); err == nil {
			t.Fatalf("remember %+v: no error", bad)
		}
	}
}

// testMemoryScopes: one principal's memories never reach another's
// scope, shared ones reach every principal of the agent, and no other
// agent's scope.
func testMemoryScopes(t *testing.T, s store.Store) {
	ctx := context.Background()
	put := func(agent, owner, text, key string) store.Memory {
		m, err := s.Remember(ctx, store.Memory{Agent: agent, Owner: owner, Text: text}, key)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	a := put("a", "alice", "alice secret plan", "1")
	b := put("a", "bob", "bob secret plan", "2")
	sh := put("a", "", "team secret plan", "3")
	put("other", "alice", "other agent secret plan", "4")
	bob := store.MemoryScope{Agent: "a", Owners: []string{"bob", ""}}
	got, err := s.Recall(ctx, store.MemoryQuery{MemoryScope: bob, Text: "secret plan", Limit: 50})
	if err != nil {
		t.Fatal(err)
	}
	if ts := memoryTexts(got); len(ts) != 2 || slices.Contains(ts, "alice secret plan") || slices.Contains(ts, "other agent secret plan") {
		t.Fatalf("bob recalls %q, want his and the shared one", ts)
	}
	if _, err := s.Forget(ctx, store.MemoryScope{Agent: "a", Owners: []string{"bob"}}, a.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("bob forgot alice's memory: %v", err)
	}
	if _, err := s.Forget(ctx, store.MemoryScope{Agent: "a", Owners: []string{"bob"}}, sh.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a principal-only scope forgot a shared memory: %v", err)
	}
	if got, _ := s.Recall(ctx, store.MemoryQuery{MemoryScope: store.MemoryScope{Agent: "a"}}); len(got) != 0 {
		t.Fatalf("an empty scope recalls %q", memoryTexts(got))
	}
	if got, _ := s.Recall(ctx, store.MemoryQuery{MemoryScope: store.MemoryScope{All: true}, Limit: 50}); len(got) != 4 {
		t.Fatalf("all scopes recall %d, want 4", len(got))
	}
	if _, err := s.Forget(ctx, bob, b.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Forget(ctx, bob, sh.ID); err != nil {
		t.Fatal(err)
	}
}

// testMemorySearchSyntax: a query is words, never the driver's syntax.
func testMemorySearchSyntax(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, err := s.Remember(ctx, store.Memory{Agent: "a", Owner: "alice", Text: "the build uses Go 1.25"}, "k"); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`"`, `build" OR "x`, `NEAR(build)`, `build & !go | (`, `'; DROP TABLE x; --`, `*`, `build:*`, `ビルド build`} {
		got, err := s.Recall(ctx, store.MemoryQuery{MemoryScope: alice("a"), Text: q})
		if err != nil {
			t.Fatalf("recall %q: %v", q, err)
		}
		if strings.Contains(q, "build") && len(got) != 1 {
			t.Fatalf("recall %q = %q, want the build memory", q, memoryTexts(got))
		}
	}
}
