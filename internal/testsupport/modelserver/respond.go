package modelserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"
)

// exchange writes one scripted reply.
type exchange struct {
	s     *Server
	w     http.ResponseWriter
	r     *http.Request
	rec   *Request // the recorded request, updated under s.mu
	req   Request  // a private copy
	reply Reply
	// cacheUsage is the prompt-cache accounting of an Anthropic request
	// (PromptCache), nil when off.
	cacheUsage *cacheUsage
}

// chunk is one SSE event of a streamed reply.
type chunk struct {
	data    any
	content bool // counts for DisconnectAfter and FirstDelta
	hangs   bool // Hang blocks before this chunk
}

func (x *exchange) respond() {
	rp := x.reply
	if rp.RetryAfter != "" {
		x.w.Header().Set("Retry-After", rp.RetryAfter)
	}
	if rp.Status != 0 && rp.Status != http.StatusOK {
		if !x.sleep(rp.ChunkDelay) {
			return
		}
		if x.s.shape == Anthropic {
			x.anthError()
			return
		}
		writeErrorCode(x.w, rp.Status, "", rp.Message, rp.ErrorCode)
		return
	}
	switch {
	case x.s.shape == Anthropic && x.req.Stream:
		x.anthStream()
		return
	case x.s.shape == Anthropic:
		x.anthWhole()
		return
	}
	if x.req.Stream {
		x.stream()
	} else {
		x.whole()
	}
}

// stream writes the reply as server-sent events, flushing after each one.
func (x *exchange) stream() {
	h := x.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	x.w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(x.w)
	if rc.Flush() != nil {
		x.s.markAborted(x.rec)
		return
	}
	sent := 0
	for i, c := range x.chunks() {
		if x.reply.DisconnectAfter > 0 && sent >= x.reply.DisconnectAfter {
			x.disconnect()
			return
		}
		if c.hangs && x.reply.Hang {
			x.hang()
			return
		}
		if i == 1 && !x.hold() {
			return
		}
		if i > 0 && !x.sleep(x.delayBefore(i)) {
			return
		}
		b, err := json.Marshal(c.data)
		if err != nil {
			panic(fmt.Sprintf("modelserver: encoding chunk: %v", err))
		}
		if !x.write(rc, "data: "+string(b)+"\n\n") {
			return
		}
		if c.content {
			sent++
			if sent == 1 {
				x.s.markFirstDelta(x.rec, time.Now())
			}
		}
	}
	if x.reply.StreamError == "" {
		if x.write(rc, "data: [DONE]\n\n") {
			x.s.markDone(x.rec, time.Now())
		}
	}
}

// delayBefore is the pause before streamed chunk i (> 0): FirstDelay before
// the first chunk after the role chunk when set, ChunkDelay otherwise.
func (x *exchange) delayBefore(i int) time.Duration {
	if i == 1 && x.reply.FirstDelay > 0 {
		return x.reply.FirstDelay
	}
	return x.reply.ChunkDelay
}

// write sends one event and flushes it; a failure counts as an abort.
func (x *exchange) write(rc *http.ResponseController, s string) bool {
	if _, err := x.w.Write([]byte(s)); err != nil {
		x.s.markAborted(x.rec)
		return false
	}
	if err := rc.Flush(); err != nil {
		x.s.markAborted(x.rec)
		return false
	}
	return true
}

// sleep waits d; it reports false (recording an abort when the client left)
// if the request or the server ended first.
func (x *exchange) sleep(d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-x.r.Context().Done():
		x.s.markAborted(x.rec)
		return false
	case <-x.s.done:
		return false
	}
}

// hold waits for Reply.Hold to be closed; it reports false (recording an
// abort when the client left) if the request or the server ended first.
func (x *exchange) hold() bool {
	if x.reply.Hold == nil {
		return true
	}
	select {
	case <-x.reply.Hold:
		return true
	case <-x.r.Context().Done():
		x.s.markAborted(x.rec)
		return false
	case <-x.s.done:
		return false
	}
}

// hang blocks until the client goes away or the server closes.
func (x *exchange) hang() {
	select {
	case <-x.r.Context().Done():
		x.s.markAborted(x.rec)
	case <-x.s.done:
	}
}

