package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/workflows"
)

// runDeliveryQueue is the delivery_queue history: while a slow turn runs,
// six more deliveries arrive (the deliver signal, no reply target; prompts
// of markup, which weighs more encoded than raw) and two that are refused
// (no key; a key of the session's own namespace). With
// two turns per run, each run serves two and continues as new carrying the
// rest of the queue in its snapshot; every delivered turn runs once.
func runDeliveryQueue(t *testing.T, e *env, session string) string {
	slow := make([]string, 10)
	for i := range slow {
		slow[i] = "slow "
	}
	e.kit.Model.Handle(func(req modelserver.Request) modelserver.Reply {
		if strings.Contains(req.LastUserText(), "take your time") {
			return modelserver.Reply{Text: slow, ChunkDelay: 150 * time.Millisecond}
		}
		return echo(req)
	})
	deliver := func(d workflows.Delivery) {
		if _, err := e.client.SignalWithStartWorkflow(context.Background(), workflows.WorkflowID(session), workflows.SignalDeliver, d,
			client.StartWorkflowOptions{TaskQueue: e.queue}, workflows.SessionWorkflowType,
			workflows.SessionInput{Session: session, TurnsPerRun: 2}); err != nil {
			t.Fatal(err)
		}
	}
	keys := []string{"q:0"}
	deliver(workflows.Delivery{Key: "q:0", Source: "history", Prompt: agent.Prompt{Text: "take your time"}})
	waitModelCalls(t, e, 1)
	deliver(workflows.Delivery{Source: "history", Prompt: agent.Prompt{Text: "no key"}})
	deliver(workflows.Delivery{Key: workflows.InternalKeyPrefix + "steer:x", Source: "history", Prompt: agent.Prompt{Text: "internal"}})
	for i := 1; i <= 6; i++ {
		k := fmt.Sprintf("q:%d", i)
		keys = append(keys, k)
		deliver(workflows.Delivery{Key: k, Source: "history", Prompt: agent.Prompt{Text: fmt.Sprintf("<i>queued %d</i> &amp;", i)}})
	}
	waitFor(t, 2*time.Minute, "every delivered turn recorded", func() bool {
		for _, k := range keys {
			if _, err := e.kit.Store.Turn(context.Background(), session, k); err != nil {
				return false
			}
		}
		return true
	})
	if n := e.kit.Model.Count(); n != len(keys) {
		t.Fatalf("model calls = %d, want %d (one per delivered turn)", n, len(keys))
	}
	return ""
}
