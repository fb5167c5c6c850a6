package channels

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/workflows"
)

// MaxBody caps a webhook body; a larger one is answered 413 unread.
const MaxBody = 1 << 20

// handOffTimeout bounds the Signal-With-Start calls of one request, well
// inside Slack's 3 s.
const handOffTimeout = 2500 * time.Millisecond

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
		req := Request{Header: r.Header, Body: body}
		if err := d.Verify(req); err != nil {
			log.Warn("channel: request refused", "kind", d.Kind(), "error", err)
			http.Error(w, "invalid signature", http.StatusUnauthorized)
			return
		}
		deliveries, ans, err := d.Parse(req)
		if err != nil {
			log.Warn("channel: unparsable request acknowledged", "kind", d.Kind(), "error", err)
		}
		ctx, cancel := context.WithTimeout(r.Context(), handOffTimeout)
		defer cancel()
		for _, dl := range deliveries {
			if err := HandOff(ctx, c, taskQueue, dl); err != nil {
				log.Error("channel: hand-off failed", "kind", d.Kind(), "session", dl.Session, "key", dl.Key(), "error", err)
				http.Error(w, "try again", http.StatusServiceUnavailable)
				return
			}
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

// HandOff sends one delivery to session:<session> with Signal-With-Start.
func HandOff(ctx context.Context, c Starter, taskQueue string, d Delivery) error {
	sig := workflows.Delivery{Key: d.Key(), Source: d.Kind, Prompt: d.Prompt}
	if len(d.Reply) > 0 {
		sig.Reply = &workflows.ReplyTarget{Kind: d.Kind, Data: d.Reply}
	}
	_, err := c.SignalWithStartWorkflow(ctx, workflows.WorkflowID(d.Session), workflows.SignalDeliver, sig,
		client.StartWorkflowOptions{
			TaskQueue:                taskQueue,
			WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
			WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
			StaticSummary:            "session " + d.Session,
		}, workflows.SessionWorkflowType, workflows.SessionInput{Session: d.Session})
	if err != nil {
		return fmt.Errorf("channels: signal-with-start %s: %w", workflows.WorkflowID(d.Session), err)
	}
	return nil
}
