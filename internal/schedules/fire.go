package schedules

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/durable"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
)

// Source is the turn source a fire's user message is recorded with.
const Source = "schedule"

// Firer holds the dependencies of the Schedule.Fire activity: the agent a
// fire's turn runs on, and a Temporal client to look at the schedule.
type Firer struct {
	// Agent runs the turn (the Temporal-backed durable agent).
	Agent agent.Agent
	// Client, when set, lets an overdue fire check whether a newer
	// occurrence already started (then it is skipped).
	Client client.Client
	// HeartbeatEvery is how often the activity heartbeats while it waits
	// (default 5s).
	HeartbeatEvery time.Duration
	// MaxWait bounds the wait for one turn (default 6h).
	MaxWait time.Duration
	Logger  *slog.Logger
	// Now reads the clock (default time.Now); tests set it.
	Now func() time.Time

	// feed, store and taskQueue make the Agent on the client of the worker
	// running the activity, for a Firer made without a client.
	feed      feed.Bus
	store     store.Store
	taskQueue string
}

// NewFirer returns a Firer whose turns run on session workflows on
// taskQueue, with live events from bus; st (may be nil) fills in what the
// feed lost of a turn, e.g. when the worker streaming it was killed. With
// c nil, each fire uses the client of the worker that runs it.
func NewFirer(c client.Client, bus feed.Bus, st store.Store, taskQueue string, log *slog.Logger) *Firer {
	f := &Firer{Client: c, Logger: log, feed: bus, store: st, taskQueue: taskQueue}
	if c != nil {
		f.Agent = f.agentOn(c)
	}
	return f
}

func (f *Firer) agentOn(c client.Client) agent.Agent {
	return &durable.Agent{Client: c, Feed: f.feed, Store: f.store, TaskQueue: f.taskQueue, Logger: f.Logger}
}

// on is f, or for a Firer made without a client a copy of it on the client
// of the worker running the activity.
func (f *Firer) on(ctx context.Context) *Firer {
	if f.Agent != nil || !activity.IsActivity(ctx) {
		return f
	}
	c := activity.GetClient(ctx)
	if c == nil {
		return f
	}
	g := *f
	g.Client, g.Agent = c, f.agentOn(c)
	return &g
}

// Registrar is the part of a Temporal worker the activity is registered on.
type Registrar interface {
	RegisterActivityWithOptions(a any, options activity.RegisterOptions)
}

// Register registers the Schedule.Fire activity on w.
func (f *Firer) Register(w Registrar) {
	w.RegisterActivityWithOptions(f.Fire, activity.RegisterOptions{Name: workflows.ActivityScheduleFire})
}

// Fire is the Schedule.Fire activity: Run, heartbeating while it waits.
func (f *Firer) Fire(ctx context.Context, req wire.FireRequest) (workflows.FireRecord, error) {
	stop := f.heartbeat(ctx)
	defer stop()
	return f.on(ctx).Run(ctx, req)
}

