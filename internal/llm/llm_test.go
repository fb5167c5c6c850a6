package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/transcript"
	"github.com/tmc/langchaingo/llms"
)

// env returns a Getenv over the given key/value pairs only.
func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// newTestModel returns an openai/test-model talking to s.
func newTestModel(t *testing.T, s *modelserver.Server, stall time.Duration) Model {
	t.Helper()
	m, err := New("openai/test-model", Options{
		Getenv:       env("OPENAI_BASE_URL", s.URL(), "OPENAI_API_KEY", "sk-test-secret-key"),
		StallTimeout: stall,
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// collector records deltas.
type collector struct {
	mu     sync.Mutex
	deltas []Delta
	first  chan struct{}
	once   sync.Once
}

func newCollector() *collector { return &collector{first: make(chan struct{})} }

func (c *collector) add(d Delta) {
	c.mu.Lock()
	c.deltas = append(c.deltas, d)
	c.mu.Unlock()
	c.once.Do(func() { close(c.first) })
}

func (c *collector) get() []Delta {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Delta(nil), c.deltas...)
}

func userPrompt(text string) Request {
	return Request{Messages: []transcript.Message{{Role: transcript.RoleUser, Text: text}}}
}

func asError(t *testing.T, err error) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *llm.Error", err, err)
	}
	return e
}

func TestNew(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		spec    string
		env     func(string) string
		wantErr []string // substrings; nil = success
		wantURL string
	}{
		{"empty spec", "", env(), []string{"no model configured", "FASTAGENT_MODEL=openai/gpt-4o-mini", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "ollama/"}, ""},
		{"no provider", "gpt-4o", env(), []string{`"gpt-4o" is not of the form provider/model`}, ""},
		{"unknown provider", "nosuch/large", env(), []string{`unknown model provider "nosuch"`}, ""},
		{"openai without key", "openai/gpt-4o-mini", env(), []string{"needs OPENAI_API_KEY"}, ""},
		{"openai remote base without key", "openai/m", env("OPENAI_BASE_URL", "https://example.test/v1"), []string{"needs OPENAI_API_KEY"}, ""},
		{"openai bad base URL", "openai/m", env("OPENAI_API_KEY", "k", "OPENAI_BASE_URL", "localhost:8080"), []string{"OPENAI_BASE_URL", "not an http(s) URL"}, ""},
		{"openai default endpoint", "openai/gpt-4o-mini", env("OPENAI_API_KEY", "k"), nil, "https://api.openai.com/v1"},
		{"openai loopback without key", "openai/m", env("OPENAI_BASE_URL", "http://127.0.0.1:9/v1/"), nil, "http://127.0.0.1:9/v1"},
		{"openai localhost without key", "openai/m", env("OPENAI_BASE_URL", "http://localhost:9/v1"), nil, "http://localhost:9/v1"},
		{"anthropic without key", "anthropic/claude-sonnet-4-5", env(), []string{"needs ANTHROPIC_API_KEY"}, ""},
		{"anthropic", "anthropic/claude-sonnet-4-5", env("ANTHROPIC_API_KEY", "k"), nil, "https://api.anthropic.com/v1"},
		{"ollama default", "ollama/llama3.2", env(), nil, "http://127.0.0.1:11434/v1"},
		{"ollama bare host", "ollama/qwen3", env("OLLAMA_HOST", "10.1.2.3"), nil, "http://10.1.2.3:11434/v1"},
		{"model name with slashes", "openai/org/model", env("OPENAI_API_KEY", "k"), nil, "https://api.openai.com/v1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m, err := New(c.spec, Options{Getenv: c.env})
			if c.wantErr != nil {
				if err == nil {
					t.Fatalf("New(%q) succeeded, want error", c.spec)
				}
				if !errors.Is(err, ErrNotConfigured) || !strings.HasPrefix(err.Error(), "llm: ") {
					t.Errorf("error %q does not wrap ErrNotConfigured with the llm prefix", err)
				}
				for _, w := range c.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("New(%q): %v", c.spec, err)
			}
			if m.Name() != c.spec {
				t.Errorf("Name %q, want %q", m.Name(), c.spec)
			}
			if got := m.(*model).baseURL; got != c.wantURL {
				t.Errorf("base URL %q, want %q", got, c.wantURL)
			}
		})
	}
}

