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

// reportQueueDepth reports the session's queue length to
// MetricTurnQueueDepth as a gauge tagged with the session (the worker's
// metrics sum the sessions): on every change, and once a replay is over,
// so a worker that took the session over from a crashed one, and heard
// nothing while it replayed, reports the queue as it is. It issues no
// command, so it is safe for running histories, and the SDK's metrics
// handler drops what a replay reports.
func (s *session) reportQueueDepth(ctx workflow.Context) {
	depth := workflow.GetMetricsHandler(ctx).WithTags(map[string]string{
		MetricSessionTag: workflow.GetInfo(ctx).WorkflowExecution.ID,
	}).Gauge(MetricTurnQueueDepth)
	workflow.Go(ctx, func(ctx workflow.Context) {
		reported, live := -1, false
		for {
			if err := workflow.Await(ctx, func() bool {
				return len(s.queue) != reported || (!live && !workflow.IsReplaying(ctx))
			}); err != nil {
				return
			}
			reported, live = len(s.queue), !workflow.IsReplaying(ctx)
			depth.Update(float64(reported))
		}
	})
}
