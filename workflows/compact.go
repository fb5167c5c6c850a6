package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// Reasons for a compaction (CompactInput.Reason).
const ()

// maxCompactLevel bounds the compactions of one model step: L1 normal, L2
// forced (a quarter of keepRecentTokens); an overflow after L2 fails.
const maxCompactLevel = 2

// CompactResult is the result of ActivityCompact and UpdateCompact.
type CompactResult struct {
	// EntryID is the compaction entry, "" when nothing was compacted.
	EntryID string `json:"entryId,omitempty"`
	// FirstKept is the first entry kept verbatim after the summary.
	FirstKept string `json:"firstKept,omitempty"`
	// TokensBefore and TokensAfter size the context (estimates).
	TokensBefore int `json:"tokensBefore"`
	TokensAfter  int `json:"tokensAfter,omitempty"`
	// Summarized counts the messages folded into the summary.
	Summarized int `json:"summarized,omitempty"`
	// Skipped says why nothing was compacted.
	Skipped string `json:"skipped,omitempty"`
	// Usage is what the summary's model call used (nil: no call, or an
	// earlier attempt's entry was the result); the ingress charges a manual
	// compaction's to the caller (limits.perPrincipal.tokensPerDay).
	Usage *agent.Usage `json:"usage,omitempty"`
}

// CompactRequest is the argument of UpdateCompact.
type CompactRequest struct{}

// compactJob is a manual compaction waiting in the turn queue, so that it
// runs between turns, never beside one.
type compactJob struct {
	done   bool
	result CompactResult
	err    error
}

// generateWithin runs one model step within the context budget. The model
// activity measures the request it is about to send (it has the transcript;
// the workflow never does) and, when it is over the threshold, returns a
// ContextReport instead of calling the model; the workflow then runs the
// Compact activity and asks again below the compaction entry. Both facts are
// activity results in history, so the decision replays exactly; a step that
// fits costs no extra activity, and the measure is of the very request
// sent (after the user prompt, steering and tool results were added), which
// a size reported by the previous step could not be.
//
// A provider's context overflow is answered the same way (L1), then with a
// forced compaction (L2), then fails with CodeContextOverflow.
func (r *loopRuntime) generateWithin(call agentloop.ModelCall) (agentloop.ModelResult, error) {
	call.CheckContext = true
	level := 0
	for {
		res, err := r.generate(call)
		reason := wire.CompactThreshold
		var overflow *agent.Failure
		switch {
		case err == nil && res.Compact == nil:
			return res, nil
		case err == nil:
			if level >= maxCompactLevel {
				// Compacting again cannot help: the provider judges.
				call.CheckContext = false
				continue
			}
		case errors.As(err, &overflow) && overflow.Code == agent.CodeContextOverflow:
			if level >= maxCompactLevel {
				return res, overflowFailure(overflow, fmt.Sprintf("even after compacting it %d times", level))
			}
			reason = wire.CompactOverflow
		default:
			return res, err
		}
		if skip, why := r.beforeCompact(call, reason); skip {
			if overflow != nil {
				return res, overflowFailure(overflow, "and a before_compact hook refused to compact it: "+why)
			}
			// Sent as it is; an overflow comes back here and fails.
			call.CheckContext = false
			continue
		}
		level++
		leaf := call.Leaf
		if n := len(call.Prepend); n > 0 {
			leaf = call.Prepend[n-1].ID
		}
		if res.Compact != nil && res.Compact.Leaf != "" {
			leaf = res.Compact.Leaf
		}
		cres, err := r.s.compact(r.ctx, wire.CompactInput{
			Session: call.Session, Leaf: leaf, EntryID: r.NewID(), Reason: reason, Force: level == maxCompactLevel, Turn: call.Turn,
		})
		if err != nil {
			if r.aborted() {
				return res, &agent.Failure{Details: "aborted", Code: agent.CodeAborted}
			}
			return res, compactFailure(err)
		}
		if cres.EntryID == "" {
			if overflow != nil {
				return res, overflowFailure(overflow, "and it could not be compacted: "+cres.Skipped)
			}
			// Nothing to summarize: send it; an overflow escalates.
			call.CheckContext = false
			continue
		}
		// The step's pending entries are stored: the call continues below
		// the compaction entry.
		call.Leaf, call.Prepend = cres.EntryID, nil
	}
}

