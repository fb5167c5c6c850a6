package channels

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/sessionstart"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
)

// MaxBody caps a webhook body; a larger one is answered 413 unread.
const MaxBody = 1 << 20

// handOffTimeout bounds the Signal-With-Start calls of one request, well
// inside Slack's 3 s.
const handOffTimeout = 2500 * time.Millisecond

// ackMargin is kept free of hand-off attempts at the end of a platform's
// answer budget, for the answer itself.
const ackMargin = 500 * time.Millisecond

// Budgeted is implemented by a Door whose platform waits longer than
// Slack's 3 s for an answer (GitHub: 10 s): the handler keeps retrying a
// failed hand-off within that budget, counted from the request's arrival.
type Budgeted interface {
	AckBudget() time.Duration
}

// Hinted is implemented by a Door whose platform does not redeliver a
// request answered 5xx by itself: the hint says how to redeliver it (it is
// logged and returned in the answer's body).
type Hinted interface {
	RedeliverHint(r Request) string
}

// handOffFailures counts requests answered 503 because their hand-off to
// Temporal still failed at the end of the platform's budget.
var handOffFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "fastagent_channel_handoff_failures_total",
	Help: "Channel requests answered 503 because their hand-off to Temporal failed within the platform's answer budget, by channel.",
}, []string{"channel"})

// Collectors are the channel doors' Prometheus collectors.
func Collectors() []prometheus.Collector { return []prometheus.Collector{handOffFailures} }

// Starter is the part of a Temporal client the door needs.
type Starter interface {
	SignalWithStartWorkflow(ctx context.Context, workflowID string, signalName string, signalArg interface{},
		options client.StartWorkflowOptions, workflow interface{}, workflowArgs ...interface{}) (client.WorkflowRun, error)
}

// Handler serves a door: cap the body, verify it, parse it, hand every
// delivery to its session workflow with Signal-With-Start, answer. It never
// waits for a worker. A failed hand-off answers 503 so the platform retries;
// the retry is deduplicated by the session workflow.
func Handler(d Door, c Starter, taskQueue string, log *slog.Logger) http.Handler {
	if taskQueue == "" {
		taskQueue = workflows.TaskQueue
	}
	if log == nil {
		log = slog.Default()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
				return
			}
			http.Error(w, "cannot read the request body", http.StatusBadRequest)
			return
		}
		start := time.Now()
		req := Request{Header: r.Header, Body: body}
		if err := d.Verify(req); err != nil {
			log.Warn("channel: request refused", "kind", d.Kind(), "error", err)
			http.Error(w, "invalid signature", http.StatusUnauthorized)
			return
		}
		parsed, err := d.Parse(req)
		if errors.Is(err, ErrRetryLater) {
			log.Warn("channel: request refused for now; the platform will deliver it again", "kind", d.Kind(), "error", err)
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		ans := parsed.Answer
		if err != nil {
			log.Warn("channel: unparsable request acknowledged", "kind", d.Kind(), "error", err)
			parsed = Parsed{}
		}
		budget := handOffTimeout + ackMargin
		if b, ok := d.(Budgeted); ok && b.AckBudget() > budget {
			budget = b.AckBudget()
		}
		if err := dispatchWithin(r.Context(), c, taskQueue, parsed, start.Add(budget-ackMargin)); err != nil {
			handOffFailures.WithLabelValues(d.Kind()).Inc()
			msg := "try again"
			if h, ok := d.(Hinted); ok {
				msg = h.RedeliverHint(req)
			}
			log.Error("channel: hand-off failed; the request is answered 503", "kind", d.Kind(), "error", err, "redeliver", msg)
			http.Error(w, msg, http.StatusServiceUnavailable)
			return
		}
		if ans.After != nil {
			ans = ans.After()
		}
		for k, v := range ans.Header {
			w.Header().Set(k, v)
		}
		if ans.ContentType != "" {
			w.Header().Set("Content-Type", ans.ContentType)
		}
		status := ans.Status
		if status == 0 {
			status = http.StatusOK
		}
		w.WriteHeader(status)
		_, _ = w.Write(ans.Body)
	})
}

