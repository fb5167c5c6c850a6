// Package activities holds everything with side effects that a session
// workflow asks for: model calls through langchaingo (streaming deltas to the
// live feed), tool execution, and session-store reads and appends with IDs
// chosen by the workflow, so that every retry is idempotent.
//
// Each activity has a plain method (RunModel, RunTool, OpenSession,
// BeginTurn, RecordTurn) that the
// in-process agent calls directly, and a thin Temporal wrapper that adds the
// attempt number and heartbeats.
package activities

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/hooks"
	"github.com/fastagent/fastagent/internal/delivery"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/llm"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/internal/workspace"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// Definitions loads the agent definition; it is called for every model and
// tool call so that edits take effect without a restart.
type Definitions interface {
	Load(ctx context.Context) (*workspace.Definition, error)
}

// Models resolves a "provider/model" spec to a model client.
type Models interface {
	Model(spec string) (llm.Model, error)
}

// Activities holds the dependencies of all activities. Register it once on a
// worker with Register.
type Activities struct {
	Store       store.Store
	Feed        feed.Bus
	Definitions Definitions
	Models      Models
	Logger      *slog.Logger
	// Hooks are optional Go hooks run around model and tool calls.
	Hooks hooks.Hooks
	// HeartbeatEvery is how often running activities heartbeat (default:
	// half their heartbeat timeout).
	HeartbeatEvery time.Duration
	// ProgressEvery is the least time between two tool_progress events of
	// one tool call (default: toolprogress.DefaultEvery, one second).
	ProgressEvery time.Duration
	// Observer, when set, receives what each model call measured (time to
	// first token, tokens by model) for metrics.
	Observer ModelObserver
	// Agent names the agent whose activities these are (its task queue;
	// "" the default one): long-term memories are kept per agent.
	Agent string
	// Senders are the channels' senders the send_message and send_file
	// tools deliver through (their credentials stay in the worker).
	Senders delivery.Senders
	// ClientSeen, when set, is called before each tool runs with the
	// Temporal client of the worker running the call: the runtime keeps
	// tools from that client's frontend. An error fails the call, the
	// tool not run.
	ClientSeen func(ctx context.Context, c client.Client) error

	// stepRun is set once Step.Run is registered on a worker with these
	// activities (Set.Registering): only then do the settings the model
	// calls return allow the workflow to schedule it.
	stepRun atomic.Bool
}

// AgentName is the agent's name memories are kept under.
func (a *Activities) AgentName() string {
	if a.Agent == "" {
		return workflows.TaskQueue
	}
	return a.Agent
}

// ModelObserver receives the measurements of one model call.
type ModelObserver interface {
	ObserveModel(ModelStats)
}

// ModelStats is what one call to a model client measured.
type ModelStats struct {
	// Model is the "provider/model" spec that served the call.
	Model string
	// FirstToken is the time from the request to the first streamed delta
	// (0: nothing was streamed).
	FirstToken time.Duration
	// Usage is what the provider reported (nil: nothing, or the call failed).
	Usage *agent.Usage
	// Failed says the call returned an error.
	Failed bool
}

// Registrar is the part of a Temporal worker activities are registered on.
type Registrar interface {
	RegisterActivityWithOptions(a interface{}, options activity.RegisterOptions)
}

// Register registers every activity of a under its name in
// workflows/names.go (Set.Entries).
func (a *Activities) Register(w Registrar) { Register(w, Set{Acts: a}) }

// Generate is the Model.Generate activity.
func (a *Activities) Generate(ctx context.Context, call agentloop.ModelCall) (agentloop.ModelResult, error) {
	stop := a.heartbeat(ctx)
	defer stop()
	ctx, done := stoppable(ctx, a.Feed, call.Session, call.Turn)
	defer done()
	res, err := a.RunModel(ctx, call, int(activity.GetInfo(ctx).Attempt))
	return res, stoppedError(ctx, err)
}

// Execute is the Tool.Execute activity. A call the workflow records
// (Synthetic: an aborted, denied or lost call's result) is not stoppable:
// it is how an aborted turn keeps its record.
func (a *Activities) Execute(ctx context.Context, call agentloop.ToolCall) (agentloop.ToolOutcome, error) {
	// The heartbeats carry the call's last progress report as their
	// details (no history event: a heartbeat is not one).
	var progress progressSlot
	ctx = withProgressSlot(ctx, &progress)
	stop := a.heartbeatWith(ctx, func() (any, bool) {
		p := progress.Load()
		if p == nil {
			return nil, false
		}
		return *p, true
	})
	defer stop()
	if call.Synthetic == nil {
		var done func()
		ctx, done = stoppable(ctx, a.Feed, call.Session, call.Turn)
		defer done()
	}
	out, err := a.RunTool(ctx, call)
	return out, stoppedError(ctx, err)
}

// Record is the Turn.Record activity (RecordTurn). It heartbeats while it
// runs: a turn's record is the last thing the worker that finished the
// turn does, and the session's next turn waits for it, so a worker that
// dies right after a turn answered must be noticed within the record's
// short heartbeat timeout, not its start-to-close timeout.
func (a *Activities) Record(ctx context.Context, in wire.RecordTurnInput) error {
	stop := a.heartbeat(ctx)
	defer stop()
	return a.RecordTurn(ctx, in)
}

// Open is the Session.Open (local) activity.
func (a *Activities) Open(ctx context.Context, in wire.OpenInput) (wire.OpenResult, error) {
	return a.OpenSession(ctx, in)
}

// heartbeat records a heartbeat every HeartbeatEvery (default: half the
// activity's heartbeat timeout) until stopped, so that a lost worker is
// noticed within the heartbeat timeout. Each heartbeat that reaches the
// server is a billable action, and the SDK sends at most one per 0.8 ×
// the timeout; an abort does not wait for one (stoppable), so a call
// shorter than half the timeout sends none.
func (a *Activities) heartbeat(ctx context.Context) (stop func()) {
	return a.heartbeatWith(ctx, nil)
}

// heartbeatWith is heartbeat with details: each heartbeat records what
// details returns, when it has something.
func (a *Activities) heartbeatWith(ctx context.Context, details func() (any, bool)) (stop func()) {
	every := a.HeartbeatEvery
	if every <= 0 {
		every = heartbeatEvery(ctx)
	}
	// No heartbeat at the start: each is an RPC and a history-service write,
	// and short calls (most tool calls) finish before the first tick.
	done := make(chan struct{})
	var once sync.Once
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if details != nil {
					if d, ok := details(); ok {
						activity.RecordHeartbeat(ctx, d)
						continue
					}
				}
				activity.RecordHeartbeat(ctx)
			}
		}
	}()
	return func() { once.Do(func() { close(done) }) }
}

// heartbeatEvery is how often an activity heartbeats: half its heartbeat
// timeout (1 s without one). Heartbeats only notice a lost worker — a stop
// arrives as a notice (stoppable) — and each one is an action.
func heartbeatEvery(ctx context.Context) time.Duration {
	if activity.IsActivity(ctx) {
		if t := activity.GetInfo(ctx).HeartbeatTimeout; t > 0 {
			return t / 2
		}
	}
	return time.Second
}

func (a *Activities) log() *slog.Logger {
	if a.Logger != nil {
		return a.Logger
	}
	return slog.Default()
}
