package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// delegateCall is a model's call of the delegate tool.
func delegateCall(id, agentName, task string) modelserver.ToolCall {
	args, _ := json.Marshal(map[string]string{"agent": agentName, "task": task})
	return modelserver.ToolCall{ID: id, Name: agentloop.DelegateTool, Args: string(args)}
}

// requestToolResults returns the tool results a request carries, by call ID.
func requestToolResults(req modelserver.Request) map[string]string {
	out := map[string]string{}
	for _, m := range req.Messages {
		if m.Role == "tool" {
			out[m.ToolCallID] = m.Content
		}
	}
	return out
}

// A turn that delegates two sub-tasks in one step runs both sub-agents as
// child workflows in parallel; their progress streams into the turn's
// events as delegated events; their answers come back as the tool results
// the model's next step reads; each child ran once, under an ID derived
// from the turn and the call, with the session as its parent.
func TestDelegationParallelChildren(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(fastRetries + "delegation:\n  agents:\n    self: {}\n")
	e.startWorker()
	m := e.kit.Model
	m.EnqueueFor("plan the trip",
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{
			delegateCall("d1", "self", "find a flight FLIGHTKEY"),
			delegateCall("d2", "self", "find a hotel HOTELKEY"),
		}},
		modelserver.Reply{Text: []string{"Trip planned."}})
	m.EnqueueFor("FLIGHTKEY", modelserver.Reply{Text: []string{"Flight ", "LH 123"}, ChunkDelay: 20 * time.Millisecond})
	m.EnqueueFor("HOTELKEY", modelserver.Reply{Text: []string{"Hotel ", "Adlon"}, ChunkDelay: 20 * time.Millisecond})

	ctx := agent.WithIdempotencyKey(context.Background(), "trip-1")
	session := e.session("delegating")
	evs := collect(t, e.agent, ctx, session, "plan the trip")
	must(t, evs, agent.TypeCompleted)

	live := map[string]string{}
	ended := map[string]string{}
	for _, ev := range evs {
		switch ev.Type {
		case agent.TypeDelegated:
			if ev.Agent != "self" || ev.Sub == nil {
				t.Errorf("delegated event %+v: want agent self and its event", ev)
				continue
			}
			if ev.Sub.Type == agent.TypeText {
				live[ev.ID] += ev.Sub.Delta
			}
		case agent.TypeToolEnded:
			ended[ev.ID] = ev.Content
		}
	}
	if live["d1"] != "Flight LH 123" || live["d2"] != "Hotel Adlon" {
		t.Errorf("live sub-agent text = %q, want each child's text under its call", live)
	}
	if ended["d1"] != "Flight LH 123" || ended["d2"] != "Hotel Adlon" {
		t.Errorf("tool results on the stream = %q", ended)
	}
	var last modelserver.Request
	for _, r := range m.Requests() {
		if r.LastUserText() == "plan the trip" {
			last = r
		}
	}
	if got := requestToolResults(last); got["d1"] != "Flight LH 123" || got["d2"] != "Hotel Adlon" {
		t.Errorf("the model's second step read %q, want both answers", got)
	}
	for _, key := range []string{"FLIGHTKEY", "HOTELKEY"} {
		n := 0
		for _, r := range m.Requests() {
			if strings.Contains(r.LastUserText(), key) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("sub-agent %s made %d model calls, want 1", key, n)
		}
	}
	parent := "session:" + session
	for _, call := range []string{"d1", "d2"} {
		id := "session:" + agentloop.DelegateSession(session, "trip-1", call)
		d, err := e.client.DescribeWorkflowExecution(context.Background(), id, "")
		if err != nil {
			t.Fatalf("child of %s: %v", call, err)
		}
		info := d.GetWorkflowExecutionInfo()
		if info.GetType().GetName() != "Delegate" || info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED ||
			info.GetParentExecution().GetWorkflowId() != parent {
			t.Errorf("child %s: type %s, status %s, parent %q; want a completed Delegate child of %s",
				id, info.GetType().GetName(), info.GetStatus(), info.GetParentExecution().GetWorkflowId(), parent)
		}
	}
}
