package workflows

import (
	"github.com/fastagent/fastagent/internal/wire"
	"go.temporal.io/sdk/workflow"
)

// traced returns ctx with span as the current tracing span (ctx when nil).
// Spans are no commands: this changes nothing in history.
func traced(ctx workflow.Context, span any) workflow.Context {
	if span == nil {
		return ctx
	}
	return workflow.WithValue(ctx, wire.TraceSpanKey{}, span)
}

// reportQueueDepth turns on noteDepth, which reports the session's queue
// length to MetricTurnQueueDepth tagged with the session (the worker's
// metrics sum the sessions).
func (s *session) reportQueueDepth(ctx workflow.Context) {
	s.queueReporting, s.queueReported = true, -1
}

// noteDepth reports the queue's length when it changed, and once a replay
// is over, so a worker that took the session over from a crashed one, and
// heard nothing while it replayed, reports the queue as it is. Every queue
// change calls it, and so does the main loop's wait (which a live workflow
// task evaluates): no listener coroutine, with its own goroutine stack,
// waits for changes. It issues no command, so it is safe for running
// histories, and the SDK's metrics handler drops what a replay reports.
func (s *session) noteDepth(ctx workflow.Context) {
	if !s.queueReporting {
		return
	}
	live := !workflow.IsReplaying(ctx)
	if len(s.queue) == s.queueReported && (s.queueLive || !live) {
		return
	}
	s.queueReported, s.queueLive = len(s.queue), live
	// The tagged gauge is made per report, not kept: a few per turn, and
	// nothing held while the session sits in the worker's cache.
	workflow.GetMetricsHandler(ctx).WithTags(map[string]string{
		MetricSessionTag: workflow.GetInfo(ctx).WorkflowExecution.ID,
	}).Gauge(MetricTurnQueueDepth).Update(float64(s.queueReported))
}
