package modelserver

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Shape is the wire protocol a Server speaks. Scripts, request recording and
// faults are the same for every shape, so a test can swap the provider.
type Shape string

const (
	// OpenAI is the chat completions API: POST /v1/chat/completions.
	OpenAI Shape = "openai"
	// Anthropic is the Messages API: POST /v1/messages, streamed as
	// message_start, content_block_start/delta/stop, message_delta and
	// message_stop events.
	Anthropic Shape = "anthropic"
)

// NewAnthropic returns a server speaking the Anthropic Messages API on a free
// port of 127.0.0.1; its URL is the ANTHROPIC_BASE_URL to use.
func NewAnthropic() *Server { return NewFor(Anthropic) }

// NewFor returns a server of the given shape listening on a free port of
// 127.0.0.1; an unknown shape panics.
func NewFor(shape Shape) *Server {
	s := New()
	switch shape {
	case OpenAI, "":
	case Anthropic:
		s.shape = Anthropic
	default:
		s.Close()
		panic(fmt.Sprintf("modelserver: unknown shape %q", shape))
	}
	return s
}

// Shape returns the wire protocol the server speaks.
func (s *Server) Shape() Shape {
	if s.shape == "" {
		return OpenAI
	}
	return s.shape
}

// Overloaded is Anthropic's answer when its servers are overloaded: HTTP 529
// with an overloaded_error body (the OpenAI shape sends a 529 server_error).
func Overloaded() Reply {
	return Reply{Status: 529, Message: "Overloaded"}
}

// Wire shapes of Anthropic requests.

type anthRequest struct {
	Model       string          `json:"model"`
	Messages    []anthMessage   `json:"messages"`
	System      json.RawMessage `json:"system"`
	MaxTokens   *int            `json:"max_tokens"`
	Stream      bool            `json:"stream"`
	Temperature *float64        `json:"temperature"`
	Tools       []anthTool      `json:"tools"`
	Thinking    *struct {
		Type         string `json:"type"`
		BudgetTokens int    `json:"budget_tokens"`
	} `json:"thinking"`
}

type anthMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type anthBlock struct {
	Type   string `json:"type"`
	Text   string `json:"text"`
	Source *struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
	} `json:"source"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	Thinking  string          `json:"thinking"`
}

type anthTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// turn is the blocks of consecutive messages of one role, which the
// Anthropic API joins into one turn.
type turn struct {
	role   string
	index  int // of its first message
	blocks []anthBlock
}

// decodeAnthropic parses and validates a Messages API body the way the API
// does, and records it in the shape-neutral Request form: the system prompt
// as a "system" message, each tool_result block as a "tool" message, and
// consecutive assistant messages joined into one with text and tool calls.
func decodeAnthropic(body []byte) (Request, error) {
	var w anthRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return Request{}, fmt.Errorf("invalid request body: %w", err)
	}
	if w.Model == "" {
		return Request{}, fmt.Errorf("model: Field required")
	}
	if w.MaxTokens == nil {
		return Request{}, fmt.Errorf("max_tokens: Field required")
	}
	if *w.MaxTokens < 1 {
		return Request{}, fmt.Errorf("max_tokens: Input should be greater than or equal to 1")
	}
	if len(w.Messages) == 0 {
		return Request{}, fmt.Errorf("messages: at least one message is required")
	}
	req := Request{Model: w.Model, Stream: w.Stream, MaxTokens: *w.MaxTokens, Temperature: w.Temperature,
		Raw: append(json.RawMessage(nil), body...)}
	if t := w.Thinking; t != nil && t.Type == "enabled" {
		switch {
		case t.BudgetTokens < 1024:
			return Request{}, fmt.Errorf("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
		case *w.MaxTokens <= t.BudgetTokens:
			return Request{}, fmt.Errorf("`max_tokens` must be greater than `thinking.budget_tokens`")
		case w.Temperature != nil && *w.Temperature != 1:
			return Request{}, fmt.Errorf("`temperature` may only be set to 1 when thinking is enabled")
		}
		req.ThinkingBudget = t.BudgetTokens
	}
	system, err := systemText(w.System)
	if err != nil {
		return Request{}, err
	}
	if system != "" {
		req.Messages = append(req.Messages, Message{Role: "system", Content: system})
	}
	var turns []turn
	for i, m := range w.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			return Request{}, fmt.Errorf("messages.%d.role: Input should be 'user' or 'assistant'", i)
		}
		if i == 0 && m.Role != "user" {
			return Request{}, fmt.Errorf("messages: first message must use the \"user\" role")
		}
		blocks, err := blocksOf(m.Content)
		if err != nil {
			return Request{}, fmt.Errorf("messages.%d.content: %w", i, err)
		}
		if len(turns) == 0 || turns[len(turns)-1].role != m.Role {
			turns = append(turns, turn{role: m.Role, index: i})
		}
		turns[len(turns)-1].blocks = append(turns[len(turns)-1].blocks, blocks...)
	}
	if err := checkToolPairs(turns, req.ThinkingBudget > 0); err != nil {
		return Request{}, err
	}
	for _, t := range turns {
		req.Messages = append(req.Messages, normalize(t)...)
	}
	for _, wt := range w.Tools {
		req.Tools = append(req.Tools, Tool{Name: wt.Name, Description: wt.Description, Parameters: wt.InputSchema})
	}
	return req, nil
}

// systemText accepts the system prompt as a string or as text blocks.
func systemText(raw json.RawMessage) (string, error) {
	blocks, err := blocksOf(raw)
	if err != nil {
		return "", fmt.Errorf("system: %w", err)
	}
	var texts []string
	for _, b := range blocks {
		texts = append(texts, b.Text)
	}
	return strings.Join(texts, "\n"), nil
}

// blocksOf reads a content field: a string (one text block), null, or an
// array of blocks.
func blocksOf(raw json.RawMessage) ([]anthBlock, error) {
	s := strings.TrimSpace(string(raw))
	switch {
	case s == "" || s == "null":
		return nil, nil
	case strings.HasPrefix(s, `"`):
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return nil, err
		}
		return []anthBlock{{Type: "text", Text: text}}, nil
	case strings.HasPrefix(s, "["):
		var blocks []anthBlock
		if err := json.Unmarshal(raw, &blocks); err != nil {
			return nil, fmt.Errorf("invalid content blocks: %w", err)
		}
		return blocks, nil
	}
	return nil, fmt.Errorf("content must be a string or an array of blocks, got %.20s", s)
}

