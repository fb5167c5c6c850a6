package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// scriptedModel is a minimal OpenAI-compatible chat completions server on
// loopback: it answers each request with the next scripted reply (a tool
// call or text) as a stream, and keeps the requests. It stands in for a
// provider so the example runs without a key; a real program points
// OPENAI_BASE_URL at nothing and uses the real API.
type scriptedModel struct {
	srv     *httptest.Server
	mu      sync.Mutex
	replies []reply
	seen    []request
}

// reply is one scripted answer: text, or one tool call.
type reply struct {
	text     string
	toolName string
	toolArgs string
}

// request is what the example's assertions read from a request.
type request struct {
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
}

func newScriptedModel(t *testing.T, replies ...reply) *scriptedModel {
	m := &scriptedModel{replies: replies}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *scriptedModel) URL() string { return m.srv.URL + "/v1" }

func (m *scriptedModel) requests() []request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]request(nil), m.seen...)
}

func (m *scriptedModel) serve(w http.ResponseWriter, r *http.Request) {
	var req request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	m.mu.Lock()
	m.seen = append(m.seen, req)
	var next reply
	if len(m.replies) > 0 {
		next, m.replies = m.replies[0], m.replies[1:]
	} else {
		next = reply{text: "(no scripted reply left)"}
	}
	m.mu.Unlock()

	w.Header().Set("Content-Type", "text/event-stream")
	chunk := func(delta map[string]any, finish any) {
		b, _ := json.Marshal(map[string]any{
			"id": "c1", "object": "chat.completion.chunk", "model": "scripted",
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}},
		})
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
	if next.toolName != "" {
		chunk(map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{
			"index": 0, "id": "call_1", "type": "function",
			"function": map[string]any{"name": next.toolName, "arguments": next.toolArgs},
		}}}, nil)
		chunk(map[string]any{}, "tool_calls")
	} else {
		chunk(map[string]any{"role": "assistant", "content": next.text}, nil)
		chunk(map[string]any{}, "stop")
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}