// compact runs ActivityCompact.
func (s *session) compact(ctx workflow.Context, in wire.CompactInput) (CompactResult, error) {
	set := s.snap.Loop.Settings
	attempts := orInt(set.ModelAttempts, defaultModelAttempts)
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           set.ModelTaskQueue,
		StartToCloseTimeout: orDur(set.ModelTimeout, defaultModelTimeout),
		HeartbeatTimeout:    orDur(set.Heartbeat, defaultHeartbeat),
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    time.Minute,
			MaximumAttempts:    int32(attempts),
		},
		Summary: "compact · " + in.Session,
	})
	var res CompactResult
	err := workflow.ExecuteActivity(actx, ActivityCompact, in).Get(actx, &res)
	return res, err
}

// overflowFailure ends a turn whose context the provider keeps refusing.
func overflowFailure(f *agent.Failure, why string) *agent.Failure {
	return &agent.Failure{
		Details: fmt.Sprintf("the conversation does not fit the model's context window %s (%s); "+
			"start a new session, or set contextWindow or lower compaction.keepRecentTokens in fastagent.yaml", why, f.Details),
		Code: agent.CodeContextOverflow,
	}
}

// compactFailure ends a turn whose compaction failed.
func compactFailure(err error) *agent.Failure {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return &agent.Failure{Details: "compacting the context failed: " + app.Message(), Code: app.Type(), Retryable: !app.NonRetryable()}
	}
	return &agent.Failure{Details: "compacting the context failed: " + rootCause(err), Retryable: true}
}

// validateCompact admits a manual compaction on the same terms as a turn.
func (s *session) validateCompact(_ workflow.Context, _ CompactRequest) error {
	if err := s.refuseExpiring(); err != nil {
		return err
	}
	if s.rollover {
		return temporal.NewApplicationErrorWithOptions(
			"session busy: it is moving to a fresh workflow history after its queued turns; retry in a moment",
			agent.CodeSessionBusy, temporal.ApplicationErrorOptions{})
	}
	if len(s.queue) >= MaxQueuedTurns {
		return temporal.NewApplicationErrorWithOptions(
			fmt.Sprintf("session busy: %d turns are already waiting; retry later", len(s.queue)),
			agent.CodeSessionBusy, temporal.ApplicationErrorOptions{})
	}
	return nil
}

// onCompact queues a manual compaction behind the session's turns and
// returns its result.
func (s *session) onCompact(ctx workflow.Context, _ CompactRequest) (CompactResult, error) {
	job := &compactJob{}
	s.queue = append(s.queue, &pendingTurn{id: workflow.GetCurrentUpdateInfo(ctx).ID, compact: job})
	s.noteDepth(ctx)
	if err := workflow.Await(ctx, func() bool { return job.done }); err != nil {
		return CompactResult{}, err
	}
	return job.result, job.err
}

// runCompaction serves a queued manual compaction at the session's leaf.
func (s *session) runCompaction(ctx workflow.Context, t *pendingTurn) {
	job := t.compact
	defer func() { job.done = true }()
	if s.snap.Loop.Leaf == "" {
		job.result = CompactResult{Skipped: "the session has no messages yet"}
		return
	}
	s.nonce = turnNonce(ctx, s.snap.IDPrefix)
	res, err := s.compact(ctx, wire.CompactInput{Session: s.in.Session, Leaf: s.snap.Loop.Leaf, EntryID: s.nextID(), Reason: wire.CompactManual})
	if err != nil {
		f := compactFailure(err)
		code := f.Code
		if code == "" {
			code = agent.CodeModel
		}
		job.err = temporal.NewApplicationErrorWithOptions(f.Details, code, temporal.ApplicationErrorOptions{NonRetryable: true})
		return
	}
	if res.EntryID != "" {
		s.snap.Loop.Leaf = res.EntryID
	}
	job.result = res
}