// checkToolPairs enforces what the API enforces about tool use: every
// tool_result answers a tool_use of the assistant turn right before it,
// every tool_use of a turn that is not the last is answered by the next
// turn, and with thinking enabled an assistant turn answered by tool
// results must start with a thinking block.
func checkToolPairs(turns []turn, thinking bool) error {
	for i, t := range turns {
		if t.role != "user" {
			continue
		}
		asked := map[string]bool{}
		var prev *turn
		if i > 0 {
			prev = &turns[i-1]
			for _, b := range prev.blocks {
				if b.Type == "tool_use" {
					asked[b.ID] = true
				}
			}
		}
		answered := map[string]bool{}
		for _, b := range t.blocks {
			if b.Type != "tool_result" {
				continue
			}
			if !asked[b.ToolUseID] {
				return fmt.Errorf("messages.%d.content: unexpected `tool_use_id` found in `tool_result` blocks: %s. "+
					"Each `tool_result` block must have a corresponding `tool_use` block in the previous message", t.index, b.ToolUseID)
			}
			answered[b.ToolUseID] = true
		}
		for id := range asked {
			if !answered[id] {
				return fmt.Errorf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. "+
					"Each `tool_use` block must have a corresponding `tool_result` block in the next message", prev.index, id)
			}
		}
		if thinking && i == len(turns)-1 && len(answered) > 0 && len(prev.blocks) > 0 && prev.blocks[0].Type != "thinking" &&
			prev.blocks[0].Type != "redacted_thinking" {
			return fmt.Errorf("messages.%d.content.0.type: Expected `thinking` or `redacted_thinking`, but found `%s`. "+
				"When `thinking` is enabled, a final `assistant` message must start with a thinking block", prev.index, prev.blocks[0].Type)
		}
	}
	return nil
}