func TestTextStreaming(t *testing.T) {
	t.Parallel()
	s := modelserver.New()
	defer s.Close()
	s.Enqueue(modelserver.Reply{
		Text:       []string{"Hel", "lo, ", "wor", "ld"},
		ChunkDelay: 2 * time.Millisecond,
		Usage:      &modelserver.Usage{PromptTokens: 11, CompletionTokens: 4},
	})
	m := newTestModel(t, s, 0)
	c := newCollector()
	msg, err := m.Generate(context.Background(), userPrompt("hi"), c.add)
	if err != nil {
		t.Fatal(err)
	}
	want := []Delta{{"text", "Hel"}, {"text", "lo, "}, {"text", "wor"}, {"text", "ld"}}
	if got := c.get(); !reflect.DeepEqual(got, want) {
		t.Errorf("deltas %q, want %q", got, want)
	}
	var concat string
	for _, d := range c.get() {
		concat += d.Text
	}
	if msg.Text != concat || msg.Text != "Hello, world" {
		t.Errorf("text %q, deltas concatenated %q", msg.Text, concat)
	}
	if msg.Role != transcript.RoleAssistant || msg.StopReason != transcript.StopEnd || msg.Model != "openai/test-model" ||
		msg.Thinking != "" || len(msg.ToolCalls) != 0 {
		t.Errorf("message %+v", msg)
	}
	if msg.Usage == nil || *msg.Usage != (transcript.Usage{Input: 11, Output: 4, Total: 15}) {
		t.Errorf("usage %+v", msg.Usage)
	}
	r := s.Requests()[0]
	if !r.Stream || r.Model != "test-model" || r.LastUserText() != "hi" {
		t.Errorf("request %+v", r)
	}
}

func TestThinkingDeltas(t *testing.T) {
	t.Parallel()
	s := modelserver.New()
	defer s.Close()
	s.Enqueue(modelserver.Reply{Thinking: []string{"Let me ", "think."}, Text: []string{"Ans", "wer"}})
	m := newTestModel(t, s, 0)
	c := newCollector()
	msg, err := m.Generate(context.Background(), userPrompt("q"), c.add)
	if err != nil {
		t.Fatal(err)
	}
	want := []Delta{{DeltaThinking, "Let me "}, {DeltaThinking, "think."}, {DeltaText, "Ans"}, {DeltaText, "wer"}}
	if got := c.get(); !reflect.DeepEqual(got, want) {
		t.Errorf("deltas %q, want %q", got, want)
	}
	if msg.Thinking != "Let me think." || msg.Text != "Answer" {
		t.Errorf("thinking %q text %q", msg.Thinking, msg.Text)
	}
}

func TestToolCalls(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		text  []string
		calls []modelserver.ToolCall
	}{
		{"single", nil, []modelserver.ToolCall{{ID: "call_abc", Name: "read_file", Args: `{"path":"README.md","limit":20}`}}},
		{"parallel", nil, []modelserver.ToolCall{
			{ID: "call_1", Name: "read_file", Args: `{"path":"a.go"}`},
			{ID: "call_2", Name: "bash", Args: `{"command":"ls -la \u003c dir","timeout":5}`},
		}},
		{"text then call", []string{"Let me ", "look."}, []modelserver.ToolCall{{ID: "call_x", Name: "ls", Args: `{}`}}},
		{"unicode args", nil, []modelserver.ToolCall{{ID: "call_u", Name: "write", Args: `{"text":"héllo wörld ✓"}`}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := modelserver.New()
			defer s.Close()
			s.Enqueue(modelserver.Reply{Text: c.text, ToolCalls: c.calls})
			m := newTestModel(t, s, 0)
			col := newCollector()
			msg, err := m.Generate(context.Background(), userPrompt("do it"), col.add)
			if err != nil {
				t.Fatal(err)
			}
			var texts []string
			for _, d := range col.get() {
				if d.Kind != DeltaText {
					t.Errorf("unexpected delta %+v", d)
				}
				texts = append(texts, d.Text)
			}
			if !reflect.DeepEqual(texts, c.text) {
				t.Errorf("text deltas %q, want %q (tool-call JSON must not leak as text)", texts, c.text)
			}
			if msg.Text != strings.Join(c.text, "") {
				t.Errorf("text %q", msg.Text)
			}
			if msg.StopReason != transcript.StopToolUse {
				t.Errorf("stop reason %q, want %q", msg.StopReason, transcript.StopToolUse)
			}
			if len(msg.ToolCalls) != len(c.calls) {
				t.Fatalf("got %d tool calls %+v, want %d", len(msg.ToolCalls), msg.ToolCalls, len(c.calls))
			}
			for i, want := range c.calls {
				got := msg.ToolCalls[i]
				if got.ID != want.ID || got.Name != want.Name || !jsonEqual(t, got.Args, []byte(want.Args)) {
					t.Errorf("call %d = %s %s %s, want %s %s %s", i, got.ID, got.Name, got.Args, want.ID, want.Name, want.Args)
				}
			}
		})
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Errorf("invalid JSON %s: %v", a, err)
		return false
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Errorf("invalid JSON %s: %v", b, err)
		return false
	}
	return reflect.DeepEqual(x, y)
}

