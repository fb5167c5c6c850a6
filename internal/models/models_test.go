package models

import (
	"strings"
	"testing"

	"github.com/fastagent/fastagent/transcript"
)

func TestLookup(t *testing.T) {
	t.Parallel()
	cases := []struct {
		spec      string
		window    int
		known     bool
		vision    bool
		reasoning bool
	}{
		{"openai/gpt-4o", 128_000, true, true, false},
		{"openai/gpt-4o-2024-08-06", 128_000, true, true, false},
		{"openai/gpt-4o-mini", 128_000, true, true, false},
		{"openai/gpt-4.1-mini", 1_047_576, true, true, false},
		{"openai/gpt-4", 8_192, true, false, false},
		{"openai/o3-mini", 200_000, true, false, true},
		{"openai/o4-mini-2025-04-16", 200_000, true, true, true},
		{"openai/gpt-5", 400_000, true, true, true},
		{"openai/gpt-5.1", 400_000, true, true, true},
		{"openai/gpt-5-chat-latest", 128_000, true, true, false},
		{"anthropic/claude-3-5-sonnet-20241022", 200_000, true, true, false},
		{"anthropic/claude-3-7-sonnet-latest", 200_000, true, true, true},
		{"anthropic/claude-sonnet-4-5-20250929", 200_000, true, true, true},
		{"anthropic/claude-opus-4-1", 200_000, true, true, true},
		{"anthropic/claude-haiku-4-5", 200_000, true, true, true},
		{"ollama/llama3.1:8b", 131_072, true, false, false},
		{"ollama/llama3:latest", 8_192, true, false, false},
		{"ollama/qwen3:14b", 40_960, true, false, true},
		{"openai/gpt-4oo", DefaultContextWindow, false, false, false},
		{"openai/scripted", DefaultContextWindow, false, false, false},
		{"ollama/gpt-4o", DefaultContextWindow, false, false, false},
		{"nonsense", DefaultContextWindow, false, false, false},
	}
	for _, tc := range cases {
		got := Lookup(tc.spec)
		if got.ContextWindow != tc.window || got.Known != tc.known || got.Vision != tc.vision || got.Reasoning != tc.reasoning {
			t.Errorf("Lookup(%q) = %+v, want window %d known %v vision %v reasoning %v", tc.spec, got, tc.window, tc.known, tc.vision, tc.reasoning)
		}
	}
}

func TestNewBudget(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name                       string
		window, reserve, keep      int
		wantWindow, wantRes, wantK int
	}{
		{"defaults", 0, 0, 0, DefaultContextWindow, DefaultReserveTokens, DefaultKeepRecentTokens},
		{"explicit", 4000, 1000, 1000, 4000, 1000, 1000},
		{"defaults on a small window scale down", 8192, 0, 0, 8192, 2048, 3072},
		{"keep-recent larger than the room", 10_000, 2000, 9000, 10_000, 2000, 4000},
	}
	for _, tc := range cases {
		b := NewBudget(tc.window, tc.reserve, tc.keep)
		if b.Window != tc.wantWindow || b.Reserve != tc.wantRes || b.KeepRecent != tc.wantK {
			t.Errorf("%s: NewBudget = %+v, want %d/%d/%d", tc.name, b, tc.wantWindow, tc.wantRes, tc.wantK)
		}
		if b.Threshold() <= b.KeepRecent {
			t.Errorf("%s: threshold %d does not leave room above keep-recent %d", tc.name, b.Threshold(), b.KeepRecent)
		}
	}
	if f := NewBudget(4000, 1000, 1000).Forced(); f.KeepRecent != 250 {
		t.Errorf("forced keep-recent = %d, want 250", f.KeepRecent)
	}
}

func TestContextTokensUsesFreshUsageOnly(t *testing.T) {
	t.Parallel()
	user := transcript.Message{Role: transcript.RoleUser, Text: strings.Repeat("x", 400)}
	reply := func(input int) transcript.Message {
		return transcript.Message{Role: transcript.RoleAssistant, Text: "ok", Usage: &transcript.Usage{Input: input, Output: 10}}
	}
	est := Estimate("", nil, []transcript.Message{user, reply(0), user})
	cases := []struct {
		name  string
		msgs  []transcript.Message
		fresh int
		want  int
	}{
		{"no usage: the estimate", []transcript.Message{user, {Role: transcript.RoleAssistant, Text: "ok"}, user}, 0, est},
		{"larger usage corrects the estimate", []transcript.Message{user, reply(5000), user}, 0, 5000 + 10 + EstimateMessage(user)},
		{"smaller usage does not lower it", []transcript.Message{user, reply(3), user}, 0, est},
		{"usage from before a compaction is ignored", []transcript.Message{user, reply(5000), user}, 2, est},
	}
	for _, tc := range cases {
		if got := ContextTokens("", nil, tc.msgs, tc.fresh); got != tc.want {
			t.Errorf("%s: ContextTokens = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// Providers that serve other vendors' models find them in the catalog.
func TestLookupThroughHosts(t *testing.T) {
	for spec, want := range map[string]int{
		"azure/gpt-4o":                                       128_000,
		"openrouter/anthropic/claude-sonnet-4.5":             200_000,
		"openrouter/openai/gpt-4.1":                          1_047_576,
		"bedrock/anthropic.claude-3-5-sonnet-20240620-v1:0":  200_000,
		"bedrock/us.anthropic.claude-sonnet-4-20250514-v1:0": 200_000,
		"vertex/gemini-2.5-pro":                              1_048_576,
		"gemini/gemini-2.0-flash-001":                        1_048_576,
		"mistral/mistral-large-latest":                       131_072,
	} {
		if got := Lookup(spec); !got.Known || got.ContextWindow != want {
			t.Errorf("%s: %+v, want window %d", spec, got, want)
		}
	}
	if !Lookup("azure/o3-mini").Reasoning {
		t.Error("azure/o3-mini should be a reasoning model")
	}
}
