package activities_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/internal/models"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// smallWindow is a fastagent.yaml with a 4,000-token window.
const smallWindow = "contextWindow: 4000\ncompaction: {reserveTokens: 1000, keepRecentTokens: 1000}\n"

func (e *env) compact(in wire.CompactInput) (workflows.CompactResult, error) {
	e.t.Helper()
	var res workflows.CompactResult
	v, err := e.act.ExecuteActivity(workflows.ActivityCompact, in)
	if err != nil {
		return res, err
	}
	if err := v.Get(&res); err != nil {
		e.t.Fatal(err)
	}
	return res, nil
}

// longBranch stores n exchanges (user, assistant tool call, tool result of
// size bytes, assistant answer) and returns the entries, root first.
func longBranch(e *env, session, prefix string, n, size int) []transcript.Entry {
	var out []transcript.Entry
	parent := ""
	add := func(m transcript.Message) {
		id := fmt.Sprintf("%s%d", prefix, len(out)+1)
		out = append(out, message(id, parent, m))
		parent = id
	}
	for i := 0; i < n; i++ {
		add(transcript.Message{Role: transcript.RoleUser, Text: fmt.Sprintf("question %d", i)})
		add(transcript.Message{Role: transcript.RoleAssistant, StopReason: transcript.StopToolUse,
			ToolCalls: []transcript.ToolCall{{ID: fmt.Sprintf("c%d", i), Name: "read", Args: []byte(`{"path":"f"}`)}}})
		add(transcript.Message{Role: transcript.RoleToolResult, ToolCallID: fmt.Sprintf("c%d", i), ToolName: "read", Text: strings.Repeat("data ", size/5)})
		add(transcript.Message{Role: transcript.RoleAssistant, Text: fmt.Sprintf("answer %d", i), StopReason: transcript.StopEnd})
	}
	e.store(session, out...)
	return out
}

// TestGenerateMeasuresContext: with CheckContext, a request over
// contextWindow − reserveTokens is not sent: the step stores its pending
// entries and reports the size; without it, or with compaction off, the
// model is called.
func TestGenerateMeasuresContext(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		config      string
		check       bool
		entries     int
		wantCompact bool
	}{
		{"over the threshold", smallWindow, true, 8, true},
		{"under the threshold", smallWindow, true, 1, false},
		{"not asked to check", smallWindow, false, 8, false},
		{"compaction off", smallWindow + "compaction: {enabled: false}\n", true, 8, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			cfg := tc.config
			if strings.Contains(cfg, "enabled: false") {
				cfg = "contextWindow: 4000\ncompaction: {enabled: false, reserveTokens: 1000, keepRecentTokens: 1000}\n"
			}
			if err := e.kit.WriteConfig(cfg); err != nil {
				t.Fatal(err)
			}
			branch := longBranch(e, "s1", "e", tc.entries, 2000)
			user := message("u-new", "", transcript.Message{Role: transcript.RoleUser, Text: "and now?"})
			call := agentloop.ModelCall{Session: "s1", Turn: "t1", Step: 1, Leaf: branch[len(branch)-1].ID,
				Prepend: []transcript.Entry{user}, EntryID: "a-new", CheckContext: tc.check}
			call.Prepend[0].ParentID = call.Leaf
			res, err := e.generate(call)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := e.stored("s1", "u-new"); !ok {
				t.Error("the pending entry was not stored")
			}
			if !tc.wantCompact {
				if res.Compact != nil || e.kit.Model.Count() != 1 {
					t.Errorf("result %+v and %d requests, want the model called", res.Compact, e.kit.Model.Count())
				}
				return
			}
			if res.Compact == nil || res.EntryID != "" {
				t.Fatalf("result %+v, want a context report and no reply", res)
			}
			if n := e.kit.Model.Count(); n != 0 {
				t.Errorf("the model was called %d times", n)
			}
			r := res.Compact
			if r.Leaf != "u-new" || r.Window != 4000 || r.Threshold != 3000 || r.Tokens <= r.Threshold {
				t.Errorf("report %+v, want leaf u-new, window 4000, threshold 3000, tokens over it", r)
			}
		})
	}
}

