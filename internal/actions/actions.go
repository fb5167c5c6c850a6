// Package actions counts what a workflow history costs on Temporal Cloud,
// whose unit of price and of rate limit is the billable action. The rules
// are Temporal Cloud's published ones (docs.temporal.io/cloud/actions, as
// read in December 2026), applied to the events of a history:
//
//   - a workflow start (client, update-with-start, continue-as-new) is one
//     action; a child workflow start is two (the intent and the start); a
//     start by a Schedule is three (two for the schedule's action);
//   - every accepted update and every signal received is one;
//   - every activity scheduled is one, and every retry of it one more
//     (the attempt number of its started event, minus one);
//   - all markers one workflow task records — local activities, side
//     effects, version markers — are one action together, plus one per
//     retried local activity attempt the task reports;
//   - every timer started, every search-attribute upsert (except
//     TemporalChangeVersion, which GetVersion upserts and which is exempt),
//     every workflow-options update, signal or cancel of another workflow
//     and Nexus operation is one.
//
// Some actions never reach a history: activity heartbeats that reach the
// server, queries, rejected updates, and a Schedule's own bookkeeping
// beyond its start. Count reports what the history shows; Heartbeats says
// so where the history cannot.
package actions

import (
	"context"
	"fmt"
	"sort"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
)

// changeVersion is the search attribute the Go SDK upserts on a workflow's
// first GetVersion of a change; Temporal Cloud does not bill it.
const changeVersion = "TemporalChangeVersion"

// scheduledBy is the search attribute a Schedule sets on the workflows it
// starts.
const scheduledBy = "TemporalScheduledById"

// Action is one billable action a history shows.
type Action struct {
	// EventID is the event it is read from.
	EventID int64
	// Kind names the action as Temporal Cloud's usage does, e.g.
	// "start_workflow", "schedule_activity", "retry_activity".
	Kind string
	// What says which workflow part it belongs to (the activity type, the
	// update name, the marker names of a workflow task).
	What string
	// N is how many actions it is (a child workflow start is 2).
	N int
}

// Count returns the billable actions in the events of h, in event order.
func Count(h *historypb.History) []Action {
	var out []Action
	// The markers of one workflow task are one action, read from its first
	// marker event.
	task := map[int64]int{} // workflow task completed event → index in out
	names := map[int][]string{}
	for _, ev := range h.GetEvents() {
		if a, ok := eventAction(ev); ok {
			out = append(out, a...)
		}
		m := ev.GetMarkerRecordedEventAttributes()
		if m == nil {
			continue
		}
		i, ok := task[m.GetWorkflowTaskCompletedEventId()]
		if !ok {
			i = len(out)
			task[m.GetWorkflowTaskCompletedEventId()] = i
			out = append(out, Action{EventID: ev.GetEventId(), Kind: "record_markers", N: 1})
		}
		names[i] = append(names[i], m.GetMarkerName())
	}
	for i, ns := range names {
		out[i].What = joinUnique(ns)
	}
	return out
}

