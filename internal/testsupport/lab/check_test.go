package lab

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/transcript"
)

func user(id, parent, text string) transcript.Entry {
	return transcript.Entry{ID: id, ParentID: parent, Type: transcript.TypeMessage,
		Message: &transcript.Message{Role: transcript.RoleUser, Text: text}}
}

func reply(id, parent string, calls ...string) transcript.Entry {
	m := &transcript.Message{Role: transcript.RoleAssistant, Text: "answer " + id}
	for _, c := range calls {
		m.ToolCalls = append(m.ToolCalls, transcript.ToolCall{ID: c, Name: "counter"})
	}
	return transcript.Entry{ID: id, ParentID: parent, Type: transcript.TypeMessage, Message: m}
}

func result(id, parent, call string) transcript.Entry {
	return transcript.Entry{ID: id, ParentID: parent, Type: transcript.TypeMessage,
		Message: &transcript.Message{Role: transcript.RoleToolResult, ToolCallID: call, ToolName: "counter", Text: "count=1"}}
}

// clean is a session of three turns: one with two tool calls, one that
// failed before its reply was stored (a prompt-only side branch), and one
// answered directly.
func clean() []transcript.Entry {
	return []transcript.Entry{
		user("u1", "", "first"),
		reply("a1", "u1", "c1", "c2"),
		result("r1", "a1", "c1"),
		result("r2", "r1", "c2"),
		reply("a2", "r2"),
		user("u2", "a2", "failed turn"),
		user("s2", "u2", "its steering"),
		user("u3", "a2", "third"),
		reply("a3", "u3"),
	}
}

func TestCheckEntries(t *testing.T) {
	cases := []struct {
		name    string
		entries []transcript.Entry
		leaf    string
		dup     int
		miss    int
		problem string // a word the report must contain
	}{
		{name: "clean", entries: clean(), leaf: "a3"},
		{name: "clean, failed last turn", entries: append(clean(), user("u4", "a3", "last fails")), leaf: "u4"},
		{
			name:    "two replies for one step",
			entries: append(clean(), reply("a3b", "u3")),
			leaf:    "a3", dup: 1, problem: "2 assistant replies",
		},
		{
			name:    "two replies after a tool result",
			entries: append(clean(), reply("a2b", "r2")),
			leaf:    "a3", dup: 1, problem: "after toolResult r2",
		},
		{
			name: "tool call without a result",
			entries: []transcript.Entry{
				user("u1", "", "first"), reply("a1", "u1", "c1", "c2"), result("r1", "a1", "c1"), reply("a2", "r1"),
			},
			leaf: "a2", miss: 1, problem: "c2 (counter) has no result",
		},
		{
			name: "second result for one call",
			entries: []transcript.Entry{
				user("u1", "", "first"), reply("a1", "u1", "c1"), result("r1", "a1", "c1"), result("r1b", "r1", "c1"), reply("a2", "r1b"),
			},
			leaf: "a2", dup: 1, problem: "second result",
		},
		{
			name:    "answered turn off the branch",
			entries: append(clean(), user("u9", "a1", "lost"), reply("a9", "u9")),
			leaf:    "a3", miss: 1, problem: "orphan branch at u9",
		},
		{
			name:    "reply off the branch",
			entries: append(clean(), reply("a8", "a3")),
			leaf:    "u3", miss: 1, problem: "orphan branch at a3",
		},
		{
			name:    "entry below a missing parent",
			entries: append(clean(), user("u7", "gone", "lost")),
			leaf:    "a3", miss: 1, problem: "not in the session",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, branch := CheckEntries(c.entries, c.leaf)
			if r.Duplicates != c.dup || r.Missing != c.miss {
				t.Fatalf("duplicates=%d missing=%d, want %d and %d; problems: %q", r.Duplicates, r.Missing, c.dup, c.miss, r.Problems)
			}
			if c.problem != "" && !strings.Contains(strings.Join(r.Problems, "\n"), c.problem) {
				t.Errorf("problems %q do not mention %q", r.Problems, c.problem)
			}
			if len(branch) == 0 || branch[len(branch)-1].ID != c.leaf || branch[0].ParentID != "" {
				t.Errorf("branch %v does not run from the root to %s", branch, c.leaf)
			}
		})
	}
}

// CheckTranscript reads the entries from a real store: a clean session
// passes; a step answered twice (distinct entry IDs, which the primary key
// does not stop) is reported.
func TestCheckTranscriptStore(t *testing.T) {
	ctx := context.Background()
	st, err := store.OpenSQLite(filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Append(ctx, "ok", clean()...); err != nil {
		t.Fatal(err)
	}
	if r := CheckTranscript(ctx, st, "ok", []string{"first", "failed turn", "its steering", "third"}, true); !r.OK() {
		t.Errorf("clean session: %q", r.Problems)
	}
	bad := append(clean()[:5], reply("a2b", "r2"))
	if err := st.Append(ctx, "bad", bad...); err != nil {
		t.Fatal(err)
	}
	if r := CheckTranscript(ctx, st, "bad", []string{"first"}, true); r.Duplicates != 1 {
		t.Errorf("a step answered twice: duplicates=%d, problems %q", r.Duplicates, r.Problems)
	}
}

func TestOneLine(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"a\n  b\tc ", 10, "a b c"},
		{"abcdef", 3, "abc…"},
		{"abc", 3, "abc"},
	} {
		if got := OneLine(tc.in, tc.n); got != tc.want {
			t.Errorf("OneLine(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}