// dispatchWithin runs Dispatch until it succeeds or deadline passes, each
// attempt bounded by handOffTimeout, backing off between attempts. A
// retried attempt is deduplicated by the workflows (same IDs and keys).
func dispatchWithin(ctx context.Context, c Starter, taskQueue string, p Parsed, deadline time.Time) error {
	backoff := 100 * time.Millisecond
	for {
		actx, cancel := context.WithDeadline(ctx, minTime(deadline, time.Now().Add(handOffTimeout)))
		err := Dispatch(actx, c, taskQueue, p)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || time.Until(deadline) < backoff+100*time.Millisecond {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
		backoff = min(2*backoff, time.Second)
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Dispatch hands everything a door parsed to Temporal: each chat message
// to its conversation's chat workflow, each delivery to its session, with
// Signal-With-Start. It returns at the first failure (the platform's retry
// is deduplicated by the workflows).
func Dispatch(ctx context.Context, c Starter, taskQueue string, p Parsed) error {
	if taskQueue == "" {
		taskQueue = workflows.TaskQueue
	}
	for _, m := range p.Messages {
		if err := HandMessage(ctx, c, taskQueue, m); err != nil {
			return err
		}
	}
	for _, d := range p.Deliveries {
		if err := HandOff(ctx, c, taskQueue, d); err != nil {
			return err
		}
	}
	for _, d := range p.Decisions {
		if err := Decide(ctx, c, d); err != nil {
			return err
		}
	}
	return nil
}

// Updater is the part of a Temporal client decisions need.
type Updater interface {
	UpdateWorkflow(ctx context.Context, options client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error)
}

// Decide sends d to its session as an approve update, waiting for the
// session's answer. A refusal by the session (not an approver, nothing
// waiting, the call changed) is told to the person and returns nil: it is
// an answer, not a failed hand-off.
func Decide(ctx context.Context, c Starter, d Decision) error {
	u, ok := c.(Updater)
	if !ok {
		return errors.New("channels: this door's Temporal client cannot send approval decisions")
	}
	h, err := u.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   workflows.WorkflowID(d.Session),
		UpdateID:     "decision:" + d.ID,
		UpdateName:   workflows.UpdateApprove,
		Args:         []any{d.Request},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = h.Get(ctx, nil)
	}
	if err == nil {
		return nil
	}
	var notFound *serviceerror.NotFound
	var app *temporal.ApplicationError
	code := ""
	if errors.As(err, &app) {
		code = app.Type()
	}
	switch code {
	case agent.CodeNotApprover, agent.CodeNotFound, agent.CodeCallChanged:
	default:
		if !errors.As(err, &notFound) {
			return fmt.Errorf("channels: decision %s on session %s: %w", d.ID, d.Session, err)
		}
	}
	if d.Notify != nil {
		if nerr := d.Notify(ctx, refusalText(err)); nerr != nil {
			slog.Warn("channels: telling a refused approver failed", "session", d.Session, "error", nerr)
		}
	}
	return nil
}

// refusalText is what a person whose decision was refused reads.
func refusalText(err error) string {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return "Your decision was not applied: " + app.Message()
	}
	return "Your decision was not applied: nothing waits for it any more."
}

// Hand returns the hand-off of a long connection (Connector.Run's hand):
// Dispatch to c within the same budget a webhook request has.
func Hand(c Starter, taskQueue string) func(context.Context, Parsed) error {
	return func(ctx context.Context, p Parsed) error {
		ctx, cancel := context.WithTimeout(ctx, handOffTimeout)
		defer cancel()
		return Dispatch(ctx, c, taskQueue, p)
	}
}

// agentKey is the context key of the agent a door serves.
type agentKey struct{}

// ForAgent returns ctx for the doors of agent name when several agents are
// served: what they hand to Temporal is that agent's — its chat workflows
// ("chat:<name>/…") and sessions ("<name>/…"). The main agent's doors
// use a plain context.
func ForAgent(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, agentKey{}, name)
}

// AgentOf is the agent ctx's doors serve ("" for the main agent).
func AgentOf(ctx context.Context) string {
	name, _ := ctx.Value(agentKey{}).(string)
	return name
}

type apiBaseKey struct{}

// WithAPIBase records where the HTTP API's routes of the agent a door
// serves start, as the client reached the door: the prefix the ingress is
// mounted under, then /agents/<name> for another agent ("" at the root).
// A door that writes a link into its answer (a webhook's events route)
// starts it there.
func WithAPIBase(ctx context.Context, base string) context.Context {
	return context.WithValue(ctx, apiBaseKey{}, base)
}

// APIBase is the base WithAPIBase recorded ("" when none).
func APIBase(ctx context.Context) string {
	base, _ := ctx.Value(apiBaseKey{}).(string)
	return base
}

// HandMessage sends one chat message to its chat workflow with
// Signal-With-Start.
func HandMessage(ctx context.Context, c Starter, taskQueue string, m wire.ChatMessage) error {
	scope := AgentOf(ctx)
	id := workflows.ScopedChatWorkflowID(scope, m.Kind, m.Chat)
	_, err := c.SignalWithStartWorkflow(ctx, id, wire.SignalChatMessage, m,
		client.StartWorkflowOptions{
			TaskQueue:                taskQueue,
			WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
			WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
			StaticSummary:            m.Kind + " conversation " + m.Chat,
		}, workflows.ChatWorkflowType, workflows.ChatInput{Kind: m.Kind, Chat: m.Chat, Scope: scope})
	if err != nil {
		return fmt.Errorf("channels: signal-with-start %s: %w", id, err)
	}
	return nil
}

// HandOff sends one direct delivery to its session workflow.
func HandOff(ctx context.Context, c Starter, taskQueue string, d Delivery) error {
	sig := wire.Delivery{Key: d.Key(), Source: d.Kind, Prompt: d.Prompt, Answer: d.Answer, WhileBusy: d.WhileBusy, Command: d.Command}
	if d.Reply != nil {
		data, err := json.Marshal(d.Reply)
		if err != nil {
			return fmt.Errorf("channels: reply target: %w", err)
		}
		sig.Reply = &wire.ReplyTarget{Kind: d.Kind, Data: data}
	}
	return SignalSession(ctx, c, taskQueue, workflows.ScopedSession(AgentOf(ctx), d.Session), sig)
}

// SignalSession sends d to session:<session> with Signal-With-Start; the
// session deduplicates it by its key. A new session's channel is the
// delivery's source. A namespace without the session search attributes
// gets the signal again without them.
func SignalSession(ctx context.Context, c Starter, taskQueue, session string, d wire.Delivery) error {
	start := func(search bool) error {
		_, err := c.SignalWithStartWorkflow(ctx, workflows.WorkflowID(session), workflows.SignalDeliver, d,
			sessionstart.Options(session, taskQueue, workflows.SessionAttrs{Channel: d.Source}, search),
			workflows.SessionWorkflowType, workflows.SessionInput{Session: session})
		return err
	}
	err := start(true)
	if sessionstart.Unregistered(err) {
		err = start(false)
	}
	if err != nil {
		return fmt.Errorf("channels: signal-with-start %s: %w", workflows.WorkflowID(session), err)
	}
	return nil
}