// eventAction returns the actions one event stands for (markers are
// counted per workflow task by Count).
func eventAction(ev *historypb.HistoryEvent) ([]Action, bool) {
	id := ev.GetEventId()
	one := func(kind, what string) ([]Action, bool) {
		return []Action{{EventID: id, Kind: kind, What: what, N: 1}}, true
	}
	switch ev.GetEventType() {
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
		return started(ev)
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
		return one("accept_workflow_update", ev.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest().GetInput().GetName())
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
		return one("signal_workflow", ev.GetWorkflowExecutionSignaledEventAttributes().GetSignalName())
	case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
		return one("schedule_activity", ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName())
	case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
		if n := ev.GetActivityTaskStartedEventAttributes().GetAttempt() - 1; n > 0 {
			return []Action{{EventID: id, Kind: "retry_activity", What: fmt.Sprintf("%d retries", n), N: int(n)}}, true
		}
	case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
		if n := ev.GetWorkflowTaskCompletedEventAttributes().GetMeteringMetadata().GetNonfirstLocalActivityExecutionAttempts(); n > 0 {
			return []Action{{EventID: id, Kind: "retry_activity_local", What: fmt.Sprintf("%d retries", n), N: int(n)}}, true
		}
	case enumspb.EVENT_TYPE_TIMER_STARTED:
		return one("start_timer", ev.GetTimerStartedEventAttributes().GetTimerId())
	case enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
		fields := ev.GetUpsertWorkflowSearchAttributesEventAttributes().GetSearchAttributes().GetIndexedFields()
		if _, ok := fields[changeVersion]; ok && len(fields) == 1 {
			return nil, false // GetVersion's upsert: exempt
		}
		return one("upsert_workflow_search_attributes", keys(fields))
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_OPTIONS_UPDATED:
		return one("update_workflow_options", "")
	case enumspb.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
		return []Action{{EventID: id, Kind: "start_child_workflow", N: 2,
			What: ev.GetStartChildWorkflowExecutionInitiatedEventAttributes().GetWorkflowType().GetName()}}, true
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
		// Billed as the new run's start, which that run's history shows.
	case enumspb.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED:
		// Billed in the signalled workflow's history (its signaled event).
	case enumspb.EVENT_TYPE_REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED:
		return one("request_cancel_external_workflow", "")
	case enumspb.EVENT_TYPE_NEXUS_OPERATION_SCHEDULED:
		return one("schedule_nexus_operation", ev.GetNexusOperationScheduledEventAttributes().GetOperation())
	case enumspb.EVENT_TYPE_NEXUS_OPERATION_CANCEL_REQUESTED:
		return one("request_nexus_operation_cancellation", "")
	}
	return nil, false
}

// started counts a run's start: a child's start is billed in its parent's
// history; a start by a Schedule is three actions.
func started(ev *historypb.HistoryEvent) ([]Action, bool) {
	a := ev.GetWorkflowExecutionStartedEventAttributes()
	act := Action{EventID: ev.GetEventId(), Kind: "start_workflow", What: a.GetWorkflowType().GetName(), N: 1}
	switch {
	case a.GetParentWorkflowExecution() != nil:
		return nil, false
	case a.GetContinuedExecutionRunId() != "":
		act.Kind = "continue_as_new_workflow"
	case a.GetSearchAttributes().GetIndexedFields()[scheduledBy] != nil:
		act.Kind, act.N = "schedule_workflow", 3
	}
	return []Action{act}, true
}

// Total sums the actions.
func Total(as []Action) int {
	n := 0
	for _, a := range as {
		n += a.N
	}
	return n
}

// ByKind sums the actions per kind.
func ByKind(as []Action) map[string]int {
	m := map[string]int{}
	for _, a := range as {
		m[a.Kind] += a.N
	}
	return m
}

// Between returns the actions read from events in [from, to].
func Between(as []Action, from, to int64) []Action {
	var out []Action
	for _, a := range as {
		if a.EventID >= from && a.EventID <= to {
			out = append(out, a)
		}
	}
	return out
}

func keys[V any](m map[string]V) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return joinUnique(ks)
}

func joinUnique(names []string) string {
	seen := map[string]bool{}
	s := ""
	for _, n := range names {
		if seen[n] {
			continue
		}
		seen[n] = true
		if s != "" {
			s += ", "
		}
		s += n
	}
	return s
}

// PerTurn splits a session run's actions by turn (see TurnSpans).
func PerTurn(h *historypb.History) [][]Action {
	spans, as := TurnSpans(h), Count(h)
	out := make([][]Action, len(spans))
	for i, sp := range spans {
		out[i] = Between(as, sp[0], sp[1])
	}
	return out
}

// Metric is what the server's own "action" metric counted for a stretch of
// work, mapped to the kinds Count reads from a history.
type Metric struct {
	// ByKind are the actions a history also shows, by Count's kinds.
	ByKind map[string]int
	// Heartbeats and Queries are actions no history shows.
	Heartbeats, Queries int64
	// Unmapped lists action types neither a history nor this mapping
	// knows ("type=n").
	Unmapped []string
}

