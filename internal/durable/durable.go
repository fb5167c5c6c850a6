// Package durable is the Agent implementation backed by Temporal session
// workflows. Invoke subscribes to the turn's live-feed log, sends the turn
// with Update-with-Start (the update ID is the idempotency key, so a
// redelivery is the same turn, and re-sending the key re-attaches to it),
// relays the feed, and ends with the terminal taken from the update's
// outcome. A consumer that goes away aborts the turn at once, unless it
// asked to be able to come back (agent.WithResumeWithin): then the turn
// detaches, keeps running, and is aborted only if nobody re-attaches within
// that time (at most DetachGrace). Attach follows a
// turn without sending one. It also offers the session control plane: abort,
// steer, approve and state.
package durable

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/relay"
	"github.com/fastagent/fastagent/internal/sessionstart"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/turnusage"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// Agent runs turns on session workflows.
type Agent struct {
	Client client.Client
	Feed   feed.Bus
	// TaskQueue defaults to workflows.TaskQueue.
	TaskQueue string
	// Grace bounds the wait for the feed to catch up with the outcome.
	Grace  time.Duration
	Logger *slog.Logger
	// TurnsPerRun is passed to new session workflows (0 = the workflow's default).
	TurnsPerRun int
	// Store is the session store, read to fill in answer text the live feed
	// lost or no longer keeps, and to find finished turns; nil disables both.
	Store store.Store
	// DetachGrace is the longest a turn whose consumer went away keeps
	// running, waiting for a consumer to re-attach, when its consumer asked
	// for that (agent.WithResumeWithin); 0 allows none. A consumer that did
	// not ask aborts its turn when it goes away (the Agent contract's
	// consumer break).
	DetachGrace time.Duration
	// WhileBusy is the agent's conversation.whileBusy: what a turn whose
	// caller chose no mode (agent.WithWhileBusy) does when its session is
	// busy ("": queue). Steering is the door's to try (the ingress steers
	// the running turn, UpdateSteer); a turn that reaches the session
	// with steer queues.
	WhileBusy string
	// PinnedCheck is how long a turn's workflow task may wait for a worker
	// before the agent checks whether the session is pinned to a build no
	// worker runs (see unserved); 0 means DefaultPinnedCheck.
	PinnedCheck time.Duration
}

var _ agent.Agent = (*Agent)(nil)

// Invoke runs one turn. See the package doc.
func (a *Agent) Invoke(ctx context.Context, scope agent.Scope, prompt agent.Prompt) iter.Seq[agent.Event] {
	return func(yield func(agent.Event) bool) {
		if scope.Session == "" {
			yield(agent.Failed("scope.session is required", false, agent.CodeInvalidCommand))
			return
		}
		key := agent.IdempotencyKey(ctx)
		if key == "" {
			key = NewKey()
		}
		source := agent.Source(ctx)
		ctx = agent.WithWhileBusy(ctx, a.whileBusy(ctx))
		relay.Stream(ctx, a.Feed, scope.Session, key, a.streamOptions(ctx, scope.Session, key, true),
			func(ctx context.Context) relay.Terminal {
				return a.turn(ctx, scope, prompt, key, source)
			}, yield)
	}
}

func (a *Agent) streamOptions(ctx context.Context, session, key string, owner bool) relay.StreamOptions {
	grace := min(agent.ResumeWithin(ctx), max(a.DetachGrace, 0))
	opt := relay.StreamOptions{
		Options: relay.Options{
			Grace:  a.Grace,
			After:  agent.ResumeAfter(ctx),
			Stored: relay.StoreReader(a.Store, session),
			Logger: a.Logger,
		},
		DetachGrace: grace,
		Abort:       func(context.Context) {}, // an observer leaving aborts nothing
		Ended:       agent.TakeTurnEnd(ctx),
	}
	if owner {
		opt.Abort = func(ctx context.Context) {
			reason := "the client disconnected"
			if grace > 0 {
				reason += " and did not re-attach within " + grace.String()
			}
			if _, err := a.Abort(ctx, session, key, reason); err != nil && !IsNoActiveRun(err) {
				a.log().Warn("abort after client disconnect failed", "session", session, "turn", key, "error", err)
			}
		}
	}
	return opt
}