// normalize turns one joined turn into Request messages.
func normalize(t turn) []Message {
	if t.role == "assistant" {
		m := Message{Role: "assistant"}
		var texts []string
		for _, b := range t.blocks {
			switch b.Type {
			case "text":
				texts = append(texts, b.Text)
			case "tool_use":
				m.ToolCalls = append(m.ToolCalls, ToolCall{ID: b.ID, Name: b.Name, Args: compactJSON(b.Input)})
			}
		}
		m.Content = strings.Join(texts, "\n")
		return []Message{m}
	}
	var out []Message
	user := Message{Role: "user"}
	var texts []string
	for _, b := range t.blocks {
		switch b.Type {
		case "tool_result":
			content, _ := blocksOf(b.Content)
			var parts []string
			for _, c := range content {
				parts = append(parts, c.Text)
			}
			out = append(out, Message{Role: "tool", ToolCallID: b.ToolUseID, Content: strings.Join(parts, "\n")})
		case "text":
			texts = append(texts, b.Text)
			user.Parts = append(user.Parts, Part{Type: "text", Text: b.Text})
		case "image":
			url := ""
			if b.Source != nil {
				url = "data:" + b.Source.MediaType + ";base64," + b.Source.Data
			}
			user.Parts = append(user.Parts, Part{Type: "image_url", ImageURL: url})
		}
	}
	if len(user.Parts) > 0 {
		user.Content = strings.Join(texts, "\n")
		if len(user.Parts) == 1 && user.Parts[0].Type == "text" {
			user.Parts = nil // a plain string or a single text block
		}
		out = append(out, user)
	}
	return out
}