func TestStopReasons(t *testing.T) {
	t.Parallel()
	s := modelserver.New()
	defer s.Close()
	m := newTestModel(t, s, 0)
	cases := []struct {
		finish   string
		calls    []modelserver.ToolCall
		want     string
		wantsErr bool
	}{
		{"stop", nil, transcript.StopEnd, false},
		{"length", nil, transcript.StopLength, false},
		{"tool_calls", []modelserver.ToolCall{{ID: "c", Name: "f"}}, transcript.StopToolUse, false},
		{"stop", []modelserver.ToolCall{{ID: "c", Name: "f"}}, transcript.StopToolUse, false}, // lax servers
		{"content_filter", nil, transcript.StopError, true},
	}
	for _, c := range cases {
		key := fmt.Sprintf("[%s %d]", c.finish, len(c.calls))
		s.EnqueueFor(key, modelserver.Reply{Text: []string{"x"}, ToolCalls: c.calls, FinishReason: c.finish})
		msg, err := m.Generate(context.Background(), userPrompt(key), nil)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if msg.StopReason != c.want || (msg.ErrorMessage != "") != c.wantsErr {
			t.Errorf("%s: stop reason %q (error message %q), want %q", key, msg.StopReason, msg.ErrorMessage, c.want)
		}
	}
}

