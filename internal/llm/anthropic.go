package llm

// What langchaingo v0.1.14's Anthropic client cannot send or keep, done on
// the wire: prompt-caching breakpoints (it takes the system prompt as a
// string and tools without cache_control) and the signed thinking blocks of
// earlier replies (it drops thinking from assistant messages, and its
// stream parser drops the signature). The request body is edited by the
// transport; the thinking blocks are read off the response stream as it
// passes.

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/fastagent/fastagent/transcript"
)

// ephemeral is Anthropic's cache_control of a breakpoint (5 minute TTL).
var ephemeral = json.RawMessage(`{"type":"ephemeral"}`)

// thinkingSet carries the thinking blocks of earlier replies from the
// message conversion to the body edit: each assistant message with blocks
// is given a placeholder text part, which the edit replaces with them.
type thinkingSet struct {
	nonce  string
	blocks map[string][]transcript.ThinkingBlock
}

func newThinkingSet() *thinkingSet {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &thinkingSet{nonce: hex.EncodeToString(b[:]), blocks: map[string][]transcript.ThinkingBlock{}}
}

// add returns the placeholder that stands for blocks.
func (s *thinkingSet) add(blocks []transcript.ThinkingBlock) string {
	p := fmt.Sprintf("\x00fastagent-thinking-%s-%d\x00", s.nonce, len(s.blocks))
	s.blocks[p] = blocks
	return p
}

// sendsBack reports whether the thinking blocks of reply m go back to the
// model spec: only to Anthropic's API, which signed them.
func sendsBack(m transcript.Message) bool {
	return len(m.ThinkingBlocks) > 0 && strings.HasPrefix(m.Model, "anthropic/")
}

// anthropicEdit returns the edit of an Anthropic request body: the
// placeholders of thinking replaced by the signed blocks, consecutive
// messages of one role joined (as the API would; a thinking block must
// open the assistant turn), and with cache on, cache_control breakpoints on
// the system prompt, the last tool and the last block of the conversation,
// so each request reads the previous one's prefix from the cache.
func anthropicEdit(thinking *thinkingSet, cache bool) func(map[string]json.RawMessage) error {
	return func(body map[string]json.RawMessage) error {
		if raw, ok := body["messages"]; ok {
			out, err := editMessages(raw, thinking, cache)
			if err != nil {
				return err
			}
			body["messages"] = out
		}
		if !cache {
			return nil
		}
		if raw, ok := body["system"]; ok {
			var text string
			if json.Unmarshal(raw, &text) == nil && text != "" {
				b, err := json.Marshal([]map[string]any{{"type": "text", "text": text, "cache_control": ephemeral}})
				if err != nil {
					return err
				}
				body["system"] = b
			}
		}
		if raw, ok := body["tools"]; ok {
			var tools []map[string]json.RawMessage
			if json.Unmarshal(raw, &tools) == nil && len(tools) > 0 {
				tools[len(tools)-1]["cache_control"] = ephemeral
				b, err := json.Marshal(tools)
				if err != nil {
					return err
				}
				body["tools"] = b
			}
		}
		return nil
	}
}

type wireMsg struct {
	Role    string                       `json:"role"`
	Content []map[string]json.RawMessage `json:"content"`
}

