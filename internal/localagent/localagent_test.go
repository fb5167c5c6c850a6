package localagent_test

import (
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/agent/agenttest"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/localagent"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
)

// harness runs the conformance suite against two in-process agents that
// share one store and one model server.
type harness struct {
	kit     *testkit.Kit
	agents  [2]*localagent.Agent
	aborted int
}

func newHarness(t *testing.T) *harness {
	k := testkit.New(t)
	h := &harness{kit: k}
	for i := range h.agents {
		bus := feed.NewInProcess()
		t.Cleanup(func() { _ = bus.Close() })
		h.agents[i] = &localagent.Agent{Acts: k.Activities(bus), MaxRetryDelay: 200 * time.Millisecond}
	}
	return h
}

func (h *harness) Agent(t testing.TB, i int) agent.Agent { return h.agents[i] }

func (h *harness) Script(t testing.TB, session string, s agenttest.Scenario) {
	h.aborted = h.kit.Model.Aborted()
	h.kit.Script(session, s)
}

func (h *harness) ToolRuns(t testing.TB, session string) int { return h.kit.Counter.Runs(session) }

func (h *harness) WaitAborted(t testing.TB, session string, timeout time.Duration) error {
	return testkit.WaitAborted(h.kit.Model, h.aborted, timeout)
}

func TestConformance(t *testing.T) {
	agenttest.Run(t, newHarness(t))
}
