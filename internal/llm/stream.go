package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
)

// deltaSink forwards deltas to the caller's callback until closed, so a
// library goroutine that outlives Generate cannot call it late.
type deltaSink struct {
	mu     sync.Mutex
	fn     func(Delta)
	closed bool
	// kick, when set, feeds the stall watchdog on every chunk (a wrapped
	// client's transport is not ours to watch).
	kick func()
	// texted is set once a text delta went out.
	texted bool
}

func (s *deltaSink) emit(kind string, b []byte) {
	if s.kick != nil {
		s.kick()
	}
	if len(b) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.fn == nil {
		return
	}
	if kind == DeltaText {
		s.texted = true
	}
	s.fn(Delta{Kind: kind, Text: string(b)})
}

// streamedText reports whether any text delta went out.
func (s *deltaSink) streamedText() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.texted
}

func (s *deltaSink) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
}

// openAIStream is the StreamingReasoningFunc for langchaingo's openai
// client, which calls it once per SSE chunk with the reasoning delta and the
// content delta. For chunks that carry tool-call deltas it replaces the
// content delta with the JSON of those deltas; they are recognised by
// isToolCallChunk and dropped (the calls arrive complete in the response).
func (s *deltaSink) openAIStream(_ context.Context, reasoning, chunk []byte) error {
	s.emit(DeltaThinking, reasoning)
	if !isToolCallChunk(chunk) {
		s.emit(DeltaText, chunk)
	}
	return nil
}

// textStream is a plain StreamingFunc (Anthropic text deltas; Anthropic
// never passes tool input through it).
func (s *deltaSink) textStream(_ context.Context, chunk []byte) error {
	s.emit(DeltaText, chunk)
	return nil
}

// thinkingStream is the StreamingReasoningFunc for Anthropic, which calls it
// for thinking deltas only (with an empty content chunk).
func (s *deltaSink) thinkingStream(_ context.Context, reasoning, _ []byte) error {
	s.emit(DeltaThinking, reasoning)
	return nil
}

// streamedToolCall mirrors the JSON shape langchaingo's openai client
// (openaiclient.ToolCall) marshals tool-call deltas into.
type streamedToolCall struct {
	ID       string `json:"id,omitempty"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// isToolCallChunk reports whether a streamed "content" chunk is really
// langchaingo's re-encoding of tool-call deltas. The heuristic: the chunk is
// a non-empty JSON array whose elements have only the fields id (optional),
// type and function{name, arguments}, and re-encoding it with that exact
// shape reproduces the chunk byte for byte (json.Marshal's compact form and
// field order). Model text matching that canonical encoding in a single
// delta is, in practice, impossible; any spacing, extra field or other
// order makes it ordinary text.
func isToolCallChunk(chunk []byte) bool {
	if len(chunk) < 2 || chunk[0] != '[' || chunk[len(chunk)-1] != ']' {
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(chunk))
	dec.DisallowUnknownFields()
	var calls []streamedToolCall
	if err := dec.Decode(&calls); err != nil || len(calls) == 0 || dec.More() {
		return false
	}
	again, err := json.Marshal(calls)
	return err == nil && bytes.Equal(again, chunk)
}
