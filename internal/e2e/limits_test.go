package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
)

// requireLimit asserts a turn ended failed with limit_exceeded naming key.
func requireLimit(t *testing.T, evs []agent.Event, key string) {
	t.Helper()
	last := evs[len(evs)-1]
	if last.Type != agent.TypeFailed || last.Code != agent.CodeLimitExceeded || last.Retryable ||
		!strings.Contains(last.Details, key) {
		t.Fatalf("terminal = %+v, want failed limit_exceeded naming %s", last, key)
	}
}

// The budgets of limits: in fastagent.yaml are enforced by the session
// workflow: a turn over its token budget or its wall time fails with
// limit_exceeded naming the key, and the session's next turn runs; a
// session over its daily tokens refuses its next turn without a model call.
func TestLimits(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(fastRetries + "limits:\n  turnTokens: 100\n  turnTime: 2s\n  sessionTokensPerDay: 1000\n")
	e.startWorker()
	small := &modelserver.Usage{PromptTokens: 5, CompletionTokens: 5}
	e.kit.Model.Handle(func(req modelserver.Request) modelserver.Reply {
		return modelserver.Reply{Text: []string{"answer to " + req.LastUserText()}, Usage: small}
	})
	counter := func(id string) []modelserver.ToolCall {
		return []modelserver.ToolCall{{ID: id, Name: testkit.CounterName, Args: `{"note":"x"}`}}
	}
	ctx := context.Background()

	t.Run("turn tokens", func(t *testing.T) {
		e.kit.Model.Enqueue(modelserver.Reply{ToolCalls: counter("tok1"), Usage: &modelserver.Usage{PromptTokens: 80, CompletionTokens: 40}})
		requireLimit(t, collect(t, e.agent, ctx, "tokens", "count"), "limits.turnTokens")
		if n := e.kit.Counter.Runs("tokens"); n != 1 {
			t.Errorf("the tool ran %d times, want 1 (its step finished before the budget stopped the turn)", n)
		}
		must(t, collect(t, e.agent, ctx, "tokens", "still there?"), agent.TypeCompleted)
	})
	t.Run("turn time", func(t *testing.T) {
		e.kit.Model.Enqueue(modelserver.Reply{ToolCalls: counter("time1"), Usage: small, FirstDelay: 2500 * time.Millisecond})
		requireLimit(t, collect(t, e.agent, ctx, "time", "count slowly"), "limits.turnTime")
		must(t, collect(t, e.agent, ctx, "time", "still there?"), agent.TypeCompleted)
	})
	t.Run("session tokens per day", func(t *testing.T) {
		e.kit.Model.Enqueue(modelserver.Reply{Text: []string{"a long answer"}, Usage: &modelserver.Usage{PromptTokens: 900, CompletionTokens: 200}})
		must(t, collect(t, e.agent, ctx, "daily", "write a lot"), agent.TypeCompleted)
		calls := e.kit.Model.Count()
		requireLimit(t, collect(t, e.agent, ctx, "daily", "more"), "limits.sessionTokensPerDay")
		if n := e.kit.Model.Count() - calls; n != 0 {
			t.Errorf("the refused turn made %d model calls", n)
		}
		v, err := e.agent.State(ctx, "daily")
		if err != nil || v.Today.Usage.Tokens() != 1100 || v.Today.Day != time.Now().UTC().Format("2006-01-02") {
			t.Errorf("state today = %+v (%v), want 1100 tokens today", v.Today, err)
		}
	})
}
