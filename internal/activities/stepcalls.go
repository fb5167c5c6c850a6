package activities

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// StepObserver hears of the calls a Step.Run activity makes, as a worker's
// activity interceptor hears of the Model.Generate and Tool.Execute
// attempts of the two-activity path (internal/metrics counts both alike).
// The Step.Run's interceptor puts it in the activity's context
// (WithStepObserver).
type StepObserver interface {
	// StepTool is told of each run of a tool call (an attempt of it): not
	// of a result read from the store (an earlier attempt ran the call)
	// nor of one recorded in its place (lost, outcome unknown), which
	// Tool.Execute's interceptor does not count either.
	StepTool(call agentloop.ToolCall, out agentloop.ToolOutcome, err error)
	// StepModel is told of each attempt of the model call: took is its
	// time; stored says the reply was read from the store (an earlier
	// attempt made the call), res.Recorded that the call recorded the turn.
	StepModel(call agentloop.ModelCall, took time.Duration, stored bool, res agentloop.ModelResult, err error)
}

type stepObserverKey struct{}

// WithStepObserver returns ctx with o, which the Step.Run activity run
// with ctx tells of its calls.
func WithStepObserver(ctx context.Context, o StepObserver) context.Context {
	return context.WithValue(ctx, stepObserverKey{}, o)
}

func stepObserverOf(ctx context.Context) StepObserver {
	o, _ := ctx.Value(stepObserverKey{}).(StepObserver)
	return o
}

// The attributes the Temporal SDK's tracing interceptor sets on its
// activity spans (interceptor.NewTracingInterceptor).
const (
	spanWorkflowID = "temporalWorkflowID"
	spanRunID      = "temporalRunID"
	spanActivityID = "temporalActivityID"
)

// instrumentation names the tracer of the spans Step.Run makes (the one
// internal/tracing gives the SDK's interceptor).
const instrumentation = "github.com/fastagent/fastagent"

// callSpans starts, below the span ctx holds (the Step.Run activity's
// RunActivity span, when the worker is traced), the spans the call would
// have had as its own activity (name: Tool.Execute, Model.Generate):
// StartActivity:<name> and RunActivity:<name> below it, with the
// attributes the SDK's tracing interceptor sets — the workflow's ID and
// run, the activity's ID (Step.Run's: the activity that ran it) — and
// fastagent.step_run naming what ran it (call: the tool call's ID).
// Traces and the dashboards built on their span names read a tool step
// the same whichever way it ran. end ends them with the call's error, as
// the interceptor does. Nothing is made when ctx holds no recording span.
func callSpans(ctx context.Context, name, call string) (_ context.Context, end func(error)) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() || !activity.IsActivity(ctx) {
		return ctx, func(error) {}
	}
	info := activity.GetInfo(ctx)
	tracer := parent.TracerProvider().Tracer(instrumentation)
	attrs := []attribute.KeyValue{
		attribute.String(spanWorkflowID, info.WorkflowExecution.ID),
		attribute.String(spanRunID, info.WorkflowExecution.RunID),
		attribute.String("fastagent.step_run", workflows.ActivityStepRun),
	}
	if call != "" {
		attrs = append(attrs, attribute.String("fastagent.tool_call", call))
	}
	sctx, start := tracer.Start(ctx, "StartActivity:"+name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	rctx, run := tracer.Start(sctx, "RunActivity:"+name, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(append(attrs, attribute.String(spanActivityID, info.ActivityID))...))
	// The SDK ends StartActivity once the activity is scheduled.
	start.End()
	return rctx, func(err error) {
		if err != nil {
			run.RecordError(err)
			var app *temporal.ApplicationError
			if !errors.As(err, &app) || app.Category() != temporal.ApplicationErrorCategoryBenign {
				run.SetStatus(codes.Error, err.Error())
			}
		}
		run.End()
	}
}