func compactJSON(raw json.RawMessage) string {
	if len(bytes.TrimSpace(raw)) == 0 {
		return "{}"
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// Wire shapes of Anthropic replies.

type anthEvent struct {
	typ     string
	data    any
	content bool // a delta: counts for DisconnectAfter and FirstDelta
	hangs   bool // Hang blocks before this event
	paced   bool // ChunkDelay is slept before it
}

type anthUsage struct {
	InputTokens   int `json:"input_tokens"`
	OutputTokens  int `json:"output_tokens"`
	CacheCreation int `json:"cache_creation_input_tokens"`
	CacheRead     int `json:"cache_read_input_tokens"`
}

type anthMessageOut struct {
	ID           string           `json:"id"`
	Type         string           `json:"type"`
	Role         string           `json:"role"`
	Model        string           `json:"model"`
	Content      []map[string]any `json:"content"`
	StopReason   *string          `json:"stop_reason"`
	StopSequence *string          `json:"stop_sequence"`
	Usage        anthUsage        `json:"usage"`
}

// anthStopReason maps the scripted finish reason (OpenAI words or
// Anthropic's own) to Anthropic's stop_reason; nil for NoFinish.
func (x *exchange) anthStopReason() *string {
	fr := x.finishReason()
	if fr == nil {
		return nil
	}
	sr := *fr
	switch sr {
	case "stop":
		sr = "end_turn"
	case "tool_calls":
		sr = "tool_use"
	case "length":
		sr = "max_tokens"
	case "content_filter":
		sr = "refusal"
	}
	return &sr
}

func (x *exchange) anthUsage() anthUsage {
	u := x.usage()
	out := anthUsage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens}
	if su := x.reply.Usage; su != nil {
		out.CacheRead, out.CacheCreation = su.CachedTokens, su.CacheWriteTokens
	} else if c := x.cacheUsage; c != nil {
		out.InputTokens, out.CacheRead, out.CacheCreation = c.input, c.read, c.write
	}
	return out
}

func (x *exchange) anthID() string { return fmt.Sprintf("msg_%04d", x.req.Seq) }

// anthEvents builds the events of a streamed Anthropic reply.
func (x *exchange) anthEvents() []anthEvent {
	rp := x.reply
	u := x.anthUsage()
	start := u
	start.OutputTokens = 1
	out := []anthEvent{
		{typ: "message_start", data: map[string]any{"type": "message_start", "message": anthMessageOut{
			ID: x.anthID(), Type: "message", Role: "assistant", Model: x.req.Model,
			Content: []map[string]any{}, Usage: start,
		}}},
		{typ: "ping", data: map[string]any{"type": "ping"}},
	}
	index := 0
	block := func(start map[string]any, deltas []map[string]any) {
		out = append(out, anthEvent{typ: "content_block_start",
			data: map[string]any{"type": "content_block_start", "index": index, "content_block": start}})
		for _, d := range deltas {
			out = append(out, anthEvent{typ: "content_block_delta", content: d["type"] != "signature_delta", paced: true,
				data: map[string]any{"type": "content_block_delta", "index": index, "delta": d}})
		}
		out = append(out, anthEvent{typ: "content_block_stop", data: map[string]any{"type": "content_block_stop", "index": index}})
		index++
	}
	if len(rp.Thinking) > 0 {
		var ds []map[string]any
		for _, t := range rp.Thinking {
			ds = append(ds, map[string]any{"type": "thinking_delta", "thinking": t})
		}
		ds = append(ds, map[string]any{"type": "signature_delta", "signature": fmt.Sprintf("sig-%d", x.req.Seq)})
		block(map[string]any{"type": "thinking", "thinking": "", "signature": ""}, ds)
	}
	if len(rp.Text) > 0 {
		var ds []map[string]any
		for _, t := range rp.Text {
			ds = append(ds, map[string]any{"type": "text_delta", "text": t})
		}
		block(map[string]any{"type": "text", "text": ""}, ds)
	}
	// Hang stops before the first event after the thinking and text deltas.
	hangAt := len(out) - 1
	if len(rp.Text) == 0 && len(rp.Thinking) == 0 {
		hangAt = len(out)
	}
	for _, tc := range rp.ToolCalls {
		var ds []map[string]any
		for _, piece := range splitArgs(args(tc)) {
			ds = append(ds, map[string]any{"type": "input_json_delta", "partial_json": piece})
		}
		block(map[string]any{"type": "tool_use", "id": tc.ID, "name": tc.Name, "input": map[string]any{}}, ds)
	}
	if rp.StreamError != "" {
		out = append(out, anthEvent{typ: "error", paced: true, data: map[string]any{"type": "error",
			"error": map[string]any{"type": rp.StreamError, "message": streamErrorMessage(rp)}}})
	} else {
		out = append(out, anthEvent{typ: "message_delta", paced: true, data: map[string]any{"type": "message_delta",
			"delta": map[string]any{"stop_reason": x.anthStopReason(), "stop_sequence": nil}, "usage": u}})
		if x.anthStopReason() != nil {
			out = append(out, anthEvent{typ: "message_stop", data: map[string]any{"type": "message_stop"}})
		}
	}
	if hangAt < len(out) {
		out[hangAt].hangs = true
	}
	return out
}

func streamErrorMessage(rp Reply) string {
	if rp.Message != "" {
		return rp.Message
	}
	return "Overloaded"
}

// anthStream writes the reply as Anthropic server-sent events.
func (x *exchange) anthStream() {
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
	for i, ev := range x.anthEvents() {
		if ev.content && x.reply.DisconnectAfter > 0 && sent >= x.reply.DisconnectAfter {
			x.disconnect()
			return
		}
		if ev.hangs && x.reply.Hang {
			x.hang()
			return
		}
		if i == 1 && !x.hold() {
			return
		}
		delay := x.reply.ChunkDelay
		if sent == 0 && ev.content && x.reply.FirstDelay > 0 {
			delay = x.reply.FirstDelay
		}
		if (ev.paced || delay != x.reply.ChunkDelay) && !x.sleep(delay) {
			return
		}
		b, err := json.Marshal(ev.data)
		if err != nil {
			panic(fmt.Sprintf("modelserver: encoding event: %v", err))
		}
		if !x.write(rc, "event: "+ev.typ+"\ndata: "+string(b)+"\n\n") {
			return
		}
		if ev.content {
			sent++
			if sent == 1 {
				x.s.markFirstDelta(x.rec, time.Now())
			}
		}
		if ev.typ == "message_stop" {
			x.s.markDone(x.rec, time.Now())
		}
	}
}

// anthWhole writes a non-streaming Anthropic reply.
func (x *exchange) anthWhole() {
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
		writeAnthropicError(x.w, http.StatusInternalServerError, rp.StreamError, streamErrorMessage(rp))
		return
	}
	msg := anthMessageOut{ID: x.anthID(), Type: "message", Role: "assistant", Model: x.req.Model,
		Content: []map[string]any{}, StopReason: x.anthStopReason(), Usage: x.anthUsage()}
	if len(rp.Thinking) > 0 {
		msg.Content = append(msg.Content, map[string]any{"type": "thinking",
			"thinking": strings.Join(rp.Thinking, ""), "signature": fmt.Sprintf("sig-%d", x.req.Seq)})
	}
	if len(rp.Text) > 0 {
		msg.Content = append(msg.Content, map[string]any{"type": "text", "text": strings.Join(rp.Text, "")})
	}
	for _, tc := range rp.ToolCalls {
		msg.Content = append(msg.Content, map[string]any{"type": "tool_use", "id": tc.ID, "name": tc.Name,
			"input": json.RawMessage(args(tc))})
	}
	x.w.Header().Set("Content-Type", "application/json")
	b, err := json.Marshal(msg)
	if err != nil {
		panic(fmt.Sprintf("modelserver: encoding reply: %v", err))
	}
	if _, err := x.w.Write(b); err != nil {
		x.s.markAborted(x.rec)
		return
	}
	x.s.markFirstDelta(x.rec, time.Now())
}