// metricKinds maps the server's action types to Count's kinds.
var metricKinds = map[string]string{
	"grpc_ExecuteMultiOperation":                 "start_workflow",
	"grpc_StartWorkflowExecution":                "start_workflow",
	"grpc_SignalWithStartWorkflowExecution":      "start_workflow",
	"message_UpdateWorkflowExecution:Acceptance": "accept_workflow_update",
	"command_BatchMarkers":                       "record_markers",
	"command_ScheduleActivityTask":               "schedule_activity",
	"activity_retry":                             "retry_activity",
	"command_StartTimer":                         "start_timer",
	"command_UpsertWorkflowSearchAttributes":     "upsert_workflow_search_attributes",
	"grpc_SignalWorkflowExecution":               "signal_workflow",
	"command_ContinueAsNewWorkflowExecution":     "continue_as_new_workflow",
	"command_StartChildWorkflowExecution":        "start_child_workflow",
	"command_StartChildWorkflowExecution_Extra":  "start_child_workflow",
}

// FromMetric maps the server's action counts (by action type) to Count's
// kinds. exemptUpserts is how many of the counted upserts set only
// TemporalChangeVersion, which the server counts and Temporal Cloud does
// not bill (ExemptUpserts reads it from the history).
func FromMetric(types map[string]int64, exemptUpserts int) Metric {
	m := Metric{ByKind: map[string]int{}}
	for typ, n := range types {
		switch {
		case metricKinds[typ] != "":
			m.ByKind[metricKinds[typ]] += int(n)
		case typ == "grpc_RecordActivityTaskHeartbeat" || typ == "grpc_RecordActivityTaskHeartbeatById":
			m.Heartbeats += n
		case typ == "grpc_QueryWorkflow":
			m.Queries += n
		case typ == "command_RecordMarker": // the markers behind command_BatchMarkers
		default:
			m.Unmapped = append(m.Unmapped, fmt.Sprintf("%s=%d", typ, n))
		}
	}
	if m.ByKind["upsert_workflow_search_attributes"] -= exemptUpserts; m.ByKind["upsert_workflow_search_attributes"] <= 0 {
		delete(m.ByKind, "upsert_workflow_search_attributes")
	}
	sort.Strings(m.Unmapped)
	return m
}

// ExemptUpserts counts the upserts in as's events of h that set only
// TemporalChangeVersion (Count leaves them out; the server counts them).
func ExemptUpserts(h *historypb.History, from, to int64) int {
	n := 0
	for _, ev := range h.GetEvents() {
		if ev.GetEventId() < from || ev.GetEventId() > to {
			continue
		}
		f := ev.GetUpsertWorkflowSearchAttributesEventAttributes().GetSearchAttributes().GetIndexedFields()
		if _, ok := f[changeVersion]; ok && len(f) == 1 {
			n++
		}
	}
	return n
}

// TurnSpans returns the event ID range [from, to] of each turn of a
// session run: a turn starts at the update (or signal) that delivers it,
// and the run's start belongs to its first turn.
func TurnSpans(h *historypb.History) [][2]int64 {
	var starts []int64
	for _, ev := range h.GetEvents() {
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
			starts = append(starts, ev.GetEventId())
		}
	}
	spans := make([][2]int64, len(starts))
	for i := range starts {
		from, to := starts[i], int64(1<<62)
		if i == 0 {
			from = 0
		}
		if i+1 < len(starts) {
			to = starts[i+1] - 1
		}
		spans[i] = [2]int64{from, to}
	}
	return spans
}

// Format prints counts by kind as "kind=n" pairs in name order.
func Format(m map[string]int) string {
	var parts []string
	for k, v := range m {
		if v != 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", k, v))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// Delta is what the server counted between two Server.Actions snapshots.
func Delta(after, before map[string]int64) map[string]int64 {
	d := map[string]int64{}
	for k, v := range after {
		if n := v - before[k]; n != 0 {
			d[k] = n
		}
	}
	return d
}

// Sum adds counts by kind.
func Sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// Fetch reads the current run's history of workflowID.
func Fetch(ctx context.Context, c client.Client, workflowID string) (*historypb.History, error) {
	it := c.GetWorkflowHistory(ctx, workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	h := &historypb.History{}
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return nil, fmt.Errorf("history of %s: %w", workflowID, err)
		}
		h.Events = append(h.Events, ev)
	}
	return h, nil
}