// disconnect closes the connection without ending the response, so the
// client reads an unexpected EOF.
func (x *exchange) disconnect() {
	hj, ok := x.w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler) // HTTP/2: resets the stream
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

// whole writes a non-streaming reply.
func (x *exchange) whole() {
	rp := x.reply
	if !x.hold() {
		return
	}
	if rp.Hang {
		x.hang()
		return
	}
	if rp.DisconnectAfter > 0 {
		x.disconnect()
		return
	}
	if !x.sleep(rp.ChunkDelay) {
		return
	}
	if rp.StreamError != "" {
		writeError(x.w, http.StatusInternalServerError, rp.StreamError, streamErrorMessage(rp))
		return
	}
	msg := wholeMessage{Role: "assistant", ReasoningContent: strings.Join(rp.Thinking, "")}
	text := strings.Join(rp.Text, "")
	if text != "" || len(rp.ToolCalls) == 0 {
		msg.Content = &text
	}
	for _, tc := range rp.ToolCalls {
		msg.ToolCalls = append(msg.ToolCalls, wholeToolCall{
			ID: tc.ID, Type: "function",
			Function: functionDelta{Name: tc.Name, Arguments: args(tc)},
		})
	}
	resp := wholeResponse{
		ID: x.id(), Object: "chat.completion", Created: x.req.Received.Unix(), Model: x.req.Model,
		Choices: []wholeChoice{{Message: msg, FinishReason: x.finishReason()}},
		Usage:   x.usage(),
	}
	x.w.Header().Set("Content-Type", "application/json")
	b, err := json.Marshal(resp)
	if err != nil {
		panic(fmt.Sprintf("modelserver: encoding reply: %v", err))
	}
	if _, err := x.w.Write(b); err != nil {
		x.s.markAborted(x.rec)
		return
	}
	x.s.markFirstDelta(x.rec, time.Now())
}

// chunks builds the events of a streamed reply, without "[DONE]".
func (x *exchange) chunks() []chunk {
	rp := x.reply
	empty := ""
	out := []chunk{{data: x.delta(delta{Role: "assistant", Content: &empty}, nil)}}
	for _, t := range rp.Thinking {
		out = append(out, chunk{data: x.delta(delta{ReasoningContent: t}, nil), content: true})
	}
	for _, t := range rp.Text {
		out = append(out, chunk{data: x.delta(delta{Content: &t}, nil), content: true})
	}
	for i, tc := range rp.ToolCalls {
		head := toolCallDelta{Index: i, ID: tc.ID, Type: "function", Function: functionDelta{Name: tc.Name}}
		out = append(out, chunk{data: x.delta(delta{ToolCalls: []toolCallDelta{head}}, nil), content: true})
		for _, piece := range splitArgs(args(tc)) {
			d := toolCallDelta{Index: i, Function: functionDelta{Arguments: piece}}
			out = append(out, chunk{data: x.delta(delta{ToolCalls: []toolCallDelta{d}}, nil), content: true})
		}
	}
	if rp.StreamError != "" {
		out = append(out, chunk{data: map[string]any{"error": map[string]any{
			"message": streamErrorMessage(rp), "type": rp.StreamError, "code": nil}}})
	} else {
		if fr := x.finishReason(); fr != nil {
			out = append(out, chunk{data: x.delta(delta{}, fr)})
		}
		out = append(out, chunk{data: streamChunk{
			ID: x.id(), Object: "chat.completion.chunk", Created: x.req.Received.Unix(), Model: x.req.Model,
			Choices: []streamChoice{}, Usage: x.usage(),
		}})
	}
	// Hang stops before the first event after the text (there always is one:
	// the usage chunk).
	if i := 1 + len(rp.Thinking) + len(rp.Text); i < len(out) {
		out[i].hangs = true
	}
	return out
}

func (x *exchange) delta(d delta, finish *string) streamChunk {
	return streamChunk{
		ID: x.id(), Object: "chat.completion.chunk", Created: x.req.Received.Unix(), Model: x.req.Model,
		Choices: []streamChoice{{Delta: d, FinishReason: finish}},
	}
}

func (x *exchange) id() string { return fmt.Sprintf("chatcmpl-%d", x.req.Seq) }

