package llm

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tmc/langchaingo/llms"

	"github.com/fastagent/fastagent/transcript"
)

// scriptedClient is a langchaingo client an embedder might bring: it streams
// chunks through StreamingFunc (with a pause between them) and answers with
// a response that carries no stop reason, or fails with err.
type scriptedClient struct {
	chunks []string
	pause  time.Duration
	calls  []llms.ToolCall
	err    error
	seen   []llms.MessageContent
}

func (c *scriptedClient) GenerateContent(ctx context.Context, msgs []llms.MessageContent, options ...llms.CallOption) (*llms.ContentResponse, error) {
	c.seen = msgs
	var o llms.CallOptions
	for _, opt := range options {
		opt(&o)
	}
	var text strings.Builder
	for _, ch := range c.chunks {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(c.pause):
		}
		if o.StreamingFunc != nil {
			if err := o.StreamingFunc(ctx, []byte(ch)); err != nil {
				return nil, err
			}
		}
		text.WriteString(ch)
	}
	if c.err != nil {
		return nil, c.err
	}
	return &llms.ContentResponse{Choices: []*llms.ContentChoice{{Content: text.String(), ToolCalls: c.calls,
		GenerationInfo: map[string]any{"PromptTokens": 7, "CompletionTokens": 3}}}}, nil
}

func (c *scriptedClient) Call(context.Context, string, ...llms.CallOption) (string, error) {
	return "", errors.New("not used")
}

func TestWrapStreamsAndAnswers(t *testing.T) {
	cl := &scriptedClient{chunks: []string{"hel", "lo"}}
	m, err := Wrap("acme/tiny", cl, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var deltas []string
	msg, err := m.Generate(context.Background(), Request{System: "be brief",
		Messages: []transcript.Message{{Role: transcript.RoleUser, Text: "hi"}}}, func(d Delta) {
		deltas = append(deltas, d.Text)
	})
	if err != nil {
		t.Fatal(err)
	}
	if msg.Text != "hello" || msg.StopReason != transcript.StopEnd || m.Name() != "acme/tiny" {
		t.Fatalf("message = %+v (name %s), want text hello ending the turn", msg, m.Name())
	}
	if strings.Join(deltas, ",") != "hel,lo" {
		t.Errorf("deltas = %v, want each chunk once", deltas)
	}
	if msg.Usage == nil || msg.Usage.Total != 10 {
		t.Errorf("usage = %+v, want 7+3", msg.Usage)
	}
	if len(cl.seen) != 2 || cl.seen[0].Role != llms.ChatMessageTypeSystem {
		t.Errorf("the client got %d messages (%v), want system + user", len(cl.seen), cl.seen)
	}

	// Tool calls without a stop reason still end the step as tool use.
	cl = &scriptedClient{calls: []llms.ToolCall{{ID: "c1", Type: "function",
		FunctionCall: &llms.FunctionCall{Name: "read", Arguments: `{"path":"a"}`}}}}
	m, _ = Wrap("acme/tiny", cl, Options{})
	msg, err = m.Generate(context.Background(), Request{Messages: []transcript.Message{{Role: transcript.RoleUser, Text: "go"}}}, nil)
	if err != nil || msg.StopReason != transcript.StopToolUse || len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Name != "read" {
		t.Fatalf("tool step = %+v, %v", msg, err)
	}
}

func TestWrapErrors(t *testing.T) {
	m, _ := Wrap("acme/tiny", &scriptedClient{err: errors.New("quota service unavailable")}, Options{})
	_, err := m.Generate(context.Background(), Request{Messages: []transcript.Message{{Role: transcript.RoleUser, Text: "x"}}}, nil)
	var e *Error
	if !errors.As(err, &e) || !e.Retryable || !strings.Contains(e.Message, "quota service unavailable") {
		t.Fatalf("client failure = %#v, want a retryable error with the client's message", err)
	}

	m, _ = Wrap("acme/tiny", &scriptedClient{err: errors.New("maximum context length exceeded")}, Options{})
	_, err = m.Generate(context.Background(), Request{Messages: []transcript.Message{{Role: transcript.RoleUser, Text: "x"}}}, nil)
	if !errors.As(err, &e) || e.Retryable || e.Kind != KindContextOverflow {
		t.Fatalf("overflow = %#v, want a permanent context overflow", err)
	}

	// Chunks keep a slow stream alive; silence longer than the stall
	// timeout fails it as a stall.
	m, _ = Wrap("acme/tiny", &scriptedClient{chunks: []string{"a", "b", "c", "d"}, pause: 60 * time.Millisecond}, Options{StallTimeout: 150 * time.Millisecond})
	if msg, err := m.Generate(context.Background(), Request{Messages: []transcript.Message{{Role: transcript.RoleUser, Text: "x"}}}, nil); err != nil || msg.Text != "abcd" {
		t.Fatalf("slow but steady stream = %+v, %v", msg, err)
	}
	m, _ = Wrap("acme/tiny", &scriptedClient{chunks: []string{"a", "b"}, pause: time.Second}, Options{StallTimeout: 100 * time.Millisecond})
	_, err = m.Generate(context.Background(), Request{Messages: []transcript.Message{{Role: transcript.RoleUser, Text: "x"}}}, nil)
	if !errors.As(err, &e) || e.Kind != KindStall || !e.Retryable {
		t.Fatalf("silent stream = %#v, want a retryable stall", err)
	}

	if _, err := Wrap("", &scriptedClient{}, Options{}); !errors.Is(err, ErrNotConfigured) {
		t.Errorf("Wrap without a spec = %v, want ErrNotConfigured", err)
	}
}

// A client that does not stream still shows its answer as text: one delta.
func TestWrapNonStreamingClient(t *testing.T) {
	cl := &scriptedClient{chunks: []string{"whole answer"}}
	m, _ := Wrap("acme/tiny", nonStreaming{cl}, Options{})
	var deltas []string
	msg, err := m.Generate(context.Background(), Request{Messages: []transcript.Message{{Role: transcript.RoleUser, Text: "x"}}},
		func(d Delta) { deltas = append(deltas, d.Text) })
	if err != nil || msg.Text != "whole answer" || strings.Join(deltas, "|") != "whole answer" {
		t.Fatalf("message %+v, deltas %q, err %v: want the answer as one delta", msg, deltas, err)
	}
}

// nonStreaming hides the streaming option from the client it wraps.
type nonStreaming struct{ c *scriptedClient }

func (n nonStreaming) GenerateContent(ctx context.Context, msgs []llms.MessageContent, _ ...llms.CallOption) (*llms.ContentResponse, error) {
	return n.c.GenerateContent(ctx, msgs)
}

func (n nonStreaming) Call(ctx context.Context, p string, o ...llms.CallOption) (string, error) {
	return n.c.Call(ctx, p, o...)
}
