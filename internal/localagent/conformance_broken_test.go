package localagent_test

import (
	"context"
	"fmt"
	"iter"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/agent/agenttest"
)

// brokenHarness is the in-process harness with a deliberately broken agent:
// wrap rewrites what the healthy agent does.
type brokenHarness struct {
	*harness
	wrap func(agent.Agent) agent.Agent
}

func (h brokenHarness) Agent(t testing.TB, i int) agent.Agent {
	a := h.harness.Agent(t, i)
	if h.wrap == nil {
		return a
	}
	return h.wrap(a)
}

// rewrite wraps an Agent, replacing each event of its stream with what f
// returns for it.
func rewrite(f func(ev agent.Event) []agent.Event) func(agent.Agent) agent.Agent {
	return func(inner agent.Agent) agent.Agent {
		return agent.AgentFunc(func(ctx context.Context, scope agent.Scope, prompt agent.Prompt) iter.Seq[agent.Event] {
			return func(yield func(agent.Event) bool) {
				for ev := range inner.Invoke(ctx, scope, prompt) {
					for _, out := range f(ev) {
						if !yield(out) {
							return
						}
					}
				}
			}
		})
	}
}

// Each conformance case fails against an agent that breaks what it checks,
// and passes against the healthy one (so the failure is the defect's).
func TestConformanceCasesFailOnBrokenAgents(t *testing.T) {
	twoTerminals := rewrite(func(ev agent.Event) []agent.Event {
		if ev.IsTerminal() {
			return []agent.Event{ev, agent.Completed(nil)}
		}
		return []agent.Event{ev}
	})
	noTerminal := rewrite(func(ev agent.Event) []agent.Event {
		if ev.IsTerminal() {
			return nil
		}
		return []agent.Event{ev}
	})
	// A silent re-run: the retry happens but the client is not told to drop
	// the partial text.
	silentRerun := rewrite(func(ev agent.Event) []agent.Event {
		if ev.Type == agent.TypeRetrying {
			return nil
		}
		return []agent.Event{ev}
	})
	// The same, ending in a failure after the silently re-run attempt.
	silentRerunThenFail := rewrite(func(ev agent.Event) []agent.Event {
		switch ev.Type {
		case agent.TypeRetrying:
			return nil
		case agent.TypeCompleted:
			return []agent.Event{agent.Failed("gave up after the re-run", false, "")}
		}
		return []agent.Event{ev}
	})
	cases := []struct {
		name    string
		caseID  string
		wrap    func(agent.Agent) agent.Agent
		rerun   bool // the engine retries the non-idempotent counter tool
		healthy bool
	}{
		{name: "healthy", caseID: "1_success_stream", healthy: true},
		{name: "two terminals", caseID: "1_success_stream", wrap: twoTerminals},
		{name: "no terminal", caseID: "1_success_stream", wrap: noTerminal},
		{name: "healthy", caseID: "2_engine_failure", healthy: true},
		{name: "two terminals", caseID: "2_engine_failure", wrap: twoTerminals},
		{name: "healthy", caseID: "6_failure_after_output_is_not_silent", healthy: true},
		{name: "silent re-run", caseID: "6_failure_after_output_is_not_silent", wrap: silentRerun},
		{name: "silent re-run then failed", caseID: "6_failure_after_output_is_not_silent", wrap: silentRerunThenFail},
		{name: "healthy", caseID: "8_executed_tool_not_rerun", healthy: true},
		{name: "tool re-run", caseID: "8_executed_tool_not_rerun", rerun: true},
	}
	for i, c := range cases {
		t.Run(c.caseID+"/"+c.name, func(t *testing.T) {
			h := newHarness(t)
			h.kit.Counter.Idempotent = c.rerun
			var run func(testing.TB, agenttest.Harness, string)
			for _, cc := range agenttest.Cases() {
				if cc.Name == c.caseID {
					run = cc.Run
				}
			}
			if run == nil {
				t.Fatalf("no conformance case %q", c.caseID)
			}
			session := fmt.Sprintf("broken-%d-%d", i, time.Now().UnixNano())
			rep := agenttest.Try(t, func(tb testing.TB) { run(tb, brokenHarness{h, c.wrap}, session) })
			switch {
			case c.healthy && rep.Failed:
				t.Fatalf("the healthy agent fails the case:\n%s", rep)
			case !c.healthy && !rep.Failed:
				t.Fatalf("the case passed against a broken agent (it cannot catch this defect); its log:\n%s", rep)
			}
			t.Logf("case report:\n%s", rep)
		})
	}
}
