package plugin

import (
	"fmt"
	"time"

	sdkworker "go.temporal.io/sdk/worker"
)

// Tuning are the SDK worker options fastagent's own workers run with: a
// turn fast (eager activities, autoscaled pollers, a short sticky timeout)
// and a deploy gentle (running calls finish before the worker stops).
type Tuning struct {
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

// WorkerOptions returns the SDK worker options of t, with plugins (the
// fastagent plugin) installed. Eager activity execution stays on (the
// SDK's default): a model or tool call scheduled by a workflow task this
// worker completes starts here without a round trip through the matching
// service.
func (t Tuning) WorkerOptions(plugins ...sdkworker.Plugin) (sdkworker.Options, error) {
	if err := t.Versioning.validate(); err != nil {
		return sdkworker.Options{}, err
	}
	if t.WorkflowTaskPollers == 1 || t.WorkflowTaskPollers < 0 {
		return sdkworker.Options{}, fmt.Errorf("worker: WorkflowTaskPollers %d: use 0 (autoscaled) or at least 2 (fixed pollers alternate between the sticky and the shared queue)", t.WorkflowTaskPollers)
	}
	maxAct := t.MaxConcurrentActivities
	if maxAct <= 0 {
		maxAct = 200
	}
	stopTimeout := t.StopTimeout
	if stopTimeout <= 0 {
		stopTimeout = DefaultStopTimeout
	}
	if t.StickyCacheSize > 0 {
		sdkworker.SetStickyWorkflowCacheSize(t.StickyCacheSize)
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
		DeploymentOptions:                       t.Versioning.deploymentOptions(),
		Plugins:                                 plugins,
	}
	if t.WorkflowTaskPollers > 0 {
		wo.MaxConcurrentWorkflowTaskPollers = t.WorkflowTaskPollers
	} else {
		wo.WorkflowTaskPollerBehavior = sdkworker.NewPollerBehaviorAutoscaling(sdkworker.PollerBehaviorAutoscalingOptions{})
	}
	return wo, nil
}
