package metrics

import (
	"context"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"

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
	res, err := a.Next.ExecuteActivity(ctx, in)
	m := a.w.m
	switch activity.GetInfo(ctx).ActivityType.Name {
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
		outcome := "ok"
		if err != nil {
			outcome = "error"
		}
		m.modelLatency.WithLabelValues(outcome).Observe(time.Since(start).Seconds())
		// A step that ended its turn recorded it (no Turn.Record runs).
		if r, ok := res.(agentloop.ModelResult); ok && err == nil && r.Recorded {
			if call, ok := arg[agentloop.ModelCall](in); ok && call.End != nil {
				a.turnFinished(call.Session, call.Turn, call.End.Ended(call, r))
			}
		}
	case workflows.ActivityToolExecute:
		if tc, ok := arg[agentloop.ToolCall](in); ok && tc.Synthetic == nil {
			outcome := "ok"
			o, isOutcome := res.(agentloop.ToolOutcome)
			switch {
			case err != nil:
				outcome = "error"
			case isOutcome && o.Recorded:
				return res, err // answered from the store: counted when it ran
			case isOutcome && o.IsError:
				outcome = "tool_error"
			}
			m.toolCalls.WithLabelValues(toolLabel(tc.Call), outcome).Inc()
		}
	}
	return res, err
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
