package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/internal/ingress"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
)

// modelToolResult is the content of the tool message answering call id in the
// requests the model server received ("" none).
func modelToolResult(reqs []modelserver.Request, id string) string {
	for _, r := range reqs {
		for _, m := range r.Messages {
			if m.Role == "tool" && m.ToolCallID == id {
				return m.Content
			}
		}
	}
	return ""
}

// lastUserMessage is the text of the last user message of r.
func lastUserMessage(r modelserver.Request) string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			return r.Messages[i].Content
		}
	}
	return ""
}

// A memory alice's agent keeps in one session is recalled — by the recall
// tool and in the prompt — in her next session, and never in bob's; the
// worker's secret values never reach the store; GET /memories shows each
// principal their own.
func TestMemoryAcrossSessionsOfOnePrincipal(t *testing.T) {
	const secret = "sk-e2e-memory-0123456789"
	t.Setenv("E2E_MEMORY_API_KEY", secret)
	e := newEnv(t)
	e.writeConfig("memory:\n  enabled: true\n  inject: {count: 3, maxTokens: 400}\n")
	e.startWorker()
	hs := e.authIngress(nil)
	invoke := func(token, session, text string) string {
		t.Helper()
		st, body, _ := send(t, http.MethodPost, hs.URL+"/invoke", token, `{"session":"`+session+`","text":"`+text+`"}`, nil)
		if st != http.StatusOK || !strings.Contains(body, `"completed"`) {
			t.Fatalf("%s's turn in %s: %d %s", token, session, st, body)
		}
		return body
	}

	e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "r1", Name: "remember",
			Args: `{"text":"Alice's favourite colour is teal (key ` + secret + `)","tags":["prefs"]}`}}},
		modelserver.Reply{Text: []string{"noted"}},
	)
	invoke("alice-token", "alice-1", "remember that my favourite colour is teal")
	if got := modelToolResult(e.kit.Model.Requests(), "r1"); !strings.HasPrefix(got, "Remembered as mem_") || !strings.Contains(got, "redacted") {
		t.Fatalf("remember's result: %q", got)
	}

	// Alice's second session: the memory is in the prompt and recalled.
	before := len(e.kit.Model.Requests())
	e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "q1", Name: "recall", Args: `{"query":"favourite colour"}`}}},
		modelserver.Reply{Text: []string{"teal"}},
	)
	invoke("alice-token", "alice-2", "what is my favourite colour?")
	reqs := e.kit.Model.Requests()
	if user := lastUserMessage(reqs[before]); !strings.HasPrefix(user, "<memories>") || !strings.Contains(user, "favourite colour is teal") ||
		!strings.HasSuffix(user, "</memories>\n\nwhat is my favourite colour?") {
		t.Errorf("alice's new session's turn lacks her memory as a block before her prompt:\n%s", user)
	}
	if sys := systemPrompt(reqs[before]); strings.Contains(sys, "teal") {
		t.Errorf("a memory reached the system prompt:\n%s", sys)
	}
	got := modelToolResult(reqs, "q1")
	if !strings.Contains(got, "favourite colour is teal") || strings.Contains(got, secret) || !strings.Contains(got, "[redacted]") {
		t.Errorf("alice's recall: %q", got)
	}

	// Bob's session: nothing of alice's, in the prompt or recalled.
	before = len(reqs)
	e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "q2", Name: "recall", Args: `{"query":"favourite colour teal"}`}}},
		modelserver.Reply{Text: []string{"no idea"}},
	)
	invoke("bob-token", "bob-1", "what is my favourite colour?")
	reqs = e.kit.Model.Requests()
	for _, r := range reqs[before:] {
		if strings.Contains(systemPrompt(r), "teal") || strings.Contains(lastUserMessage(r), "teal") {
			t.Errorf("bob's prompt holds alice's memory:\n%s\n%s", systemPrompt(r), lastUserMessage(r))
		}
	}
	if got := modelToolResult(reqs, "q2"); got != "No memories match." {
		t.Errorf("bob's recall: %q, want no memories", got)
	}

	// People see their own memories over HTTP.
	list := func(token string) []string {
		t.Helper()
		st, body, _ := send(t, http.MethodGet, hs.URL+"/memories", token, "", nil)
		var l ingress.MemoryList
		if st != http.StatusOK || json.Unmarshal([]byte(body), &l) != nil {
			t.Fatalf("GET /memories as %s: %d %s", token, st, body)
		}
		var out []string
		for _, m := range l.Memories {
			out = append(out, m.Owner+": "+m.Text)
		}
		return out
	}
	if got := list("alice-token"); len(got) != 1 || !strings.HasPrefix(got[0], "alice: Alice's favourite colour is teal (key [redacted])") {
		t.Errorf("alice's memories: %q", got)
	}
	if got := list("bob-token"); len(got) != 0 {
		t.Errorf("bob's memories: %q, want none", got)
	}
	if st, body, _ := send(t, http.MethodGet, hs.URL+"/memories", "", "", nil); st != http.StatusUnauthorized {
		t.Errorf("GET /memories without a token: %d %s", st, body)
	}
}
