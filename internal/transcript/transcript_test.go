package transcript

import "testing"

func msg(id, parent, role, text string) Entry {
	return Entry{ID: id, ParentID: parent, Type: TypeMessage, Message: &Message{Role: role, Text: text}}
}

func TestContextOf(t *testing.T) {
	t.Parallel()
	branch := []Entry{
		msg("1", "", RoleUser, "a"),
		msg("2", "1", RoleAssistant, "b"),
		msg("3", "2", RoleUser, "c"),
		msg("4", "3", RoleAssistant, "d"),
		{ID: "5", ParentID: "4", Type: TypeCompaction, Compaction: &Compaction{Summary: "S", FirstKeptEntryID: "3"}},
		msg("6", "5", RoleUser, "e"),
	}
	cases := []struct {
		name      string
		branch    []Entry
		texts     []string
		wantFresh int
	}{
		{"no compaction", branch[:4], []string{"a", "b", "c", "d"}, 0},
		{"summary, kept, after", branch, []string{CompactionPrefix + "\n\nS", "c", "d", "e"}, 3},
		{"compaction at the leaf", branch[:5], []string{CompactionPrefix + "\n\nS", "c", "d"}, 3},
	}
	for _, tc := range cases {
		msgs, fresh := ContextOf(tc.branch)
		if len(msgs) != len(tc.texts) {
			t.Fatalf("%s: %d messages, want %d", tc.name, len(msgs), len(tc.texts))
		}
		for i, m := range msgs {
			if m.Text != tc.texts[i] {
				t.Errorf("%s: message %d = %q, want %q", tc.name, i, m.Text, tc.texts[i])
			}
		}
		if fresh != tc.wantFresh {
			t.Errorf("%s: fresh = %d, want %d", tc.name, fresh, tc.wantFresh)
		}
	}
	if LatestCompaction(branch) != 4 || LatestCompaction(branch[:4]) != -1 {
		t.Error("LatestCompaction")
	}
}
