// Package storetest is a conformance suite for store.Store drivers: every
// driver's test calls Run with a function opening a fresh, empty store.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/transcript"
)

// Run runs the conformance suite. open is called once per case and must
// return a new, empty store; Run closes it when the case ends (open may
// register further cleanup, such as deleting the database, with t.Cleanup).
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	t.Helper()
	cases := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"RoundTrip", testRoundTrip},
		{"LargeEntry", testLargeEntry},
		{"IdempotentAppend", testIdempotentAppend},
		{"OrderAcrossAppends", testOrderAcrossAppends},
		{"Branch", testBranch},
		{"BranchEmptyLeaf", testBranchEmptyLeaf},
		{"BranchCycle", testBranchCycle},
		{"NotFound", testNotFound},
		{"NewSession", testNewSession},
		{"SessionIsolation", testSessionIsolation},
		{"Sessions", testSessions},
		{"ListSessions", testListSessions},
		{"ListSessionsOfAnAgent", testListSessionsOfAnAgent},
		{"ConcurrentAppends", testConcurrentAppends},
		{"OddSessionIDs", testOddSessionIDs},
		{"InvalidAppend", testInvalidAppend},
		{"BranchMissingParent", testBranchMissingParent},
		{"TurnRecords", testTurnRecords},
		{"TurnRecordIsolation", testTurnRecordIsolation},
		{"TurnRecordReplaces", testTurnRecordReplaces},
		{"Heads", testHeads},
		{"SessionOwners", testSessionOwners},
		{"Replies", testReplies},
		{"DeleteSession", testDeleteSession},
		{"Memories", testMemories},
		{"MemoryScopes", testMemoryScopes},
		{"MemorySearchSyntax", testMemorySearchSyntax},
		{"ReadsAreCopies", testReadsAreCopies},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := open(t)
			if s == nil {
				t.Fatal("open returned a nil store")
			}
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			c.fn(t, s)
		})
	}
}

// base is the timestamp test entries are built from.
var base = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)

func at(sec int) time.Time { return base.Add(time.Duration(sec) * time.Second) }

// msg builds a user message entry.
func msg(id, parent, text string) transcript.Entry {
	return transcript.Entry{
		ID: id, ParentID: parent, Type: transcript.TypeMessage, Time: at(len(id)),
		Message: &transcript.Message{Role: transcript.RoleUser, Text: text},
	}
}

// fullEntries exercises every Entry field, as a chain of parent links.
func fullEntries() []transcript.Entry {
	return []transcript.Entry{
		{
			ID: "u1", Type: transcript.TypeMessage, Time: at(0),
			Message: &transcript.Message{
				Role: transcript.RoleUser, Text: "What is in this picture? «ünïcode» 🚀",
				Images: []transcript.Image{
					{MimeType: "image/png", Data: "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="},
					{MimeType: "image/jpeg", Data: "/9j/4AAQSkZJRgABAQ=="},
				},
				Source: "http",
			},
		},
		{
			ID: "a1", ParentID: "u1", Type: transcript.TypeMessage, Time: at(1),
			Message: &transcript.Message{
				Role: transcript.RoleAssistant, Text: "Let me look.", Thinking: "The user wants a description.",
				ToolCalls: []transcript.ToolCall{
					{ID: "call_1", Name: "read", Args: json.RawMessage(`{"path":"a.go","limit":10}`)},
					{ID: "call_2", Name: "bash", Args: json.RawMessage(`{"command":"ls -la","env":["A=1"]}`)},
				},
				Model: "provider/model-x", StopReason: transcript.StopToolUse,
				Usage:        &transcript.Usage{Input: 1200, Output: 34, Total: 1234},
				ErrorMessage: "partial: upstream hiccup",
			},
		},
		{
			ID: "t1", ParentID: "a1", Type: transcript.TypeMessage, Time: at(2),
			Message: &transcript.Message{
				Role: transcript.RoleToolResult, Text: "package main\n", ToolCallID: "call_1", ToolName: "read",
				IsError: true, Details: json.RawMessage(`{"exitCode":1,"lines":[1,2,3],"nested":{"ok":false,"v":null}}`),
			},
		},
		{
			ID: "c1", ParentID: "t1", Type: transcript.TypeCompaction, Time: at(3),
			Compaction: &transcript.Compaction{Summary: "The user asked about a picture.", FirstKeptEntryID: "a1", TokensBefore: 98765},
		},
		{
			ID: "x1", ParentID: "c1", Type: transcript.TypeCustom, Time: at(4),
			Custom: &transcript.Custom{Kind: "toolActivation", Data: json.RawMessage(`{"tools":["read","bash"],"by":"user"}`)},
		},
		{
			ID: "x2", ParentID: "x1", Type: transcript.TypeCustom, Time: at(5),
			Custom: &transcript.Custom{Kind: "approval"},
		},
	}
}

func testRoundTrip(t *testing.T, s store.Store) {
	ctx := context.Background()
	want := fullEntries()
	if err := s.Append(ctx, "sess", want...); err != nil {
		t.Fatalf("Append: %v", err)
	}
	for _, w := range want {
		t.Run(w.ID, func(t *testing.T) {
			got, err := s.Get(ctx, "sess", w.ID)
			if err != nil {
				t.Fatalf("Get(%q): %v", w.ID, err)
			}
			if d := diffEntry(w, got); d != "" {
				t.Errorf("Get(%q) mismatch:\n%s", w.ID, d)
			}
		})
	}
	all := mustEntries(t, s, "sess")
	assertEntries(t, "Entries", want, all)
	if leaf := mustLeaf(t, s, "sess"); leaf != "x2" {
		t.Errorf("Leaf = %q, want %q", leaf, "x2")
	}
	branch, err := s.Branch(ctx, "sess", "x2")
	if err != nil {
		t.Fatalf("Branch: %v", err)
	}
	assertEntries(t, "Branch", want, branch)
}

func testLargeEntry(t *testing.T, s store.Store) {
	ctx := context.Background()
	big := strings.Repeat("QUJDRA==", 1<<17) // 1 MiB of base64
	e := transcript.Entry{
		ID: "big", Type: transcript.TypeMessage, Time: at(0),
		Message: &transcript.Message{Role: transcript.RoleUser, Images: []transcript.Image{{MimeType: "image/png", Data: big}}},
	}
	if err := s.Append(ctx, "sess", e); err != nil {
		t.Fatalf("Append: %v", err)
	}
	got, err := s.Get(ctx, "sess", "big")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if got.Message == nil || len(got.Message.Images) != 1 || got.Message.Images[0].Data != big {
		t.Fatalf("large image did not round-trip (got %d images)", imageCount(got))
	}
}