// finishReason returns the scripted or derived finish reason; nil for
// NoFinish.
func (x *exchange) finishReason() *string {
	fr := x.reply.FinishReason
	switch {
	case fr == NoFinish:
		return nil
	case fr != "":
	case len(x.reply.ToolCalls) > 0:
		fr = "tool_calls"
	default:
		fr = "stop"
	}
	return &fr
}

// usage returns the scripted usage or a rough one: a token per four
// characters of the request messages, a token per content chunk.
func (x *exchange) usage() *usageJSON {
	if u := x.reply.Usage; u != nil {
		total := u.TotalTokens
		if total == 0 {
			total = u.PromptTokens + u.CompletionTokens
		}
		out := &usageJSON{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: total}
		if u.CachedTokens > 0 {
			out.PromptDetails = &promptDetails{CachedTokens: u.CachedTokens}
		}
		return out
	}
	chars := 0
	for _, m := range x.req.Messages {
		chars += len(m.Content)
	}
	prompt := chars/4 + 1
	completion := len(x.reply.Thinking) + len(x.reply.Text)
	for _, tc := range x.reply.ToolCalls {
		completion += 1 + len(splitArgs(args(tc)))
	}
	return &usageJSON{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
}

func args(tc ToolCall) string {
	if tc.Args == "" {
		return "{}"
	}
	return tc.Args
}

// splitArgs cuts s into two or three pieces at rune boundaries (one piece
// only when s is a single rune).
func splitArgs(s string) []string {
	n := utf8.RuneCountInString(s)
	if n < 2 {
		return []string{s}
	}
	parts := 3
	if n < 6 {
		parts = 2
	}
	var out []string
	runes := []rune(s)
	for i := 0; i < parts; i++ {
		out = append(out, string(runes[i*n/parts:(i+1)*n/parts]))
	}
	return out
}

// writeError sends an OpenAI-style error body.
func writeError(w http.ResponseWriter, status int, typ, msg string) {
	writeErrorCode(w, status, typ, msg, "")
}

// writeErrorCode sends an OpenAI-style error body with a code (null when "").
func writeErrorCode(w http.ResponseWriter, status int, typ, msg, code string) {
	if msg == "" {
		msg = http.StatusText(status)
	}
	if typ == "" {
		typ = errorType(status)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	var c any
	if code != "" {
		c = code
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": c}})
	_, _ = w.Write(b)
}

func errorType(status int) string {
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return "authentication_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status >= 500:
		return "server_error"
	default:
		return "invalid_request_error"
	}
}

// Wire shapes of replies.

type streamChunk struct {
	ID      string         `json:"id"`
	Object  string         `json:"object"`
	Created int64          `json:"created"`
	Model   string         `json:"model"`
	Choices []streamChoice `json:"choices"`
	Usage   *usageJSON     `json:"usage,omitempty"`
}

type streamChoice struct {
	Index        int     `json:"index"`
	Delta        delta   `json:"delta"`
	FinishReason *string `json:"finish_reason"`
}

type delta struct {
	Role             string          `json:"role,omitempty"`
	Content          *string         `json:"content,omitempty"`
	ReasoningContent string          `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCallDelta `json:"tool_calls,omitempty"`
}

type toolCallDelta struct {
	Index    int           `json:"index"`
	ID       string        `json:"id,omitempty"`
	Type     string        `json:"type,omitempty"`
	Function functionDelta `json:"function"`
}

type functionDelta struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

type usageJSON struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
	// PromptDetails carries cached_tokens (OpenAI's prompt cache).
	PromptDetails *promptDetails `json:"prompt_tokens_details,omitempty"`
}

type promptDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

type wholeResponse struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []wholeChoice `json:"choices"`
	Usage   *usageJSON    `json:"usage"`
}

type wholeChoice struct {
	Index        int          `json:"index"`
	Message      wholeMessage `json:"message"`
	FinishReason *string      `json:"finish_reason"`
}

type wholeMessage struct {
	Role             string          `json:"role"`
	Content          *string         `json:"content"`
	ReasoningContent string          `json:"reasoning_content,omitempty"`
	ToolCalls        []wholeToolCall `json:"tool_calls,omitempty"`
}

type wholeToolCall struct {
	ID       string        `json:"id"`
	Type     string        `json:"type"`
	Function functionDelta `json:"function"`
}
