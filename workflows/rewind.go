package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/wire"
)

// RewindRequest is the argument of UpdateRewind: the entry that becomes the
// session's leaf.
type RewindRequest struct {
	Entry string `json:"entry"`
}

// RewindResult is the result of ActivityRewind and UpdateRewind.
type RewindResult struct {
	// Leaf is the session's new leaf: the branch-summary entry, or Entry
	// itself when nothing was abandoned.
	Leaf string `json:"leaf"`
	// Entry is the target; From the leaf moved away from.
	Entry string `json:"entry"`
	From  string `json:"from"`
	// SummaryEntry is the branch-summary entry ("" none); Abandoned counts
	// the messages it summarizes.
	SummaryEntry string `json:"summaryEntry,omitempty"`
	Abandoned    int    `json:"abandoned"`
	Summary      string `json:"summary,omitempty"`
	// Usage is what the branch summary's model call used (nil: none); the
	// ingress charges it to the caller (limits.perPrincipal.tokensPerDay).
	Usage *agent.Usage `json:"usage,omitempty"`
}

// rewindJob is a rewind waiting in the turn queue.
type rewindJob struct {
	req    RewindRequest
	done   bool
	result RewindResult
	err    error
}

// validateRewind admits a rewind only between turns: a running or queued
// turn is CodeTurnRunning (the caller waits or aborts it first).
func (s *session) validateRewind(_ workflow.Context, req RewindRequest) error {
	if err := s.refuseExpiring(); err != nil {
		return err
	}
	if strings.TrimSpace(req.Entry) == "" {
		return temporal.NewApplicationErrorWithOptions(`need { "entry": string }`, agent.CodeInvalidCommand,
			temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	if s.running != nil || len(s.queue) > 0 {
		return temporal.NewApplicationErrorWithOptions(
			"a turn is running or waiting in this session; rewind between turns (wait, or abort it first)",
			agent.CodeTurnRunning, temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	if s.rollover {
		return temporal.NewApplicationErrorWithOptions(
			"session busy: it is moving to a fresh workflow history; retry in a moment",
			agent.CodeSessionBusy, temporal.ApplicationErrorOptions{})
	}
	if s.snap.Loop.Leaf == "" {
		return temporal.NewApplicationErrorWithOptions("the session has no entries to rewind to", agent.CodeNotFound,
			temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	return nil
}

// onRewind queues the rewind (so it runs between turns) and returns its result.
func (s *session) onRewind(ctx workflow.Context, req RewindRequest) (RewindResult, error) {
	job := &rewindJob{req: req}
	s.queue = append(s.queue, &pendingTurn{id: workflow.GetCurrentUpdateInfo(ctx).ID, rewind: job})
	s.noteDepth(ctx)
	if err := workflow.Await(ctx, func() bool { return job.done }); err != nil {
		return RewindResult{}, err
	}
	return job.result, job.err
}

// runRewind serves a queued rewind: ActivityRewind summarizes the abandoned
// branch and the leaf moves to what it returns.
func (s *session) runRewind(ctx workflow.Context, t *pendingTurn) {
	job := t.rewind
	defer func() { job.done = true }()
	s.nonce = turnNonce(ctx, s.snap.IDPrefix)
	in := wire.RewindInput{Session: s.in.Session, Leaf: s.snap.Loop.Leaf, Entry: job.req.Entry, EntryID: s.nextID()}
	set := s.snap.Loop.Settings
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           set.ModelTaskQueue,
		StartToCloseTimeout: orDur(set.ModelTimeout, defaultModelTimeout),
		HeartbeatTimeout:    orDur(set.Heartbeat, defaultHeartbeat),
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    time.Minute,
			MaximumAttempts:    int32(orInt(set.ModelAttempts, defaultModelAttempts)),
		},
		Summary: "rewind · " + s.in.Session,
	})
	var res RewindResult
	if err := workflow.ExecuteActivity(actx, ActivityRewind, in).Get(actx, &res); err != nil {
		f := compactFailure(err)
		code := f.Code
		if code == "" {
			code = agent.CodeModel
		}
		job.err = temporal.NewApplicationErrorWithOptions(strings.Replace(f.Details, "compacting the context", "rewinding the session", 1), code,
			temporal.ApplicationErrorOptions{NonRetryable: true})
		return
	}
	if res.Leaf == "" {
		job.err = temporal.NewApplicationErrorWithOptions(fmt.Sprintf("rewind to %q returned no leaf", job.req.Entry), agent.CodeStore,
			temporal.ApplicationErrorOptions{NonRetryable: true})
		return
	}
	s.snap.Loop.Leaf = res.Leaf
	job.result = res
}