func imageCount(e transcript.Entry) int {
	if e.Message == nil {
		return -1
	}
	return len(e.Message.Images)
}

func testIdempotentAppend(t *testing.T, s store.Store) {
	ctx := context.Background()
	first := msg("e1", "", "first")
	if err := s.Append(ctx, "sess", first, msg("e2", "e1", "two")); err != nil {
		t.Fatalf("Append: %v", err)
	}
	// A retried append of e1 with different content: the first write wins.
	if err := s.Append(ctx, "sess", msg("e1", "", "second")); err != nil {
		t.Fatalf("re-Append: %v", err)
	}
	got, err := s.Get(ctx, "sess", "e1")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if d := diffEntry(first, got); d != "" {
		t.Errorf("after duplicate append, Get(e1) is not the first write:\n%s", d)
	}
	if leaf := mustLeaf(t, s, "sess"); leaf != "e2" {
		t.Errorf("duplicate append moved Leaf to %q, want %q", leaf, "e2")
	}
	// A retried batch: the known entries are skipped, the new one is added.
	if err := s.Append(ctx, "sess", msg("e1", "", "third"), msg("e2", "e1", "x"), msg("e3", "e2", "three")); err != nil {
		t.Fatalf("retried batch: %v", err)
	}
	// Duplicates inside one call: the first occurrence wins.
	if err := s.Append(ctx, "sess", msg("e4", "e3", "four"), msg("e4", "e3", "FOUR")); err != nil {
		t.Fatalf("batch with duplicate: %v", err)
	}
	want := []transcript.Entry{first, msg("e2", "e1", "two"), msg("e3", "e2", "three"), msg("e4", "e3", "four")}
	assertEntries(t, "Entries", want, mustEntries(t, s, "sess"))
	if leaf := mustLeaf(t, s, "sess"); leaf != "e4" {
		t.Errorf("Leaf = %q, want e4", leaf)
	}
}

func testOrderAcrossAppends(t *testing.T, s store.Store) {
	ctx := context.Background()
	// IDs deliberately out of lexical order: append order must win.
	batches := [][]string{{"m"}, {"c", "z", "a"}, {"q", "b"}, {"y"}, {"d", "x", "e", "w"}}
	var want []transcript.Entry
	parent := ""
	for _, b := range batches {
		var es []transcript.Entry
		for _, id := range b {
			e := msg(id, parent, "text "+id)
			es = append(es, e)
			parent = id
		}
		if err := s.Append(ctx, "sess", es...); err != nil {
			t.Fatalf("Append(%v): %v", b, err)
		}
		want = append(want, es...)
		if leaf := mustLeaf(t, s, "sess"); leaf != parent {
			t.Errorf("after Append(%v): Leaf = %q, want %q", b, leaf, parent)
		}
	}
	assertEntries(t, "Entries", want, mustEntries(t, s, "sess"))
}

func testBranch(t *testing.T, s store.Store) {
	ctx := context.Background()
	//   r ─ a ─ b ─ c
	//   │    └─ x ─ y
	//   └─ z
	byID := map[string]transcript.Entry{}
	order := []transcript.Entry{
		msg("r", "", "root"), msg("a", "r", "A"), msg("b", "a", "B"), msg("x", "a", "X"),
		msg("c", "b", "C"), msg("y", "x", "Y"), msg("z", "r", "Z"),
	}
	for _, e := range order {
		byID[e.ID] = e
		if err := s.Append(ctx, "sess", e); err != nil {
			t.Fatalf("Append(%s): %v", e.ID, err)
		}
	}
	// Noise in another session with the same IDs but other parents.
	if err := s.Append(ctx, "other", msg("c", "", "other c"), msg("b", "c", "other b")); err != nil {
		t.Fatalf("Append(other): %v", err)
	}
	cases := []struct {
		leaf string
		want []string
	}{
		{"c", []string{"r", "a", "b", "c"}},
		{"y", []string{"r", "a", "x", "y"}},
		{"b", []string{"r", "a", "b"}},
		{"z", []string{"r", "z"}},
		{"r", []string{"r"}},
	}
	for _, c := range cases {
		t.Run(c.leaf, func(t *testing.T) {
			got, err := s.Branch(ctx, "sess", c.leaf)
			if err != nil {
				t.Fatalf("Branch(%q): %v", c.leaf, err)
			}
			var want []transcript.Entry
			for _, id := range c.want {
				want = append(want, byID[id])
			}
			assertEntries(t, "Branch("+c.leaf+")", want, got)
		})
	}
}

func testBranchEmptyLeaf(t *testing.T, s store.Store) {
	ctx := context.Background()
	for _, setup := range []bool{false, true} {
		if setup {
			if err := s.Append(ctx, "sess", msg("r", "", "root")); err != nil {
				t.Fatalf("Append: %v", err)
			}
		}
		got, err := s.Branch(ctx, "sess", "")
		if err != nil {
			t.Fatalf("Branch(\"\") (session populated: %v): %v", setup, err)
		}
		if len(got) != 0 {
			t.Errorf("Branch(\"\") (session populated: %v) = %v, want empty", setup, ids(got))
		}
	}
}