// turn sends the update and waits for its outcome. An error that says
// nothing about the turn (the connection to Temporal dropped, a poll timed
// out, the workflow moved to a new run) is not a failure of the turn: the
// update is sent again with the same ID, which re-attaches to it (or returns
// its recorded outcome), until ctx ends.
func (a *Agent) turn(ctx context.Context, scope agent.Scope, prompt agent.Prompt, key, source string) relay.Terminal {
	ctx, stop := a.watchUnserved(ctx, scope.Session)
	defer stop()
	backoff := 100 * time.Millisecond
	for {
		out, err := a.updateTurn(ctx, scope, prompt, key, source)
		if err == nil {
			turnusage.Send(ctx, a.Feed, scope.Session, key, out)
			return relay.FromOutcome(out, a.stored(scope.Session, out))
		}
		if cause := unservedCause(ctx); cause != nil {
			return relay.Terminal{Event: agent.Failed(cause.Message, true, cause.Code)}
		}
		if ctx.Err() != nil || settled(err) {
			return relay.Terminal{Event: failure(err)}
		}
		a.log().Warn("turn outcome not known yet; asking again", "session", scope.Session, "turn", key, "error", err)
		select {
		case <-ctx.Done():
			return relay.Terminal{Event: failure(err)}
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (a *Agent) updateTurn(ctx context.Context, scope agent.Scope, prompt agent.Prompt, key, source string) (agentloop.Outcome, error) {
	out, err := a.updateTurnWith(ctx, scope, prompt, key, source, true)
	if sessionstart.Unregistered(err) {
		a.log().Warn(sessionstart.Hint, "error", err)
		out, err = a.updateTurnWith(ctx, scope, prompt, key, source, false)
	}
	return out, err
}

// startOptions are the start options of session's workflow, with the
// principal of ctx and the channel source as search attributes when search.
func (a *Agent) startOptions(ctx context.Context, session, source string, search bool) client.StartWorkflowOptions {
	if source == "" {
		source = "api"
	}
	return sessionstart.Options(session, a.TaskQueue, workflows.SessionAttrs{Principal: agent.Principal(ctx), Channel: source}, search)
}

func (a *Agent) updateTurnWith(ctx context.Context, scope agent.Scope, prompt agent.Prompt, key, source string, search bool) (agentloop.Outcome, error) {
	start := a.Client.NewWithStartWorkflowOperation(a.startOptions(ctx, scope.Session, source, search),
		workflows.SessionWorkflowType, workflows.SessionInput{
			Session:       scope.Session,
			ParentSession: scope.ParentSession,
			BranchHints:   scope.BranchHints,
			FromEntry:     scope.FromEntry,
			TurnsPerRun:   a.TurnsPerRun,
		})
	h, err := a.Client.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateID:     key,
			UpdateName:   workflows.UpdateTurn,
			Args:         []any{workflows.TurnRequest{Prompt: prompt, Source: source, WhileBusy: agent.WhileBusy(ctx)}},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	var out agentloop.Outcome
	if err == nil {
		err = h.Get(ctx, &out)
	}
	return out, err
}

// settled reports whether err is the turn's own answer (a rejection or a
// failure of the update) rather than a failure to learn it. A turn that
// reached its session while the run continued as new is not settled: it
// never reached the workflow, and sent again it reaches the new run.
func settled(err error) bool {
	if closing(err) || refusedContinuing(err) {
		return false
	}
	var app *temporal.ApplicationError
	var exhausted *serviceerror.ResourceExhausted
	var invalid *serviceerror.InvalidArgument
	return errors.As(err, &app) || errors.As(err, &exhausted) || errors.As(err, &invalid)
}

// refusedContinuing reports whether err is the session workflow's refusal
// of a turn that reached its run as the run was about to continue as new
// (workflows.RefusedContinuing): the turn never started, and sent again it
// reaches the next run. A client that sends its next turn once the previous
// one answered meets this when that answer ended the run.
func refusedContinuing(err error) bool {
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != agent.CodeSessionBusy || !app.HasDetails() {
		return false
	}
	var why string
	return app.Details(&why) == nil && why == workflows.RefusedContinuing
}

// closing reports whether err is the server's answer to an update that
// arrived while the workflow's run was closing (continuing as new) and was
// never handed to the workflow. The server gives it the "busy workflow"
// cause it also gives a full update queue, and tells the two apart only in
// the message; it expects the update to be sent again.
func closing(err error) bool {
	var exhausted *serviceerror.ResourceExhausted
	return errors.As(err, &exhausted) && exhausted.Cause == enumspb.RESOURCE_EXHAUSTED_CAUSE_BUSY_WORKFLOW &&
		strings.Contains(exhausted.Message, "workflow is closing")
}

// stored reads a finished turn's answer from the store (nil without one).
func (a *Agent) stored(session string, out agentloop.Outcome) func(ctx context.Context) ([]string, error) {
	if a.Store == nil {
		return nil
	}
	return func(ctx context.Context) ([]string, error) { return relay.StoredSteps(ctx, a.Store, session, out) }
}

// Attach follows the turn with idempotency key key in session — running,
// queued, or finished — without sending it: the turn's events from the
// start (or after agent.ResumeAfter(ctx)) and its terminal. It fails with
// an *agent.Error coded no_such_turn (or no_such_session) before streaming
// when the turn is unknown. A consumer of Attach leaving aborts nothing.
func (a *Agent) Attach(ctx context.Context, session, key string) (iter.Seq[agent.Event], error) {
	if session == "" || key == "" {
		return nil, agent.NewError(agent.CodeNoSuchTurn, "a session and a turn key are required")
	}
	finished, live, err := a.find(ctx, session, key)
	if err != nil {
		return nil, err
	}
	if finished == nil && !live {
		return nil, agent.NewError(agent.CodeNoSuchTurn, fmt.Sprintf("no turn %q in session %q (it may have finished more than a day ago)", key, session))
	}
	return func(yield func(agent.Event) bool) {
		relay.Stream(ctx, a.Feed, session, key, a.streamOptions(ctx, session, key, false),
			func(ctx context.Context) relay.Terminal {
				if finished != nil {
					turnusage.Send(ctx, a.Feed, session, key, *finished)
					return relay.FromOutcome(*finished, a.stored(session, *finished))
				}
				return a.await(ctx, session, key)
			}, yield)
	}, nil
}

// find says whether key is a finished turn of session (its outcome) or a
// live one (running or queued).
func (a *Agent) find(ctx context.Context, session, key string) (*agentloop.Outcome, bool, error) {
	if out, err := a.recorded(ctx, session, key); err == nil {
		return out, false, nil
	}
	v, err := a.State(ctx, session)
	if err != nil {
		return nil, false, err
	}
	if v.Running == key || slices.Contains(v.Queued, key) {
		return nil, true, nil
	}
	// Finished in the current run but not recorded yet.
	gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var out agentloop.Outcome
	if err := a.Client.GetWorkflowUpdateHandle(client.GetWorkflowUpdateHandleOptions{
		WorkflowID: workflows.WorkflowID(session), UpdateID: key,
	}).Get(gctx, &out); err == nil {
		return &out, false, nil
	}
	return nil, false, nil
}

// await waits for a live turn's outcome: from its update when it has one,
// else (a follow-up or wake turn) from the turn record once it is written;
// the relay also takes it from the feed's outcome message.
func (a *Agent) await(ctx context.Context, session, key string) relay.Terminal {
	var out agentloop.Outcome
	err := a.Client.GetWorkflowUpdateHandle(client.GetWorkflowUpdateHandleOptions{
		WorkflowID: workflows.WorkflowID(session), UpdateID: key,
	}).Get(ctx, &out)
	if err == nil {
		turnusage.Send(ctx, a.Feed, session, key, out)
		return relay.FromOutcome(out, a.stored(session, out))
	}
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return relay.Terminal{Event: failure(err)}
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return relay.Terminal{Event: failure(ctx.Err())}
		case <-tick.C:
			if o, err := a.recorded(ctx, session, key); err == nil {
				turnusage.Send(ctx, a.Feed, session, key, *o)
				return relay.FromOutcome(*o, a.stored(session, *o))
			}
		}
	}
}

// recorded reads a finished turn's outcome from the store's turn records.
func (a *Agent) recorded(ctx context.Context, session, key string) (*agentloop.Outcome, error) {
	if a.Store == nil {
		return nil, store.ErrNotFound
	}
	return lookupTurn(ctx, a.Store, session, key)
}

// failure maps an error from the update to a failed event.
func failure(err error) agent.Event {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		// The rejection's type is already a contract code.
		retryable := !app.NonRetryable() && app.Type() != agent.CodeInvalidCommand
		return agent.Failed(app.Message(), retryable || app.Type() == agent.CodeSessionBusy, app.Type())
	}
	var exhausted *serviceerror.ResourceExhausted
	if errors.As(err, &exhausted) {
		return agent.Failed("session busy: too many turns in flight ("+exhausted.Message+"); retry later", true, agent.CodeSessionBusy)
	}
	return agent.Failed("the session could not be reached: "+err.Error(), true, "")
}

