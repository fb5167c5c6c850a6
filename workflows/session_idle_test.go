package workflows_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
	"github.com/fastagent/fastagent/workflows/wakes"
)

// expireFake is a fake Session.Expire: it records each call's mock time
// and input and answers with fn.
type expireFake struct {
	h     *harness
	mu    sync.Mutex
	calls []wire.ExpireInput
	at    []time.Time
	fn    func(ctx context.Context, n int, in wire.ExpireInput) (wire.ExpireResult, error)
}

func withExpire(h *harness, fn func(ctx context.Context, n int, in wire.ExpireInput) (wire.ExpireResult, error)) *expireFake {
	f := &expireFake{h: h, fn: fn}
	h.env.RegisterActivityWithOptions(f.expire, activity.RegisterOptions{Name: workflows.ActivitySessionExpire})
	return f
}

func (f *expireFake) expire(ctx context.Context, in wire.ExpireInput) (wire.ExpireResult, error) {
	f.mu.Lock()
	f.calls = append(f.calls, in)
	f.at = append(f.at, f.h.env.Now())
	n := len(f.calls)
	f.mu.Unlock()
	return f.fn(ctx, n, in)
}

func (f *expireFake) times() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.at...)
}

const idleTTL = 2 * time.Hour

func idleHarness(t *testing.T) *harness {
	h := newHarness(t)
	h.openSettings = agentloop.Settings{IdleTTL: idleTTL}
	return h
}

// An idle session closes itself once idle for its TTL: a turn within the
// TTL restarts the clock; Session.Expire then runs once, with the end of
// the last turn, and the workflow completes.
func TestSessionIdleTTLExpires(t *testing.T) {
	t.Parallel()
	h := idleHarness(t)
	f := withExpire(h, func(context.Context, int, wire.ExpireInput) (wire.ExpireResult, error) {
		return wire.ExpireResult{Deleted: true, Entries: 4, IdleTTL: idleTTL}, nil
	})
	start := h.env.Now()
	t1 := h.turn(ms, "t1", "one")
	t2 := h.turn(90*time.Minute, "t2", "two")
	h.run(workflows.SessionInput{Session: "s"})
	if err := h.env.GetWorkflowError(); err != nil {
		t.Fatalf("workflow error %v, want it completed", err)
	}
	h.requireOK(t1, "t1")
	h.requireOK(t2, "t2")
	at := f.times()
	if len(at) != 1 {
		t.Fatalf("Session.Expire ran %d times, want 1", len(at))
	}
	if idle := at[0].Sub(start); idle < 90*time.Minute+idleTTL || idle > 90*time.Minute+idleTTL+time.Minute {
		t.Errorf("expired %s after the start, want the TTL after the second turn (%s)", idle, 90*time.Minute+idleTTL)
	}
	if since := f.calls[0].IdleSince.Sub(start); since < 90*time.Minute || since > 91*time.Minute {
		t.Errorf("idle since %s after the start, want the second turn's end", since)
	}
}

// A TTL lengthened since (Session.Expire deletes nothing and answers the
// new TTL) wins: the session waits the rest and expires then. A deletion
// that fails after its attempts leaves the session open, and it tries
// again a TTL later: never a workflow failure.
func TestSessionIdleTTLLengthenedOrFailing(t *testing.T) {
	t.Parallel()
	t.Run("lengthened", func(t *testing.T) {
		h := idleHarness(t)
		f := withExpire(h, func(_ context.Context, n int, _ wire.ExpireInput) (wire.ExpireResult, error) {
			if n == 1 {
				return wire.ExpireResult{IdleTTL: 5 * time.Hour}, nil
			}
			return wire.ExpireResult{Deleted: true, IdleTTL: 5 * time.Hour}, nil
		})
		start := h.env.Now()
		h.turn(ms, "t1", "one")
		h.run(workflows.SessionInput{Session: "s"})
		if err := h.env.GetWorkflowError(); err != nil {
			t.Fatalf("workflow error %v, want it completed", err)
		}
		at := f.times()
		if len(at) != 2 || at[0].Sub(start) > idleTTL+time.Minute || at[1].Sub(start) < 5*time.Hour || at[1].Sub(start) > 5*time.Hour+time.Minute {
			t.Fatalf("Session.Expire ran at %v after the start, want at the old TTL (2h) and at the new one (5h)", since(start, at))
		}
	})
	t.Run("failing", func(t *testing.T) {
		h := idleHarness(t)
		f := withExpire(h, func(context.Context, int, wire.ExpireInput) (wire.ExpireResult, error) {
			return wire.ExpireResult{}, errors.New("store down")
		})
		start := h.env.Now()
		h.turn(ms, "t1", "one")
		later := h.turn(5*time.Hour, "t2", "after the failures")
		h.runUntil(workflows.SessionInput{Session: "s"}, 6*time.Hour)
		h.requireCancelled()
		h.requireOK(later, "a turn after failed deletions")
		at := f.times()
		// Five attempts at 2h, five more a TTL later (4h).
		if len(at) != 10 || at[0].Sub(start) < idleTTL || at[5].Sub(start) < 2*idleTTL {
			t.Fatalf("Session.Expire ran %d times, at %v after the start; want 5 attempts at 2h and 5 at 4h", len(at), since(start, at))
		}
	})
}

