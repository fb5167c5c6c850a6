package serve

import (
	"context"
	"testing"

	"github.com/fastagent/fastagent/agent"
)

// An agent's session names map to its own stored names and back; the main
// agent keeps its names and refuses those another agent's prefix claims.
func TestScopedSessionNames(t *testing.T) {
	second := &scopedAgent{name: "reviewer", prefix: "reviewer/"}
	main := &scopedAgent{name: "fastagent", reserved: []string{"reviewer/", "support/"}}
	cases := []struct {
		scope      *scopedAgent
		in, stored string
		refused    bool
	}{
		{second, "s1", "reviewer/s1", false},
		{second, "reviewer/s1", "reviewer/reviewer/s1", false},
		{main, "s1", "s1", false},
		{main, "a/b", "a/b", false},
		{main, "reviewer2/x", "reviewer2/x", false},
		{main, "reviewer/s1", "", true},
		{main, "support/", "", true},
	}
	for _, c := range cases {
		got, err := c.scope.in(context.Background(), c.in)
		if c.refused {
			if agent.CodeOf(err) != agent.CodeInvalidCommand {
				t.Errorf("%s: in(%q) = %q, %v; want invalid_command", c.scope.name, c.in, got, err)
			}
			continue
		}
		if err != nil || got != c.stored {
			t.Errorf("%s: in(%q) = %q, %v; want %q", c.scope.name, c.in, got, err, c.stored)
		}
		if back := c.scope.out(got); back != c.in {
			t.Errorf("%s: out(%q) = %q, want %q", c.scope.name, got, back, c.in)
		}
	}
}
