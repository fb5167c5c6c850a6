package actions

import "testing"

// A delegation, measured on the recorded delegation histories:
// delegationParentActions is what one delegate call adds to the turn that
// makes it, at most (the child's start, counted 2 by Temporal Cloud's
// rules; the call's result, a Tool.Execute; the workflow task that
// publishes its tool_started, a Feed.Publish marker shared by the calls of
// one step), and delegationChildActions what the child's own history costs
// for a one-step answer (its first workflow task's markers, the timer of
// its own deadline (delegation.timeout), the model step, which records the
// turn); its start is billed to the parent.
const (
	delegationParentActions = 4
	delegationChildActions  = 3
)

func TestDelegation(t *testing.T) {
	turns := PerTurn(load(t, "delegation"))
	if len(turns) != 1 {
		t.Fatalf("delegation: %d turns, want 1", len(turns))
	}
	as := turns[0]
	k := ByKind(as)
	if k["start_child_workflow"] != 4 {
		t.Errorf("two delegate calls cost %d child-start actions, want 4 (2 each): %s", k["start_child_workflow"], kinds(as))
	}
	// The first turn of a session with two model steps (+1), two delegations.
	want := firstTurnActions + 1 + 2*delegationParentActions
	if n := Total(as); n > want {
		t.Errorf("a first turn delegating twice costs %d actions, documented %d: %s", n, want, kinds(as))
	}
	child := Count(load(t, "delegation_child"))
	if n := Total(child); n > delegationChildActions {
		t.Errorf("a one-step sub-agent's own workflow costs %d actions, documented %d: %s", n, delegationChildActions, kinds(child))
	}
}
