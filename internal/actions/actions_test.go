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
	firstTurnActions    = 5 // start + a one-step turn + the run's window timer
	oneStepTurnActions  = 3 // a one-step text turn in a running session: update, markers, Model.Generate
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
	as := PerTurn(load(t, "continue_as_new"))[0]
	got := ByKind(as)
	for _, kind := range []string{"start_workflow", "accept_workflow_update", "record_markers"} {
		if got[kind] != 1 {
			t.Errorf("a session's first turn has %d %s, want 1: %s", got[kind], kind, kinds(as))
		}
	}
	if n := Total(as); n > firstTurnActions {
		t.Errorf("a session's first one-step turn costs %d actions, documented %d: %s", n, firstTurnActions, kinds(as))
	}
}

// A run's first turn update sets one timer, which ends the run before that
// turn's key leaves the idempotency window (Temporal would answer the key
// from the run's history for as long as the run lasts): one action per run,
// on its first turn — a new session's, and the first after each
// continue-as-new — and none on the turns after it (versions_first, two
// runs of two turns).
func TestWindowTimerOncePerRun(t *testing.T) {
	for _, run := range []string{"versions_first", "versions_first_run2"} {
		turns := PerTurn(load(t, run))
		if len(turns) != 2 {
			t.Fatalf("%s: %d turns, want 2", run, len(turns))
		}
		for i, as := range turns {
			want := 0
			if i == 0 {
				want = 1
			}
			if n := ByKind(as)["start_timer"]; n != want {
				t.Errorf("%s turn %d: %d timers, want %d: %s", run, i+1, n, want, kinds(as))
			}
		}
	}
}

// Every later one-step turn of a run costs at most the documented number:
// the turns of continue_as_new (one-step turns in one run).
func TestOneStepTurnInARunningSession(t *testing.T) {
	turns := PerTurn(load(t, "continue_as_new"))
	if len(turns) < 3 {
		t.Fatalf("found %d turns, want at least 3", len(turns))
	}
	for i, as := range turns[1:] {
		if n := Total(as); n > oneStepTurnActions {
			t.Errorf("turn %d costs %d actions, documented %d: %s", i+2, n, oneStepTurnActions, kinds(as))
		}
		if ByKind(as)["start_workflow"] != 0 {
			t.Errorf("turn %d starts a workflow: %s", i+2, kinds(as))
		}
	}
}

// A turn with tool steps costs what a one-step turn costs plus one action
// per tool step run as one Step.Run (its calls and the next model call),
// or, where a step falls back to two activities, one per further model
// step and one per tool call (and one per retry): nothing else.
func TestToolStep(t *testing.T) {
	for _, tc := range []struct {
		history                     string
		models, tools, steps, retry int
	}{
		{"step_run", 1, 0, 2, 1},             // two tool steps, each one Step.Run; the first retried once
		{"sequential_tools", 2, 2, 0, 0},     // recorded before Step.Run: two calls one after another, then one more model step
		{"tool_turn_with_retry", 2, 1, 0, 1}, // recorded before Step.Run: one call; the model step after it was retried once
	} {
		as := Count(load(t, tc.history))
		k := ByKind(as)
		var models, tools, steps int
		for _, a := range as {
			switch a.What {
			case "Model.Generate":
				models++
			case "Tool.Execute":
				tools++
			case "Step.Run":
				steps++
			}
		}
		if models != tc.models || tools != tc.tools || steps != tc.steps || k["retry_activity"] != tc.retry {
			t.Errorf("%s: %d model steps, %d tool calls, %d combined steps, %d retries; want %d, %d, %d, %d: %s", tc.history,
				models, tools, steps, k["retry_activity"], tc.models, tc.tools, tc.steps, tc.retry, kinds(as))
		}
		// start, update, markers, the run's window timer, then one action
		// per model step (the last one records the turn), tool call,
		// combined step and retry: no Turn.Record, no status upsert.
		base := 4
		if k["upsert_workflow_search_attributes"] != 0 || k["schedule_activity"] != models+tools+steps {
			t.Errorf("%s: status upserts or activities besides the steps' and calls': %s", tc.history, kinds(as))
		}
		if n := Total(as); n != base+models+tools+steps+tc.retry {
			t.Errorf("%s costs %d actions, want %d: %s", tc.history, n, base+models+tools+steps+tc.retry, kinds(as))
		}
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
