package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// The example runs a real turn: embedded Temporal, the worker with the Go
// tool and hook, the langchaingo client against a scripted OpenAI-compatible
// server. The model sees the hook's text and the tool's result.
func TestExampleRunsATurnWithTheGoToolAndHook(t *testing.T) {
	ms := newScriptedModel(t,
		reply{toolName: "dice", toolArgs: `{"n":2}`},
		reply{text: "You rolled two dice."},
	)
	t.Setenv("OPENAI_BASE_URL", ms.URL())
	t.Setenv("OPENAI_API_KEY", "test-key")
	t.Setenv("FASTAGENT_MODEL", "openai/scripted")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	answer, err := run(ctx, agentDir(), "roll two dice")
	if err != nil {
		t.Fatal(err)
	}
	if answer != "You rolled two dice." {
		t.Fatalf("answer %q", answer)
	}
	reqs := ms.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model calls, want 2", len(reqs))
	}
	first := reqs[0]
	if first.Messages[0].Role != "system" || !strings.Contains(first.Messages[0].Content, "always use the dice tool") {
		t.Errorf("the hook's text is not in the system prompt: %q", first.Messages[0].Content)
	}
	offered := false
	for _, tool := range first.Tools {
		offered = offered || tool.Function.Name == "dice"
	}
	if !offered {
		t.Error("the Go tool was not offered to the model")
	}
	var result string
	for _, m := range reqs[1].Messages {
		if m.Role == "tool" {
			result = m.Content
		}
	}
	if !strings.HasPrefix(result, "rolled ") || strings.Count(result, ",") != 1 {
		t.Errorf("tool result seen by the model = %q, want two faces", result)
	}
}
