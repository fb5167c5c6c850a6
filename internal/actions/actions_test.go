package actions

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
)

// The costs docs/load-and-sizing.md states ("What a turn costs"). A
// workflow change that adds an action to these turns fails here: update the
// documentation with the number, or find the action a guarantee does not
// need.
const (
	firstTurnActions    = 5 // start + one-step turn
	oneStepTurnActions  = 4 // a one-step text turn in a running session
	toolStepActions     = 2 // each further model step after a tool call
	scheduleFireActions = 4 // the fire workflow (3 for the Schedule's start) + its activity
)

func load(t *testing.T, name string) *historypb.History {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "workflows", "testdata", "histories", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return h
}

// kinds lists actions as "kind what" lines, for readable failures.
func kinds(as []Action) string {
	var b strings.Builder
	for _, a := range as {
		b.WriteString(a.Kind)
		if a.What != "" {
			b.WriteString(" (" + a.What + ")")
		}
		if a.N > 1 {
			b.WriteString(" ×" + string(rune('0'+a.N)))
		}
		b.WriteString("; ")
	}
	return b.String()
}

func TestFirstTurnOfASession(t *testing.T) {
	as := Count(load(t, "plain_turn"))
	want := "start_workflow (Session); accept_workflow_update (turn); record_markers (Version, SideEffect, LocalActivity); " +
		"schedule_activity (Model.Generate); schedule_activity (Turn.Record); "
	if got := kinds(as); got != want {
		t.Errorf("actions of a session's first one-step turn:\n got  %s\n want %s", got, want)
	}
	if n := Total(as); n > firstTurnActions {
		t.Errorf("a session's first one-step turn costs %d actions, documented %d: %s", n, firstTurnActions, kinds(as))
	}
}

// Every turn of a run after its first costs the same: the turns of
// continue_as_new (three one-step turns in one run).
func TestOneStepTurnInARunningSession(t *testing.T) {
	turns := PerTurn(load(t, "continue_as_new"))
	if len(turns) != 3 {
		t.Fatalf("found %d turns, want 3", len(turns))
	}
	for i, as := range turns[1:] {
		if n := Total(as); n > oneStepTurnActions {
			t.Errorf("turn %d costs %d actions, documented %d: %s", i+2, n, oneStepTurnActions, kinds(as))
		}
	}
	if n := Total(turns[0]); n != Total(turns[1])+1 {
		t.Errorf("the first turn costs %d, want one more (the start) than a later turn's %d", n, Total(turns[1]))
	}
}

func TestToolStep(t *testing.T) {
	plain := Total(Count(load(t, "plain_turn")))
	// sequential_tools: two tool calls run one after another, then one more
	// model step: one extra model step and two tool executions.
	seq := Count(load(t, "sequential_tools"))
	if got := Total(seq) - plain; got != 3 {
		t.Errorf("two sequential tool calls and the model step after them cost %d actions over a plain turn, want 3: %s", got, kinds(seq))
	}
	// tool_turn_with_retry: one tool call, one model step after it, which
	// was retried once (a retry is an action).
	retry := Count(load(t, "tool_turn_with_retry"))
	if got := Total(retry) - plain; got != toolStepActions+1 {
		t.Errorf("a tool step with one model retry costs %d over a plain turn, want %d: %s", got, toolStepActions+1, kinds(retry))
	}
	if ByKind(retry)["retry_activity"] != 1 {
		t.Errorf("the retried model call is not counted: %s", kinds(retry))
	}
}

func TestScheduleFire(t *testing.T) {
	as := Count(load(t, "schedule_fire"))
	if n := Total(as); n != scheduleFireActions {
		t.Errorf("a schedule fire's workflow costs %d actions, documented %d: %s", n, scheduleFireActions, kinds(as))
	}
}

// GetVersion's TemporalChangeVersion upsert is exempt; any other upsert
// counts, and so do timers, signals and child starts.
func TestRules(t *testing.T) {
	h := &historypb.History{Events: []*historypb.HistoryEvent{
		{EventId: 1, EventType: enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES,
			Attributes: upsert("TemporalChangeVersion")},
		{EventId: 2, EventType: enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES,
			Attributes: upsert("FastAgentStatus")},
		{EventId: 3, EventType: enumspb.EVENT_TYPE_TIMER_STARTED,
			Attributes: &historypb.HistoryEvent_TimerStartedEventAttributes{TimerStartedEventAttributes: &historypb.TimerStartedEventAttributes{TimerId: "t"}}},
		{EventId: 4, EventType: enumspb.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED,
			Attributes: &historypb.HistoryEvent_StartChildWorkflowExecutionInitiatedEventAttributes{StartChildWorkflowExecutionInitiatedEventAttributes: &historypb.StartChildWorkflowExecutionInitiatedEventAttributes{}}},
	}}
	got := ByKind(Count(h))
	if got["upsert_workflow_search_attributes"] != 1 || got["start_timer"] != 1 || got["start_child_workflow"] != 2 || Total(Count(h)) != 4 {
		t.Errorf("counted %v, want one upsert (TemporalChangeVersion exempt), one timer, a child start as two", got)
	}
}

func upsert(name string) *historypb.HistoryEvent_UpsertWorkflowSearchAttributesEventAttributes {
	return &historypb.HistoryEvent_UpsertWorkflowSearchAttributesEventAttributes{
		UpsertWorkflowSearchAttributesEventAttributes: &historypb.UpsertWorkflowSearchAttributesEventAttributes{
			SearchAttributes: &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{name: {Data: []byte(`"x"`)}}},
		},
	}
}
