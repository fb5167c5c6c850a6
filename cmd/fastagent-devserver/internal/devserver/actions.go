package devserver

import (
	"maps"
	"slices"
	"sync"

	"go.temporal.io/server/common/metrics"
)

// actionCounts is the server's own count of billable actions (its "action"
// metric, the one Temporal publishes for estimating Temporal Cloud usage),
// by namespace and action type.
type actionCounts struct {
	mu sync.Mutex
	m  map[string]map[string]int64 // namespace → action type → count
}

func (c *actionCounts) add(ns, typ string, v int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]map[string]int64{}
	}
	if c.m[ns] == nil {
		c.m[ns] = map[string]int64{}
	}
	c.m[ns][typ] += v
}

func (c *actionCounts) snapshot(ns string) map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.m[ns])
}

// actionHandler is the server's metrics handler: it keeps the "action"
// counter and drops every other metric (the embedded server exports none).
type actionHandler struct {
	metrics.Handler // the no-op handler, for everything but actions
	tags            []metrics.Tag
	counts          *actionCounts
}

func newActionHandler() *actionHandler {
	return &actionHandler{Handler: metrics.NoopMetricsHandler, counts: &actionCounts{}}
}

// WithTags implements metrics.Handler.
func (h *actionHandler) WithTags(tags ...metrics.Tag) metrics.Handler {
	return &actionHandler{Handler: h.Handler, tags: append(slices.Clone(h.tags), tags...), counts: h.counts}
}

// Counter implements metrics.Handler.
func (h *actionHandler) Counter(name string) metrics.CounterIface {
	if name != metrics.ActionCounter.Name() {
		return h.Handler.Counter(name)
	}
	return metrics.CounterFunc(func(v int64, tags ...metrics.Tag) {
		var ns, typ string
		for _, t := range append(slices.Clone(h.tags), tags...) {
			switch t.Key {
			case "namespace":
				ns = t.Value
			case "action_type":
				typ = t.Value
			}
		}
		h.counts.add(ns, typ, v)
	})
}

// Actions returns how many billable actions the server counted in
// namespace (default: the server's namespace) since it started, by action
// type as its "action" metric names them: grpc_ExecuteMultiOperation (an
// update-with-start that started the workflow),
// message_UpdateWorkflowExecution:Acceptance, command_ScheduleActivityTask,
// command_BatchMarkers (all markers of one workflow task),
// grpc_RecordActivityTaskHeartbeat, activity_retry, … The server counts
// every command it is sent, including the TemporalChangeVersion upsert
// Temporal Cloud does not bill and the individual markers behind
// command_BatchMarkers (command_RecordMarker).
func (s *Server) Actions(namespace string) map[string]int64 {
	if namespace == "" {
		namespace = s.namespace
	}
	if s.actions == nil {
		return nil
	}
	return s.actions.counts.snapshot(namespace)
}
