package workflows_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// statusLog records the FastAgentStatus values a run upserts.
type statusLog struct {
	mu  sync.Mutex
	got []string
}

func (l *statusLog) values() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.got...)
}

// watchStatus starts the run with the session search attributes (when
// searchable) and records every upsert.
func watchStatus(t *testing.T, h *harness, searchable bool) *statusLog {
	t.Helper()
	if searchable {
		attrs := workflows.SessionAttrs{Agent: "fastagent", Channel: "http", Principal: "alice"}
		if err := h.env.SetTypedSearchAttributesOnStart(attrs.SearchAttributes()); err != nil {
			t.Fatal(err)
		}
	}
	l := &statusLog{}
	h.env.OnUpsertTypedSearchAttributes(mock.Anything).Return(nil).Run(func(args mock.Arguments) {
		sa := args.Get(0).(temporal.SearchAttributes)
		v, _ := sa.GetKeyword(workflows.KeyStatus)
		if sa.Size() != 1 {
			t.Errorf("an upsert set %d attributes, want only %s", sa.Size(), workflows.AttrStatus)
		}
		l.mu.Lock()
		l.got = append(l.got, v)
		l.mu.Unlock()
	}).Maybe()
	return l
}

// TestSessionStatusUpserts: turns alone never upsert the status — it says
// whether the session waits for a person, and two upserts a turn would be
// two billed actions — queued or not, searchable or not (a run started
// without the attributes never upserts: they may not be registered).
func TestSessionStatusUpserts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		searchable bool
		want       []string
	}{
		// t1 alone; t2 and t3 arrive while t1 runs, so the session stays
		// running until t3 ends; t4 alone.
		{name: "searchable", searchable: true, want: nil},
		{name: "not registered", searchable: false, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			log := watchStatus(t, h, tt.searchable)
			gate := make(chan struct{})
			h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
				if call.Turn == "t2" {
					if err := waitGate(gate); err != nil {
						return agentloop.ModelResult{}, err
					}
				}
				return reply(call), nil
			}
			u1 := h.turn(ms, "t1", "one")
			var u2, u3 *update
			h.at(time.Minute, func() {
				u2 = &update{}
				h.sendNow(u2, workflows.UpdateTurn, "t2", workflows.TurnRequest{Prompt: agent.Prompt{Text: "two"}})
				h.when(func() bool { return h.modelStarted("t2", 1) }, func() {
					u3 = &update{}
					h.sendNow(u3, workflows.UpdateTurn, "t3", workflows.TurnRequest{Prompt: agent.Prompt{Text: "three"}})
					close(gate)
				})
			})
			u4 := h.turn(time.Hour, "t4", "four")
			h.run(workflows.SessionInput{Session: "s1"})
			h.requireCancelled()
			for _, u := range []*update{u1, u2, u3, u4} {
				requireOutcome(t, h.outcome(u), h.outcome(u).Turn, agent.TypeCompleted, "", false)
			}
			equalSlice(t, "status upserts", log.values(), tt.want)
		})
	}
}

// TestSessionStatusWaitingApproval: a tool call waiting for a human makes
// the status waiting_approval, and idle again once decided.
func TestSessionStatusWaitingApproval(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	log := watchStatus(t, h, true)
	h.model = func(_ context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
		if call.Step == 1 {
			c1 := known("c1", "deploy")
			c1.RequiresApproval = true
			return reply(call, c1), nil
		}
		return reply(call), nil
	}
	u := h.turn(ms, "t1", "ship it")
	var during []string
	h.at(time.Minute, func() { during = log.values() })
	ap := h.send(2*time.Minute, workflows.UpdateApprove, "approve-1", workflows.ApproveRequest{Call: "c1", Approve: true})
	h.run(workflows.SessionInput{Session: "s1"})
	h.requireCancelled()
	requireOutcome(t, h.outcome(u), "t1", agent.TypeCompleted, "", false)
	h.requireOK(ap, "approve")
	equalSlice(t, "status while the call waits", during, []string{"waiting_approval"})
	equalSlice(t, "status upserts", log.values(), []string{"waiting_approval", "idle"})
}