func since(start time.Time, at []time.Time) []time.Duration {
	var out []time.Duration
	for _, a := range at {
		out = append(out, a.Sub(start).Round(time.Second))
	}
	return out
}

// While Session.Expire runs, a turn update is refused as session_busy
// (RefusedContinuing: the client sends it again, to a fresh session), and
// a delivery, which cannot be refused, goes to a fresh session: once the
// data is deleted the run continues as new with only that delivery queued.
func TestSessionIdleTTLMessageDuringExpiry(t *testing.T) {
	t.Parallel()
	h := idleHarness(t)
	withReplies(h)
	gate := make(chan struct{})
	entered := make(chan struct{})
	var once sync.Once
	withExpire(h, func(context.Context, int, wire.ExpireInput) (wire.ExpireResult, error) {
		once.Do(func() { close(entered) })
		if err := waitGate(gate); err != nil {
			return wire.ExpireResult{}, err
		}
		return wire.ExpireResult{Deleted: true, IdleTTL: idleTTL}, nil
	})
	h.turn(ms, "t1", "one")
	isEntered := func() bool {
		select {
		case <-entered:
			return true
		default:
			return false
		}
	}
	late := &update{}
	h.at(idleTTL-time.Second, func() {
		h.when(isEntered, func() {
			h.sendNow(late, workflows.UpdateTurn, "late", workflows.TurnRequest{Prompt: agent.Prompt{Text: "late"}})
			h.deliver(delivery("d1", "delivered meanwhile"))
			h.when(late.finished, func() { close(gate) })
		})
	})
	h.run(workflows.SessionInput{Session: "s"})
	app := h.requireRejected(late, agent.CodeSessionBusy)
	var why string
	if !app.HasDetails() || app.Details(&why) != nil || why != workflows.RefusedContinuing {
		t.Errorf("refusal during expiry: %v, want details %q", app, workflows.RefusedContinuing)
	}
	var can *workflow.ContinueAsNewError
	if err := h.env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("workflow error %v, want continue-as-new into a fresh session", err)
	}
	var in struct {
		Session  string `json:"session"`
		Snapshot struct {
			Opened bool   `json:"opened"`
			Turns  int64  `json:"turns"`
			IDP    string `json:"idPrefix"`
			Queue  []struct {
				Delivery workflows.Delivery `json:"delivery"`
			} `json:"queue"`
		} `json:"snapshot"`
	}
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &in); err != nil {
		t.Fatal(err)
	}
	s := in.Snapshot
	if in.Session != "s" || s.Opened || s.Turns != 0 || s.IDP != "" || len(s.Queue) != 1 || s.Queue[0].Delivery.Key != "d1" {
		t.Errorf("the next run's input %+v, want a fresh session holding only delivery d1", in)
	}
}

// A pending wake-up keeps an idle session open: it expires only a TTL
// after the turn the wake-up ran.
func TestSessionIdleTTLWaitsForAWakeUp(t *testing.T) {
	t.Parallel()
	r := newWakeRigWith(t, func(now time.Time, id string) *wakes.Wake {
		return &wakes.Wake{ID: id, Prompt: "check later", FireAt: now.Add(5 * time.Hour)}
	}, agentloop.Settings{IdleTTL: idleTTL})
	var (
		mu sync.Mutex
		at []time.Time
	)
	r.env.RegisterActivityWithOptions(func(context.Context, wire.ExpireInput) (wire.ExpireResult, error) {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, r.env.Now())
		return wire.ExpireResult{Deleted: true, IdleTTL: idleTTL}, nil
	}, activity.RegisterOptions{Name: workflows.ActivitySessionExpire})
	start := r.env.Now()
	r.turn(t, time.Second, "t1", "set a wake-up")
	r.env.RegisterDelayedCallback(r.env.CancelWorkflow, 20*time.Hour)
	r.env.ExecuteWorkflow(workflows.SessionWorkflowType, workflows.SessionInput{Session: "s"})
	if err := r.env.GetWorkflowError(); err != nil {
		t.Fatalf("workflow error %v, want it completed", err)
	}
	if len(r.woken()) != 1 {
		t.Fatalf("woken %q: the wake-up must fire before the session expires", r.woken())
	}
	if len(at) != 1 || at[0].Sub(start) < 5*time.Hour+idleTTL || at[0].Sub(start) > 5*time.Hour+idleTTL+10*time.Minute {
		t.Errorf("Session.Expire ran at %v after the start, want once, the TTL after the wake-up's turn (7h)", since(start, at))
	}
}
