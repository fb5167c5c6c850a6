package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/wire"
)

// Idle sessions (sessions.idleTTL). A session whose definition sets an idle
// TTL closes itself once it has been idle that long: no turn running or
// queued (so no approval or question pending either), no delivery or
// handler in flight, no wake-up pending. A durable timer, armed from the
// end of the last turn, fires; Session.Expire re-reads the definition's
// TTL and, when the session is still due, deletes its stored data through
// the deletion code of DELETE /sessions/{id}; the workflow then completes.
//
// While Session.Expire runs, turn updates, compactions and rewinds are
// refused as session_busy with RefusedContinuing (the ingress sends them
// again and they reach a fresh session); deliveries (SignalDeliver) cannot
// be refused, so those that arrive are carried into a fresh session: the
// run continues as new with nothing but them. A deletion that fails after
// its attempts leaves the session open, logged, and it tries again after
// another TTL: never a workflow failure.

// changeIdleTTL versions the idle timer and Session.Expire.
const changeIdleTTL = "session-idle-ttl"

// Session.Expire's bounds: a few attempts, then the session waits another
// TTL.
const (
	expireTimeout  = time.Minute
	expireAttempts = 5
)

// idleTTL is the definition's sessions.idleTTL as the session last read
// it (0: the session never expires; a sub-agent's session never does: its
// delegating session owns it).
func (s *session) idleTTL() time.Duration {
	if s.depth > 0 || !s.snap.Opened {
		return 0
	}
	return s.snap.Loop.Settings.IdleTTL
}

// idleSince is when the session last finished something (this run's start
// when it has not since the TTL was set).
func (s *session) idleSince() time.Time {
	if s.snap.IdleSince.After(s.runStart) {
		return s.snap.IdleSince
	}
	if s.snap.IdleSince.IsZero() {
		return s.runStart
	}
	return s.snap.IdleSince
}

// noteActive restarts the idle clock: a turn (or compaction, rewind) ended.
func (s *session) noteActive(ctx workflow.Context) {
	if s.idleTTL() > 0 {
		s.snap.IdleSince = workflow.Now(ctx)
	}
}

// armIdle arms the idle timer, when the session has a TTL and none is
// armed, for when the session will have been idle for its TTL. Turns do
// not reset the timer: when it fires, expireIdle finds the session active
// since and arms it again for the rest.
func (s *session) armIdle(ctx workflow.Context) {
	ttl := s.idleTTL()
	if ttl <= 0 || s.idleTimer != nil {
		return
	}
	if workflow.GetVersion(ctx, changeIdleTTL, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	d := max(s.idleSince().Add(ttl).Sub(workflow.Now(ctx)), time.Second)
	s.idleTimer = workflow.NewTimerWithOptions(s.root, d, workflow.TimerOptions{
		Summary: fmt.Sprintf("close the session once idle for %s (sessions.idleTTL)", ttl)})
}

// idleReached reports whether the idle timer fired.
func (s *session) idleReached() bool {
	return s.idleTimer != nil && s.idleTimer.IsReady()
}

// refuseExpiring refuses a turn, compaction or rewind while the session
// deletes itself: sent again, it reaches a fresh session.
func (s *session) refuseExpiring() error {
	if !s.expiring {
		return nil
	}
	return temporal.NewApplicationErrorWithOptions(
		"session busy: it is closing after being idle for its sessions.idleTTL; send the request again and it reaches a fresh session",
		agent.CodeSessionBusy, temporal.ApplicationErrorOptions{Details: []any{RefusedContinuing}})
}

// expireIdle runs when the idle timer fired between turns. It returns done
// when the session deleted its data and the run must end with err (nil:
// complete; a continue-as-new error: a fresh session for deliveries that
// arrived meanwhile). Otherwise the timer is re-armed by the main loop.
func (s *session) expireIdle(ctx workflow.Context) (done bool, err error) {
	s.idleTimer = nil
	ttl := s.idleTTL()
	now := workflow.Now(ctx)
	if ttl <= 0 {
		return false, nil
	}
	if len(s.queue) > 0 || s.running != nil || len(s.snap.Wakes) > 0 || s.waitingDeliveries() > 0 || s.draining ||
		s.replies > 0 || s.records > 0 || !workflow.AllHandlersFinished(ctx) {
		// Busy, or a wake-up is pending (it will run a turn): a whole TTL
		// again from now.
		s.snap.IdleSince = now
		return false, nil
	}
	since := s.idleSince()
	if since.Add(ttl).After(now) {
		return false, nil // active since the timer was armed
	}
	s.expiring = true
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: expireTimeout,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second,
			MaximumAttempts: expireAttempts},
		Summary: "expire · idle since " + since.UTC().Format(time.RFC3339),
	})
	var res wire.ExpireResult
	err = workflow.ExecuteActivity(actx, ActivitySessionExpire, wire.ExpireInput{Session: s.in.Session, IdleSince: since, Now: now}).Get(ctx, &res)
	if err != nil {
		s.expiring = false
		s.snap.IdleSince = workflow.Now(ctx)
		workflow.GetLogger(ctx).Error("idle session not deleted: it stays open and tries again after its idle TTL",
			"session", s.in.Session, "idleTTL", ttl, "error", err)
		return false, nil
	}
	if !res.Deleted {
		// The definition now sets a longer TTL, or none: it wins.
		s.expiring = false
		s.snap.Loop.Settings.IdleTTL = res.IdleTTL
		return false, nil
	}
	workflow.GetLogger(ctx).Info("idle session deleted", "session", s.in.Session, "idleTTL", res.IdleTTL,
		"entries", res.Entries, "subSessions", res.SubSessions)
	if err := s.awaitSettled(ctx); err != nil {
		return true, err
	}
	if len(s.queue) == 0 {
		return true, nil
	}
	// Deliveries arrived while the data was deleted: they run in a fresh
	// session of the same ID.
	s.stopCarriedLive(ctx)
	s.carryQueue()
	fresh := snapshot{Queue: s.snap.Queue, DrainOnDemand: s.snap.DrainOnDemand, StepRun: s.snap.StepRun}
	drainUpgrade(ctx)
	return true, workflow.NewContinueAsNewErrorWithOptions(ctx, upgradeOnContinue, SessionWorkflowType, SessionInput{
		Session:           s.in.Session,
		TurnsPerRun:       s.in.TurnsPerRun,
		IdempotencyWindow: s.in.IdempotencyWindow,
		RecentBytes:       s.in.RecentBytes,
		Snapshot:          &fresh,
	})
}
