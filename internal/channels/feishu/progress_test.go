package feishu

import (
	"testing"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels"
)

// The card shows a running tool's latest progress line under it, escaped:
// a tool's output never becomes a mention, a tag or an entity.
func TestPreviewShowsToolProgress(t *testing.T) {
	var v channels.View
	v.Apply(agent.ToolStarted("c1", "bash", nil))
	v.Apply(agent.ToolProgress("c1", "bash", agent.Progress{Message: `copy <at id=all></at> a&b (3/10)`}))
	if got, want := preview(&v), "_Using `bash`…_\n↳ copy &lt;at id=all&gt;&lt;/at&gt; a&amp;b (3/10)"; got != want {
		t.Fatalf("preview = %q, want %q", got, want)
	}
}
