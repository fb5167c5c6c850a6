package telegram

import (
	"testing"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels"
)

// The preview shows a running tool's latest progress line under it.
func TestPreviewShowsToolProgress(t *testing.T) {
	var v channels.View
	v.Apply(agent.Text("Running it."))
	v.Apply(agent.ToolStarted("c1", "bash", nil))
	v.Apply(agent.ToolProgress("c1", "bash", agent.Progress{Message: "step 2"}))
	if got, want := preview(&v), "Running it.\n\n🔧 bash…\n↳ step 2"; got != want {
		t.Fatalf("preview = %q, want %q", got, want)
	}
	v.Apply(agent.ToolEnded("c1", false, "ok"))
	if got := preview(&v); got != "Running it." {
		t.Fatalf("after the call ended the preview is %q", got)
	}
}
