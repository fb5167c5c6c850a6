package activities_test

import (
	"errors"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows"
)

// TestRewind: the abandoned messages (the current branch minus the
// target's) are summarized once into a branch-summary entry below the
// target; a retried attempt returns the stored entry; nothing abandoned
// moves without a model call; an unknown entry is not_found.
func TestRewind(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// u1 ← a1 ← u2 ← a2 (current), and a sibling u3 below a1.
	e.store("s1",
		message("u1", "", transcript.Message{Role: transcript.RoleUser, Text: "first"}),
		message("a1", "u1", transcript.Message{Role: transcript.RoleAssistant, Text: "one"}),
		message("u2", "a1", transcript.Message{Role: transcript.RoleUser, Text: "second idea"}),
		message("a2", "u2", transcript.Message{Role: transcript.RoleAssistant, Text: "tried it"}),
		message("u3", "a1", transcript.Message{Role: transcript.RoleUser, Text: "sibling"}),
	)
	e.kit.Model.Enqueue(modelserver.Reply{Text: []string{"## What was tried\n- the second idea"}, Usage: &modelserver.Usage{PromptTokens: 300, CompletionTokens: 40}})
	rewind := func(in wire.RewindInput) (workflows.RewindResult, error) {
		var res workflows.RewindResult
		v, err := e.act.ExecuteActivity(workflows.ActivityRewind, in)
		if err != nil {
			return res, err
		}
		return res, v.Get(&res)
	}
	res, err := rewind(wire.RewindInput{Session: "s1", Leaf: "a2", Entry: "a1", EntryID: "b1"})
	if err != nil || res.Leaf != "b1" || res.Abandoned != 2 || !strings.Contains(res.Summary, "second idea") {
		t.Fatalf("rewind: %+v, %v", res, err)
	}
	if u := res.Usage; u == nil || u.Input != 300 || u.Output != 40 || u.Calls != 1 {
		t.Errorf("rewind usage %+v, want the branch summary call's (300 in, 40 out)", u)
	}
	got, ok := e.stored("s1", "b1")
	if !ok || got.Type != transcript.TypeBranchSummary || got.ParentID != "a1" || got.BranchSummary.FromID != "a2" {
		t.Fatalf("stored %+v", got)
	}
	reqs := e.kit.Model.Requests()
	if n := len(reqs); n != 1 || !strings.Contains(reqs[0].Messages[len(reqs[0].Messages)-1].Content, "[User]: second idea") {
		t.Fatalf("summary requests: %d %+v", n, reqs)
	}
	cases := []struct {
		name      string
		in        wire.RewindInput
		leaf      string
		abandoned int
		code      string
	}{
		{"retried attempt", wire.RewindInput{Session: "s1", Leaf: "a2", Entry: "a1", EntryID: "b1"}, "b1", 0, ""},
		{"nothing abandoned", wire.RewindInput{Session: "s1", Leaf: "a1", Entry: "a1", EntryID: "b2"}, "a1", 0, ""},
		{"unknown entry", wire.RewindInput{Session: "s1", Leaf: "a2", Entry: "nope", EntryID: "b3"}, "", 0, agent.CodeNotFound},
	}
	for _, c := range cases {
		res, err := rewind(c.in)
		if c.code != "" {
			var app *temporal.ApplicationError
			if !errors.As(err, &app) || app.Type() != c.code {
				t.Errorf("%s: %v, want %s", c.name, err, c.code)
			}
			continue
		}
		if err != nil || res.Leaf != c.leaf || res.Abandoned != c.abandoned {
			t.Errorf("%s: %+v, %v; want leaf %s", c.name, res, err, c.leaf)
		}
	}
	if n := len(e.kit.Model.Requests()); n != 1 {
		t.Errorf("%d model calls, want 1 (retries and empty rewinds call no model)", n)
	}
	for _, id := range []string{"b2", "b3"} {
		if _, ok := e.stored("s1", id); ok {
			t.Errorf("entry %s stored, want none", id)
		}
	}
}