// Run fires one occurrence: unless a newer occurrence already covers it, it
// runs one turn with req.Prompt in session "schedule:<name>" under the
// idempotency key req.Key, so running it again with the same key rejoins
// (or answers from) the same turn instead of starting a second one. A failed
// turn is a record with outcome "failed", not an error; an error means the
// wait itself was cut short (the activity is retried and rejoins the turn).
func (f *Firer) Run(ctx context.Context, req wire.FireRequest) (workflows.FireRecord, error) {
	start := f.now()
	rec := workflows.FireRecord{
		Name:         req.Name,
		Session:      workflows.ScheduleSession(req.Name),
		FiredAt:      req.FiredAt,
		ScheduledFor: req.Nominal,
	}
	if rec.FiredAt.IsZero() {
		rec.FiredAt = start
	}
	finish := func(outcome string) workflows.FireRecord {
		rec.Outcome = outcome
		rec.Ms = max(f.now().Sub(rec.FiredAt).Milliseconds(), 0)
		return rec
	}
	if req.Name == "" || req.Key == "" || req.Prompt == "" {
		rec.Error = "invalid fire request: name, key and prompt are required (recreate the schedule by restarting fastagent)"
		return finish(workflows.FireFailed), nil
	}
	if f.Agent == nil {
		return rec, errors.New("schedule fire: this worker has no Temporal client to run the turn on")
	}
	why, err := f.Superseded(ctx, req, start)
	if err != nil {
		f.log().Warn("cannot tell whether an overdue fire is superseded; running it", "fire", req.Key, "error", err)
	}
	if why != "" {
		rec.Error = why
		f.log().Info("schedule fire skipped", "fire", req.Key, "reason", why)
		return finish(workflows.FireSkipped), nil
	}

	// The turn belongs to the session, not to this attempt: wait for it on
	// a context the activity's cancellation does not reach (cancelling an
	// Invoke aborts its turn), and let a retried attempt rejoin it by key.
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.maxWait())
	tctx = agent.WithSource(agent.WithIdempotencyKey(tctx, req.Key), Source)
	type result struct {
		res agent.Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer cancel()
		res, err := agent.Collect(f.Agent.Invoke(tctx, agent.Scope{Session: rec.Session}, agent.Prompt{Text: req.Prompt}))
		done <- result{res, err}
	}()
	select {
	case r := <-done:
		var fail *agent.Failure
		switch {
		case r.err == nil:
			rec.Reply = r.res.Text
			return finish(workflows.FireCompleted), nil
		case errors.As(r.err, &fail):
			rec.Error = fail.Details
		default:
			rec.Error = r.err.Error()
		}
		return finish(workflows.FireFailed), nil
	case <-ctx.Done():
		return rec, fmt.Errorf("schedules: fire %s: %w (the turn goes on in session %s; a retry rejoins it)", req.Key, ctx.Err(), rec.Session)
	}
}

// Superseded returns why req should be skipped, or "" to run it. A fire is
// skipped only when it is overdue — a later occurrence of its cron is
// already due (its nominal time is not the cron's latest instant ≤ now) —
// and a later fire of the schedule has already started. An overdue fire with
// no later one is the single catch-up occurrence and runs.
func (f *Firer) Superseded(ctx context.Context, req wire.FireRequest, now time.Time) (string, error) {
	if req.Nominal.IsZero() || req.Cron == "" {
		return "", nil
	}
	sched, err := ParseCron(req.Cron, req.TZ)
	if err != nil {
		return "", err
	}
	next := sched.Next(req.Nominal)
	if next.IsZero() || next.After(now) {
		return "", nil // the latest occurrence due
	}
	if f.Client == nil {
		return "", nil
	}
	desc, err := f.Client.ScheduleClient().GetHandle(ctx, workflows.ScheduleID(req.Name)).Describe(ctx)
	if isNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("describe schedule %s: %w", workflows.ScheduleID(req.Name), err)
	}
	for _, a := range desc.Info.RecentActions {
		if a.StartWorkflowResult == nil || a.StartWorkflowResult.WorkflowID == req.Key {
			continue
		}
		if a.ScheduleTime.After(req.Nominal) {
			return fmt.Sprintf("overdue occurrence (scheduled for %s) superseded by the later fire %s",
				req.Nominal.UTC().Format(time.RFC3339), a.StartWorkflowResult.WorkflowID), nil
		}
	}
	return "", nil
}

// heartbeat records a heartbeat every HeartbeatEvery until stopped.
func (f *Firer) heartbeat(ctx context.Context) func() {
	every := f.HeartbeatEvery
	if every <= 0 {
		every = 5 * time.Second
	}
	hctx, cancel := context.WithCancel(ctx)
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-hctx.Done():
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx)
			}
		}
	}()
	return cancel
}

func (f *Firer) now() time.Time {
	if f.Now != nil {
		return f.Now()
	}
	return time.Now()
}

func (f *Firer) maxWait() time.Duration {
	if f.MaxWait > 0 {
		return f.MaxWait
	}
	return 6 * time.Hour
}

func (f *Firer) log() *slog.Logger {
	if f.Logger != nil {
		return f.Logger
	}
	return slog.Default()
}
