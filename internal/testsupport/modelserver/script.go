package modelserver

import (
	"fmt"
	"strings"
	"time"
)

// NoFinish as Reply.FinishReason ends the stream cleanly (with "data: [DONE]")
// but without any finish_reason, the way a truncating proxy would.
const NoFinish = "-"

// Reply scripts the answer to one chat completions request.
//
// A streamed reply is sent in this order: a role chunk, one chunk per
// Thinking piece (delta.reasoning_content), one per Text piece
// (delta.content), then for each tool call a header chunk (index, id, type,
// name, empty arguments) followed by its Args in two or more pieces, then the
// finish chunk, a usage chunk and "data: [DONE]". Every chunk but the role,
// finish and usage chunks is a content chunk.
type Reply struct {
	// Status other than 0 and 200 sends a JSON error body
	// {"error":{"message":Message,"type":...}} with that status instead.
	Status int
	// RetryAfter is sent as the Retry-After header when set (any reply).
	RetryAfter string
	// Message is the error message of a non-200 reply (default: the status text).
	Message string
	// ErrorCode is the error body's "code" (null when empty), e.g.
	// "context_length_exceeded".
	ErrorCode string

	// Thinking pieces are sent as delta.reasoning_content.
	Thinking []string
	// Text pieces are sent as delta.content.
	Text []string
	// ToolCalls are streamed one after the other, OpenAI style.
	ToolCalls []ToolCall
	// FinishReason defaults to "tool_calls" when there are tool calls and
	// "stop" otherwise; NoFinish omits it.
	FinishReason string

	// ChunkDelay is slept before every chunk but the role chunk (and before
	// the whole body of a non-streaming reply).
	ChunkDelay time.Duration
	// FirstDelay, when set, is slept before the first chunk after the role
	// chunk instead of ChunkDelay: a model's time to first token.
	FirstDelay time.Duration
	// DisconnectAfter > 0 closes the connection abruptly once that many
	// content chunks were sent, instead of the next event, so the client sees
	// an unexpected EOF mid-stream (a reply with fewer content chunks
	// completes normally). A non-streaming reply is cut before its headers.
	DisconnectAfter int
	// Hang sends the headers and the thinking and text chunks, then blocks
	// until the client goes away (counted as an abort) or the server closes.
	// A non-streaming reply hangs before its headers.
	Hang bool
	// Hold, when not nil, holds the reply after its headers (a streamed
	// reply: after the role chunk; a non-streaming one: before anything)
	// until Hold is closed, the client goes away (counted as an abort) or the
	// server closes. Tests use it to keep a turn running until they let it
	// finish.
	Hold <-chan struct{}

	// StreamError, when set, ends a streamed reply after its content with
	// an error instead of the finish: the Anthropic shape sends an "error"
	// event of this type (e.g. "overloaded_error") with Message, the OpenAI
	// shape a data chunk {"error":{...}} without "[DONE]". A non-streaming
	// reply answers HTTP 500 instead.
	StreamError string

	// Usage is reported in the usage chunk; nil derives a rough count.
	Usage *Usage

	// overflowWindow and overflowGot are the numbers of ContextLengthExceeded,
	// for the Anthropic wording.
	overflowWindow, overflowGot int
}

// ContextLengthExceeded is the answer to a request longer than the model's
// context window: HTTP 400 with code context_length_exceeded in the OpenAI
// shape, "prompt is too long: N tokens > M maximum" in the Anthropic shape.
func ContextLengthExceeded(window, got int) Reply {
	return Reply{
		Status:         400,
		ErrorCode:      "context_length_exceeded",
		overflowWindow: window,
		overflowGot:    got,
		Message: fmt.Sprintf("This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. "+
			"Please reduce the length of the messages.", window, got),
	}
}

// ToolCall is one scripted tool call. Args is the raw JSON arguments text
// ("{}" when empty).
type ToolCall struct {
	ID   string
	Name string
	Args string
}

// Usage is the token usage reported for a reply. TotalTokens defaults to the
// sum of the other two.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	TotalTokens      int
	// CachedTokens are prompt tokens reported as read from the prompt cache
	// (Anthropic: cache_read_input_tokens).
	CachedTokens int
	// CacheWriteTokens are prompt tokens reported as written to the prompt
	// cache (Anthropic's cache_creation_input_tokens; the OpenAI shape has
	// no such field).
	CacheWriteTokens int
}

// keyedQueue holds the replies scripted for one conversation key.
type keyedQueue struct {
	key     string
	replies []Reply
}

// Enqueue appends replies to the shared FIFO queue; each request that no
// keyed queue claims consumes one.
func (s *Server) Enqueue(replies ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, replies...)
}

// EnqueueFor appends replies to the queue of key. A request is served from
// that queue when the text of its last user message (Request.LastUserText)
// contains key as a substring; the keyed queues are tried in the order their
// keys were first used, before the shared queue. Because the last user
// message stays the same across the tool-call turns of one prompt, one key
// scripts a whole agent turn of one conversation.
func (s *Server) EnqueueFor(key string, replies ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.keyed {
		if s.keyed[i].key == key {
			s.keyed[i].replies = append(s.keyed[i].replies, replies...)
			return
		}
	}
	s.keyed = append(s.keyed, keyedQueue{key: key, replies: replies})
}

// Handle sets the fallback used when no queue has a reply for a request;
// nil restores the default, which answers with the text "ok". fn may be
// called concurrently.
func (s *Server) Handle(fn func(Request) Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handler = fn
}

// Pending returns how many scripted replies (shared and keyed) are unused.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.queue)
	for _, k := range s.keyed {
		n += len(k.replies)
	}
	return n
}

// next picks the reply for req; it must be called with s.mu held. The second
// result is false when the fallback handler has to be called.
func (s *Server) next(req *Request) (Reply, bool) {
	last := req.LastUserText()
	for i := range s.keyed {
		k := &s.keyed[i]
		if len(k.replies) > 0 && strings.Contains(last, k.key) {
			r := k.replies[0]
			k.replies = k.replies[1:]
			return r, true
		}
	}
	if len(s.queue) > 0 {
		r := s.queue[0]
		s.queue = s.queue[1:]
		return r, true
	}
	return Reply{}, false
}

func defaultHandler(Request) Reply {
	return Reply{Text: []string{"ok"}}
}
