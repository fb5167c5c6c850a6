package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
)

// busyDown is a channel whose busy notices fail (the receiver is down:
// each is retried for about eight minutes) while answers go through.
type busyDown struct {
	mu      sync.Mutex
	busy    []string
	answers []string
	down    bool
}

func withBusyDown(h *harness) *busyDown {
	b := &busyDown{down: true}
	h.env.RegisterActivityWithOptions(func(_ context.Context, in wire.ReplyInput) error {
		b.mu.Lock()
		defer b.mu.Unlock()
		if !in.Busy {
			b.answers = append(b.answers, in.Turn)
			return nil
		}
		if b.down {
			return errors.New("receiver down")
		}
		b.busy = append(b.busy, in.Turn)
		return nil
	}, activity.RegisterOptions{Name: workflows.ActivityChannelReply})
	h.env.RegisterActivityWithOptions(func(context.Context, wire.StreamInput) error { return nil },
		activity.RegisterOptions{Name: workflows.ActivityChannelStream})
	return b
}

// A session rolling over with a full queue does not wait for refusals
// that keep coming: a steady flood of refused deliveries whose busy
// notices keep failing (each retried for minutes, so one is always in
// flight) used to hold continue-as-new, and with it every queued turn,
// for as long as the flood lasted. Refusals that reach a run rolling over
// are carried to the next run (their record and notice done there), and
// the run continues as new once what it started has settled.
func TestSessionRolloverNotHeldByRefusals(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	withBusyDown(h)
	big, more := strings.Repeat("x", 190<<10), strings.Repeat("y", 10<<10)
	h.at(ms, func() {
		h.deliver(delivery("k0", "first"))
		for i := 1; i <= 4; i++ {
			h.deliver(delivery(fmt.Sprintf("k%d", i), big)) // the queue is full
		}
		h.deliver(delivery("r0", more)) // refused: its notice keeps failing
	})
	const flood = 6 * time.Hour
	var keys []string
	for at := time.Minute; at < flood; at += 2 * time.Minute {
		k := fmt.Sprintf("f%d", len(keys))
		keys = append(keys, k)
		h.at(at, func() { h.deliver(delivery(k, more)) })
	}
	h.runUntil(workflows.SessionInput{Session: "s1", TurnsPerRun: 1}, flood+time.Minute)
	var can *workflow.ContinueAsNewError
	if err := h.env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("workflow error = %v: the run never continued as new while refusals kept coming, and k1..k4 waited %s", err, flood)
	}
	in := continued(t, h)
	equal(t, "turns carried", len(in.Snapshot.Queue), 4)

	// The next run (the receiver back) sends the notices carried to it.
	next := newHarness(t)
	b := withBusyDown(next)
	b.down = false
	next.run(in)
	carried := 0
	for _, r := range in.Snapshot.Refusals {
		if r.Reply != nil {
			carried++
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if carried == 0 || len(b.busy) != carried {
		t.Errorf("notices sent by the next run: %v, want the %d carried to it", b.busy, carried)
	}
}
