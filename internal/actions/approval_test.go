package actions

import "testing"

// approvalWaitActions is what a call waiting for a person adds to the turn
// (docs/load-and-sizing.md): the decision's update, the two workflow tasks
// that publish approval_requested and approval_resolved (a local-activity
// marker each), the deadline's timer, and the status upserts to
// waiting_approval and back to idle.
const approvalWaitActions = 6

// A one-step turn with one tool call approved in time costs the documented
// one-step turn, one tool call and one model step more, and the approval
// wait: approval_deadline's second turn (the first timed out).
func TestApprovalWait(t *testing.T) {
	turns := PerTurn(load(t, "approval_deadline"))
	if len(turns) < 3 {
		t.Fatalf("found %d turn spans, want 3 (the timed-out turn, the approved one and its decision)", len(turns))
	}
	as := append(append([]Action(nil), turns[1]...), turns[2]...)
	k := ByKind(as)
	if k["start_timer"] != 1 || k["accept_workflow_update"] != 2 {
		t.Errorf("the approved turn has %d timers and %d updates, want 1 and 2: %s", k["start_timer"], k["accept_workflow_update"], kinds(as))
	}
	want := oneStepTurnActions + 2 + approvalWaitActions // + Tool.Execute, + the model step after it
	if n := Total(as); n > want {
		t.Errorf("a turn with one approved call costs %d actions, documented %d: %s", n, want, kinds(as))
	}
	// A question (ask_user) waits the same way.
	q := PerTurn(load(t, "ask_user"))
	if len(q) < 2 {
		t.Fatalf("ask_user: %d turn spans, want 2", len(q))
	}
	as = append(append([]Action(nil), q[0]...), q[1]...)
	if n, want := Total(as), firstTurnActions+2+approvalWaitActions; n > want {
		t.Errorf("a first turn with one answered question costs %d actions, documented %d: %s", n, want, kinds(as))
	}
}
