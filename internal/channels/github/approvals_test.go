package github

import (
	"testing"

	"github.com/fastagent/fastagent/workflows"
)

// A decision comment decides only a call of its own repository, only from
// an allowed association, and is never a turn; other comments are not
// decisions.
func TestDecisionComments(t *testing.T) {
	t.Parallel()
	tok := approvalToken("octo/app", "github:octo/app#7", "call_1")
	other := approvalToken("octo/other", "github:octo/other#7", "call_1")
	d := &Door{}
	for _, tc := range []struct {
		name, comment, association string
		decision, isDecision       bool
		want                       workflows.ApproveRequest
	}{
		{name: "owner approves", comment: "/approve " + tok, association: "OWNER", decision: true, isDecision: true,
			want: workflows.ApproveRequest{Call: "call_1", Approve: true, By: "github:mona", Door: Kind, Vetted: true}},
		{name: "member denies with a reason", comment: "/deny " + tok + " not on a Friday\nthanks", association: "member", decision: true, isDecision: true,
			want: workflows.ApproveRequest{Call: "call_1", Reason: "not on a Friday", By: "github:mona", Door: Kind, Vetted: true}},
		{name: "contributor", comment: "/approve " + tok, association: "CONTRIBUTOR", isDecision: true},
		{name: "another repository's call", comment: "/approve " + other, association: "OWNER", isDecision: true},
		{name: "a garbled token", comment: "/approve bm90LWEtdG9rZW4", association: "OWNER", isDecision: true},
		{name: "an ordinary comment", comment: "please /approve this", association: "OWNER"},
	} {
		ev := &Event{Name: "issue_comment", Action: "created", Repo: "octo/app", Number: 7, Comment: tc.comment, Association: tc.association, Sender: "mona"}
		dec, isDecision := d.decision(ev, "body-1")
		if isDecision != tc.isDecision || (dec != nil) != tc.decision {
			t.Errorf("%s: decision %+v, is %v; want decision %v, is %v", tc.name, dec, isDecision, tc.decision, tc.isDecision)
			continue
		}
		if dec != nil && (dec.Request != tc.want || dec.Session != "github:octo/app#7" || dec.ID != "github:body-1") {
			t.Errorf("%s: %+v, want %+v in github:octo/app#7", tc.name, dec, tc.want)
		}
	}
}