func editMessages(raw json.RawMessage, thinking *thinkingSet, cache bool) (json.RawMessage, error) {
	var in []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, fmt.Errorf("llm: anthropic messages: %w", err)
	}
	var out []wireMsg
	for _, m := range in {
		var blocks []map[string]json.RawMessage
		if s := bytes.TrimSpace(m.Content); len(s) > 0 && s[0] == '"' {
			blocks = []map[string]json.RawMessage{{"type": json.RawMessage(`"text"`), "text": m.Content}}
		} else if err := json.Unmarshal(m.Content, &blocks); err != nil {
			return nil, fmt.Errorf("llm: anthropic message content: %w", err)
		}
		var kept []map[string]json.RawMessage
		for _, b := range blocks {
			var text string
			if thinking != nil && string(b["type"]) == `"text"` && json.Unmarshal(b["text"], &text) == nil {
				if tb, ok := thinking.blocks[text]; ok {
					for _, t := range tb {
						kept = append(kept, thinkingBlockJSON(t))
					}
					continue
				}
			}
			kept = append(kept, b)
		}
		if n := len(out); n > 0 && out[n-1].Role == m.Role {
			out[n-1].Content = append(out[n-1].Content, kept...)
			continue
		}
		out = append(out, wireMsg{Role: m.Role, Content: kept})
	}
	if cache && len(out) > 0 {
		last := out[len(out)-1].Content
		for i := len(last) - 1; i >= 0; i-- {
			if t := string(last[i]["type"]); t != `"thinking"` && t != `"redacted_thinking"` {
				last[i]["cache_control"] = ephemeral
				break
			}
		}
	}
	return json.Marshal(out)
}

func thinkingBlockJSON(t transcript.ThinkingBlock) map[string]json.RawMessage {
	str := func(s string) json.RawMessage { b, _ := json.Marshal(s); return b }
	if t.Redacted != "" {
		return map[string]json.RawMessage{"type": str("redacted_thinking"), "data": str(t.Redacted)}
	}
	return map[string]json.RawMessage{"type": str("thinking"), "thinking": str(t.Thinking), "signature": str(t.Signature)}
}

// thinkingWatch reads the thinking blocks of an Anthropic reply off its
// server-sent events as the client reads them: thinking text from
// thinking_delta, the signature from signature_delta (which langchaingo
// drops), redacted blocks whole from content_block_start.
type thinkingWatch struct {
	mu     sync.Mutex
	buf    []byte
	blocks map[int]*transcript.ThinkingBlock
}

func (w *thinkingWatch) write(p []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return
		}
		line := bytes.TrimRight(w.buf[:i], "\r")
		w.buf = w.buf[i+1:]
		if data, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			w.event(bytes.TrimSpace(data))
		}
	}
}

func (w *thinkingWatch) event(data []byte) {
	var ev struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
		Block struct {
			Type      string `json:"type"`
			Thinking  string `json:"thinking"`
			Signature string `json:"signature"`
			Data      string `json:"data"`
		} `json:"content_block"`
		Delta struct {
			Type      string `json:"type"`
			Thinking  string `json:"thinking"`
			Signature string `json:"signature"`
		} `json:"delta"`
	}
	if json.Unmarshal(data, &ev) != nil {
		return
	}
	if w.blocks == nil {
		w.blocks = map[int]*transcript.ThinkingBlock{}
	}
	switch ev.Type {
	case "content_block_start":
		switch ev.Block.Type {
		case "thinking":
			w.blocks[ev.Index] = &transcript.ThinkingBlock{Thinking: ev.Block.Thinking, Signature: ev.Block.Signature}
		case "redacted_thinking":
			w.blocks[ev.Index] = &transcript.ThinkingBlock{Redacted: ev.Block.Data}
		}
	case "content_block_delta":
		b := w.blocks[ev.Index]
		if b == nil {
			return
		}
		switch ev.Delta.Type {
		case "thinking_delta":
			b.Thinking += ev.Delta.Thinking
		case "signature_delta":
			b.Signature += ev.Delta.Signature
		}
	}
}

// result returns the signed blocks in reply order (unsigned ones are of no
// use to send back and are left out).
func (w *thinkingWatch) result() []transcript.ThinkingBlock {
	w.mu.Lock()
	defer w.mu.Unlock()
	idx := make([]int, 0, len(w.blocks))
	for i := range w.blocks {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var out []transcript.ThinkingBlock
	for _, i := range idx {
		if b := w.blocks[i]; b.Signature != "" || b.Redacted != "" {
			out = append(out, *b)
		}
	}
	return out
}
