package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/transcript"
)

// bigSystem is a system prompt over Anthropic's 1024-token cache minimum.
var bigSystem = "You are a careful agent.\n" + strings.Repeat("Rule: read the file before you change it, and say what you changed. ", 90)

func sessionTools() []agent.ToolSpec {
	var out []agent.ToolSpec
	for _, n := range []string{"read", "write", "bash"} {
		out = append(out, agent.ToolSpec{Name: n, Description: "The " + n + " tool, " + strings.Repeat("described at length. ", 20),
			Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`)})
	}
	return out
}

// rawBody decodes a recorded request body.
func rawBody(t *testing.T, r modelserver.Request) map[string]json.RawMessage {
	t.Helper()
	var b map[string]json.RawMessage
	if err := json.Unmarshal(r.Raw, &b); err != nil {
		t.Fatal(err)
	}
	return b
}

// The request carries cache_control on the system prompt, the last tool
// and the conversation's last block; the next request of the session reads
// the prefix the first wrote, and the reply's usage says so.
func TestAnthropicCacheBreakpoints(t *testing.T) {
	t.Parallel()
	s := modelserver.NewAnthropic()
	defer s.Close()
	s.PromptCache(1024)
	m := newAnthropicModel(t, s, "claude-sonnet-4-5")
	req := Request{System: bigSystem, Tools: sessionTools(),
		Messages: []transcript.Message{{Role: transcript.RoleUser, Text: "first question"}}}
	s.Enqueue(modelserver.Reply{Text: []string{"first answer"}})
	first, err := m.Generate(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	body := rawBody(t, s.Requests()[0])
	var system []map[string]any
	var tools []map[string]any
	var msgs []struct {
		Content []map[string]any `json:"content"`
	}
	_ = json.Unmarshal(body["system"], &system)
	_ = json.Unmarshal(body["tools"], &tools)
	_ = json.Unmarshal(body["messages"], &msgs)
	if len(system) != 1 || system[0]["cache_control"] == nil || system[0]["text"] != bigSystem {
		t.Errorf("system %s, want one text block with cache_control", body["system"])
	}
	if len(tools) != 3 || tools[2]["cache_control"] == nil || tools[0]["cache_control"] != nil {
		t.Errorf("tools %s, want cache_control on the last only", body["tools"])
	}
	if len(msgs) != 1 || msgs[0].Content[len(msgs[0].Content)-1]["cache_control"] == nil {
		t.Errorf("messages %s, want cache_control on the last block", body["messages"])
	}
	if u := first.Usage; u == nil || u.CacheWrite == 0 || u.CacheRead != 0 {
		t.Errorf("first usage %+v, want a cache write", first.Usage)
	}

	req.Messages = append(req.Messages, first, transcript.Message{Role: transcript.RoleUser, Text: "second question"})
	s.Enqueue(modelserver.Reply{Text: []string{"second answer"}})
	second, err := m.Generate(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if u := second.Usage; u == nil || u.CacheRead != first.Usage.CacheWrite || u.CacheWrite == 0 || u.Input > 5 {
		t.Errorf("second usage %+v, want the first's %d tokens read", second.Usage, first.Usage.CacheWrite)
	}
}

// Extended thinking with tools: the signed thinking block of the reply that
// called a tool is kept on the message and sent back unchanged, first in
// that assistant turn, in the request that answers the tool result; so the
// step that answers it thinks too (the fake refuses an assistant turn
// without it, as the API does). A history recorded without blocks keeps
// thinking off in that step.
func TestAnthropicThinkingRoundTrip(t *testing.T) {
	t.Parallel()
	s := modelserver.NewAnthropic()
	defer s.Close()
	m := newAnthropicModel(t, s, "claude-sonnet-4-5")
	req := Request{System: "sys", Tools: sessionTools(), Thinking: ThinkingHigh,
		Messages: []transcript.Message{{Role: transcript.RoleUser, Text: "read a.txt"}}}
	s.Enqueue(modelserver.Reply{Thinking: []string{"I should ", "read it."}, Text: []string{"Reading."},
		ToolCalls: []modelserver.ToolCall{{ID: "toolu_1", Name: "read", Args: `{"path":"a.txt"}`}}})
	first, err := m.Generate(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []transcript.ThinkingBlock{{Thinking: "I should read it.", Signature: "sig-1"}}
	if fmt.Sprint(first.ThinkingBlocks) != fmt.Sprint(want) {
		t.Fatalf("thinking blocks %+v, want %+v", first.ThinkingBlocks, want)
	}
	// Through the store: the message is kept as JSON.
	stored, _ := json.Marshal(first)
	var back transcript.Message
	if err := json.Unmarshal(stored, &back); err != nil {
		t.Fatal(err)
	}
	result := transcript.Message{Role: transcript.RoleToolResult, ToolCallID: "toolu_1", ToolName: "read", Text: "contents"}
	req.Messages = append(req.Messages, back, result)
	s.Enqueue(modelserver.Reply{Text: []string{"Done."}})
	if _, err := m.Generate(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	second := s.Requests()[1]
	if second.ThinkingBudget == 0 {
		t.Error("the step answering the tool result did not think")
	}
	var msgs []struct {
		Role    string            `json:"role"`
		Content []json.RawMessage `json:"content"`
	}
	_ = json.Unmarshal(rawBody(t, second)["messages"], &msgs)
	if len(msgs) != 3 || msgs[1].Role != "assistant" || len(msgs[1].Content) != 3 {
		t.Fatalf("messages %s, want user, one assistant turn (thinking, text, tool_use), user", rawBody(t, second)["messages"])
	}
	if got := string(msgs[1].Content[0]); got != `{"signature":"sig-1","thinking":"I should read it.","type":"thinking"}` {
		t.Errorf("assistant turn starts with %s, want the signed thinking block unchanged", got)
	}

	// A reply recorded without its blocks: that step does not think.
	old := back
	old.ThinkingBlocks = nil
	req.Messages[1] = old
	s.Enqueue(modelserver.Reply{Text: []string{"Done."}})
	if _, err := m.Generate(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	if third := s.Requests()[2]; third.ThinkingBudget != 0 || strings.Contains(string(third.Raw), `"thinking","thinking"`) {
		t.Errorf("without kept blocks the step thinks (budget %d)", third.ThinkingBudget)
	}
}

// The input tokens billed over a 20-turn session, with and without cache
// breakpoints, against the fake that accounts for them (Anthropic's
// prices: a cache write costs 1.25 input tokens, a read 0.1). Run with -v
// to see the figures.
func TestPromptCachingSaves20Turns(t *testing.T) {
	t.Parallel()
	run := func(cache bool) (input, read, write int) {
		s := modelserver.NewAnthropic()
		defer s.Close()
		s.PromptCache(1024)
		mm := newAnthropicModel(t, s, "claude-sonnet-4-5")
		mm.(*model).noPromptCache = !cache
		req := Request{System: bigSystem, Tools: sessionTools()}
		for turn := 1; turn <= 20; turn++ {
			req.Messages = append(req.Messages, transcript.Message{Role: transcript.RoleUser,
				Text: fmt.Sprintf("Turn %d: %s", turn, strings.Repeat("please look at the next part of the log. ", 8))})
			s.Enqueue(modelserver.Reply{Text: []string{fmt.Sprintf("Answer %d: ", turn), strings.Repeat("the part looks fine. ", 10)}})
			msg, err := mm.Generate(context.Background(), req, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Messages = append(req.Messages, msg)
			input += msg.Usage.Input
			read += msg.Usage.CacheRead
			write += msg.Usage.CacheWrite
		}
		return
	}
	ni, nr, nw := run(false)
	ci, cr, cw := run(true)
	if nr != 0 || nw != 0 {
		t.Fatalf("without breakpoints the cache was used: read %d write %d", nr, nw)
	}
	billedWithout := float64(ni)
	billedWith := float64(ci) + 1.25*float64(cw) + 0.1*float64(cr)
	t.Logf("20-turn session, prompt tokens sent: %d without caching, %d with (uncached %d, cache write %d, cache read %d)",
		ni, ci+cr+cw, ci, cw, cr)
	t.Logf("input tokens billed (input-token equivalents): %.0f without caching, %.0f with caching (%.0f%% saved)",
		billedWithout, billedWith, 100*(1-billedWith/billedWithout))
	if ci+cr+cw != ni {
		t.Errorf("the same session sent %d prompt tokens with caching and %d without", ci+cr+cw, ni)
	}
	if billedWith > billedWithout/2 {
		t.Errorf("caching billed %.0f of %.0f input tokens, want less than half", billedWith, billedWithout)
	}
}
