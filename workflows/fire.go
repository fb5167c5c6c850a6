package workflows

import (
	"errors"
	"strings"
	"time"

	"github.com/fastagent/fastagent/internal/wire"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Names of schedule firing. Like the names in names.go they are part of the
// wire contract with existing Temporal Schedules and running fires.
const (
	// ScheduleFireWorkflowType is the registered name of ScheduleFireWorkflow,
	// the workflow a schedule's action starts.
	ScheduleFireWorkflowType = "ScheduleFire"
	// ActivityScheduleFire runs one scheduled turn and returns its FireRecord.
	ActivityScheduleFire = "Schedule.Fire"

	// ScheduleIDPrefix prefixes the ID of the Temporal Schedule of a
	// schedules/<name>.yaml file.
	ScheduleIDPrefix = "schedule:"
	// FireWorkflowIDPrefix prefixes the workflow ID of a fire; Temporal
	// appends "-<scheduled time, RFC 3339>".
	FireWorkflowIDPrefix = "schedule-fire:"
	// ScheduledStartTimeAttribute is the search attribute Temporal sets on a
	// workflow started by a schedule: the action's nominal time.
	ScheduledStartTimeAttribute = "TemporalScheduledStartTime"
	// ScheduledByIDAttribute is the search attribute Temporal sets on a
	// workflow started by a schedule: the schedule's ID.
	ScheduledByIDAttribute = "TemporalScheduledById"
)

// Outcomes of a fire (FireRecord.Outcome).
const (
	FireCompleted = "completed"
	FireFailed    = "failed"
	// FireSkipped is an overdue occurrence that a newer one already covers.
	FireSkipped = "skipped"
)

// ScheduleID is the ID of the Temporal Schedule named name.
func ScheduleID(name string) string { return ScheduleIDPrefix + name }

// ScheduleSession is the session a schedule's turns run in:
// "schedule:<name>"; the schedule "<agent>/<name>" of an agent served beside
// the main one runs in that agent's session "<agent>/schedule:<name>".
func ScheduleSession(name string) string {
	if agent, own, ok := strings.Cut(name, "/"); ok {
		return agent + "/schedule:" + own
	}
	return "schedule:" + name
}

// FireWorkflowID is the workflow ID a schedule's action is configured with;
// each fire's ID is this plus "-<scheduled time>".
func FireWorkflowID(name string) string { return FireWorkflowIDPrefix + name }

// FireInput is the argument of ScheduleFireWorkflow, fixed in the schedule's
// action when the schedule is created or updated.
type FireInput struct {
	Name   string `json:"name"`
	Prompt string `json:"prompt"`
	// Cron and TZ are the schedule's spec, so the fire can tell an overdue
	// occurrence from the latest one.
	Cron string `json:"cron"`
	TZ   string `json:"tz,omitempty"`
	// Deliver are the targets ("slack:#ops"…) a completed fire's answer is
	// sent to, once each.
	Deliver []string `json:"deliver,omitempty"`
}

// FireRecord is the result of one fire: ScheduleFireWorkflow's result, listed
// by `fastagent schedule history`.
type FireRecord struct {
	Name    string    `json:"name"`
	Session string    `json:"session"`
	FiredAt time.Time `json:"firedAt"`
	Ms      int64     `json:"ms"`
	Outcome string    `json:"outcome"`
	Reply   string    `json:"reply,omitempty"`
	Error   string    `json:"error,omitempty"`
	// ScheduledFor is the occurrence's nominal time (for a trigger, when it
	// was triggered).
	ScheduledFor time.Time `json:"scheduledFor,omitzero"`
	// Delivered are the deliver: targets the answer was sent to.
	Delivered []string `json:"delivered,omitempty"`
	// DeliveryError says which deliver: targets the answer did not reach,
	// and why, once the sends' retries are spent.
	DeliveryError string `json:"deliveryError,omitempty"`
}

// Fire activity timing. A turn may run long (tools); a dead worker is found
// by the heartbeat, and the retried activity rejoins the same turn.
const (
	fireTimeout   = 2 * time.Hour
	fireHeartbeat = 30 * time.Second
	fireAttempts  = 10
)

// Delivery of a fire's answer (the schedule's deliver: targets).
const (
	// changeFireDeliver versions the Channel.Send step a completed fire
	// runs when its input names deliver: targets.
	changeFireDeliver = "fire-deliver"
	sendTimeout       = 2 * time.Minute
	sendAttempts      = 8
)

// ScheduleFireWorkflow runs one occurrence of a schedule: the
// ActivityScheduleFire activity, whose FireRecord is the result, then —
// when the schedule names deliver: targets and the turn completed — the
// ActivityChannelSend activity, which sends the answer to each target once.
// A fire whose activity gave up is recorded as failed rather than failing
// the workflow, so every fire has a record; a delivery that still fails
// after its retries is recorded in the record's DeliveryError.
func ScheduleFireWorkflow(ctx workflow.Context, in FireInput) (FireRecord, error) {
	info := workflow.GetInfo(ctx)
	req := wire.FireRequest{
		Name:    in.Name,
		Prompt:  in.Prompt,
		Cron:    in.Cron,
		TZ:      in.TZ,
		Key:     info.WorkflowExecution.ID,
		Nominal: nominalTime(info.WorkflowExecution.ID, info.SearchAttributes), //nolint:staticcheck // SA1019: NominalTime decodes the raw TemporalScheduledStartTime payload; moving to the typed API is a separate change
		FiredAt: info.WorkflowStartTime,
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: fireTimeout,
		HeartbeatTimeout:    fireHeartbeat,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    time.Minute,
			MaximumAttempts:    fireAttempts,
		},
		Summary: "turn in session " + ScheduleSession(in.Name),
	})
	var rec FireRecord
	if err := workflow.ExecuteActivity(actx, ActivityScheduleFire, req).Get(ctx, &rec); err != nil {
		ms := workflow.Now(ctx).Sub(req.FiredAt).Milliseconds()
		return FireRecord{
			Name:         in.Name,
			Session:      ScheduleSession(in.Name),
			FiredAt:      req.FiredAt,
			Ms:           max(ms, 0),
			Outcome:      FireFailed,
			Error:        errorMessage(err),
			ScheduledFor: req.Nominal,
		}, nil
	}
	if len(in.Deliver) > 0 && rec.Outcome == FireCompleted &&
		workflow.GetVersion(ctx, changeFireDeliver, workflow.DefaultVersion, 1) >= 1 {
		rec = deliverAnswer(ctx, in, req.Key, rec)
	}
	return rec, nil
}

