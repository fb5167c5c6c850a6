package lab

import (
	"context"
	"fmt"

	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/transcript"
)

// TranscriptReport compares a session's stored transcript with the prompts
// sent to it.
type TranscriptReport struct {
	Entries int
	// Duplicates counts entry IDs stored more than once, prompts stored more
	// than once and user entries nobody sent.
	Duplicates int
	// Missing counts prompts not stored, prompts or tool calls without the
	// entries that must follow them, and entries off the leaf's branch.
	Missing  int
	Problems []string
}

// OK reports no duplicates and nothing missing.
func (r TranscriptReport) OK() bool { return r.Duplicates == 0 && r.Missing == 0 }

func (r *TranscriptReport) dup(format string, args ...any) {
	r.Duplicates++
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

func (r *TranscriptReport) miss(format string, args ...any) {
	r.Missing++
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// CheckTranscript checks that session holds each prompt exactly once, in
// order, on one unbroken branch (every stored entry lies on the path from
// the root to the leaf). With answered, every prompt must be followed by an
// assistant reply, and every tool call of a reply by its result, before the
// next prompt: user → assistant (→ toolResult… → assistant)… with nothing
// missing and nothing twice.
func CheckTranscript(ctx context.Context, st store.Store, session string, prompts []string, answered bool) TranscriptReport {
	var r TranscriptReport
	entries, err := st.Entries(ctx, session)
	if err != nil {
		r.miss("read entries: %v", err)
		return r
	}
	r.Entries = len(entries)
	ids := map[string]bool{}
	var users []string
	for _, e := range entries {
		if ids[e.ID] {
			r.dup("entry %s stored twice", e.ID)
		}
		ids[e.ID] = true
		if e.Message != nil && e.Message.Role == transcript.RoleUser {
			users = append(users, e.Message.Text)
		}
	}
	want := map[string]int{}
	for _, p := range prompts {
		want[p]++
	}
	got := map[string]int{}
	for _, u := range users {
		got[u]++
		if want[u] == 0 {
			r.dup("user entry %.60q was never sent", u)
		}
	}
	for p, n := range want {
		switch g := got[p]; {
		case g < n:
			r.miss("prompt %.60q stored %d times, sent %d", p, g, n)
		case g > n:
			r.dup("prompt %.60q stored %d times, sent %d", p, g, n)
		}
	}
	if r.OK() && len(users) == len(prompts) {
		for i := range users {
			if users[i] != prompts[i] {
				r.Problems = append(r.Problems, fmt.Sprintf("prompts stored out of order at %d: %.40q, want %.40q", i, users[i], prompts[i]))
				break
			}
		}
	}
	if len(entries) == 0 {
		return r
	}
	leaf, err := st.Leaf(ctx, session)
	if err != nil {
		r.miss("read leaf: %v", err)
		return r
	}
	branch, err := st.Branch(ctx, session, leaf)
	if err != nil {
		r.miss("read branch: %v", err)
		return r
	}
	if len(branch) != len(entries) {
		r.miss("%d of %d entries are off the leaf's branch", len(entries)-len(branch), len(entries))
	}
	if answered {
		checkAnswered(&r, branch)
	}
	return r
}

// checkAnswered walks the branch: after a user entry an assistant reply;
// after a reply with tool calls, one result per call, then a reply.
func checkAnswered(r *TranscriptReport, branch []transcript.Entry) {
	var open []string // tool call IDs awaiting results
	needReply := ""   // the prompt or result waiting for an assistant reply
	for _, e := range branch {
		m := e.Message
		if m == nil {
			continue
		}
		switch m.Role {
		case transcript.RoleUser:
			if len(open) > 0 {
				r.miss("tool calls %v have no result before the next prompt", open)
				open = nil
			}
			if needReply != "" && m.Source != "steer" {
				r.miss("%s has no reply", needReply)
			}
			needReply = fmt.Sprintf("prompt %.40q", m.Text)
		case transcript.RoleAssistant:
			if len(open) > 0 {
				r.miss("tool calls %v have no result before the next reply", open)
				open = nil
			}
			needReply = ""
			for _, tc := range m.ToolCalls {
				open = append(open, tc.ID)
			}
		case transcript.RoleToolResult:
			found := false
			for i, id := range open {
				if id == m.ToolCallID {
					open = append(open[:i], open[i+1:]...)
					found = true
					break
				}
			}
			if !found {
				r.dup("tool result for %s that no reply asked for (or a second one)", m.ToolCallID)
			}
			if len(open) == 0 {
				needReply = "tool result " + m.ToolCallID
			}
		}
	}
	if len(open) > 0 {
		r.miss("tool calls %v have no result", open)
	}
	if needReply != "" {
		r.miss("%s has no reply", needReply)
	}
}
