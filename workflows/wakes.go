package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows/agentloop"
	"github.com/fastagent/fastagent/workflows/wakes"
)

// WakeRecord is one fired wake-up and how its turn ended.
type WakeRecord struct {
	ID      string    `json:"id"`
	Turn    string    `json:"turn"`
	FiredAt time.Time `json:"firedAt"`
	Status  string    `json:"status"`
	Details string    `json:"details,omitempty"`
}

// wakeLogLimit bounds snapshot.WakeLog.
const wakeLogLimit = 20

// armWakes starts a durable timer for every pending wake-up (at start and
// after continue-as-new).
func (s *session) armWakes(ctx workflow.Context) {
	for _, w := range s.snap.Wakes {
		s.arm(ctx, w)
	}
}

// arm starts one wake-up's timer in its own coroutine; unwake cancels it.
func (s *session) arm(ctx workflow.Context, w wakes.Wake) {
	tctx, cancel := workflow.WithCancel(ctx)
	if s.wakeCancel == nil {
		s.wakeCancel = map[string]workflow.CancelFunc{}
	}
	s.wakeCancel[w.ID] = cancel
	workflow.Go(tctx, func(ctx workflow.Context) {
		d := w.FireAt.Sub(workflow.Now(ctx))
		if d < time.Millisecond {
			d = time.Millisecond
		}
		summary := fmt.Sprintf("wake %s: %s", w.ID, preview(w.Prompt, 60))
		if w.Recurring() {
			summary += fmt.Sprintf(" (cron %s %s)", w.Cron, w.TZ)
		}
		if err := workflow.NewTimerWithOptions(ctx, d, workflow.TimerOptions{Summary: summary}).Get(ctx, nil); err != nil {
			return // cancelled by unwake
		}
		s.fire(ctx, w.ID)
	})
}

// fire queues the woken turn and re-arms (recurring) or forgets (one-shot)
// the wake-up. A woken turn waits its turn like any other.
func (s *session) fire(ctx workflow.Context, id string) {
	i := s.wakeIndex(id)
	if i < 0 {
		return
	}
	w := s.snap.Wakes[i]
	w.Fired++
	// Unique per workflow chain: a session started again after a terminate
	// numbers its wake-ups from 1 again.
	turn := fmt.Sprintf("%swake:%s:%s:%d", InternalKeyPrefix, s.snap.IDPrefix, w.ID, w.Fired)
	s.queue = append(s.queue, &pendingTurn{
		id:   turn,
		req:  TurnRequest{Prompt: agent.Prompt{Text: wakes.Envelope(w.ID, w.Prompt)}, Source: "wake"},
		wake: w.ID,
	})
	s.noteDepth(ctx)
	if !w.Recurring() {
		s.removeWake(id)
		return
	}
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
	})
	var next time.Time
	if err := workflow.ExecuteLocalActivity(lctx, ActivityWakeNext, wire.NextWakeInput{Cron: w.Cron, TZ: w.TZ, After: w.FireAt}).Get(ctx, &next); err != nil {
		workflow.GetLogger(ctx).Error("recurring wake-up dropped: next instant unknown", "wake", id, "error", err)
		s.removeWake(id)
		return
	}
	if i = s.wakeIndex(id); i < 0 {
		return // cancelled meanwhile
	}
	w.FireAt = next
	s.snap.Wakes[i] = w
	s.arm(s.root, w)
}

func (s *session) wakeIndex(id string) int {
	for i, w := range s.snap.Wakes {
		if w.ID == id {
			return i
		}
	}
	return -1
}

func (s *session) removeWake(id string) {
	if i := s.wakeIndex(id); i >= 0 {
		s.snap.Wakes = append(s.snap.Wakes[:i:i], s.snap.Wakes[i+1:]...)
	}
	if cancel, ok := s.wakeCancel[id]; ok {
		cancel()
		delete(s.wakeCancel, id)
	}
}

// applyWakes carries out the wake/unwake directives of a tool batch.
func (s *session) applyWakes(outs []agentloop.ToolOutcome) {
	for _, o := range outs {
		switch {
		case o.Wake != nil:
			if s.wakeIndex(o.Wake.ID) >= 0 || len(s.snap.Wakes) >= wakes.DefaultMaxPending {
				continue
			}
			s.snap.WakeSeq++
			s.snap.Wakes = append(s.snap.Wakes, *o.Wake)
			s.arm(s.root, *o.Wake)
		case o.Unwake != "":
			s.removeWake(o.Unwake)
		}
	}
}

// wakeIDs lists pending wake-up IDs for the wake/unwake tools.
func (s *session) wakeIDs() []string {
	ids := make([]string, len(s.snap.Wakes))
	for i, w := range s.snap.Wakes {
		ids[i] = w.ID
	}
	return ids
}

func (s *session) nextWakeID() string { return fmt.Sprintf("w%d", s.snap.WakeSeq+1) }

func (s *session) logWake(t *pendingTurn, out agentloop.Outcome, firedAt time.Time) {
	s.snap.WakeLog = append(s.snap.WakeLog, WakeRecord{ID: t.wake, Turn: t.id, FiredAt: firedAt, Status: out.Status, Details: out.Details})
	if n := len(s.snap.WakeLog) - wakeLogLimit; n > 0 {
		s.snap.WakeLog = append([]WakeRecord(nil), s.snap.WakeLog[n:]...)
	}
}

func preview(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
