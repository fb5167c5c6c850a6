package llm

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/transcript"
)

// newAnthropicModel returns anthropic/<name> talking to the Anthropic-shaped
// server s through langchaingo's Anthropic client.
func newAnthropicModel(t *testing.T, s *modelserver.Server, name string) Model {
	t.Helper()
	m, err := New("anthropic/"+name, Options{
		Getenv: env("ANTHROPIC_BASE_URL", s.URL(), "ANTHROPIC_API_KEY", "sk-ant-test-secret"),
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestAnthropicBaseURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		env     func(string) string
		wantURL string
		wantErr string
	}{
		{"host only, as Anthropic's SDKs take it", env("ANTHROPIC_BASE_URL", "https://gw.example.test", "ANTHROPIC_API_KEY", "k"), "https://gw.example.test/v1", ""},
		{"with /v1", env("ANTHROPIC_BASE_URL", "https://gw.example.test/v1/", "ANTHROPIC_API_KEY", "k"), "https://gw.example.test/v1", ""},
		{"loopback needs no key", env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/v1"), "http://127.0.0.1:9/v1", ""},
		{"remote needs a key", env("ANTHROPIC_BASE_URL", "https://gw.example.test"), "", "needs ANTHROPIC_API_KEY"},
		{"not a URL", env("ANTHROPIC_BASE_URL", "gw:1", "ANTHROPIC_API_KEY", "k"), "", "ANTHROPIC_BASE_URL"},
	}
	for _, tt := range tests {
		m, err := New("anthropic/claude-sonnet-4-5", Options{Getenv: tt.env})
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: error %v, want %q", tt.name, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := m.(*model).baseURL; got != tt.wantURL {
			t.Errorf("%s: base URL %q, want %q", tt.name, got, tt.wantURL)
		}
	}
}

// A streamed reply with thinking, text and two tool calls arrives as
// thinking and text deltas and one message with usage, cache included.
func TestAnthropicStream(t *testing.T) {
	t.Parallel()
	s := modelserver.NewAnthropic()
	defer s.Close()
	s.Enqueue(modelserver.Reply{
		Thinking: []string{"let me ", "look"},
		Text:     []string{"Reading ", "both."},
		ToolCalls: []modelserver.ToolCall{
			{ID: "toolu_1", Name: "read", Args: `{"path":"a.txt"}`},
			{ID: "toolu_2", Name: "read", Args: `{"path":"b.txt"}`},
		},
		Usage: &modelserver.Usage{PromptTokens: 120, CompletionTokens: 30, CachedTokens: 800, CacheWriteTokens: 64},
	})
	c := newCollector()
	msg, err := newAnthropicModel(t, s, "claude-sonnet-4-5").Generate(context.Background(), userPrompt("read a and b"), c.add)
	if err != nil {
		t.Fatal(err)
	}
	var thinking, text string
	for _, d := range c.get() {
		switch d.Kind {
		case DeltaThinking:
			thinking += d.Text
		case DeltaText:
			text += d.Text
		}
	}
	if thinking != "let me look" || text != "Reading both." {
		t.Errorf("deltas: thinking %q text %q", thinking, text)
	}
	if msg.Thinking != "let me look" || msg.Text != "Reading both." || msg.StopReason != transcript.StopToolUse {
		t.Errorf("message %+v", msg)
	}
	if len(msg.ToolCalls) != 2 || msg.ToolCalls[0].ID != "toolu_1" || string(msg.ToolCalls[1].Args) != `{"path":"b.txt"}` {
		t.Errorf("tool calls %+v", msg.ToolCalls)
	}
	want := transcript.Usage{Input: 120, Output: 30, Total: 150, CacheRead: 800, CacheWrite: 64}
	if msg.Usage == nil || *msg.Usage != want {
		t.Errorf("usage %+v, want %+v", msg.Usage, want)
	}
	r := s.Requests()[0]
	if r.APIKey != "sk-ant-test-secret" || r.Model != "claude-sonnet-4-5" || !r.Stream || r.MaxTokens != defaultAnthropicMaxTokens {
		t.Errorf("request %+v", r)
	}
}

// A transcript with two tool calls in one assistant message, their results
// and a steering message is a request the Messages API accepts (the server
// refuses unpaired tool_use/tool_result blocks the way the API does).
func TestAnthropicToolTurnRequest(t *testing.T) {
	t.Parallel()
	s := modelserver.NewAnthropic()
	defer s.Close()
	req := Request{
		System: "You are terse.",
		Messages: []transcript.Message{
			{Role: transcript.RoleUser, Text: "read a and b"},
			{Role: transcript.RoleAssistant, Text: "Reading both.", Thinking: "private", ToolCalls: []transcript.ToolCall{
				{ID: "toolu_1", Name: "read", Args: json.RawMessage(`{"path":"a.txt"}`)},
				{ID: "toolu_2", Name: "read", Args: json.RawMessage(`{"path":"b.txt"}`)},
			}},
			{Role: transcript.RoleToolResult, ToolCallID: "toolu_1", ToolName: "read", Text: "A"},
			{Role: transcript.RoleToolResult, ToolCallID: "toolu_2", ToolName: "read", Text: "B"},
			{Role: transcript.RoleUser, Text: "and be quick"},
		},
		Tools:    []agent.ToolSpec{{Name: "read", Description: "Read a file."}},
		Thinking: ThinkingHigh,
	}
	msg, err := newAnthropicModel(t, s, "claude-sonnet-4-5").Generate(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Text != "ok" {
		t.Errorf("text %q", msg.Text)
	}
	r := s.Requests()[0]
	if got := strings.Join(r.Roles(), ","); got != "system,user,assistant,tool,tool,user" {
		t.Fatalf("roles %s; body %s", got, r.Raw)
	}
	if a := r.Messages[2]; a.Content != "Reading both." || len(a.ToolCalls) != 2 || a.ToolCalls[1].Args != `{"path":"b.txt"}` {
		t.Errorf("assistant %+v", a)
	}
	if r.ThinkingBudget != 0 || strings.Contains(string(r.Raw), "private") {
		t.Errorf("a step answering tool results sent thinking: budget %d, body %s", r.ThinkingBudget, r.Raw)
	}
	if len(r.Tools) != 1 || r.Tools[0].Name != "read" {
		t.Errorf("tools %+v", r.Tools)
	}
}

// thinkingLevel reaches Anthropic as an extended-thinking budget with the
// temperature the API requires, for every reasoning model in the catalog
// (langchaingo alone drops it for names it does not know).
func TestAnthropicThinkingRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		model, level string
		budget       int
	}{
		{"claude-sonnet-4-5", ThinkingMedium, 8192},
		{"claude-haiku-4-5", ThinkingLow, 2048},
		{"claude-3-7-sonnet-latest", ThinkingMinimal, 1024},
		{"claude-sonnet-4-5", ThinkingOff, 0},
		{"claude-3-5-haiku-latest", ThinkingHigh, 0}, // no extended thinking
	}
	for _, tt := range tests {
		s := modelserver.NewAnthropic()
		s.Enqueue(modelserver.Reply{Thinking: []string{"deep"}, Text: []string{"answer"}})
		req := userPrompt("think")
		req.Thinking = tt.level
		c := newCollector()
		msg, err := newAnthropicModel(t, s, tt.model).Generate(context.Background(), req, c.add)
		s.Close()
		if err != nil {
			t.Errorf("%s %s: %v", tt.model, tt.level, err)
			continue
		}
		r := s.Requests()[0]
		if r.ThinkingBudget != tt.budget {
			t.Errorf("%s %s: budget %d, want %d; body %s", tt.model, tt.level, r.ThinkingBudget, tt.budget, r.Raw)
		}
		if tt.budget > 0 && (r.Temperature == nil || *r.Temperature != 1 || r.MaxTokens <= tt.budget) {
			t.Errorf("%s: temperature %v max_tokens %d", tt.model, r.Temperature, r.MaxTokens)
		}
		if msg.Thinking != "deep" || len(c.get()) == 0 || c.get()[0] != (Delta{Kind: DeltaThinking, Text: "deep"}) {
			t.Errorf("%s: thinking %q deltas %+v", tt.model, msg.Thinking, c.get())
		}
	}
}

func TestAnthropicErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		reply      modelserver.Reply
		kind       string
		retryable  bool
		retryAfter time.Duration
		contains   []string
	}{
		{"429 retry-after", modelserver.Reply{Status: 429, RetryAfter: "3", Message: "Number of request tokens has exceeded your per-minute rate limit"},
			KindRateLimit, true, 3 * time.Second, []string{"HTTP 429", "retry after 3s", "per-minute rate limit"}},
		{"529 overloaded", modelserver.Overloaded(), KindServer, true, 0, []string{"HTTP 529", "Overloaded"}},
		{"500 api_error", modelserver.Reply{Status: 500, Message: "Internal server error"}, KindServer, true, 0, []string{"HTTP 500"}},
		{"prompt is too long", modelserver.ContextLengthExceeded(200_000, 210_000), KindContextOverflow, false, 0,
			[]string{"context window", "prompt is too long: 210000 tokens > 200000 maximum"}},
		{"invalid request", modelserver.Reply{Status: 400, Message: "tools.0.input_schema: Field required"}, KindInvalidRequest, false, 0,
			[]string{"HTTP 400", "input_schema"}},
		{"401", modelserver.Reply{Status: 401, Message: "invalid x-api-key"}, KindAuth, false, 0, []string{"check ANTHROPIC_API_KEY"}},
		{"404", modelserver.Reply{Status: 404, Message: "model: claude-nope"}, KindNotFound, false, 0, []string{`"claude-sonnet-4-5"`, "ANTHROPIC_BASE_URL"}},
		{"overloaded mid-stream", modelserver.Reply{Text: []string{"par"}, StreamError: "overloaded_error"}, KindServer, true, 0,
			[]string{"overloaded_error"}},
		{"disconnect mid-stream", modelserver.Reply{Text: []string{"a", "b", "c"}, DisconnectAfter: 2}, KindNetwork, true, 0, []string{"broke mid-stream"}},
		{"no message_stop", modelserver.Reply{Text: []string{"a"}, FinishReason: modelserver.NoFinish}, KindTruncated, true, 0, []string{"without a finish reason"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := modelserver.NewAnthropic()
			defer s.Close()
			s.Enqueue(tt.reply)
			_, err := newAnthropicModel(t, s, "claude-sonnet-4-5").Generate(context.Background(), userPrompt("x"), nil)
			if err == nil {
				t.Fatal("Generate succeeded")
			}
			e := asError(t, err)
			if e.Kind != tt.kind || e.Retryable != tt.retryable || e.RetryAfter != tt.retryAfter {
				t.Errorf("kind %q retryable %v retry after %v, want %q %v %v (%v)", e.Kind, e.Retryable, e.RetryAfter,
					tt.kind, tt.retryable, tt.retryAfter, err)
			}
			for _, w := range tt.contains {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "sk-ant-test-secret") {
				t.Errorf("error leaks the key: %q", err)
			}
			if n := s.Count(); n != 1 {
				t.Errorf("server saw %d requests; the client must not retry on its own", n)
			}
		})
	}
}
