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

// TestContextAnswersInterruptedToolCalls: a branch that continues after an
// assistant message whose tool calls got no result (a rewind or fork to that
// entry) gives every such call an "interrupted" error result, right after
// the results it has, so providers never see a call without a result.
func TestContextAnswersInterruptedToolCalls(t *testing.T) {
	t.Parallel()
	calls := Entry{ID: "2", ParentID: "1", Type: TypeMessage, Message: &Message{Role: RoleAssistant, StopReason: StopToolUse,
		ToolCalls: []ToolCall{{ID: "c1", Name: "read"}, {ID: "c2", Name: "bash"}}}}
	result := Entry{ID: "3", ParentID: "2", Type: TypeMessage, Message: &Message{Role: RoleToolResult, ToolCallID: "c1", ToolName: "read", Text: "ok"}}
	branch := []Entry{msg("1", "", RoleUser, "a"), calls, result, msg("4", "3", RoleUser, "go on")}
	msgs := Context(branch)
	var roles []string
	for _, m := range msgs {
		roles = append(roles, m.Role+":"+m.ToolCallID)
	}
	want := []string{"user:", "assistant:", "toolResult:c1", "toolResult:c2", "user:"}
	if len(roles) != len(want) {
		t.Fatalf("messages %v, want %v", roles, want)
	}
	for i := range want {
		if roles[i] != want[i] {
			t.Fatalf("messages %v, want %v", roles, want)
		}
	}
	if m := msgs[3]; !m.IsError || m.ToolName != "bash" || m.Text != InterruptedToolResult {
		t.Errorf("synthetic result = %+v, want an error result of bash saying %q", m, InterruptedToolResult)
	}
	// No result at all, then a user message (a rewind to the call itself).
	msgs = Context([]Entry{msg("1", "", RoleUser, "a"), calls, msg("5", "2", RoleUser, "again")})
	if len(msgs) != 5 || msgs[2].ToolCallID != "c1" || msgs[3].ToolCallID != "c2" || msgs[4].Text != "again" {
		t.Errorf("after a rewind to the call: %+v", msgs)
	}
	// A branch that ends at the calls (a turn in progress) is left alone,
	// and so is a complete one.
	if msgs := Context(branch[:2]); len(msgs) != 2 {
		t.Errorf("trailing calls: %d messages, want 2", len(msgs))
	}
	full := []Entry{msg("1", "", RoleUser, "a"), calls, result,
		{ID: "6", ParentID: "3", Type: TypeMessage, Message: &Message{Role: RoleToolResult, ToolCallID: "c2", ToolName: "bash", Text: "done"}},
		msg("7", "6", RoleAssistant, "b")}
	if msgs := Context(full); len(msgs) != 5 || msgs[3].Text != "done" {
		t.Errorf("complete branch changed: %+v", msgs)
	}
	// fresh counts the synthetic results it follows.
	comp := append(append([]Entry(nil), branch...), Entry{ID: "8", ParentID: "4", Type: TypeCompaction,
		Compaction: &Compaction{Summary: "S", FirstKeptEntryID: "1"}}, msg("9", "8", RoleUser, "z"))
	if msgs, fresh := ContextOf(comp); fresh != len(msgs)-1 {
		t.Errorf("fresh = %d of %d messages, want %d", fresh, len(msgs), len(msgs)-1)
	}
}