func testBranchCycle(t *testing.T, s store.Store) {
	ctx := context.Background()
	// Corrupt parent links (p ⇄ q) must not make Branch loop forever.
	if err := s.Append(ctx, "sess", msg("p", "q", "P"), msg("q", "p", "Q"), msg("leaf", "q", "L")); err != nil {
		t.Fatalf("Append: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Branch(ctx, "sess", "leaf")
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || errors.Is(err, store.ErrNotFound) {
			t.Errorf("Branch over a parent cycle: err = %v, want a cycle error", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Branch over a parent cycle did not return within 30s")
	}
}

func testNotFound(t *testing.T, s store.Store) {
	ctx := context.Background()
	if err := s.Append(ctx, "sess", msg("r", "", "root")); err != nil {
		t.Fatalf("Append: %v", err)
	}
	cases := []struct {
		name string
		call func() error
	}{
		{"Get unknown id", func() error { _, err := s.Get(ctx, "sess", "nope"); return err }},
		{"Get unknown session", func() error { _, err := s.Get(ctx, "nosuch", "r"); return err }},
		{"Branch unknown id", func() error { _, err := s.Branch(ctx, "sess", "nope"); return err }},
		{"Branch unknown session", func() error { _, err := s.Branch(ctx, "nosuch", "r"); return err }},
	}
	for _, c := range cases {
		err := c.call()
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s: err = %v, want ErrNotFound", c.name, err)
		}
	}
}

func testNewSession(t *testing.T, s store.Store) {
	ctx := context.Background()
	leaf, err := s.Leaf(ctx, "fresh")
	if err != nil || leaf != "" {
		t.Errorf("Leaf(new session) = %q, %v; want \"\", nil", leaf, err)
	}
	es, err := s.Entries(ctx, "fresh")
	if err != nil || len(es) != 0 {
		t.Errorf("Entries(new session) = %v, %v; want empty, nil", ids(es), err)
	}
	list, err := s.Sessions(ctx)
	if err != nil || len(list) != 0 {
		t.Errorf("Sessions(empty store) = %+v, %v; want empty, nil", list, err)
	}
}

func testSessionIsolation(t *testing.T, s store.Store) {
	ctx := context.Background()
	one := []transcript.Entry{msg("e1", "", "one"), msg("e2", "e1", "one-2")}
	two := []transcript.Entry{msg("e1", "", "two"), msg("e3", "e2", "two-3")} // e2 exists only in s1
	if err := s.Append(ctx, "s1", one...); err != nil {
		t.Fatalf("Append(s1): %v", err)
	}
	if err := s.Append(ctx, "s2", two...); err != nil {
		t.Fatalf("Append(s2): %v", err)
	}
	for _, c := range []struct {
		session string
		want    []transcript.Entry
	}{{"s1", one}, {"s2", two}} {
		got, err := s.Get(ctx, c.session, "e1")
		if err != nil {
			t.Fatalf("Get(%s, e1): %v", c.session, err)
		}
		if d := diffEntry(c.want[0], got); d != "" {
			t.Errorf("Get(%s, e1):\n%s", c.session, d)
		}
		assertEntries(t, "Entries("+c.session+")", c.want, mustEntries(t, s, c.session))
		if leaf := mustLeaf(t, s, c.session); leaf != c.want[1].ID {
			t.Errorf("Leaf(%s) = %q, want %q", c.session, leaf, c.want[1].ID)
		}
	}
	if _, err := s.Get(ctx, "s2", "e2"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get(s2, e2) err = %v, want ErrNotFound (e2 belongs to s1)", err)
	}
	// Parent links do not cross sessions: e3's parent e2 is not in s2, so
	// the walk is broken (never a silently shorter branch, never s1's e2).
	if br, err := s.Branch(ctx, "s2", "e3"); !errors.Is(err, store.ErrBrokenBranch) {
		t.Errorf("Branch(s2, e3) = %v, %v; want ErrBrokenBranch", ids(br), err)
	}
}

func testSessions(t *testing.T, s store.Store) {
	ctx := context.Background()
	start := time.Now()
	steps := []struct {
		session string
		ids     []string
	}{
		{"s1", []string{"a", "b"}},
		{"s2", []string{"c"}},
		{"s3", []string{"d", "e", "f"}},
		{"s1", []string{"g"}},
	}
	for _, st := range steps {
		var es []transcript.Entry
		for _, id := range st.ids {
			es = append(es, msg(id, "", id))
		}
		if err := s.Append(ctx, st.session, es...); err != nil {
			t.Fatalf("Append(%s): %v", st.session, err)
		}
	}
	list, err := s.Sessions(ctx)
	if err != nil {
		t.Fatalf("Sessions: %v", err)
	}
	want := []store.SessionInfo{
		{Session: "s1", Entries: 3, Leaf: "g"},
		{Session: "s3", Entries: 3, Leaf: "f"},
		{Session: "s2", Entries: 1, Leaf: "c"},
	}
	if len(list) != len(want) {
		t.Fatalf("Sessions = %+v, want %d sessions", list, len(want))
	}
	lo, hi := start.Add(-time.Minute), time.Now().Add(time.Minute)
	for i, w := range want {
		g := list[i]
		if g.Session != w.Session || g.Entries != w.Entries || g.Leaf != w.Leaf {
			t.Errorf("Sessions[%d] = {%q %d %q}, want {%q %d %q}", i, g.Session, g.Entries, g.Leaf, w.Session, w.Entries, w.Leaf)
		}
		if g.Updated.Before(lo) || g.Updated.After(hi) {
			t.Errorf("Sessions[%d].Updated = %v, want between %v and %v", i, g.Updated, lo, hi)
		}
	}
}

func testConcurrentAppends(t *testing.T, s store.Store) {
	ctx := context.Background()
	const workers, rounds = 8, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				// Each worker adds its own entry plus a shared one that
				// every worker also appends (a retried append racing).
				own := msg(fmt.Sprintf("w%d-%02d", w, i), "", "own")
				shared := msg(fmt.Sprintf("shared-%02d", i), "", "shared")
				if err := s.Append(ctx, "sess", own, shared); err != nil {
					errs <- fmt.Errorf("worker %d round %d: %w", w, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got := mustEntries(t, s, "sess")
	seen := map[string]int{}
	for i, e := range got {
		if _, dup := seen[e.ID]; dup {
			t.Errorf("entry %q appears twice", e.ID)
		}
		seen[e.ID] = i
	}
	if want := workers*rounds + rounds; len(got) != want {
		t.Errorf("Entries has %d entries, want %d", len(got), want)
	}
	for w := range workers {
		last := -1
		for i := range rounds {
			id := fmt.Sprintf("w%d-%02d", w, i)
			pos, ok := seen[id]
			if !ok {
				t.Errorf("entry %q lost", id)
				continue
			}
			if pos < last {
				t.Errorf("entry %q at position %d, before its predecessor at %d", id, pos, last)
			}
			last = pos
		}
	}
	for i := range rounds {
		if _, ok := seen[fmt.Sprintf("shared-%02d", i)]; !ok {
			t.Errorf("entry shared-%02d lost", i)
		}
	}
	if leaf := mustLeaf(t, s, "sess"); len(got) > 0 && leaf != got[len(got)-1].ID {
		t.Errorf("Leaf = %q, want the last entry %q", leaf, got[len(got)-1].ID)
	}
}

func testOddSessionIDs(t *testing.T, s store.Store) {
	ctx := context.Background()
	sessions := []string{
		"-1001234567890",
		"slack:T1:C2:1700000000.0001",
		"日本語のセッション 🚀 ünï",
		`quote'"; DROP TABLE entries; --`,
		`path/with\back%slash_and*glob?`,
		" leading and trailing ",
	}
	for i, sess := range sessions {
		es := []transcript.Entry{msg("r", "", sess), msg(fmt.Sprintf("n%d", i), "r", "child of "+sess)}
		if err := s.Append(ctx, sess, es...); err != nil {
			t.Fatalf("Append(%q): %v", sess, err)
		}
	}
	for i, sess := range sessions {
		leafID := fmt.Sprintf("n%d", i)
		want := []transcript.Entry{msg("r", "", sess), msg(leafID, "r", "child of "+sess)}
		assertEntries(t, fmt.Sprintf("Entries(%q)", sess), want, mustEntries(t, s, sess))
		if leaf := mustLeaf(t, s, sess); leaf != leafID {
			t.Errorf("Leaf(%q) = %q, want %q", sess, leaf, leafID)
		}
		br, err := s.Branch(ctx, sess, leafID)
		if err != nil {
			t.Fatalf("Branch(%q): %v", sess, err)
		}
		assertEntries(t, fmt.Sprintf("Branch(%q)", sess), want, br)
	}
	list, err := s.Sessions(ctx)
	if err != nil {
		t.Fatalf("Sessions: %v", err)
	}
	var got []string
	for _, si := range list {
		got = append(got, si.Session)
	}
	var want []string
	for i := len(sessions) - 1; i >= 0; i-- {
		want = append(want, sessions[i])
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Sessions = %q, want %q", got, want)
	}
}

func testInvalidAppend(t *testing.T, s store.Store) {
	ctx := context.Background()
	if err := s.Append(ctx, "", msg("e1", "", "x")); err == nil {
		t.Error("Append to an empty session ID succeeded, want an error")
	}
	if err := s.Append(ctx, "sess", msg("ok", "", "x"), msg("", "ok", "no id")); err == nil {
		t.Error("Append of an entry without ID succeeded, want an error")
	}
	bad := msg("bad", "", "x")
	bad.Message.Details = json.RawMessage(`{not json`)
	if err := s.Append(ctx, "sess", bad); err == nil {
		t.Error("Append of an entry with invalid JSON details succeeded, want an error")
	}
	if err := s.Append(ctx, "sess"); err != nil {
		t.Errorf("Append of no entries: %v", err)
	}
	if es := mustEntries(t, s, "sess"); len(es) != 0 {
		t.Errorf("rejected appends stored %v, want nothing", ids(es))
	}
}

// diffEntry describes how got differs from want ("" when equal). Times are
// compared as instants; everything else must be identical.
func diffEntry(want, got transcript.Entry) string {
	var b strings.Builder
	if !want.Time.Equal(got.Time) {
		fmt.Fprintf(&b, "  Time: got %v, want %v\n", got.Time, want.Time)
	}
	w, g := want, got
	w.Time, g.Time = time.Time{}, time.Time{}
	if !reflect.DeepEqual(w, g) {
		wj, _ := json.Marshal(w)
		gj, _ := json.Marshal(g)
		fmt.Fprintf(&b, "  got  %s\n  want %s\n", gj, wj)
		if string(wj) == string(gj) {
			fmt.Fprintf(&b, "  (same JSON; Go values differ: got %#v, want %#v)\n", g, w)
		}
	}
	return b.String()
}

func assertEntries(t *testing.T, what string, want, got []transcript.Entry) {
	t.Helper()
	if len(want) != len(got) {
		t.Errorf("%s: got %d entries %v, want %d %v", what, len(got), ids(got), len(want), ids(want))
		return
	}
	for i := range want {
		if d := diffEntry(want[i], got[i]); d != "" {
			t.Errorf("%s[%d] (%s):\n%s", what, i, want[i].ID, d)
		}
	}
}

func ids(es []transcript.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

func mustEntries(t *testing.T, s store.Store, session string) []transcript.Entry {
	t.Helper()
	es, err := s.Entries(context.Background(), session)
	if err != nil {
		t.Fatalf("Entries(%q): %v", session, err)
	}
	return es
}

func mustLeaf(t *testing.T, s store.Store, session string) string {
	t.Helper()
	leaf, err := s.Leaf(context.Background(), session)
	if err != nil {
		t.Fatalf("Leaf(%q): %v", session, err)
	}
	return leaf
}

func testBranchMissingParent(t *testing.T, s store.Store) {
	ctx := context.Background()
	// b names parent "gone", which was never stored: a walk from c must not
	// quietly return the shorter path [b c].
	if err := s.Append(ctx, "sess", msg("r", "", "root"), msg("b", "gone", "B"), msg("c", "b", "C")); err != nil {
		t.Fatalf("Append: %v", err)
	}
	for _, leaf := range []string{"c", "b"} {
		got, err := s.Branch(ctx, "sess", leaf)
		if !errors.Is(err, store.ErrBrokenBranch) {
			t.Errorf("Branch(%q) = %v, %v; want ErrBrokenBranch", leaf, ids(got), err)
		} else if !strings.Contains(err.Error(), `"gone"`) {
			t.Errorf("Branch(%q) error %q does not name the missing parent", leaf, err)
		}
	}
	if got, err := s.Branch(ctx, "sess", "r"); err != nil || len(got) != 1 {
		t.Errorf("Branch(r) = %v, %v; want [r]", ids(got), err)
	}
}

func testTurnRecords(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, err := s.LastTurn(ctx, "sess"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("LastTurn of an empty session: err = %v, want ErrNotFound", err)
	}
	rec := func(key, outcome string, sec int) store.TurnRecord {
		return store.TurnRecord{Key: key, Outcome: json.RawMessage(outcome), Finished: at(sec)}
	}
	writes := []struct {
		rec  store.TurnRecord
		last string // LastTurn's key after the write
	}{
		{rec("k1", `{"turn":"k1","leaf":"a"}`, 1), "k1"},
		{rec("k2", `{"turn":"k2","leaf":"b"}`, 2), "k2"},
		// A retried (or conflicting) write of k1 is a no-op: the first wins
		// and k1 does not become the last turn.
		{rec("k1", `{"turn":"k1","leaf":"OTHER"}`, 9), "k2"},
		{rec("k3", `{"turn":"k3","leaf":"c"}`, 3), "k3"},
	}
	for i, w := range writes {
		if err := s.RecordTurn(ctx, "sess", w.rec); err != nil {
			t.Fatalf("write %d: RecordTurn(%s): %v", i, w.rec.Key, err)
		}
		last, err := s.LastTurn(ctx, "sess")
		if err != nil || last.Key != w.last {
			t.Fatalf("write %d: LastTurn = %q, %v; want %q", i, last.Key, err, w.last)
		}
	}
	want := map[string]store.TurnRecord{
		"k1": writes[0].rec, "k2": writes[1].rec, "k3": writes[3].rec,
	}
	for key, w := range want {
		got, err := s.Turn(ctx, "sess", key)
		if err != nil {
			t.Fatalf("Turn(%s): %v", key, err)
		}
		// Postgres keeps microseconds.
		if got.Key != key || got.Finished.Sub(w.Finished).Abs() >= time.Microsecond || !jsonEqual(got.Outcome, w.Outcome) {
			t.Errorf("Turn(%s) = {%s %s %v}, want {%s %s %v}", key, got.Key, got.Outcome, got.Finished, key, w.Outcome, w.Finished)
		}
	}
	if _, err := s.Turn(ctx, "sess", "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Turn(nope): err = %v, want ErrNotFound", err)
	}
	for _, bad := range []struct {
		session string
		rec     store.TurnRecord
	}{
		{"", rec("k", `{}`, 0)},
		{"sess", rec("", `{}`, 0)},
		{"sess", rec("k9", `{not json`, 0)},
	} {
		if err := s.RecordTurn(ctx, bad.session, bad.rec); err == nil {
			t.Errorf("RecordTurn(%q, key %q, %s) succeeded, want an error", bad.session, bad.rec.Key, bad.rec.Outcome)
		}
	}
}

func testTurnRecordIsolation(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := store.TurnRecord{Key: "k", Outcome: json.RawMessage(`{"leaf":"a"}`), Finished: at(1)}
	b := store.TurnRecord{Key: "k", Outcome: json.RawMessage(`{"leaf":"b"}`), Finished: at(2)}
	if err := s.RecordTurn(ctx, "A", a); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordTurn(ctx, "B", b); err != nil {
		t.Fatal(err)
	}
	for session, w := range map[string]store.TurnRecord{"A": a, "B": b} {
		got, err := s.Turn(ctx, session, "k")
		if err != nil || !jsonEqual(got.Outcome, w.Outcome) {
			t.Errorf("Turn(%s, k) = %s, %v; want %s", session, got.Outcome, err, w.Outcome)
		}
		last, err := s.LastTurn(ctx, session)
		if err != nil || !jsonEqual(last.Outcome, w.Outcome) {
			t.Errorf("LastTurn(%s) = %s, %v; want %s", session, last.Outcome, err, w.Outcome)
		}
	}
}

// testTurnRecordReplaces: a record with Replaces replaces a stored record
// of its key that finished before Replaces (a key run again after its
// idempotency window), becomes the last turn, and a retry of it, or a record
// whose Replaces is not after the stored one's end, changes nothing.
func testTurnRecordReplaces(t *testing.T, s store.Store) {
	ctx := context.Background()
	old := store.TurnRecord{Key: "k", Outcome: json.RawMessage(`{"leaf":"old"}`), Finished: at(1)}
	other := store.TurnRecord{Key: "j", Outcome: json.RawMessage(`{"leaf":"j"}`), Finished: at(2)}
	again := store.TurnRecord{Key: "k", Outcome: json.RawMessage(`{"leaf":"new"}`), Finished: at(20), Replaces: at(10)}
	early := store.TurnRecord{Key: "k", Outcome: json.RawMessage(`{"leaf":"early"}`), Finished: at(30), Replaces: at(15)}
	for _, r := range []store.TurnRecord{old, other, again, again, early} {
		if err := s.RecordTurn(ctx, "sess", r); err != nil {
			t.Fatalf("RecordTurn(%s %s): %v", r.Key, r.Outcome, err)
		}
	}
	got, err := s.Turn(ctx, "sess", "k")
	if err != nil || !jsonEqual(got.Outcome, again.Outcome) || got.Finished.Sub(again.Finished).Abs() >= time.Microsecond {
		t.Errorf("Turn(k) = %s at %v, %v; want %s at %v", got.Outcome, got.Finished, err, again.Outcome, again.Finished)
	}
	if last, err := s.LastTurn(ctx, "sess"); err != nil || last.Key != "k" {
		t.Errorf("LastTurn = %q, %v; want the replacement k", last.Key, err)
	}
	// Without Replaces the first write still wins.
	if err := s.RecordTurn(ctx, "sess", store.TurnRecord{Key: "j", Outcome: json.RawMessage(`{"leaf":"x"}`), Finished: at(40)}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Turn(ctx, "sess", "j"); err != nil || !jsonEqual(got.Outcome, other.Outcome) {
		t.Errorf("Turn(j) = %s, %v; want %s", got.Outcome, err, other.Outcome)
	}
}

// testHeads: SetHead records a session's head, the last write wins, sessions
// are apart, and a session without one is ErrNotFound.
func testHeads(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, err := s.Head(ctx, "A"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Head(A) before any: err = %v, want ErrNotFound", err)
	}
	for _, w := range []struct{ session, leaf string }{{"A", "a1"}, {"B", "b1"}, {"A", "a2"}} {
		if err := s.SetHead(ctx, w.session, w.leaf); err != nil {
			t.Fatalf("SetHead(%s, %s): %v", w.session, w.leaf, err)
		}
	}
	for session, want := range map[string]string{"A": "a2", "B": "b1"} {
		if got, err := s.Head(ctx, session); err != nil || got != want {
			t.Errorf("Head(%s) = %q, %v; want %q", session, got, err, want)
		}
	}
	if err := s.SetHead(ctx, "A", ""); err == nil {
		t.Error("SetHead with an empty leaf succeeded")
	}
	if err := s.SetHead(ctx, "", "x"); err == nil {
		t.Error("SetHead with an empty session succeeded")
	}
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

func testSessionOwners(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, err := s.SessionOwner(ctx, "A"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SessionOwner of an unclaimed session: %v, want ErrNotFound", err)
	}
	// Racing claims: exactly one principal wins and every claimant learns who.
	var wg sync.WaitGroup
	got := make([]string, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, err := s.ClaimSession(ctx, "A", fmt.Sprintf("p%d", i))
			if err != nil {
				t.Errorf("ClaimSession: %v", err)
			}
			got[i] = o
		}()
	}
	wg.Wait()
	for _, o := range got {
		if o != got[0] || o == "" {
			t.Fatalf("claimants disagree on the owner: %v", got)
		}
	}
	if o, err := s.SessionOwner(ctx, "A"); err != nil || o != got[0] {
		t.Errorf("SessionOwner(A) = %q, %v; want %q", o, err, got[0])
	}
	if o, err := s.ClaimSession(ctx, "B", "bob"); err != nil || o != "bob" {
		t.Errorf("ClaimSession(B, bob) = %q, %v", o, err)
	}
	if o, _ := s.SessionOwner(ctx, "A"); o != got[0] {
		t.Errorf("claiming B changed A's owner to %q", o)
	}
	for _, bad := range [][2]string{{"", "p"}, {"C", ""}} {
		if _, err := s.ClaimSession(ctx, bad[0], bad[1]); err == nil {
			t.Errorf("ClaimSession(%q, %q) succeeded, want an error", bad[0], bad[1])
		}
	}
}

func testReplies(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, err := s.Reply(ctx, "A", "t1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Reply before any save: %v, want ErrNotFound", err)
	}
	steps := []struct {
		session, turn, ref string
		want               string
	}{
		{"A", "t1", "C1:100.1", "C1:100.1"},
		{"A", "t1", "C1:999.9", "C1:100.1"}, // first write wins
		{"A", "t2", "C1:200.2", "C1:200.2"},
		{"B", "t1", "C2:300.3", "C2:300.3"}, // sessions are separate
	}
	for _, st := range steps {
		if err := s.SaveReply(ctx, st.session, st.turn, st.ref); err != nil {
			t.Fatalf("SaveReply(%q, %q, %q): %v", st.session, st.turn, st.ref, err)
		}
		if got, err := s.Reply(ctx, st.session, st.turn); err != nil || got != st.want {
			t.Errorf("Reply(%q, %q) = %q, %v; want %q", st.session, st.turn, got, err, st.want)
		}
	}
	if got, _ := s.Reply(ctx, "A", "t1"); got != "C1:100.1" {
		t.Errorf("Reply(A, t1) = %q after other saves, want C1:100.1", got)
	}
	for _, bad := range [][3]string{{"", "t", "r"}, {"A", "", "r"}, {"A", "t", ""}} {
		if err := s.SaveReply(ctx, bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("SaveReply(%q, %q, %q) succeeded, want an error", bad[0], bad[1], bad[2])
		}
	}
}

func testListSessions(t *testing.T, s store.Store) {
	ctx := context.Background()
	seedSessions(t, s)
	ids := func(list []store.SessionInfo) string {
		var out []string
		for _, si := range list {
			out = append(out, si.Session)
		}
		return strings.Join(out, ",")
	}
	cases := []struct {
		name string
		q    store.SessionQuery
		want string
	}{
		{"all in one page", store.SessionQuery{}, "s5,s4,s3,s2,s1"},
		{"pages of two", store.SessionQuery{Limit: 2}, "s5,s4,s3,s2,s1"},
		{"exact pages", store.SessionQuery{Limit: 5}, "s5,s4,s3,s2,s1"},
		{"owner", store.SessionQuery{Owner: "alice"}, "s5,s3,s1"},
		{"owner in pages of one", store.SessionQuery{Owner: "alice", Limit: 1}, "s5,s3,s1"},
		{"nobody's", store.SessionQuery{Owner: "bob"}, ""},
	}
	for _, c := range cases {
		if got := ids(walkSessions(t, s, c.q)); got != c.want {
			t.Errorf("%s: sessions %q, want %q", c.name, got, c.want)
		}
	}
	p, err := s.ListSessions(ctx, store.SessionQuery{Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	if p.NextCursor != "" {
		t.Errorf("a last full page has cursor %q, want none", p.NextCursor)
	}
	for _, si := range p.Sessions {
		wantOwner, wantTurns := "", 0
		if n := si.Session[1] - '0'; n%2 == 1 {
			wantOwner = "alice"
		}
		if si.Session == "s2" {
			wantTurns = 2
		}
		if si.Owner != wantOwner || si.Turns != wantTurns || si.Entries != 2 || si.Leaf != si.Session+"-b" {
			t.Errorf("%s: %+v, want owner %q, %d turns, 2 entries, leaf %s-b", si.Session, si, wantOwner, wantTurns, si.Session)
		}
	}
	for _, q := range []store.SessionQuery{{Cursor: "not a cursor!"}, {Limit: -1}, {Limit: store.MaxSessionPage + 1}} {
		if _, err := s.ListSessions(ctx, q); err == nil {
			t.Errorf("ListSessions(%+v) = nil error, want one", q)
		}
	}
}

// testListSessionsOfAnAgent lists the sessions under a prefix, and all
// but those under some prefixes: how a deployment of several agents lists
// each one's. A prefix is literal text (no LIKE wildcards).
func testListSessionsOfAnAgent(t *testing.T, s store.Store) {
	ctx := context.Background()
	for _, id := range []string{"a", "rev/x", "rev2/z", "ops/w", "a/b", "r%v/q", "rev/y"} {
		if err := s.Append(ctx, id, msg(id+"-a", "", "a")); err != nil {
			t.Fatalf("Append(%s): %v", id, err)
		}
	}
	cases := []struct {
		name string
		q    store.SessionQuery
		want string
	}{
		{"one agent's", store.SessionQuery{Prefix: "rev/"}, "rev/y,rev/x"},
		{"in pages of one", store.SessionQuery{Prefix: "rev/", Limit: 1}, "rev/y,rev/x"},
		{"literal prefix", store.SessionQuery{Prefix: "r%v/"}, "r%v/q"},
		{"the main agent's", store.SessionQuery{Exclude: []string{"rev/", "ops/", "r%v/"}}, "a/b,rev2/z,a"},
		{"the main agent's in pages of two", store.SessionQuery{Exclude: []string{"rev/", "ops/", "r%v/"}, Limit: 2}, "a/b,rev2/z,a"},
		{"none", store.SessionQuery{Prefix: "nobody/"}, ""},
	}
	for _, c := range cases {
		var got []string
		for _, si := range walkSessions(t, s, c.q) {
			got = append(got, si.Session)
		}
		if strings.Join(got, ",") != c.want {
			t.Errorf("%s: sessions %q, want %q", c.name, strings.Join(got, ","), c.want)
		}
	}
	if _, err := s.ListSessions(ctx, store.SessionQuery{Exclude: []string{""}}); err == nil {
		t.Error("excluding the empty prefix (everything) = nil error, want one")
	}
}

// seedSessions appends s1..s5 in order (s5 newest); alice owns s1, s3,
// s5; s2 has two recorded turns.
func seedSessions(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	for i := 1; i <= 5; i++ {
		id := fmt.Sprintf("s%d", i)
		if err := s.Append(ctx, id, msg(id+"-a", "", "a"), msg(id+"-b", id+"-a", "b")); err != nil {
			t.Fatalf("Append(%s): %v", id, err)
		}
		if i%2 == 1 {
			if _, err := s.ClaimSession(ctx, id, "alice"); err != nil {
				t.Fatalf("ClaimSession(%s): %v", id, err)
			}
		}
	}
	for _, k := range []string{"k1", "k2"} {
		if err := s.RecordTurn(ctx, "s2", store.TurnRecord{Key: k, Outcome: json.RawMessage(`{}`), Finished: base}); err != nil {
			t.Fatalf("RecordTurn: %v", err)
		}
	}
}

// walkSessions lists the sessions of q page by page (at most a dozen
// pages), checking each page keeps to the limit.
func walkSessions(t *testing.T, s store.Store, q store.SessionQuery) []store.SessionInfo {
	t.Helper()
	var all []store.SessionInfo
	for pages := 0; ; pages++ {
		p, err := s.ListSessions(context.Background(), q)
		if err != nil {
			t.Fatalf("ListSessions(%+v): %v", q, err)
		}
		if q.Limit > 0 && len(p.Sessions) > q.Limit {
			t.Fatalf("ListSessions(%+v) returned %d sessions, over the limit", q, len(p.Sessions))
		}
		all = append(all, p.Sessions...)
		if p.NextCursor == "" || pages > 10 {
			return all
		}
		q.Cursor = p.NextCursor
	}
}

// testDeleteSession: DeleteSession removes a session's entries, turn
// records, replies and head, keeps its owner, and removes nothing of
// another session whose ID merely starts the same; SubSessions lists the
// "<session>/…" ones.
func testDeleteSession(t *testing.T, s store.Store) {
	ctx := context.Background()
	seed := func(session string) {
		t.Helper()
		if err := s.Append(ctx, session, fullEntries()...); err != nil {
			t.Fatalf("Append(%s): %v", session, err)
		}
		rec := store.TurnRecord{Key: "k1", Outcome: json.RawMessage(`{"status":"completed"}`), Finished: at(9)}
		if err := s.RecordTurn(ctx, session, rec); err != nil {
			t.Fatalf("RecordTurn(%s): %v", session, err)
		}
		if err := s.SaveReply(ctx, session, "k1", "C1:1.0"); err != nil {
			t.Fatalf("SaveReply(%s): %v", session, err)
		}
		if err := s.SetHead(ctx, session, mustLeaf(t, s, session)); err != nil { //nolint:contextcheck // a test helper with its own context
			t.Fatalf("SetHead(%s): %v", session, err)
		}
		if _, err := s.ClaimSession(ctx, session, "alice"); err != nil {
			t.Fatalf("ClaimSession(%s): %v", session, err)
		}
	}
	for _, session := range []string{"A", "A/delegate-0123456789abcdef", "AB", "A/x/y"} {
		seed(session)
	}
	subs, err := s.SubSessions(ctx, "A")
	if err != nil {
		t.Fatalf("SubSessions(A): %v", err)
	}
	if want := []string{"A/delegate-0123456789abcdef", "A/x/y"}; !slices.Equal(subs, want) {
		t.Errorf("SubSessions(A) = %q, want %q", subs, want)
	}
	n, err := s.DeleteSession(ctx, "A")
	if err != nil {
		t.Fatalf("DeleteSession(A): %v", err)
	}
	if want := int64(len(fullEntries())); n != want {
		t.Errorf("DeleteSession(A) removed %d entries, want %d", n, want)
	}
	checkSessionGone(t, s, "A")
	if o, err := s.SessionOwner(ctx, "A"); err != nil || o != "alice" {
		t.Errorf("SessionOwner(A) after delete = %q, %v; want alice (the ID stays its owner's)", o, err)
	}
	for _, other := range []string{"AB", "A/delegate-0123456789abcdef", "A/x/y"} {
		if es := mustEntries(t, s, other); len(es) != len(fullEntries()) {
			t.Errorf("deleting A left %s with %d entries, want %d", other, len(es), len(fullEntries()))
		}
		if o, err := s.SessionOwner(ctx, other); err != nil || o != "alice" {
			t.Errorf("deleting A changed %s's owner: %q, %v", other, o, err)
		}
	}
	page, err := s.ListSessions(ctx, store.SessionQuery{})
	if err != nil {
		t.Fatalf("ListSessions: %v", err)
	}
	for _, si := range page.Sessions {
		if si.Session == "A" {
			t.Errorf("ListSessions still lists A after delete: %+v", si)
		}
	}
	if n, err := s.DeleteSession(ctx, "A"); err != nil || n != 0 {
		t.Errorf("DeleteSession(A) again = %d, %v; want 0, nil", n, err)
	}
	if _, err := s.DeleteSession(ctx, ""); err == nil {
		t.Error("DeleteSession with an empty session succeeded")
	}
}

// checkSessionGone: nothing of session is left to read after DeleteSession.
func checkSessionGone(t *testing.T, s store.Store, session string) {
	t.Helper()
	ctx := context.Background()
	if es := mustEntries(t, s, session); len(es) != 0 {
		t.Errorf("%s still holds %d entries", session, len(es))
	}
	for _, e := range fullEntries() {
		if _, err := s.Get(ctx, session, e.ID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Get(%s, %s) after delete: %v, want ErrNotFound", session, e.ID, err)
		}
	}
	if l := mustLeaf(t, s, session); l != "" {
		t.Errorf("%s's leaf = %q after delete", session, l)
	}
	if _, err := s.Turn(ctx, session, "k1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("%s(%s) after delete: %v, want ErrNotFound", "Turn", session, err)
	}
	if _, err := s.LastTurn(ctx, session); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("%s(%s) after delete: %v, want ErrNotFound", "LastTurn", session, err)
	}
	if _, err := s.Reply(ctx, session, "k1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("%s(%s) after delete: %v, want ErrNotFound", "Reply", session, err)
	}
	if _, err := s.Head(ctx, session); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("%s(%s) after delete: %v, want ErrNotFound", "Head", session, err)
	}
}

// testReadsAreCopies: what Get and Branch return is the caller's to change;
// a later read still returns what was stored.
func testReadsAreCopies(t *testing.T, s store.Store) {
	ctx := context.Background()
	want := fullEntries()
	if err := s.Append(ctx, "sess", want...); err != nil {
		t.Fatalf("Append: %v", err)
	}
	spoil := func(e *transcript.Entry) {
		if m := e.Message; m != nil {
			m.Text = "spoiled"
			if len(m.ToolCalls) > 0 {
				m.ToolCalls[0].Name = "spoiled"
			}
			if len(m.Images) > 0 {
				m.Images[0].Data = "spoiled"
			}
			if m.Usage != nil {
				m.Usage.Input = -1
			}
		}
		if e.Compaction != nil {
			e.Compaction.Summary = "spoiled"
		}
		if e.Custom != nil {
			e.Custom.Kind = "spoiled"
		}
		e.ParentID = "spoiled"
	}
	leaf := want[len(want)-1].ID
	for range 2 { // the first reads may come from the database, the second from memory
		b, err := s.Branch(ctx, "sess", leaf)
		if err != nil {
			t.Fatalf("Branch: %v", err)
		}
		for i := range b {
			spoil(&b[i])
		}
		for _, w := range want {
			e, err := s.Get(ctx, "sess", w.ID)
			if err != nil {
				t.Fatalf("Get(%s): %v", w.ID, err)
			}
			spoil(&e)
		}
	}
	got, err := s.Branch(ctx, "sess", leaf)
	if err != nil {
		t.Fatalf("Branch: %v", err)
	}
	assertEntries(t, "Branch after the caller changed earlier reads", want, got)
	for _, w := range want {
		e, err := s.Get(ctx, "sess", w.ID)
		if err != nil {
			t.Fatalf("Get(%s): %v", w.ID, err)
		}
		assertEntries(t, "Get after the caller changed earlier reads", []transcript.Entry{w}, []transcript.Entry{e})
	}
}

// RunShared runs the cases about two handles of one database (two
// processes of a deployment): open returns two stores over the same,
// empty database. A store may keep what it read or wrote in memory; these
// cases check that neither handle ever answers with something the
// database does not hold.
func RunShared(t *testing.T, open func(t *testing.T) (a, b store.Store)) {
	t.Helper()
	cases := []struct {
		name string
		fn   func(t *testing.T, a, b store.Store)
	}{
		{"FirstAppendWinsAcrossHandles", testFirstAppendWinsAcrossHandles},
		{"BranchGrowsOnOtherHandle", testBranchGrowsOnOtherHandle},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := open(t)
			t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
			c.fn(t, a, b)
		})
	}
}

// testFirstAppendWinsAcrossHandles: an entry ID appended by one handle and
// then, with other content, by the other (a retried activity on another
// worker) reads as the first on both.
func testFirstAppendWinsAcrossHandles(t *testing.T, a, b store.Store) {
	ctx := context.Background()
	first, second := msg("x", "", "first"), msg("x", "", "second")
	if err := a.Append(ctx, "sess", first); err != nil {
		t.Fatalf("Append on a: %v", err)
	}
	if err := b.Append(ctx, "sess", second); err != nil {
		t.Fatalf("Append on b: %v", err)
	}
	if err := b.Append(ctx, "sess", msg("y", "x", "child")); err != nil {
		t.Fatalf("Append on b: %v", err)
	}
	for name, s := range map[string]store.Store{"a": a, "b": b} {
		for range 2 {
			e, err := s.Get(ctx, "sess", "x")
			if err != nil {
				t.Fatalf("Get on %s: %v", name, err)
			}
			assertEntries(t, "Get on "+name, []transcript.Entry{first}, []transcript.Entry{e})
			br, err := s.Branch(ctx, "sess", "y")
			if err != nil {
				t.Fatalf("Branch on %s: %v", name, err)
			}
			assertEntries(t, "Branch on "+name, []transcript.Entry{first, msg("y", "x", "child")}, br)
		}
	}
}

// testBranchGrowsOnOtherHandle: a handle that read a branch sees it grow
// by entries the other handle appended — a few, then many at once.
func testBranchGrowsOnOtherHandle(t *testing.T, a, b store.Store) {
	ctx := context.Background()
	var chain []transcript.Entry
	grow := func(n int) {
		t.Helper()
		var add []transcript.Entry
		for range n {
			parent := ""
			if len(chain) > 0 {
				parent = chain[len(chain)-1].ID
			}
			e := msg(fmt.Sprintf("e%02d", len(chain)), parent, fmt.Sprintf("entry %d", len(chain)))
			chain = append(chain, e)
			add = append(add, e)
		}
		if err := a.Append(ctx, "sess", add...); err != nil {
			t.Fatalf("Append on a: %v", err)
		}
	}
	for _, n := range []int{2, 1, 2, 7, 1} {
		grow(n)
		for range 2 {
			got, err := b.Branch(ctx, "sess", chain[len(chain)-1].ID)
			if err != nil {
				t.Fatalf("Branch on b: %v", err)
			}
			assertEntries(t, fmt.Sprintf("Branch on b after %d entries", len(chain)), chain, got)
		}
	}
	// A branch off an earlier entry, appended by b itself.
	side := msg("side", chain[3].ID, "side")
	if err := b.Append(ctx, "sess", side); err != nil {
		t.Fatalf("Append on b: %v", err)
	}
	got, err := a.Branch(ctx, "sess", "side")
	if err != nil {
		t.Fatalf("Branch on a: %v", err)
	}
	assertEntries(t, "Branch on a of b's side branch", append(append([]transcript.Entry{}, chain[:4]...), side), got)
}
