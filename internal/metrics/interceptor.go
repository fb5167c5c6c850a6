package metrics

import (
	"context"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"

	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// maxOpenTurns bounds the start times kept for turn latency; a turn whose
// outcome is recorded by another worker leaves its start behind, so the
// oldest are dropped past this size.
const maxOpenTurns = 10000

// Interceptor returns the worker interceptor that records fastagent's turn,
// model and tool metrics from the activities the session workflow runs
// (activities see real time; workflow code stays untouched).
func (m *Metrics) Interceptor() interceptor.WorkerInterceptor {
	return &workerInterceptor{m: m, open: map[string]time.Time{}}
}

type workerInterceptor struct {
	interceptor.WorkerInterceptorBase
	m    *Metrics
	mu   sync.Mutex
	open map[string]time.Time // session\x00key -> start
}

func (w *workerInterceptor) InterceptActivity(_ context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	a := &activityInbound{w: w}
	a.Next = next
	return a
}

type activityInbound struct {
	interceptor.ActivityInboundInterceptorBase
	w *workerInterceptor
}

func (a *activityInbound) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	start := time.Now()
	name := activity.GetInfo(ctx).ActivityType.Name
	if name == workflows.ActivityStepRun {
		// Its calls are counted one by one as it makes them, as the
		// Tool.Execute and Model.Generate activities would be.
		ctx = activities.WithStepObserver(ctx, a)
	}
	res, err := a.Next.ExecuteActivity(ctx, in)
	m := a.w.m
	switch name {
	case workflows.ActivityTurnBegin:
		if r, ok := res.(wire.BeginTurnResult); ok && err == nil && r.Outcome == nil {
			m.turnsStarted.Inc()
			if bi, ok := arg[wire.BeginTurnInput](in); ok && bi.Key != "" {
				a.w.started(bi.Session+"\x00"+bi.Key, start)
			}
		}
	case workflows.ActivityTurnRecord:
		if ri, ok := arg[wire.RecordTurnInput](in); ok && err == nil {
			a.turnFinished(ri.Session, ri.Key, ri.Outcome)
		}
	case workflows.ActivityModelGenerate:
		r, _ := res.(agentloop.ModelResult)
		if call, ok := arg[agentloop.ModelCall](in); ok {
			a.modelCalled(call, time.Since(start), r, err)
		}
	case workflows.ActivityToolExecute:
		if tc, ok := arg[agentloop.ToolCall](in); ok && tc.Synthetic == nil {
			o, _ := res.(agentloop.ToolOutcome)
			a.toolCalled(tc, o, err)
		}
	}
	return res, err
}

// modelCalled counts one attempt of a model call (call, which took took):
// its latency by outcome and, when it ended its turn and recorded it (no
// Turn.Record runs), the turn's end.
func (a *activityInbound) modelCalled(call agentloop.ModelCall, took time.Duration, r agentloop.ModelResult, err error) {
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	a.w.m.modelLatency.WithLabelValues(outcome).Observe(took.Seconds())
	if err == nil && r.Recorded && call.End != nil {
		a.turnFinished(call.Session, call.Turn, call.End.Ended(call, r))
	}
}

// toolCalled counts one attempt of tool call tc by outcome; one answered
// from the store (an earlier attempt ran it) was counted when it ran.
func (a *activityInbound) toolCalled(tc agentloop.ToolCall, o agentloop.ToolOutcome, err error) {
	outcome := "ok"
	switch {
	case err != nil:
		outcome = "error"
	case o.Recorded:
		return
	case o.IsError:
		outcome = "tool_error"
	}
	a.w.m.toolCalls.WithLabelValues(toolLabel(tc.Call), outcome).Inc()
}

// StepTool counts a tool call a Step.Run ran as Tool.Execute's is
// (activities.StepObserver).
func (a *activityInbound) StepTool(call agentloop.ToolCall, out agentloop.ToolOutcome, err error) {
	a.toolCalled(call, out, err)
}

// StepModel counts the model call a Step.Run made as Model.Generate's is
// (activities.StepObserver): an attempt that read the reply an earlier
// one stored is not counted again, though the turn it recorded is.
func (a *activityInbound) StepModel(call agentloop.ModelCall, took time.Duration, stored bool, res agentloop.ModelResult, err error) {
	if !stored {
		a.modelCalled(call, took, res, err)
		return
	}
	if err == nil && res.Recorded && call.End != nil {
		a.turnFinished(call.Session, call.Turn, call.End.Ended(call, res))
	}
}

// turnFinished counts a recorded turn and its latency.
func (a *activityInbound) turnFinished(session, key string, out agentloop.Outcome) {
	m := a.w.m
	m.turnsFinished.WithLabelValues(out.Status, out.Code).Inc()
	if t, ok := a.w.finished(session + "\x00" + key); ok {
		m.turnLatency.WithLabelValues(out.Status).Observe(time.Since(t).Seconds())
	}
}

// toolLabel is the tool label of a call: the tool's name when the agent
// has that tool, "unknown" for a name the model made up (label values stay
// bounded by the agent's own tools).
func toolLabel(c agentloop.Call) string {
	if !c.Known {
		return "unknown"
	}
	return c.Name
}

// arg is the activity's first argument as T.
func arg[T any](in *interceptor.ExecuteActivityInput) (T, bool) {
	var zero T
	if len(in.Args) == 0 {
		return zero, false
	}
	switch v := in.Args[0].(type) {
	case T:
		return v, true
	case *T:
		if v != nil {
			return *v, true
		}
	}
	return zero, false
}

func (w *workerInterceptor) started(id string, t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.open) >= maxOpenTurns {
		oldest, ot := "", t
		for k, v := range w.open {
			if v.Before(ot) {
				oldest, ot = k, v
			}
		}
		delete(w.open, oldest)
	}
	if _, ok := w.open[id]; !ok {
		w.open[id] = t
	}
}

func (w *workerInterceptor) finished(id string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.open[id]
	delete(w.open, id)
	return t, ok
}
