package lab

import (
	"context"
	"fmt"
	"slices"

	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/transcript"
)

// TranscriptReport compares a session's stored transcript with the prompts
// sent to it.
type TranscriptReport struct {
	Entries int
	// Duplicates counts prompts stored more than once, user entries nobody
	// sent, steps answered twice and tool results nobody asked for.
	Duplicates int
	// Missing counts prompts not stored, prompts or tool calls without the
	// entries that must follow them, and orphan branches.
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
// order, that its entries form one conversation (CheckEntries), and, with
// answered, that every prompt on the leaf's branch is followed by an
// assistant reply and every tool call of a reply by its result, before the
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
	var users []string
	for _, e := range entries {
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
	branch := checkEntries(&r, entries, leaf)
	if answered {
		checkAnswered(&r, branch)
	}
	return r
}

// CheckEntries checks the shape of a session's entries (in append order;
// leaf is the session's leaf, its most recently appended entry). Entries
// form a tree by ParentID; the conversation is the branch from the root to
// leaf. A run of the agent loop only ever extends that branch, so the
// defects found are:
//
//   - a step answered twice: two assistant entries with the same parent
//     (each model step stores one reply under the step's last entry);
//   - a tool call without a result: a tool call of an assistant entry with
//     no toolResult entry for its ID among the results chained directly
//     below that entry (results of one reply hang one below the other; the
//     runtime records a result even for a lost or aborted call);
//   - a tool result for a call its reply did not make, or a second result
//     for one call, in that chain;
//   - an orphan branch: an entry off the leaf's branch, unless it and every
//     entry below it are user messages. Such a prompt-only side branch is a
//     turn that failed or was aborted before its reply was stored; the next
//     turn continues from the entry before its prompt. An entry whose parent
//     is not in the session is an orphan too.
//
// It returns the leaf's branch, root first.
func CheckEntries(entries []transcript.Entry, leaf string) (TranscriptReport, []transcript.Entry) {
	r := TranscriptReport{Entries: len(entries)}
	branch := checkEntries(&r, entries, leaf)
	return r, branch
}

func checkEntries(r *TranscriptReport, entries []transcript.Entry, leaf string) []transcript.Entry {
	byID := make(map[string]transcript.Entry, len(entries))
	children := map[string][]transcript.Entry{}
	for _, e := range entries {
		byID[e.ID] = e
		children[e.ParentID] = append(children[e.ParentID], e)
	}

	// The leaf's branch, root first.
	var branch []transcript.Entry
	onBranch := map[string]bool{}
	for id := leaf; id != ""; {
		e, ok := byID[id]
		if !ok {
			r.miss("the branch to the leaf %s breaks at %s: no such entry", leaf, id)
			break
		}
		if onBranch[id] {
			r.miss("the branch to the leaf %s loops at %s", leaf, id)
			break
		}
		onBranch[id] = true
		branch = append(branch, e)
		id = e.ParentID
	}
	slices.Reverse(branch)

	for _, e := range entries {
		// Two replies for one step.
		if isRole(e, transcript.RoleAssistant) {
			n := countRole(children[e.ParentID], transcript.RoleAssistant)
			if n > 1 && firstAssistant(children[e.ParentID]) != e.ID {
				r.dup("the step after %s has %d assistant replies (%s is a second one)", describe(byID, e.ParentID), n, e.ID)
			}
			if len(e.Message.ToolCalls) > 0 {
				checkResults(r, e, children)
			}
		}
		// Orphan branches: reported once, at their top.
		if onBranch[e.ID] {
			continue
		}
		if _, ok := byID[e.ParentID]; e.ParentID != "" && !ok {
			r.miss("entry %s hangs below %s, which is not in the session", e.ID, e.ParentID)
			continue
		}
		if e.ParentID != "" && !onBranch[e.ParentID] {
			continue // below an off-branch entry: judged with its top
		}
		if isRole(e, transcript.RoleAssistant) && countRole(children[e.ParentID], transcript.RoleAssistant) > 1 {
			continue // reported as a step answered twice
		}
		if !promptsOnly(e, children) {
			r.miss("orphan branch at %s (%s below %s): entries off the leaf's branch that are not just an unanswered prompt",
				e.ID, kind(e), describe(byID, e.ParentID))
		}
	}
	return branch
}

// checkResults follows the toolResult entries chained below reply a and
// reports calls without a result and results nobody asked for.
func checkResults(r *TranscriptReport, a transcript.Entry, children map[string][]transcript.Entry) {
	open := map[string]bool{}
	for _, tc := range a.Message.ToolCalls {
		open[tc.ID] = true
	}
	seen := map[string]bool{}
	for cur := a.ID; ; {
		var next *transcript.Entry
		for _, c := range children[cur] {
			if isRole(c, transcript.RoleToolResult) {
				next = &c
				break
			}
		}
		if next == nil {
			break
		}
		id := next.Message.ToolCallID
		switch {
		case seen[id]:
			r.dup("reply %s: tool call %s has a second result %s", a.ID, id, next.ID)
		case !open[id]:
			r.dup("reply %s: result %s is for tool call %s, which the reply did not make", a.ID, next.ID, id)
		}
		seen[id] = true
		cur = next.ID
	}
	for _, tc := range a.Message.ToolCalls {
		if !seen[tc.ID] {
			r.miss("reply %s: tool call %s (%s) has no result entry", a.ID, tc.ID, tc.Name)
		}
	}
}

// promptsOnly reports whether e and everything below it are user messages.
func promptsOnly(e transcript.Entry, children map[string][]transcript.Entry) bool {
	if !isRole(e, transcript.RoleUser) {
		return false
	}
	for _, c := range children[e.ID] {
		if !promptsOnly(c, children) {
			return false
		}
	}
	return true
}

func firstAssistant(es []transcript.Entry) string {
	for _, e := range es {
		if isRole(e, transcript.RoleAssistant) {
			return e.ID
		}
	}
	return ""
}

func countRole(es []transcript.Entry, role string) int {
	n := 0
	for _, e := range es {
		if isRole(e, role) {
			n++
		}
	}
	return n
}

func isRole(e transcript.Entry, role string) bool {
	return e.Type == transcript.TypeMessage && e.Message != nil && e.Message.Role == role
}

func kind(e transcript.Entry) string {
	if e.Message != nil {
		return e.Message.Role
	}
	return e.Type
}

func describe(byID map[string]transcript.Entry, id string) string {
	if id == "" {
		return "the root"
	}
	if e, ok := byID[id]; ok {
		return kind(e) + " " + id
	}
	return id
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