func TestHTTPErrors(t *testing.T) {
	t.Parallel()
	httpDate := time.Now().Add(3 * time.Second).UTC().Format(http.TimeFormat)
	cases := []struct {
		name          string
		reply         modelserver.Reply
		kind          string
		retryable     bool
		retryAfterMin time.Duration
		retryAfterMax time.Duration
		contains      []string
	}{
		{"429 seconds", modelserver.Reply{Status: 429, RetryAfter: "2", Message: "Rate limit reached"}, KindRateLimit, true, 2 * time.Second, 2 * time.Second,
			[]string{"rate limiting", "HTTP 429", "retry after 2s", "Rate limit reached"}},
		{"429 http date", modelserver.Reply{Status: 429, RetryAfter: httpDate}, KindRateLimit, true, time.Second, 4 * time.Second, []string{"HTTP 429"}},
		{"429 without header", modelserver.Reply{Status: 429}, KindRateLimit, true, 0, 0, []string{"HTTP 429"}},
		{"500", modelserver.Reply{Status: 500, Message: "boom"}, KindServer, true, 0, 0, []string{"HTTP 500", "boom"}},
		{"503", modelserver.Reply{Status: 503}, KindServer, true, 0, 0, []string{"HTTP 503"}},
		{"401", modelserver.Reply{Status: 401, Message: "Incorrect API key provided: sk-test-secret-key"}, KindAuth, false, 0, 0,
			[]string{"rejected the API key", "check OPENAI_API_KEY"}},
		{"403", modelserver.Reply{Status: 403}, KindAuth, false, 0, 0, []string{"check OPENAI_API_KEY"}},
		{"404", modelserver.Reply{Status: 404, Message: "model not found"}, KindNotFound, false, 0, 0, []string{`model name "test-model"`, "OPENAI_BASE_URL"}},
		{"400 echoing the key", modelserver.Reply{Status: 400, Message: "bad tools for key sk-test-secret-key"}, KindInvalidRequest, false, 0, 0,
			[]string{"HTTP 400", "bad tools for key [redacted]"}},
		{"422", modelserver.Reply{Status: 422, Message: "unprocessable"}, KindInvalidRequest, false, 0, 0, []string{"HTTP 422", "unprocessable"}},
		{"openai context_length_exceeded", modelserver.ContextLengthExceeded(4000, 5210), KindContextOverflow, false, 0, 0,
			[]string{"longer than the model's context window", "HTTP 400", "maximum context length is 4000 tokens"}},
		{"anthropic prompt is too long", modelserver.Reply{Status: 400, Message: "prompt is too long: 210000 tokens > 200000 maximum"}, KindContextOverflow, false, 0, 0,
			[]string{"context window", "prompt is too long"}},
		{"ollama input length", modelserver.Reply{Status: 400, Message: "the input length exceeds the context length"}, KindContextOverflow, false, 0, 0,
			[]string{"context window"}},
		{"llama.cpp context size", modelserver.Reply{Status: 400, Message: "the request exceeds the available context size, try increasing it"}, KindContextOverflow, false, 0, 0,
			[]string{"context window"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := modelserver.New()
			defer s.Close()
			s.Enqueue(c.reply)
			m := newTestModel(t, s, 0)
			_, err := m.Generate(context.Background(), userPrompt("x"), nil)
			if err == nil {
				t.Fatal("Generate succeeded")
			}
			e := asError(t, err)
			if e.Kind != c.kind || e.Retryable != c.retryable || e.Status != c.reply.Status {
				t.Errorf("kind %q retryable %v status %d, want %q %v %d", e.Kind, e.Retryable, e.Status, c.kind, c.retryable, c.reply.Status)
			}
			if e.RetryAfter < c.retryAfterMin || e.RetryAfter > c.retryAfterMax {
				t.Errorf("RetryAfter %v, want within [%v, %v]", e.RetryAfter, c.retryAfterMin, c.retryAfterMax)
			}
			for _, w := range c.contains {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "sk-test-secret-key") {
				t.Errorf("error leaks the API key: %q", err)
			}
			if n := s.Count(); n != 1 {
				t.Errorf("server saw %d requests; the client must not retry on its own", n)
			}
		})
	}
}

func TestMidStreamDisconnect(t *testing.T) {
	t.Parallel()
	s := modelserver.New()
	defer s.Close()
	s.Enqueue(modelserver.Reply{Text: []string{"a", "b", "c", "d"}, DisconnectAfter: 2})
	m := newTestModel(t, s, 0)
	c := newCollector()
	_, err := m.Generate(context.Background(), userPrompt("x"), c.add)
	e := asError(t, err)
	if e.Kind != KindNetwork || !e.Retryable || e.Status != 200 || !strings.Contains(e.Message, "mid-stream") {
		t.Errorf("error %+v", e)
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("error %v does not wrap io.ErrUnexpectedEOF", err)
	}
	if got := c.get(); !reflect.DeepEqual(got, []Delta{{DeltaText, "a"}, {DeltaText, "b"}}) {
		t.Errorf("deltas before the cut %q", got)
	}
}

func TestTruncatedStream(t *testing.T) {
	t.Parallel()
	s := modelserver.New()
	defer s.Close()
	s.Enqueue(modelserver.Reply{Text: []string{"half an ans"}, FinishReason: modelserver.NoFinish})
	m := newTestModel(t, s, 0)
	msg, err := m.Generate(context.Background(), userPrompt("x"), nil)
	if err == nil {
		t.Fatalf("a stream without finish reason was accepted: %+v", msg)
	}
	e := asError(t, err)
	if e.Kind != KindTruncated || !e.Retryable || !strings.Contains(err.Error(), "without a finish reason") {
		t.Errorf("error %+v", e)
	}
}

