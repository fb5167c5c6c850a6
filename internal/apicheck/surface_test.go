package apicheck

import (
	"slices"
	"testing"
)

// workflowsContract are the types package workflows exports: what a caller
// of the workflows names — the payloads of the updates, signals and query
// callers send (docs/temporal-api.md), and the inputs and results of the
// workflow functions a worker registers. The protocol between the
// workflows and their activities, and the state a workflow carries across
// continue-as-new, are internal (internal/wire, unexported in workflows).
var workflowsContract = []string{
	// The session workflow: its input and search attributes.
	"SessionInput", "SessionAttrs",
	// Updates, their arguments and results.
	"TurnRequest", "AbortRequest", "AbortResult", "SteerRequest", "ApproveRequest", "AnswerRequest",
	"CompactRequest", "CompactResult", "RewindRequest", "RewindResult", "ResendRequest",
	// The deliver signal.
	"Delivery", "ReplyTarget",
	// The state query.
	"SessionView", "PendingApproval", "PendingQuestion", "WakeRecord", "DayUsage", "FailedReply",
	// The other workflows' inputs and results.
	"ChatInput", "DelegateInput", "FireInput", "FireRecord",
}

// Package workflows exports the contract callers rely on and nothing more:
// a type outside workflowsContract is either part of it (add it, and to
// docs/temporal-api.md) or belongs inside.
func TestWorkflowsExportsTheCallerContract(t *testing.T) {
	p, err := Scan(root, "workflows")
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range p.Types {
		if !slices.Contains(workflowsContract, typ) {
			t.Errorf("workflows exports %s, which is not part of the caller contract: move it inside (internal/wire) or unexport it", typ)
		}
	}
	for _, typ := range workflowsContract {
		if !slices.Contains(p.Types, typ) {
			t.Errorf("workflows no longer exports %s of the caller contract", typ)
		}
	}
	t.Logf("workflows exports %d types", len(p.Types))
}