// deliverAnswer sends a completed fire's answer to in.Deliver with
// ActivityChannelSend under the fire's key, and records the outcome.
func deliverAnswer(ctx workflow.Context, in FireInput, key string, rec FireRecord) FireRecord {
	if strings.TrimSpace(rec.Reply) == "" {
		rec.DeliveryError = "nothing delivered: the turn's answer has no text"
		return rec
	}
	sctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: sendTimeout,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    time.Minute,
			MaximumAttempts:    sendAttempts,
		},
		Summary: "deliver to " + strings.Join(in.Deliver, ", "),
	})
	var res wire.SendResult
	err := workflow.ExecuteActivity(sctx, ActivityChannelSend, wire.SendInput{
		Session: rec.Session, Key: "deliver/" + key, Targets: in.Deliver, Text: rec.Reply,
	}).Get(ctx, &res)
	if err != nil {
		// The targets reached before the failure, when it says.
		var app *temporal.ApplicationError
		if errors.As(err, &app) && app.HasDetails() {
			_ = app.Details(&res)
		}
	}
	rec.Delivered = res.Delivered
	if err != nil {
		rec.DeliveryError = errorMessage(err)
		workflow.GetLogger(ctx).Error("schedule fire: delivering the answer failed", "schedule", in.Name,
			"targets", in.Deliver, "error", rec.DeliveryError)
	}
	return rec
}

// nominalTime returns the scheduled time of a fire: the
// TemporalScheduledStartTime search attribute, else the RFC 3339 suffix
// Temporal appends to the workflow ID, else zero.
func nominalTime(workflowID string, attrs *commonpb.SearchAttributes) time.Time {
	if p := attrs.GetIndexedFields()[ScheduledStartTimeAttribute]; p != nil {
		var t time.Time
		if err := converter.GetDefaultDataConverter().FromPayload(p, &t); err == nil && !t.IsZero() {
			return t.UTC()
		}
	}
	// "schedule-fire:<name>-2006-01-02T15:04:05Z"
	const layout = "2006-01-02T15:04:05Z"
	if n := len(workflowID) - len(layout); n > 0 && workflowID[n-1] == '-' {
		if t, err := time.Parse(time.RFC3339, workflowID[n:]); err == nil {
			return t.UTC()
		}
	}
	return time.Time{}
}

// errorMessage is the innermost application message of a failed activity.
func errorMessage(err error) string {
	var app *temporal.ApplicationError
	var tmo *temporal.TimeoutError
	switch {
	case errors.As(err, &app):
		return app.Message()
	case errors.As(err, &tmo):
		return "the fire activity timed out (" + tmo.TimeoutType().String() + "); check that a fastagent worker runs on the schedule's task queue"
	}
	return err.Error()
}
