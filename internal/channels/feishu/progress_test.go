package feishu

import (
	"testing"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels"
)

// The card shows a running tool's latest progress line under it.
func TestPreviewShowsToolProgress(t *testing.T) {
	var v channels.View
	v.Apply(agent.ToolStarted("c1", "bash", nil))
	v.Apply(agent.ToolProgress("c1", "bash", agent.Progress{Message: "copy `a` (3/10)"}))
	if got, want := preview(&v), "_Using `bash`…_\n↳ `copy 'a' (3/10)`"; got != want {
		t.Fatalf("preview = %q, want %q", got, want)
	}
}