// TestCompact: the summary call gets pi's prompt over the older messages
// (never cut at a tool result), fits under the threshold, and the
// compaction entry lands below the leaf naming the first kept entry; a
// second compaction updates the previous summary; a retry returns the stored
// entry without calling the model.
func TestCompact(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := e.kit.WriteConfig(smallWindow); err != nil {
		t.Fatal(err)
	}
	branch := longBranch(e, "s1", "e", 10, 1500)
	e.kit.Model.Enqueue(modelserver.Reply{Text: []string{"## Goal\nread files"}, Usage: &modelserver.Usage{PromptTokens: 2000, CompletionTokens: 50}})
	leaf := branch[len(branch)-1].ID
	res, err := e.compact(wire.CompactInput{Session: "s1", Leaf: leaf, EntryID: "k1", Reason: wire.CompactThreshold})
	if err != nil {
		t.Fatal(err)
	}
	if res.EntryID != "k1" || res.Summarized == 0 || res.TokensAfter >= res.TokensBefore || res.TokensAfter > 3000 {
		t.Fatalf("result %+v, want k1 with fewer tokens after (under 3000)", res)
	}
	if u := res.Usage; u == nil || u.Input != 2000 || u.Output != 50 || u.Calls != 1 {
		t.Errorf("result usage %+v, want the summary call's (2000 in, 50 out)", u)
	}
	entry, ok := e.stored("s1", "k1")
	if !ok || entry.Compaction == nil || entry.ParentID != leaf || entry.Compaction.Summary != "## Goal\nread files" {
		t.Fatalf("stored %+v, want the compaction below the leaf", entry)
	}
	kept, _ := e.stored("s1", entry.Compaction.FirstKeptEntryID)
	if kept.Message == nil || kept.Message.Role == transcript.RoleToolResult {
		t.Errorf("first kept entry %+v, want a user or assistant message", kept.Message)
	}
	req := e.kit.Model.Requests()[0]
	if req.Messages[0].Role != "system" || !strings.Contains(req.Messages[0].Content, "context summarization assistant") {
		t.Errorf("summary system prompt = %q", req.Messages[0].Content)
	}
	text := req.LastUserText()
	for _, want := range []string{"<conversation>", "earlier messages left out", "[User]: question", "[Assistant tool calls]: read(", "[Tool result]: data", "## Goal", "## Next Steps"} {
		if !strings.Contains(text, want) {
			t.Errorf("summary request lacks %q", want)
		}
	}
	if strings.Contains(text, "<previous-summary>") {
		t.Error("a first summary has no previous summary")
	}
	if got := requestTokens(req); got > 3000 {
		t.Errorf("the summary request holds about %d tokens, over the 3000 threshold", got)
	}

	// A retried attempt finds the entry.
	again, err := e.compact(wire.CompactInput{Session: "s1", Leaf: leaf, EntryID: "k1", Reason: wire.CompactThreshold})
	if err != nil || again.EntryID != "k1" || again.Usage != nil || e.kit.Model.Count() != 1 {
		t.Errorf("retry: %+v %v after %d requests, want the stored entry and no new request", again, err, e.kit.Model.Count())
	}

	// More conversation, then a forced compaction updates the summary.
	more := longBranch(e, "s1-more", "m", 3, 1500)
	more[0].ParentID = "k1"
	e.store("s1", more...)
	e.kit.Model.Enqueue(modelserver.Reply{Text: []string{"## Goal\nupdated"}})
	res2, err := e.compact(wire.CompactInput{Session: "s1", Leaf: more[len(more)-1].ID, EntryID: "k2", Reason: wire.CompactOverflow, Force: true})
	if err != nil || res2.EntryID != "k2" {
		t.Fatalf("second compaction: %+v %v", res2, err)
	}
	text = e.kit.Model.Requests()[1].LastUserText()
	if !strings.Contains(text, "<previous-summary>\n## Goal\nread files") || !strings.Contains(text, "NEW conversation messages") {
		t.Errorf("an update summary carries the previous one and pi's update prompt: %.300q", text)
	}
}

// TestCompactSkips: compaction off skips automatic compactions but not a
// manual one; a branch that fits in keepRecentTokens has nothing to compact.
func TestCompactSkips(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := e.kit.WriteConfig("contextWindow: 4000\ncompaction: {enabled: false, reserveTokens: 1000, keepRecentTokens: 1000}\n"); err != nil {
		t.Fatal(err)
	}
	branch := longBranch(e, "s1", "e", 6, 1500)
	leaf := branch[len(branch)-1].ID
	res, err := e.compact(wire.CompactInput{Session: "s1", Leaf: leaf, EntryID: "k1", Reason: wire.CompactOverflow})
	if err != nil || res.EntryID != "" || !strings.Contains(res.Skipped, "disabled") {
		t.Errorf("automatic with compaction off: %+v %v, want skipped", res, err)
	}
	e.kit.Model.Enqueue(modelserver.Reply{Text: []string{"summary"}})
	res, err = e.compact(wire.CompactInput{Session: "s1", Leaf: leaf, EntryID: "k2", Reason: wire.CompactManual})
	if err != nil || res.EntryID != "k2" {
		t.Errorf("manual with compaction off: %+v %v, want compacted", res, err)
	}

	small := newEnv(t)
	short := longBranch(small, "s2", "e", 1, 10)
	res, err = small.compact(wire.CompactInput{Session: "s2", Leaf: short[len(short)-1].ID, EntryID: "k1", Reason: wire.CompactManual})
	if err != nil || res.EntryID != "" || !strings.Contains(res.Skipped, "nothing to compact") || small.kit.Model.Count() != 0 {
		t.Errorf("short branch: %+v %v, want nothing to compact and no model call", res, err)
	}
}

