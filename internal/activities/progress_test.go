package activities_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/workflows"
)

// TestExecutePublishesProgress: a bash call's output lines go on the
// turn's feed as tool_progress events of the call, throttled, before its
// tool_ended; the stored result is the tool's output alone.
func TestExecutePublishesProgress(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	acts := e.kit.Activities(e.bus)
	acts.ProgressEvery = 100 * time.Millisecond
	var suite testsuite.WorkflowTestSuite
	act := suite.NewTestActivityEnvironment()
	acts.Register(act)
	call := toolSetup(e, "s1", "bash", `{"command":"for i in 1 2 3; do echo step $i; sleep 0.3; done"}`)
	if _, err := act.ExecuteActivity(workflows.ActivityToolExecute, call); err != nil {
		t.Fatalf("Execute: %v", err)
	}
	var progress []string
	ended := false
	for _, m := range e.feedUntil("s1", "t1", feed.KindEnd) {
		if m.Kind != feed.KindEvent {
			continue
		}
		switch ev := m.Event; ev.Type {
		case agent.TypeToolEnded:
			ended = true
		case agent.TypeToolProgress:
			if ended || ev.ID != "c1" || ev.Name != "bash" || m.Step != 1 {
				t.Errorf("tool_progress %+v (step %d, after the end %v)", ev, m.Step, ended)
			}
			progress = append(progress, ev.Content)
		}
	}
	if !slices.Equal(progress, []string{"step 1", "step 2", "step 3"}) {
		t.Errorf("progress %q, want step 1..3", progress)
	}
	res, ok := e.stored("s1", "r1")
	if !ok || strings.TrimSpace(res.Message.Text) != "step 1\nstep 2\nstep 3" {
		t.Fatalf("stored result %+v", res.Message)
	}
}
