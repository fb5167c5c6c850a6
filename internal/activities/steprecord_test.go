package activities_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// A model step asked to (ModelCall.End) records the turn it ends, as
// Turn.Record would: the outcome the loop computes (TurnEnd.Ended) is
// stored under the turn's key and published after the step's end; a retry
// of the step changes nothing; a step that calls tools records nothing; and
// the workflow's own record of the turn (Override) replaces the step's.
func TestModelStepRecordsTheTurnItEnds(t *testing.T) {
	t.Parallel()
	const session = "s1"
	e := newEnv(t)
	e.kit.Model.Enqueue(modelserver.Reply{Text: []string{"four"}},
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "c1", Name: "counter", Args: `{}`}}})
	user := message("u1", "", transcript.Message{Role: transcript.RoleUser, Text: "2+2?"})
	end := &agentloop.TurnEnd{First: "u1", Usage: &agent.Usage{Input: 5, Calls: 1}, Started: time.Now().Add(-time.Second)}
	call := agentloop.ModelCall{Session: session, Turn: "k1", Step: 2, Prepend: []transcript.Entry{user}, EntryID: "a1", End: end}
	res, err := e.generate(call)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Recorded {
		t.Fatalf("result = %+v, want Recorded", res)
	}
	want := end.Ended(call, res)
	rec, err := e.kit.Store.Turn(context.Background(), session, "k1")
	if err != nil {
		t.Fatalf("no record of k1: %v", err)
	}
	var got agentloop.Outcome
	if err := json.Unmarshal(rec.Outcome, &got); err != nil {
		t.Fatal(err)
	}
	if got.Status != agent.TypeCompleted || got.Steps != 2 || got.First != "u1" || got.Leaf != "a1" || got.Marker != res.Marker ||
		got.Usage == nil || *got.Usage != *want.Usage || got.Usage.Calls != 2 {
		t.Errorf("recorded %+v (usage %+v), want %+v (usage %+v)", got, got.Usage, want, want.Usage)
	}
	msgs := e.feedUntil(session, "k1", feed.KindOutcome)
	if n := len(msgs); n < 2 || msgs[n-2].Kind != feed.KindEnd {
		t.Errorf("feed = %+v, want the step's end, then the outcome", msgs)
	}
	// A retry finds the stored reply: recorded again, the first record kept.
	if res, err := e.generate(call); err != nil || !res.Recorded {
		t.Fatalf("retry: %+v, %v", res, err)
	}
	if n := e.kit.Model.Count(); n != 1 {
		t.Errorf("the model was called %d times, want once", n)
	}

	// A step that calls tools does not end the turn.
	call2 := agentloop.ModelCall{Session: session, Turn: "k2", Step: 1, Prepend: []transcript.Entry{message("u2", "a1",
		transcript.Message{Role: transcript.RoleUser, Text: "count"})}, EntryID: "a2", End: &agentloop.TurnEnd{First: "u2"}}
	if res, err := e.generate(call2); err != nil || res.Recorded || len(res.Calls) != 1 {
		t.Fatalf("tool step: %+v, %v; want one call, not recorded", res, err)
	}
	if _, err := e.kit.Store.Turn(context.Background(), session, "k2"); err == nil {
		t.Error("a step that called tools recorded its turn")
	}

	// The workflow's record (a turn aborted as its last step recorded it)
	// replaces the step's.
	aborted := agentloop.Outcome{Turn: "k1", Status: agent.TypeFailed, Code: agent.CodeAborted, Steps: 2, First: "u1", Leaf: "u1"}
	in := wire.RecordTurnInput{Session: session, Key: "k1", Outcome: aborted, Finished: time.Now(), Started: end.Started, Override: true}
	if _, err := e.act.ExecuteActivity(workflows.ActivityTurnRecord, in); err != nil {
		t.Fatal(err)
	}
	rec, err = e.kit.Store.Turn(context.Background(), session, "k1")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(rec.Outcome, &got); err != nil || got.Status != agent.TypeFailed {
		t.Errorf("after the workflow's record: %s, want its failure", rec.Outcome)
	}
}
