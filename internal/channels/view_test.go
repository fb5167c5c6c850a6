package channels

import (
	"strings"
	"testing"

	"github.com/fastagent/fastagent/agent"
)

// A delegate call's line shows its sub-agent and the end of what it is
// saying, its current line only, bounded; other events of the sub-agent
// and events of calls that ended change nothing.
func TestViewShowsSubAgentProgress(t *testing.T) {
	var v View
	v.Apply(agent.ToolStarted("d1", "delegate", nil))
	text := func(d string) agent.Event {
		return agent.Delegated("d1", "reviewer", agent.Event{Type: agent.TypeText, Delta: d})
	}
	if !v.Apply(text("Reading ")) || !v.Apply(text("the diff")) || v.Tools[0].Name != "reviewer: Reading the diff" {
		t.Fatalf("tool line = %q", v.Tools[0].Name)
	}
	v.Apply(text(".\nLooks "))
	v.Apply(agent.Delegated("d1", "reviewer", agent.Delegated("n1", "linter", agent.Event{Type: agent.TypeText, Delta: "fine"})))
	if v.Tools[0].Name != "reviewer: Looks fine" {
		t.Errorf("tool line = %q, want the current line only", v.Tools[0].Name)
	}
	v.Apply(text(strings.Repeat("x", 200)))
	if r := []rune(strings.TrimPrefix(v.Tools[0].Name, "reviewer: ")); len(r) != progressLen+1 || r[0] != '…' {
		t.Errorf("a long line is shown as %q, want its last %d characters after …", v.Tools[0].Name, progressLen)
	}
	if v.Apply(agent.Delegated("d1", "reviewer", agent.ToolStarted("t1", "read", nil))) {
		t.Error("a sub-agent's tool call changed the view")
	}
	v.Apply(agent.ToolEnded("d1", false, "LGTM"))
	if v.Apply(text("late")) {
		t.Error("text after the call ended changed the view")
	}
}

// A running call's line carries its latest progress report; an unchanged
// report, one for another call, or one after the call ended changes
// nothing, and an ended call shows none.
func TestViewShowsToolProgress(t *testing.T) {
	var v View
	v.Apply(agent.ToolStarted("c1", "bash", nil))
	prog := func(id, msg string, n, total float64) agent.Event {
		return agent.ToolProgress(id, "bash", agent.Progress{Message: msg, Progress: n, Total: total})
	}
	if !v.Apply(prog("c1", "step 1", 0, 0)) || v.Tools[0].ProgressLine() != "step 1" {
		t.Fatalf("progress line = %q", v.Tools[0].ProgressLine())
	}
	if v.Apply(prog("c1", "step 1", 0, 0)) {
		t.Error("an unchanged report changed the view")
	}
	if v.Apply(prog("c2", "other", 0, 0)) {
		t.Error("a report of an unknown call changed the view")
	}
	v.Apply(prog("c1", "rows", 3, 10))
	if got := v.Tools[0].ProgressLine(); got != "rows (3/10)" {
		t.Errorf("progress line = %q, want rows (3/10)", got)
	}
	v.Apply(prog("c1", strings.Repeat("y", 200)+"END", 0, 0))
	if got := []rune(v.Tools[0].ProgressLine()); len(got) != progressLen+1 || !strings.HasSuffix(string(got), "END") {
		t.Errorf("a long report is shown as %q", string(got))
	}
	v.Apply(agent.ToolEnded("c1", false, "ok"))
	if v.Apply(prog("c1", "late", 0, 0)) || v.Tools[0].ProgressLine() != "" {
		t.Errorf("an ended call shows progress %q", v.Tools[0].ProgressLine())
	}
}
