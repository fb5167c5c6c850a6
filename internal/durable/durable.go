// Package durable is the Agent implementation backed by Temporal session
// workflows. Invoke subscribes to the session's live feed, sends the turn with
// Update-with-Start (the update ID is the idempotency key, so a redelivery is
// the same turn), relays the feed, and ends with the terminal taken from the
// update's outcome. It also offers the session control plane: abort, steer,
// approve and state.
package durable

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/relay"
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
		if relay.Stream(ctx, a.Feed, scope.Session, key, a.Grace, func(ctx context.Context) relay.Terminal {
			return a.turn(ctx, scope, prompt, key, source)
		}, yield) {
			return
		}
		// The consumer went away before the terminal: abort the turn so that
		// in-flight model and tool work stops (contract: consumer cancel).
		actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer acancel()
		if _, err := a.Abort(actx, scope.Session, key, "the client disconnected"); err != nil && !IsNoActiveRun(err) {
			a.log().Warn("abort after client disconnect failed", "session", scope.Session, "turn", key, "error", err)
		}
	}
}

// turn sends the update and waits for its outcome.
func (a *Agent) turn(ctx context.Context, scope agent.Scope, prompt agent.Prompt, key, source string) relay.Terminal {
	start := a.Client.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID:                       workflows.WorkflowID(scope.Session),
		TaskQueue:                a.taskQueue(),
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		StaticSummary:            "session " + scope.Session,
	}, workflows.SessionWorkflowType, workflows.SessionInput{
		Session:       scope.Session,
		ParentSession: scope.ParentSession,
		BranchHints:   scope.BranchHints,
		TurnsPerRun:   a.TurnsPerRun,
	})
	h, err := a.Client.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateID:     key,
			UpdateName:   workflows.UpdateTurn,
			Args:         []any{workflows.TurnRequest{Prompt: prompt, Source: source}},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	var out agentloop.Outcome
	if err == nil {
		err = h.Get(ctx, &out)
	}
	if err != nil {
		return relay.Terminal{Event: failure(err)}
	}
	return relay.Terminal{Event: out.Event(), Marker: out.Marker}
}

// failure maps an error from the update to a failed event.
func failure(err error) agent.Event {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		switch app.Type() {
		case workflows.ErrTypeSessionBusy:
			return agent.Failed(app.Message(), true, agent.CodeSessionBusy)
		case workflows.ErrTypeInvalidInput:
			return agent.Failed(app.Message(), false, agent.CodeInvalidCommand)
		}
		return agent.Failed(app.Message(), !app.NonRetryable(), "")
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

// Steer adds a message the running turn reads after its current step.
func (a *Agent) Steer(ctx context.Context, session, text string) error {
	return a.update(ctx, session, workflows.UpdateSteer, workflows.SteerRequest{Text: text}, nil)
}

// Approve answers a tool call waiting for approval.
func (a *Agent) Approve(ctx context.Context, session, call string, approve bool, reason string) error {
	return a.update(ctx, session, workflows.UpdateApprove, workflows.ApproveRequest{Call: call, Approve: approve, Reason: reason}, nil)
}

// State queries a session's state.
func (a *Agent) State(ctx context.Context, session string) (workflows.SessionView, error) {
	var v workflows.SessionView
	resp, err := a.Client.QueryWorkflow(ctx, workflows.WorkflowID(session), "", workflows.QueryState)
	if err != nil {
		return v, wrapNotFound(session, err)
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
	return wrapNotFound(session, err)
}

// ErrNoSuchSession is returned by control calls on a session that has no
// running workflow.
var ErrNoSuchSession = errors.New("no such session")

func wrapNotFound(session string, err error) error {
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return fmt.Errorf("%w: %q", ErrNoSuchSession, session)
	}
	return err
}

// IsNoActiveRun reports whether err is a control-plane "no_active_run" rejection.
func IsNoActiveRun(err error) bool { return ErrorType(err) == workflows.ErrTypeNoActiveRun }

// ErrorType returns the application error type of err ("" if none).
func ErrorType(err error) string {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return app.Type()
	}
	return ""
}

// ErrorMessage returns the application error's own message, or err.Error().
func ErrorMessage(err error) string {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return app.Message()
	}
	return err.Error()
}

func (a *Agent) taskQueue() string {
	if a.TaskQueue != "" {
		return a.TaskQueue
	}
	return workflows.TaskQueue
}

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
