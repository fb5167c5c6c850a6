package modelserver

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
)

// Native is a loopback server for the wire formats that are neither chat
// completions nor the Anthropic Messages API: Gemini's generateContent and
// Bedrock's InvokeModel. It records every request whole (path, query,
// headers, body), so a test asserts what reached it, and answers from a
// FIFO of scripted Replies (Text, ToolCalls, Usage are used), then with a
// plain "ok".
type Native struct {
	srv     *httptest.Server
	mu      sync.Mutex
	reqs    []Captured
	replies []Reply
	write   func(w http.ResponseWriter, c Captured, rp Reply)
}

// Captured is one request a Native server received.
type Captured struct {
	Method, Path, RawQuery string
	Header                 http.Header
	Body                   json.RawMessage
}

func newNative(write func(w http.ResponseWriter, c Captured, rp Reply)) *Native {
	n := &Native{write: write}
	n.srv = httptest.NewServer(http.HandlerFunc(n.serve))
	return n
}

// NewGemini returns a server speaking the Gemini API's REST form
// (POST /v1beta/models/<model>:generateContent and :streamGenerateContent
// with alt=sse); its URL is the GEMINI_BASE_URL to use.
func NewGemini(replies ...Reply) *Native {
	n := newNative(writeGemini)
	n.replies = replies
	return n
}

// NewBedrock returns a server speaking Amazon Bedrock's InvokeModel API
// for Anthropic models (POST /model/<id>/invoke, an Anthropic Messages
// reply body); its URL is the AWS_ENDPOINT_URL_BEDROCK_RUNTIME to use.
func NewBedrock(replies ...Reply) *Native {
	n := newNative(writeBedrock)
	n.replies = replies
	return n
}

// URL is the server's base URL (no path).
func (n *Native) URL() string { return n.srv.URL }

// Close stops the server.
func (n *Native) Close() { n.srv.Close() }

// Requests returns the requests received so far, oldest first.
func (n *Native) Requests() []Captured {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]Captured(nil), n.reqs...)
}

func (n *Native) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c := Captured{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Header: r.Header.Clone(), Body: body}
	n.mu.Lock()
	n.reqs = append(n.reqs, c)
	rp := Reply{Text: []string{"ok"}}
	if len(n.replies) > 0 {
		rp, n.replies = n.replies[0], n.replies[1:]
	}
	n.mu.Unlock()
	if r.Method != http.MethodPost {
		http.Error(w, "use POST", http.StatusMethodNotAllowed)
		return
	}
	n.write(w, c, rp)
}

func nativeUsage(rp Reply) Usage {
	if rp.Usage != nil {
		return *rp.Usage
	}
	return Usage{PromptTokens: 10, CompletionTokens: 5}
}

// writeGemini answers a generateContent request: one JSON response, or for
// streamGenerateContent one response per text piece and tool call, as
// server-sent events (alt=sse, the Gemini SDKs) or as a JSON array
// (the Go REST client's $alt=json).
func writeGemini(w http.ResponseWriter, c Captured, rp Reply) {
	u := nativeUsage(rp)
	usage := map[string]any{"promptTokenCount": u.PromptTokens, "candidatesTokenCount": u.CompletionTokens,
		"totalTokenCount": u.PromptTokens + u.CompletionTokens}
	var parts []map[string]any
	for _, t := range rp.Text {
		parts = append(parts, map[string]any{"text": t})
	}
	for _, tc := range rp.ToolCalls {
		parts = append(parts, map[string]any{"functionCall": map[string]any{"name": tc.Name, "args": json.RawMessage(args(tc))}})
	}
	chunk := func(ps []map[string]any, last bool) map[string]any {
		cand := map[string]any{"content": map[string]any{"role": "model", "parts": ps}, "index": 0}
		// As the API does, every chunk carries usage: the prompt's from
		// the first, the output's counted up to the last.
		out := map[string]any{"candidates": []any{cand},
			"usageMetadata": map[string]any{"promptTokenCount": u.PromptTokens, "totalTokenCount": u.PromptTokens}}
		if last {
			cand["finishReason"] = "STOP"
			out["usageMetadata"] = usage
		}
		return out
	}
	if !strings.HasSuffix(c.Path, ":streamGenerateContent") {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(chunk(parts, true))
		return
	}
	if !strings.Contains(c.RawQuery, "alt=sse") {
		var arr []map[string]any
		for i, p := range parts {
			arr = append(arr, chunk([]map[string]any{p}, i == len(parts)-1))
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(arr)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for i, p := range parts {
		b, _ := json.Marshal(chunk([]map[string]any{p}, i == len(parts)-1))
		fmt.Fprintf(w, "data: %s\r\n\r\n", b)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
}

// writeBedrock answers an InvokeModel request for an Anthropic model.
func writeBedrock(w http.ResponseWriter, _ Captured, rp Reply) {
	u := nativeUsage(rp)
	content := []map[string]any{}
	if len(rp.Text) > 0 {
		content = append(content, map[string]any{"type": "text", "text": strings.Join(rp.Text, "")})
	}
	stop := "end_turn"
	for _, tc := range rp.ToolCalls {
		content = append(content, map[string]any{"type": "tool_use", "id": tc.ID, "name": tc.Name, "input": json.RawMessage(args(tc))})
		stop = "tool_use"
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"id": "msg_bedrock", "type": "message", "role": "assistant",
		"model": "claude", "content": content, "stop_reason": stop,
		"usage": map[string]any{"input_tokens": u.PromptTokens, "output_tokens": u.CompletionTokens}})
}