// anthError writes the scripted error reply in Anthropic's shape; OpenAI's
// context_length_exceeded becomes Anthropic's "prompt is too long".
func (x *exchange) anthError() {
	rp := x.reply
	msg := rp.Message
	if rp.ErrorCode == "context_length_exceeded" {
		msg = fmt.Sprintf("prompt is too long: %d tokens > %d maximum", rp.overflowGot, rp.overflowWindow)
	}
	writeAnthropicError(x.w, rp.Status, "", msg)
}

// writeAnthropicError sends an Anthropic error body.
func writeAnthropicError(w http.ResponseWriter, status int, typ, msg string) {
	if msg == "" {
		msg = http.StatusText(status)
		if msg == "" {
			msg = "error"
		}
	}
	if typ == "" {
		typ = anthErrorType(status)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
	_, _ = w.Write(b)
}

func anthErrorType(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// PromptCache makes the Anthropic shape account for cache_control
// breakpoints the way the API does when a reply's usage is not scripted:
// the prompt is the tools, then the system blocks, then the message blocks
// (role and block, cache_control left out); a breakpoint whose prefix holds
// at least minTokens is written to the cache; a request reads the longest
// cached prefix found at its breakpoints or up to 20 blocks before each.
// input_tokens are then the tokens after the last breakpoint,
// cache_creation_input_tokens those written, cache_read_input_tokens those
// read. Tokens are estimated as bytes/4 of each block's JSON.
func (s *Server) PromptCache(minTokens int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cache = &promptCache{min: minTokens, prefixes: map[[32]byte]bool{}}
}

// promptCache is the server's cache of prefixes, by their hash.
type promptCache struct {
	min      int
	prefixes map[[32]byte]bool
}

// cacheUsage is one request's token accounting.
type cacheUsage struct{ input, read, write int }

// account accounts for a request body and updates the cache.
func (c *promptCache) account(body []byte) cacheUsage {
	var w struct {
		System   json.RawMessage   `json:"system"`
		Tools    []json.RawMessage `json:"tools"`
		Messages []anthMessage     `json:"messages"`
	}
	_ = json.Unmarshal(body, &w)
	var blocks [][]byte
	var marks []bool
	add := func(prefix string, raw json.RawMessage) {
		var b map[string]json.RawMessage
		if json.Unmarshal(raw, &b) != nil {
			b = map[string]json.RawMessage{"text": raw}
		}
		_, marked := b["cache_control"]
		delete(b, "cache_control")
		enc, _ := json.Marshal(b)
		blocks = append(blocks, append([]byte(prefix), enc...))
		marks = append(marks, marked)
	}
	for _, t := range w.Tools {
		add("tool:", t)
	}
	rawBlocks := func(raw json.RawMessage) []json.RawMessage {
		var arr []json.RawMessage
		if json.Unmarshal(raw, &arr) == nil {
			return arr
		}
		if len(bytes.TrimSpace(raw)) > 0 && string(bytes.TrimSpace(raw)) != "null" {
			b, _ := json.Marshal(map[string]json.RawMessage{"type": json.RawMessage(`"text"`), "text": raw})
			return []json.RawMessage{b}
		}
		return nil
	}
	for _, b := range rawBlocks(w.System) {
		add("system:", b)
	}
	for _, m := range w.Messages {
		for _, b := range rawBlocks(m.Content) {
			add(m.Role+":", b)
		}
	}
	hashes := make([][32]byte, len(blocks))
	cum := make([]int, len(blocks))
	var h [32]byte
	total := 0
	for i, b := range blocks {
		h = sha256.Sum256(append(h[:], b...))
		hashes[i] = h
		total += len(b)/4 + 1
		cum[i] = total
	}
	read, last := 0, -1
	for i, marked := range marks {
		if !marked {
			continue
		}
		last = i
		for j := i; j >= 0 && j >= i-20; j-- {
			if c.prefixes[hashes[j]] && cum[j] > read {
				read = cum[j]
			}
		}
	}
	u := cacheUsage{read: read, input: total - read}
	if last >= 0 {
		for i, marked := range marks {
			if marked && cum[i] >= c.min {
				c.prefixes[hashes[i]] = true
			}
		}
		if cum[last] >= c.min && cum[last] > read {
			u.write = cum[last] - read
		}
		u.input = total - read - u.write
	}
	return u
}
