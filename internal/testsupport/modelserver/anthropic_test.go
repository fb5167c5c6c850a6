package modelserver

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// postAnthropic sends a Messages API request and returns the response.
func postAnthropic(t *testing.T, s *Server, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, s.URL()+"/messages", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-api-key", "sk-ant-test")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	return resp
}

type sse struct {
	event string
	data  map[string]any
}

// anthEventsOf reads "event:"/"data:" pairs until EOF and checks they agree.
func anthEventsOf(t *testing.T, r io.Reader) []sse {
	t.Helper()
	var out []sse
	var cur sse
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			cur.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.data); err != nil {
				t.Fatalf("data %q: %v", line, err)
			}
			if cur.data["type"] != cur.event {
				t.Errorf("event %q carries data of type %v", cur.event, cur.data["type"])
			}
			out = append(out, cur)
			cur = sse{}
		case line != "":
			t.Fatalf("unexpected line %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestAnthropicStreamShape(t *testing.T) {
	t.Parallel()
	s := NewAnthropic()
	defer s.Close()
	s.Enqueue(Reply{
		Thinking:  []string{"hm", "m"},
		Text:      []string{"Hel", "lo"},
		ToolCalls: []ToolCall{{ID: "toolu_1", Name: "read", Args: `{"path":"a.txt"}`}},
		Usage:     &Usage{PromptTokens: 7, CompletionTokens: 5, CachedTokens: 3, CacheWriteTokens: 2},
	})
	resp := postAnthropic(t, s, `{"model":"claude-x","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	evs := anthEventsOf(t, resp.Body)
	var kinds []string
	var thinking, text, args string
	for _, e := range evs {
		k := e.event
		if d, ok := e.data["delta"].(map[string]any); ok && k == "content_block_delta" {
			k = d["type"].(string)
			switch k {
			case "thinking_delta":
				thinking += d["thinking"].(string)
			case "text_delta":
				text += d["text"].(string)
			case "input_json_delta":
				args += d["partial_json"].(string)
				k = "input_json_delta"
			}
		}
		if k == "content_block_start" {
			k += ":" + e.data["content_block"].(map[string]any)["type"].(string)
		}
		if len(kinds) == 0 || kinds[len(kinds)-1] != k {
			kinds = append(kinds, k)
		}
	}
	want := "message_start,ping," +
		"content_block_start:thinking,thinking_delta,signature_delta,content_block_stop," +
		"content_block_start:text,text_delta,content_block_stop," +
		"content_block_start:tool_use,input_json_delta,content_block_stop," +
		"message_delta,message_stop"
	if got := strings.Join(kinds, ","); got != want {
		t.Errorf("events\n got %s\nwant %s", got, want)
	}
	if thinking != "hmm" || text != "Hello" || args != `{"path":"a.txt"}` {
		t.Errorf("thinking %q text %q args %q", thinking, text, args)
	}
	start := evs[0].data["message"].(map[string]any)["usage"].(map[string]any)
	if start["input_tokens"] != 7.0 || start["cache_read_input_tokens"] != 3.0 || start["cache_creation_input_tokens"] != 2.0 {
		t.Errorf("message_start usage %v", start)
	}
	md := evs[len(evs)-2].data
	if md["delta"].(map[string]any)["stop_reason"] != "tool_use" || md["usage"].(map[string]any)["output_tokens"] != 5.0 {
		t.Errorf("message_delta %v", md)
	}
	if r := s.Requests()[0]; r.APIKey != "sk-ant-test" || r.FirstDelta.IsZero() || r.MaxTokens != 100 {
		t.Errorf("recorded %+v", r)
	}
}

func TestAnthropicStopReasons(t *testing.T) {
	t.Parallel()
	tests := []struct {
		reply Reply
		want  any // stop_reason; nil for none
		stop  bool
	}{
		{Reply{Text: []string{"a"}}, "end_turn", true},
		{Reply{Text: []string{"a"}, FinishReason: "length"}, "max_tokens", true},
		{Reply{Text: []string{"a"}, FinishReason: "refusal"}, "refusal", true},
		{Reply{Text: []string{"a"}, FinishReason: NoFinish}, nil, false},
	}
	for _, tt := range tests {
		s := NewAnthropic()
		s.Enqueue(tt.reply)
		resp := postAnthropic(t, s, `{"model":"m","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
		evs := anthEventsOf(t, resp.Body)
		resp.Body.Close()
		s.Close()
		last := evs[len(evs)-1]
		if tt.stop != (last.event == "message_stop") {
			t.Errorf("%+v: last event %s", tt.reply, last.event)
		}
		var md map[string]any
		for _, e := range evs {
			if e.event == "message_delta" {
				md = e.data
			}
		}
		if got := md["delta"].(map[string]any)["stop_reason"]; got != tt.want {
			t.Errorf("%+v: stop_reason %v, want %v", tt.reply, got, tt.want)
		}
	}
}

func TestAnthropicErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		reply            Reply
		status           int
		typ, msgContains string
	}{
		{Reply{Status: 429, RetryAfter: "3", Message: "slow down"}, 429, "rate_limit_error", "slow down"},
		{Overloaded(), 529, "overloaded_error", "Overloaded"},
		{ContextLengthExceeded(200000, 210000), 400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"},
		{Reply{Status: 401, Message: "invalid x-api-key"}, 401, "authentication_error", "invalid x-api-key"},
	}
	for _, tt := range tests {
		s := NewAnthropic()
		s.Enqueue(tt.reply)
		resp := postAnthropic(t, s, `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
		var body struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		err := json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		s.Close()
		if err != nil || resp.StatusCode != tt.status || body.Type != "error" || body.Error.Type != tt.typ ||
			!strings.Contains(body.Error.Message, tt.msgContains) {
			t.Errorf("%d %+v (%v), want %d %s %q", resp.StatusCode, body, err, tt.status, tt.typ, tt.msgContains)
		}
		if tt.reply.RetryAfter != "" && resp.Header.Get("Retry-After") != tt.reply.RetryAfter {
			t.Errorf("Retry-After %q", resp.Header.Get("Retry-After"))
		}
	}
}

func TestAnthropicStreamError(t *testing.T) {
	t.Parallel()
	s := NewAnthropic()
	defer s.Close()
	s.Enqueue(Reply{Text: []string{"par", "tial"}, StreamError: "overloaded_error"})
	resp := postAnthropic(t, s, `{"model":"m","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	defer resp.Body.Close()
	evs := anthEventsOf(t, resp.Body)
	last := evs[len(evs)-1]
	if last.event != "error" || last.data["error"].(map[string]any)["type"] != "overloaded_error" {
		t.Errorf("last event %+v", last)
	}
}

// The server refuses what the Messages API refuses, with its wording, and
// records nothing.
func TestAnthropicValidation(t *testing.T) {
	t.Parallel()
	user := `{"role":"user","content":"hi"}`
	toolTurn := `{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"ls","input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"a"}]}`
	tests := []struct {
		name, body, want string
	}{
		{"no max_tokens", `{"model":"m","messages":[` + user + `]}`, "max_tokens: Field required"},
		{"no messages", `{"model":"m","max_tokens":5,"messages":[]}`, "at least one message"},
		{"assistant first", `{"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":"x"}]}`, "first message"},
		{"small budget", `{"model":"m","max_tokens":5000,"thinking":{"type":"enabled","budget_tokens":500},"messages":[` + user + `]}`,
			"greater than or equal to 1024"},
		{"budget over max_tokens", `{"model":"m","max_tokens":2000,"thinking":{"type":"enabled","budget_tokens":2000},"messages":[` + user + `]}`,
			"`max_tokens` must be greater"},
		{"temperature with thinking", `{"model":"m","max_tokens":5000,"temperature":0,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[` + user + `]}`,
			"`temperature` may only be set to 1"},
		{"unanswered tool_use", `{"model":"m","max_tokens":5,"messages":[` + user + `,` +
			`{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"ls","input":{}}]},` + user + `]}`,
			"without `tool_result` blocks"},
		{"stray tool_result", `{"model":"m","max_tokens":5,"messages":[` + user + `,{"role":"assistant","content":"x"},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"nope","content":"a"}]}]}`,
			"unexpected `tool_use_id`"},
		{"thinking without thinking block", `{"model":"m","max_tokens":5000,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[` +
			user + `,` + toolTurn + `]}`, "must start with a thinking block"},
	}
	s := NewAnthropic()
	defer s.Close()
	for _, tt := range tests {
		resp := postAnthropic(t, s, tt.body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(b), tt.want) || !strings.Contains(string(b), "invalid_request_error") {
			t.Errorf("%s: %d %s, want 400 with %q", tt.name, resp.StatusCode, b, tt.want)
		}
	}
	if n := s.Count(); n != 0 {
		t.Errorf("%d refused requests recorded", n)
	}
	// The same tool turn without thinking, and with a thinking block first, is fine.
	for _, body := range []string{
		`{"model":"m","max_tokens":5,"messages":[` + user + `,` + toolTurn + `]}`,
		`{"model":"m","max_tokens":5000,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[` + user + `,` +
			`{"role":"assistant","content":[{"type":"thinking","thinking":"x","signature":"s"},{"type":"tool_use","id":"t1","name":"ls","input":{}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"a"}]}]}`,
	} {
		resp := postAnthropic(t, s, body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("valid request refused: %d %s", resp.StatusCode, b)
		}
	}
}

// Requests are recorded in the same form as the OpenAI shape's, so one test
// can assert either.
func TestAnthropicRequestDecoding(t *testing.T) {
	t.Parallel()
	s := NewAnthropic()
	defer s.Close()
	body := `{"model":"claude-x","stream":true,"max_tokens":1999,"system":"sys","temperature":1,
	 "thinking":{"type":"enabled","budget_tokens":1024},
	 "messages":[
	  {"role":"user","content":[{"type":"text","text":"look"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAA="}}]},
	  {"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"s"},{"type":"text","text":"listing"}]},
	  {"role":"assistant","content":[{"type":"tool_use","id":"c1","name":"ls","input":{ "dir": "." }}]},
	  {"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":"a.txt"}]},
	  {"role":"user","content":[{"type":"text","text":"next"}]}],
	 "tools":[{"name":"ls","description":"list","input_schema":{"type":"object"}}]}`
	resp := postAnthropic(t, s, body)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	r := s.Requests()[0]
	if r.Model != "claude-x" || !r.Stream || r.MaxTokens != 1999 || r.ThinkingBudget != 1024 || r.Temperature == nil ||
		r.LastUserText() != "next" || strings.Join(r.Roles(), ",") != "system,user,assistant,tool,user" {
		t.Fatalf("request %+v", r)
	}
	if m := r.Messages[1]; m.Content != "look" || len(m.Parts) != 2 || m.Parts[1].ImageURL != "data:image/png;base64,AAA=" {
		t.Errorf("user parts %+v", m)
	}
	if m := r.Messages[2]; m.Content != "listing" || len(m.ToolCalls) != 1 || m.ToolCalls[0] != (ToolCall{ID: "c1", Name: "ls", Args: `{"dir":"."}`}) {
		t.Errorf("assistant %+v", m)
	}
	if m := r.Messages[3]; m.ToolCallID != "c1" || m.Content != "a.txt" {
		t.Errorf("tool %+v", m)
	}
	if len(r.Tools) != 1 || r.Tools[0].Name != "ls" || string(r.Tools[0].Parameters) != `{"type":"object"}` {
		t.Errorf("tools %+v", r.Tools)
	}
}

func TestAnthropicNonStreaming(t *testing.T) {
	t.Parallel()
	s := NewAnthropic()
	defer s.Close()
	s.Enqueue(Reply{Text: []string{"a", "b"}, ToolCalls: []ToolCall{{ID: "t1", Name: "ls", Args: `{"x":1}`}}})
	resp := postAnthropic(t, s, `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
	defer resp.Body.Close()
	var m struct {
		Type       string           `json:"type"`
		StopReason string           `json:"stop_reason"`
		Content    []map[string]any `json:"content"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	if m.Type != "message" || m.StopReason != "tool_use" || len(m.Content) != 2 || m.Content[0]["text"] != "ab" ||
		m.Content[1]["input"].(map[string]any)["x"] != 1.0 {
		t.Errorf("reply %+v", m)
	}
}

func TestAnthropicWrongPath(t *testing.T) {
	t.Parallel()
	s := NewAnthropic()
	defer s.Close()
	resp := post(t, context.Background(), s, streamBody("hi")) // /chat/completions
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("chat completions on the Anthropic shape: %d, want 404", resp.StatusCode)
	}
}
