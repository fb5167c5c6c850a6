package llm

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/tmc/langchaingo/llms"

	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/transcript"
)

func TestReasoningEffortReachesOpenAI(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, spec, level, want string
	}{
		{"reasoning model, high", "openai/o3-mini", ThinkingHigh, "high"},
		{"reasoning model, minimal", "openai/gpt-5", ThinkingMinimal, "minimal"},
		{"gpt-5 mini, minimal", "openai/gpt-5-mini", ThinkingMinimal, "minimal"},
		{"o-series has no minimal", "openai/o3-mini", ThinkingMinimal, "low"},
		{"o4 has no minimal", "openai/o4-mini", ThinkingMinimal, "low"},
		{"gpt-5.1 has no minimal", "openai/gpt-5.1", ThinkingMinimal, "low"},
		{"reasoning model, off", "openai/o4-mini", ThinkingOff, ""},
		{"reasoning model, unset", "openai/o4-mini", "", ""},
		{"plain model ignores it", "openai/gpt-4o-mini", ThinkingHigh, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := modelserver.New()
			defer s.Close()
			m, err := New(tt.spec, Options{Getenv: env("OPENAI_BASE_URL", s.URL())})
			if err != nil {
				t.Fatal(err)
			}
			req := userPrompt("hi")
			req.Thinking = tt.level
			if _, err := m.Generate(context.Background(), req, nil); err != nil {
				t.Fatal(err)
			}
			var body struct {
				Effort   string            `json:"reasoning_effort"`
				Messages []json.RawMessage `json:"messages"`
			}
			raw := s.Requests()[0].Raw
			if err := json.Unmarshal(raw, &body); err != nil {
				t.Fatalf("body %s: %v", raw, err)
			}
			if body.Effort != tt.want || len(body.Messages) != 1 {
				t.Errorf("reasoning_effort %q, want %q; body %s", body.Effort, tt.want, raw)
			}
		})
	}
}

func TestAnthropicThinkingBudget(t *testing.T) {
	t.Parallel()
	toolStep := []transcript.Message{
		{Role: transcript.RoleUser, Text: "hi"},
		{Role: transcript.RoleAssistant, ToolCalls: []transcript.ToolCall{{ID: "t1", Name: "ls"}}},
		{Role: transcript.RoleToolResult, ToolCallID: "t1", Text: "a"},
		{Role: transcript.RoleUser, Text: "steer"},
	}
	tests := []struct {
		name               string
		reasoning          bool
		maxOutput          int
		level              string
		msgs               []transcript.Message
		wantBudget, wantMx int
	}{
		{"off", true, 64_000, ThinkingOff, nil, 0, defaultAnthropicMaxTokens},
		{"minimal", true, 64_000, ThinkingMinimal, nil, 1024, 1024 + defaultAnthropicMaxTokens},
		{"low", true, 64_000, ThinkingLow, nil, 2048, 2048 + defaultAnthropicMaxTokens},
		{"medium", true, 64_000, ThinkingMedium, nil, 8192, 8192 + defaultAnthropicMaxTokens},
		{"high", true, 64_000, ThinkingHigh, nil, 24576, 24576 + defaultAnthropicMaxTokens},
		{"high capped by output limit", true, 20_000, ThinkingHigh, nil, 10_000, 20_000},
		{"model without thinking", false, 8192, ThinkingHigh, nil, 0, defaultAnthropicMaxTokens},
		{"step answering tool results", true, 64_000, ThinkingHigh, toolStep, 0, defaultAnthropicMaxTokens},
		{"next turn thinks again", true, 64_000, ThinkingLow,
			append(append([]transcript.Message{}, toolStep...), transcript.Message{Role: transcript.RoleAssistant, Text: "done"},
				transcript.Message{Role: transcript.RoleUser, Text: "again"}), 2048, 2048 + defaultAnthropicMaxTokens},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := &model{spec: "anthropic/x", flavor: flavorAnthropic, reasoning: tt.reasoning, maxOutput: tt.maxOutput}
			req := userPrompt("hi")
			if tt.msgs != nil {
				req.Messages = tt.msgs
			}
			req.Thinking = tt.level
			budget, maxTokens := m.anthropicLimits(req)
			var o llms.CallOptions
			for _, opt := range m.callOptions(req, nil, &deltaSink{}) {
				opt(&o)
			}
			if budget != tt.wantBudget || maxTokens != tt.wantMx || o.MaxTokens != tt.wantMx {
				t.Errorf("budget %d max_tokens %d (option %d), want %d %d", budget, maxTokens, o.MaxTokens, tt.wantBudget, tt.wantMx)
			}
		})
	}
}

// TestUsageFromStream: the usage chunk of a streamed reply, cached prompt
// tokens included, lands on the message.
func TestUsageFromStream(t *testing.T) {
	t.Parallel()
	s := modelserver.New()
	defer s.Close()
	s.Enqueue(modelserver.Reply{Text: []string{"hi"}, Usage: &modelserver.Usage{PromptTokens: 120, CompletionTokens: 5, CachedTokens: 64}})
	msg, err := newTestModel(t, s, 0).Generate(context.Background(), userPrompt("hello"), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := transcript.Usage{Input: 120, Output: 5, Total: 125, CacheRead: 64}
	if msg.Usage == nil || *msg.Usage != want {
		t.Errorf("usage %+v, want %+v", msg.Usage, want)
	}
}
