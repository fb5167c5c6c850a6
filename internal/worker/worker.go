// Package worker assembles a Temporal worker that runs session workflows,
// schedule fires and their activities, with the options that make a turn
// fast (eager activities) and an abort prompt (frequent heartbeats).
package worker

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/schedules"
	"github.com/fastagent/fastagent/workflows"
)

// Options configure a worker.
type Options struct {
	// TaskQueue defaults to workflows.TaskQueue.
	TaskQueue string
	// Activities carries the activities' dependencies (store, feed, definition, models).
	Activities *activities.Activities
	// MaxConcurrentActivities bounds parallel model and tool calls (default 200).
	MaxConcurrentActivities int
	// StickyCacheSize is how many sessions' workflow state the process keeps
	// warm (SDK default 10,000); 0 keeps the default.
	StickyCacheSize int
	// WorkflowTaskPollers is 0 (the default) for autoscaled workflow-task
	// pollers: separate groups for the worker's sticky queue and the shared
	// queue, scaled on the server's hints, so a new session's first
	// workflow task (shared queue) is polled even while the sticky queue has
	// a backlog. n ≥ 2 uses n fixed pollers in the SDK's mixed mode instead,
	// which poll only the sticky queue while it has a backlog — under load,
	// new sessions then wait seconds (see docs/load-and-sizing.md).
	WorkflowTaskPollers int
	// StopTimeout is how long Stop lets running activities (tool calls,
	// model streams) finish after polling stops, before their contexts are
	// cancelled; 0 means DefaultStopTimeout.
	StopTimeout time.Duration
	// Schedules runs the Schedule.Fire activity of schedule fires. When nil,
	// New builds one from the client, Activities.Feed and the task queue.
	Schedules *schedules.Firer
	// Repliers post channel answers (one per channel kind, built from the
	// channel files and the worker's environment); none is fine when no
	// channel is configured.
	Repliers []channels.Replier
	// WorkspaceDir is the agent's workspace, where files that channel
	// messages carry are saved.
	WorkspaceDir string
	// Interceptors are added to the SDK worker (metrics).
	Interceptors []interceptor.WorkerInterceptor
	// Versioning places the worker in a Worker Deployment (zero value:
	// unversioned).
	Versioning Versioning
}

// StickyTimeout is how long a session's next workflow task waits for the
// worker that has the session cached before any worker may take it (SDK
// default 5 s). When a worker dies, every session it had cached pays this
// once; a busy worker that misses it costs only a history replay elsewhere.
const StickyTimeout = 2 * time.Second

// DefaultStopTimeout is how long a stopping worker (SIGTERM on a deploy)
// waits for running activities, so that a tool running at that moment
// finishes and its result is used rather than becoming "outcome unknown".
const DefaultStopTimeout = 30 * time.Second

// New returns a worker with everything it serves registered completely: the
// session and schedule-fire workflows, every activity they call (the
// Schedule.Fire activity included). Options.Activities is required. Start
// the worker with Run or Start.
func New(c client.Client, opts Options) (sdkworker.Worker, error) {
	if err := opts.Versioning.validate(); err != nil {
		return nil, err
	}
	if opts.Activities == nil || opts.Activities.Feed == nil && opts.Schedules == nil {
		return nil, errors.New("worker: Options.Activities (with its Feed) is required: a worker registers every activity its workflows call")
	}
	if opts.WorkflowTaskPollers == 1 || opts.WorkflowTaskPollers < 0 {
		return nil, fmt.Errorf("worker: WorkflowTaskPollers %d: use 0 (autoscaled) or at least 2 (fixed pollers alternate between the sticky and the shared queue)", opts.WorkflowTaskPollers)
	}
	tq := opts.TaskQueue
	if tq == "" {
		tq = workflows.TaskQueue
	}
	maxAct := opts.MaxConcurrentActivities
	if maxAct <= 0 {
		maxAct = 200
	}
	stopTimeout := opts.StopTimeout
	if stopTimeout <= 0 {
		stopTimeout = DefaultStopTimeout
	}
	if opts.StickyCacheSize > 0 {
		sdkworker.SetStickyWorkflowCacheSize(opts.StickyCacheSize)
	}
	// Heartbeats are throttled as the SDK does by default (at most one per
	// 0.8 × the activity's heartbeat timeout): they serve crash detection
	// only, since an abort reaches running activities by a stop notice on
	// the feed (workflows' stopActivities), and each one is an action.
	wo := sdkworker.Options{
		MaxConcurrentActivityExecutionSize:      maxAct,
		MaxConcurrentLocalActivityExecutionSize: maxAct,
		StickyScheduleToStartTimeout:            StickyTimeout,
		WorkerStopTimeout:                       stopTimeout,
		Interceptors:                            opts.Interceptors,
		DeploymentOptions:                       opts.Versioning.deploymentOptions(),
	}
	if opts.WorkflowTaskPollers > 0 {
		wo.MaxConcurrentWorkflowTaskPollers = opts.WorkflowTaskPollers
	} else {
		wo.WorkflowTaskPollerBehavior = sdkworker.NewPollerBehaviorAutoscaling(sdkworker.PollerBehaviorAutoscalingOptions{})
	}
	w := sdkworker.New(c, tq, wo)
	firer := opts.Schedules
	if firer == nil {
		firer = schedules.NewFirer(c, opts.Activities.Feed, opts.Activities.Store, tq, opts.Activities.Logger)
	}
	Register(w, opts.Activities, firer, opts.replies(c, tq))
	return w, nil
}

// Register registers on w the session and schedule-fire workflows together
// with every activity they call, so that no workflow is ever registered
// without its activities.
func Register(w sdkworker.Registry, acts *activities.Activities, firer *schedules.Firer, replies *activities.Replies) {
	w.RegisterWorkflowWithOptions(workflows.SessionWorkflow, workflow.RegisterOptions{Name: workflows.SessionWorkflowType})
	w.RegisterWorkflowWithOptions(workflows.ScheduleFireWorkflow, workflow.RegisterOptions{Name: workflows.ScheduleFireWorkflowType})
	w.RegisterWorkflowWithOptions(workflows.ChatWorkflow, workflow.RegisterOptions{Name: workflows.ChatWorkflowType})
	w.RegisterWorkflowWithOptions(workflows.DelegateWorkflow, workflow.RegisterOptions{Name: workflows.DelegateWorkflowType})
	acts.Register(w)
	firer.Register(w)
	replies.Register(w)
}

// replies builds the channel activities: repliers from the options, the
// live feed and store of the activities, the client for chat routing.
func (o Options) replies(c client.Client, tq string) *activities.Replies {
	r := activities.NewReplies(o.Activities.Store, o.Activities.Feed, o.Repliers, o.Activities.Logger)
	r.Starter, r.TaskQueue, r.Dir = c, tq, o.WorkspaceDir
	return r
}

// Split returns two workers of task queue tq that together serve what one
// worker built by New serves: wf takes the workflow tasks (and their local
// activities), act the activities. Either can then be stopped alone — a
// workflow worker lost while its activities still run, or the reverse.
// Neither is started.
func Split(c client.Client, tq string, acts *activities.Activities, firer *schedules.Firer, replies *activities.Replies) (wf, act sdkworker.Worker) {
	wf = sdkworker.New(c, tq, sdkworker.Options{LocalActivityWorkerOnly: true})
	Register(wf, acts, firer, replies)
	act = sdkworker.New(c, tq, sdkworker.Options{DisableWorkflowWorker: true})
	acts.Register(act)
	firer.Register(act)
	replies.Register(act)
	return wf, act
}
