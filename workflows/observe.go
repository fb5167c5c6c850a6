package workflows

import "go.temporal.io/sdk/workflow"

// TraceSpanKey is the workflow context key under which the tracing
// interceptor keeps the current span (the OpenTelemetry interceptor's
// SpanContextKey). A turn's activities run under the span of the update
// that sent the turn, so one trace shows one turn, although the turn runs
// in the workflow's main loop rather than in the update handler.
type TraceSpanKey struct{}

// traced returns ctx with span as the current tracing span (ctx when nil).
// Spans are no commands: this changes nothing in history.
func traced(ctx workflow.Context, span any) workflow.Context {
	if span == nil {
		return ctx
	}
	return workflow.WithValue(ctx, TraceSpanKey{}, span)
}

// reportQueueDepth reports every change of the session's queue length to
// MetricTurnQueueDepth as a signed delta. It issues no command, so it is
// safe for running histories, and the SDK's metrics handler drops what a
// replay reports, so a session replayed on another worker is not counted
// twice.
func (s *session) reportQueueDepth(ctx workflow.Context) {
	depth := workflow.GetMetricsHandler(ctx).Counter(MetricTurnQueueDepth)
	workflow.Go(ctx, func(ctx workflow.Context) {
		reported := 0
		for {
			if err := workflow.Await(ctx, func() bool { return len(s.queue) != reported }); err != nil {
				return
			}
			n := len(s.queue)
			depth.Inc(int64(n - reported))
			reported = n
		}
	})
}
