package e2e

import (
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/agent/agenttest"
	"github.com/fastagent/fastagent/internal/httpagent"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
)

// durableHarness adapts the Temporal-backed agent to the conformance suite;
// with viaHTTP the agents are HTTP clients of two ingress servers.
type durableHarness struct {
	e       *env
	agents  [2]agent.Agent
	aborted int
}

func (h *durableHarness) Agent(t testing.TB, i int) agent.Agent { return h.agents[i] }

func (h *durableHarness) Script(t testing.TB, session string, s agenttest.Scenario) {
	h.aborted = h.e.kit.Model.Aborted()
	h.e.kit.Script(session, s)
}

func (h *durableHarness) ToolRuns(t testing.TB, session string) int {
	return h.e.kit.Counter.Runs(session)
}

func (h *durableHarness) WaitAborted(t testing.TB, session string, timeout time.Duration) error {
	return testkit.WaitAborted(h.e.kit.Model, h.aborted, timeout)
}

// fastRetries keeps model retries short so the suite runs in seconds.
const fastRetries = "retry:\n  heartbeat: 5s\n"

// The conformance suites run with the served default detach grace: a
// consumer that breaks off without asking to resume still cancels the
// turn's in-flight work at once (case 3).
func TestConformanceDurable(t *testing.T) {
	e := newEnv(t)
	e.agent.DetachGrace = serve.DefaultDetachGrace
	e.writeConfig(fastRetries)
	e.startWorker()
	h := &durableHarness{e: e}
	second := *e.agent // a second client instance sharing only the backend
	h.agents = [2]agent.Agent{e.agent, &second}
	agenttest.Run(t, h)
}

func TestConformanceHTTP(t *testing.T) {
	e := newEnv(t)
	e.agent.DetachGrace = serve.DefaultDetachGrace
	e.writeConfig(fastRetries)
	e.startWorker()
	a, b := e.ingress(), e.ingress()
	h := &durableHarness{e: e}
	h.agents = [2]agent.Agent{&httpagent.Agent{BaseURL: a.URL}, &httpagent.Agent{BaseURL: b.URL}}
	agenttest.Run(t, h)
}