// Abort stops the running turn (turn == "") or the named running/queued one.
func (a *Agent) Abort(ctx context.Context, session, turn, reason string) (string, error) {
	var res workflows.AbortResult
	err := a.update(ctx, session, workflows.UpdateAbort, workflows.AbortRequest{Turn: turn, Reason: reason}, &res)
	return res.Turn, err
}

// whileBusy is the mode a turn is sent with: the caller's, else the
// agent's; steer (tried by the door already, or not possible) queues.
func (a *Agent) whileBusy(ctx context.Context) string {
	mode := agent.WhileBusy(ctx)
	if mode == "" {
		mode = a.WhileBusy
	}
	if mode == workflows.WhileBusySteer || mode == workflows.WhileBusyQueue {
		return ""
	}
	return mode
}

// SteerTurn adds a message that turn reads after its current step, only
// while turn is the one running (else agent.CodeNoActiveRun).
func (a *Agent) SteerTurn(ctx context.Context, session, turn, text string) error {
	return a.update(ctx, session, workflows.UpdateSteer, workflows.SteerRequest{Text: text, Turn: turn}, nil)
}

// DefaultWhileBusy is the agent's conversation.whileBusy ("": queue).
func (a *Agent) DefaultWhileBusy() string { return a.WhileBusy }