func TestStallBetweenChunks(t *testing.T) {
	t.Parallel()
	s := modelserver.New()
	defer s.Close()
	s.Enqueue(modelserver.Reply{Text: []string{"partial"}, Hang: true})
	m := newTestModel(t, s, 300*time.Millisecond)
	c := newCollector()
	start := time.Now()
	_, err := m.Generate(context.Background(), userPrompt("x"), c.add)
	elapsed := time.Since(start)
	e := asError(t, err)
	if e.Kind != KindStall || !e.Retryable || e.Message != "the model stream stalled for 300ms" {
		t.Errorf("error %+v", e)
	}
	if elapsed < 300*time.Millisecond || elapsed > 3*time.Second {
		t.Errorf("stall detected after %v, want about 300ms", elapsed)
	}
	if got := c.get(); !reflect.DeepEqual(got, []Delta{{DeltaText, "partial"}}) {
		t.Errorf("deltas %q", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.WaitAborted(ctx); err != nil {
		t.Errorf("the stalled stream was not abandoned: %v", err)
	}
}

func TestStallBeforeHeaders(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // so the server notices the client leaving
		select {                  // never answers
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer hs.Close()
	defer close(release)
	m, err := New("openai/m", Options{Getenv: env("OPENAI_BASE_URL", hs.URL+"/v1"), StallTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = m.Generate(context.Background(), userPrompt("x"), nil)
	e := asError(t, err)
	if e.Kind != KindStall || !e.Retryable || e.Status != 0 {
		t.Errorf("error %+v", e)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestNetworkError(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	m, err := New("openai/m", Options{Getenv: env("OPENAI_BASE_URL", "http://"+addr+"/v1")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Generate(context.Background(), userPrompt("x"), nil)
	e := asError(t, err)
	if e.Kind != KindNetwork || !e.Retryable || e.Status != 0 || !strings.Contains(e.Message, "could not reach") ||
		!strings.Contains(e.Message, "refused") {
		t.Errorf("error %+v", e)
	}
}

func TestCallerCancel(t *testing.T) {
	t.Parallel()
	s := modelserver.New()
	defer s.Close()
	s.Enqueue(modelserver.Reply{Text: []string{"started"}, Hang: true})
	m := newTestModel(t, s, 0) // default 60s stall: only the caller can end this
	c := newCollector()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-c.first
		cancel()
	}()
	start := time.Now()
	_, err := m.Generate(ctx, userPrompt("x"), c.add)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Generate returned %v after cancel", d)
	}
	e := asError(t, err)
	if e.Kind != KindCanceled || e.Retryable || !errors.Is(err, context.Canceled) {
		t.Errorf("error %+v (%v)", e, err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer wcancel()
	if err := s.WaitAborted(wctx); err != nil {
		t.Errorf("server did not see the abort: %v", err)
	}
	// Already canceled: no request at all.
	if _, err := m.Generate(ctx, userPrompt("y"), nil); asError(t, err).Kind != KindCanceled || s.Count() != 1 {
		t.Errorf("pre-canceled call: %v, server count %d", err, s.Count())
	}
}

func TestMultiTurnRequestShape(t *testing.T) {
	t.Parallel()
	s := modelserver.New()
	defer s.Close()
	m := newTestModel(t, s, 0)
	req := Request{
		System:    "You are terse.",
		MaxTokens: 123,
		Messages: []transcript.Message{
			{Role: transcript.RoleUser, Text: "what is in a.txt?", Images: []transcript.Image{{MimeType: "image/png", Data: "iVBORw0KGgo="}}},
			{Role: transcript.RoleAssistant, Text: "I'll read it.", Thinking: "private", StopReason: transcript.StopToolUse,
				ToolCalls: []transcript.ToolCall{{ID: "call_7", Name: "read_file", Args: json.RawMessage(`{"path":"a.txt"}`)}}},
			{Role: transcript.RoleToolResult, ToolCallID: "call_7", ToolName: "read_file", Text: "hello from a"},
			{Role: transcript.RoleUser, Text: "and now?"},
		},
		Tools: []agent.ToolSpec{{Name: "read_file", Description: "Read a file.",
			Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)}},
	}
	if _, err := m.Generate(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	r := s.Requests()[0]
	if got := strings.Join(r.Roles(), ","); got != "system,user,assistant,tool,user" {
		t.Fatalf("roles %s; body %s", got, r.Raw)
	}
	if r.Messages[0].Content != "You are terse." {
		t.Errorf("system %+v", r.Messages[0])
	}
	u := r.Messages[1]
	if len(u.Parts) != 2 || u.Parts[0].Type != "text" || u.Parts[0].Text != "what is in a.txt?" ||
		u.Parts[1].Type != "image_url" || u.Parts[1].ImageURL != "data:image/png;base64,iVBORw0KGgo=" {
		t.Errorf("user with image %+v", u)
	}
	a := r.Messages[2]
	if a.Content != "I'll read it." || len(a.ToolCalls) != 1 || a.ToolCalls[0].ID != "call_7" ||
		a.ToolCalls[0].Name != "read_file" || a.ToolCalls[0].Args != `{"path":"a.txt"}` {
		t.Errorf("assistant %+v", a)
	}
	if strings.Contains(string(r.Raw), "private") {
		t.Errorf("thinking was sent back to the provider: %s", r.Raw)
	}
	tr := r.Messages[3]
	if tr.ToolCallID != "call_7" || tr.Content != "hello from a" {
		t.Errorf("tool result %+v", tr)
	}
	if r.Messages[4].Content != "and now?" || r.LastUserText() != "and now?" {
		t.Errorf("last user %+v", r.Messages[4])
	}
	if len(r.Tools) != 1 || r.Tools[0].Name != "read_file" || r.Tools[0].Description != "Read a file." ||
		!jsonEqual(t, r.Tools[0].Parameters, req.Tools[0].Parameters) {
		t.Errorf("tools %+v", r.Tools)
	}
	if r.MaxTokens != 123 {
		t.Errorf("max tokens %d", r.MaxTokens)
	}
}

func TestInvalidRequest(t *testing.T) {
	t.Parallel()
	s := modelserver.New()
	defer s.Close()
	m := newTestModel(t, s, 0)
	cases := []Request{
		{Messages: []transcript.Message{{Role: "robot", Text: "x"}}},
		{Messages: []transcript.Message{{Role: transcript.RoleToolResult, Text: "x"}}},
		{Messages: []transcript.Message{{Role: transcript.RoleUser, Text: "x"}}, Tools: []agent.ToolSpec{{Name: "t", Parameters: json.RawMessage(`{bad`)}}},
	}
	for i, req := range cases {
		_, err := m.Generate(context.Background(), req, nil)
		if e := asError(t, err); e.Kind != KindInvalidRequest || e.Retryable {
			t.Errorf("case %d: %+v", i, e)
		}
	}
	if s.Count() != 0 {
		t.Errorf("invalid requests reached the server")
	}
}

func TestConcurrentCallsKeepTheirOwnStatus(t *testing.T) {
	t.Parallel()
	s := modelserver.New()
	defer s.Close()
	m := newTestModel(t, s, 0)
	const n = 16
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("<conv %d>", i)
		switch i % 3 {
		case 0:
			s.EnqueueFor(key, modelserver.Reply{Status: 429, RetryAfter: fmt.Sprint(i + 1), ChunkDelay: 20 * time.Millisecond})
		case 1:
			s.EnqueueFor(key, modelserver.Reply{Status: 500, ChunkDelay: 10 * time.Millisecond})
		default:
			s.EnqueueFor(key, modelserver.Reply{Text: []string{key, " done"}, ChunkDelay: 5 * time.Millisecond})
		}
	}
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("<conv %d>", i)
			msg, err := m.Generate(context.Background(), userPrompt("please "+key), nil)
			var e *Error
			errors.As(err, &e)
			switch i % 3 {
			case 0:
				if e == nil || e.Status != 429 || e.RetryAfter != time.Duration(i+1)*time.Second {
					errs <- fmt.Sprintf("%s: %v", key, err)
				}
			case 1:
				if e == nil || e.Status != 500 || e.RetryAfter != 0 {
					errs <- fmt.Sprintf("%s: %v", key, err)
				}
			default:
				if err != nil || msg.Text != key+" done" {
					errs <- fmt.Sprintf("%s: %q %v", key, msg.Text, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestIsToolCallChunk(t *testing.T) {
	t.Parallel()
	cases := []struct {
		chunk string
		want  bool
	}{
		{`[{"id":"call_1","type":"function","function":{"name":"read","arguments":""}}]`, true},
		{`[{"type":"","function":{"name":"","arguments":"{\"path\":"}}]`, true},
		{`[{"type":"","function":{"name":"","arguments":"\u003c"}}]`, true},
		{`[{"id":"a","type":"function","function":{"name":"x","arguments":""}},{"type":"","function":{"name":"","arguments":"{}"}}]`, true},
		{`hello`, false},
		{``, false},
		{`[]`, false},
		{`[1, 2, 3]`, false},
		{`["a","b"]`, false},
		{`[{"type": "function", "function": {"name": "x", "arguments": ""}}]`, false},               // spaced: prose
		{`[{"function":{"name":"x","arguments":""},"type":"function"}]`, false},                     // other order
		{`[{"index":0,"type":"function","function":{"name":"x","arguments":""}}]`, false},           // extra field
		{`[{"type":"function","function":{"name":"x","arguments":"","extra":1}}]`, false},           // extra nested field
		{`[{"type":"function","function":{"name":"x","arguments":""}}] and more`, false},            // trailing text
		{`[{"type":"function"}]`, false},                                                            // missing function
		{`[{"id":"","type":"function","function":{"name":"x","arguments":""}}]`, false},             // empty id is omitted by langchaingo
		{`[{"type":"function","function":{"name":"x","arguments":""}}]` + "\n", false},              // not what json.Marshal writes
		{`[{"type":"function","function":{"name":"x","arguments":"<"}}]`, false},                    // json.Marshal escapes <
		{`[{"ID":"call_1","type":"function","function":{"name":"read","arguments":""}}]`, false},    // case differs
		{`[{"id":"call_1","type":"function","function":{"name":"read","arguments":null}}]`, false},  // null arguments
		{`[{"id":"call_1","type":"function","function":{"name":"read","arguments":"{}"}}]x`, false}, // junk after
		{`[{"id":"call_1","type":"function","function":{"name":"read","arguments":"{}"}}`, false},   // unterminated
		{`[{"id":"call_1","type":"function","function":{"name":"read","arguments":"{}"}}]]`, false}, // extra bracket
	}
	for _, c := range cases {
		if got := isToolCallChunk([]byte(c.chunk)); got != c.want {
			t.Errorf("isToolCallChunk(%s) = %v, want %v", c.chunk, got, c.want)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		header map[string]string
		want   time.Duration
	}{
		{map[string]string{"Retry-After": "2"}, 2 * time.Second},
		{map[string]string{"Retry-After": "0.5"}, 500 * time.Millisecond},
		{map[string]string{"Retry-After": now.Add(7 * time.Second).Format(http.TimeFormat)}, 7 * time.Second},
		{map[string]string{"Retry-After": now.Add(-time.Minute).Format(http.TimeFormat)}, 0},
		{map[string]string{"Retry-After": "soon"}, 0},
		{map[string]string{"Retry-After": "-3"}, 0},
		{map[string]string{"Retry-After-Ms": "1500", "Retry-After": "9"}, 1500 * time.Millisecond},
		{map[string]string{}, 0},
	}
	for _, c := range cases {
		h := http.Header{}
		for k, v := range c.header {
			h.Set(k, v)
		}
		if got := parseRetryAfter(h, now); got != c.want {
			t.Errorf("parseRetryAfter(%v) = %v, want %v", c.header, got, c.want)
		}
	}
}

func TestAnthropicMessages(t *testing.T) {
	t.Parallel()
	msgs := []transcript.Message{
		{Role: transcript.RoleUser, Text: "look", Images: []transcript.Image{{MimeType: "image/png", Data: "AAEC"}}},
		{Role: transcript.RoleAssistant, Text: "two calls", ToolCalls: []transcript.ToolCall{
			{ID: "t1", Name: "a", Args: json.RawMessage(`{"x":1}`)},
			{ID: "t2", Name: "b"},
		}},
		{Role: transcript.RoleToolResult, ToolCallID: "t1", Text: "r1"},
		{Role: transcript.RoleToolResult, ToolCallID: "t2", Text: "r2"},
		{Role: transcript.RoleAssistant}, // empty: left out
	}
	got, err := toMessages(flavorAnthropic, "sys", msgs, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []llms.MessageContent{
		{Role: llms.ChatMessageTypeSystem, Parts: []llms.ContentPart{llms.TextPart("sys")}},
		{Role: llms.ChatMessageTypeHuman, Parts: []llms.ContentPart{llms.TextPart("look"), llms.BinaryPart("image/png", []byte{0, 1, 2})}},
		{Role: llms.ChatMessageTypeAI, Parts: []llms.ContentPart{llms.TextPart("two calls")}},
		{Role: llms.ChatMessageTypeAI, Parts: []llms.ContentPart{llms.ToolCall{ID: "t1", Type: "function", FunctionCall: &llms.FunctionCall{Name: "a", Arguments: `{"x":1}`}}}},
		{Role: llms.ChatMessageTypeAI, Parts: []llms.ContentPart{llms.ToolCall{ID: "t2", Type: "function", FunctionCall: &llms.FunctionCall{Name: "b", Arguments: `{}`}}}},
		{Role: llms.ChatMessageTypeTool, Parts: []llms.ContentPart{llms.ToolCallResponse{ToolCallID: "t1", Content: "r1"}}},
		{Role: llms.ChatMessageTypeTool, Parts: []llms.ContentPart{llms.ToolCallResponse{ToolCallID: "t2", Content: "r2"}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("anthropic messages\n got %#v\nwant %#v", got, want)
	}
	if _, err := toMessages(flavorAnthropic, "", []transcript.Message{{Role: transcript.RoleUser, Images: []transcript.Image{{MimeType: "image/png", Data: "!!"}}}}, nil); err == nil {
		t.Error("invalid base64 image accepted")
	}
}

func TestToMessageFromResponse(t *testing.T) {
	t.Parallel()
	m := &model{spec: "anthropic/claude"}
	// The shape langchaingo's Anthropic client returns: one choice per block.
	resp := &llms.ContentResponse{Choices: []*llms.ContentChoice{
		{StopReason: "tool_use", GenerationInfo: map[string]any{"ThinkingContent": "hmm", "ThinkingSignature": "sig", "InputTokens": 9, "OutputTokens": 4,
			"CacheReadInputTokens": 5, "CacheCreationInputTokens": 2}},
		{Content: "calling", StopReason: "tool_use", GenerationInfo: map[string]any{"ThinkingContent": "", "InputTokens": 9, "OutputTokens": 4}},
		{StopReason: "tool_use", ToolCalls: []llms.ToolCall{{ID: "toolu_1", FunctionCall: &llms.FunctionCall{Name: "ls", Arguments: `{"d":"."}`}}}},
		{StopReason: "tool_use", ToolCalls: []llms.ToolCall{{FunctionCall: &llms.FunctionCall{}}}}, // merge artefact
		{StopReason: "tool_use", ToolCalls: []llms.ToolCall{{ID: "toolu_2", FunctionCall: &llms.FunctionCall{Name: "cat", Arguments: `{"path": broken`}}}},
	}}
	msg, stop := m.toMessage(resp)
	if stop != "tool_use" || msg.Thinking != "hmm" || msg.Text != "calling" || msg.Usage == nil || *msg.Usage != (transcript.Usage{Input: 9, Output: 4, Total: 13, CacheRead: 5, CacheWrite: 2}) {
		t.Errorf("message %+v stop %q", msg, stop)
	}
	if len(msg.ToolCalls) != 2 || msg.ToolCalls[0].ID != "toolu_1" || string(msg.ToolCalls[0].Args) != `{"d":"."}` ||
		string(msg.ToolCalls[1].Args) != `"{\"path\": broken"` {
		t.Errorf("tool calls %+v", msg.ToolCalls)
	}
	if s, _ := mapStop(stop, true); s != transcript.StopToolUse {
		t.Errorf("mapStop(tool_use) = %q", s)
	}
	if s, _ := mapStop("max_tokens", false); s != transcript.StopLength {
		t.Errorf("mapStop(max_tokens) = %q", s)
	}
	if s, _ := mapStop("end_turn", false); s != transcript.StopEnd {
		t.Errorf("mapStop(end_turn) = %q", s)
	}
}