// requestTokens estimates a received request the way the runtime does.
func requestTokens(req modelserver.Request) int {
	n := 0
	for _, m := range req.Messages {
		n += models.EstimateText(m.Content) + 4
		for _, tc := range m.ToolCalls {
			n += models.EstimateText(tc.Name) + models.EstimateText(tc.Args) + 4
		}
	}
	return n
}

// TestSummariesFollowTheFallbackChain: a summary (compaction, and a
// rewind's branch summary) whose chat model is rate limited for minutes is
// written by the next model of the chain at once, in a request sized for
// that model's window, instead of waiting out the Retry-After.
func TestSummariesFollowTheFallbackChain(t *testing.T) {
	t.Parallel()
	const chain = "chatModel: openai/gpt-4o\nmodels: [openai/primary, openai/gpt-4]\ncompaction: {reserveTokens: 1000, keepRecentTokens: 1000}\n"
	limited := modelserver.Reply{Status: 429, Message: "rate limited", RetryAfter: "120"}

	t.Run("compaction", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		if err := e.kit.WriteConfig(chain); err != nil {
			t.Fatal(err)
		}
		branch := longBranch(e, "s1", "e", 10, 8000) // about 20,000 tokens: over gpt-4's 8,192
		e.kit.Model.Enqueue(limited, modelserver.Reply{Text: []string{"## Goal\nsummarized by the fallback"}})
		res, err := e.compact(wire.CompactInput{Session: "s1", Leaf: branch[len(branch)-1].ID, EntryID: "k1", Reason: wire.CompactThreshold})
		if err != nil {
			t.Fatalf("compaction with a rate-limited chat model: %v", err)
		}
		reqs := e.kit.Model.Requests()
		if len(reqs) != 2 || reqs[0].Model != "gpt-4o" || reqs[1].Model != "gpt-4" {
			t.Fatalf("requests went to %v, want gpt-4o then gpt-4", modelsOf(reqs))
		}
		if got := requestTokens(reqs[1]); got > 8192 {
			t.Errorf("the fallback's summary request holds about %d tokens, over its 8,192-token window", got)
		}
		if entry, ok := e.stored("s1", "k1"); !ok || entry.Compaction == nil || !strings.Contains(entry.Compaction.Summary, "by the fallback") || res.EntryID != "k1" {
			t.Errorf("stored %+v, result %+v: want the fallback's summary", entry, res)
		}
	})

	t.Run("rewind", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		if err := e.kit.WriteConfig(chain); err != nil {
			t.Fatal(err)
		}
		e.store("s1",
			message("u1", "", transcript.Message{Role: transcript.RoleUser, Text: "first"}),
			message("a1", "u1", transcript.Message{Role: transcript.RoleAssistant, Text: "one"}),
			message("u2", "a1", transcript.Message{Role: transcript.RoleUser, Text: "second idea"}),
			message("a2", "u2", transcript.Message{Role: transcript.RoleAssistant, Text: "tried it"}),
		)
		e.kit.Model.Enqueue(limited, modelserver.Reply{Text: []string{"the second idea, by the fallback"}})
		v, err := e.act.ExecuteActivity(workflows.ActivityRewind, wire.RewindInput{Session: "s1", Leaf: "a2", Entry: "a1", EntryID: "b1"})
		if err != nil {
			t.Fatalf("rewind with a rate-limited chat model: %v", err)
		}
		var res workflows.RewindResult
		if err := v.Get(&res); err != nil || !strings.Contains(res.Summary, "by the fallback") {
			t.Fatalf("rewind: %+v %v", res, err)
		}
		if got := modelsOf(e.kit.Model.Requests()); len(got) != 2 || got[1] != "gpt-4" {
			t.Errorf("requests went to %v, want gpt-4o then gpt-4", got)
		}
	})
}

// modelsOf lists the model each request named.
func modelsOf(reqs []modelserver.Request) []string {
	var out []string
	for _, r := range reqs {
		out = append(out, r.Model)
	}
	return out
}