// Steer adds a message the running turn reads after its current step.
func (a *Agent) Steer(ctx context.Context, session, text string) error {
	return a.update(ctx, session, workflows.UpdateSteer, workflows.SteerRequest{Text: text}, nil)
}

// Approve answers a tool call waiting for approval. With req.ArgsHash or
// req.DefinitionHash set, a call that no longer has them is refused
// (agent.CodeCallChanged) and stays pending.
func (a *Agent) Approve(ctx context.Context, session string, req workflows.ApproveRequest) error {
	return a.update(ctx, session, workflows.UpdateApprove, req, nil)
}

// Answer answers a question the session's running turn asked (ask_user):
// the text becomes the call's result.
func (a *Agent) Answer(ctx context.Context, session string, req workflows.AnswerRequest) error {
	return a.update(ctx, session, workflows.UpdateAnswer, req, nil)
}

// Resend sends the channel reply of turn, which failed after its retries,
// once more (UpdateResend).
func (a *Agent) Resend(ctx context.Context, session, turn string) error {
	return a.update(ctx, session, workflows.UpdateResend, workflows.ResendRequest{Turn: turn}, nil)
}

// Compact compacts a session's context between its turns (UpdateCompact).
func (a *Agent) Compact(ctx context.Context, session string) (workflows.CompactResult, error) {
	var res workflows.CompactResult
	err := a.update(ctx, session, workflows.UpdateCompact, workflows.CompactRequest{}, &res)
	return res, err
}

// State queries a session's state.
func (a *Agent) State(ctx context.Context, session string) (workflows.SessionView, error) {
	var v workflows.SessionView
	resp, err := a.Client.QueryWorkflow(ctx, workflows.WorkflowID(session), "", workflows.QueryState)
	if err != nil {
		return v, controlError(session, err)
	}
	if err := resp.Get(&v); err != nil {
		return v, fmt.Errorf("durable: decode state: %w", err)
	}
	return v, nil
}

func (a *Agent) update(ctx context.Context, session, name string, arg, result any) error {
	h, err := a.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   workflows.WorkflowID(session),
		UpdateID:     NewKey(),
		UpdateName:   name,
		Args:         []any{arg},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = h.Get(ctx, result)
	}
	return controlError(session, err)
}

// controlError gives a control-plane error its contract code: a session
// without a workflow is no_such_session; a rejection by the workflow keeps
// the code it was rejected with (no_active_run, invalid_command, …).
func controlError(session string, err error) error {
	if err == nil {
		return nil
	}
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return &agent.Error{Code: agent.CodeNoSuchSession, Message: fmt.Sprintf("no such session %q", session), Err: err}
	}
	var app *temporal.ApplicationError
	if errors.As(err, &app) && app.Type() != "" {
		return &agent.Error{Code: app.Type(), Message: app.Message(), Err: err}
	}
	return err
}

// IsNoActiveRun reports whether err is a control-plane "no_active_run" rejection.
func IsNoActiveRun(err error) bool { return agent.CodeOf(err) == agent.CodeNoActiveRun }

func (a *Agent) log() *slog.Logger {
	if a.Logger != nil {
		return a.Logger
	}
	return slog.Default()
}

// NewKey returns a random idempotency key.
func NewKey() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
