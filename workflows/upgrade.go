package workflows

import "go.temporal.io/sdk/workflow"

// upgradeOnContinue starts every next run of a long-lived workflow on its
// Worker Deployment's current version. Runs are pinned to the version whose
// worker started them (worker.Options.Deployment), so a history is only ever replayed
// by the code that wrote it; continue-as-new is where a session or chat
// moves to new code, with nothing but its snapshot. Unversioned workers
// ignore it.
var upgradeOnContinue = workflow.ContinueAsNewErrorOptions{
	InitialVersioningBehavior: workflow.ContinueAsNewVersioningBehaviorAutoUpgrade,
}

// targetMoved reports whether the server said, on any workflow task of this
// run, that the deployment's current (or ramping) version for this workflow
// is no longer the run's pinned version. It latches: the run then ends at
// its next idle point and continues as new onto the new version.
func (s *session) targetMoved(ctx workflow.Context) bool {
	if !s.moved && workflow.GetInfo(ctx).GetTargetWorkerDeploymentVersionChanged() {
		s.moved = true
	}
	return s.moved
}

// limit is the run's turns-per-run bound.
func (s *session) limit() int {
	if s.in.TurnsPerRun > 0 {
		return s.in.TurnsPerRun
	}
	return turnsPerRun
}

// drainUpgrade consumes the SignalUpgrades this run received. The signal's
// only purpose is the workflow task it causes, on which the server reports a
// moved target; consuming it just before continue-as-new keeps it from being
// carried (or dropped with a warning). No listener coroutine waits for it:
// each is a goroutine with its own stack for as long as the session is
// cached.
func drainUpgrade(ctx workflow.Context) {
	ch := workflow.GetSignalChannel(ctx, SignalUpgrade)
	for ch.ReceiveAsync(nil) {
	}
}
