package fakeslack

import (
	"encoding/json"
	"slices"
	"strings"
	"unicode/utf8"
)

// MarkdownLimit is the most characters Slack takes in one markdown_text.
const MarkdownLimit = 12000

// ErrNotStreaming is Slack's answer to appending to (or stopping) a
// message that is not streaming.
const ErrNotStreaming = "message_not_in_streaming_state"

// Message is a message as the fake keeps it: posted, or streamed with
// chat.startStream, and edited since.
type Message struct {
	Channel string
	TS      string
	// Thread is the thread_ts it was posted under ("" at the top level).
	Thread string
	// Text is what the message shows now: the streamed markdown so far, or
	// the text (or markdown_text) of its last post or update.
	Text string
	// Stream is set when chat.startStream created it; Streaming while the
	// stream is open.
	Stream, Streaming bool
	// Appends counts chat.appendStream calls that were accepted.
	Appends int
	// Tasks are the task_update chunks received, in order.
	Tasks []Task
	// Updates counts chat.update calls on it.
	Updates int
	// Metadata is the message's metadata as posted or updated (JSON, ""
	// for none).
	Metadata string
	// Blocks are the message's blocks as last posted or updated (JSON, ""
	// for none; an update without blocks keeps them, as Slack does).
	Blocks string
	// seq orders the messages by creation.
	seq int
}

// Task is one task_update chunk of a stream.
type Task struct {
	ID     string `json:"id"`
	Title  string `json:"title"`
	Status string `json:"status"`
	// Details is the line shown under the task (a running tool's progress).
	Details string `json:"details,omitempty"`
}

// Status is one assistant.threads.setStatus call.
type Status struct {
	Channel, Thread, Status string
}

// chunk is a streaming chunk as sent in the chunks parameter.
type chunk struct {
	Type string `json:"type"`
	Text string `json:"text"`
	Task
}

// registerStream adds the streaming methods (chat.startStream,
// chat.appendStream, chat.stopStream), assistant.threads.setStatus, and
// makes chat.postMessage and chat.update keep the messages' text.
func registerStream(s *Server) {
	s.msgs = map[string]*Message{}
	post, update := s.handlers["chat.postMessage"], s.handlers["chat.update"]
	s.handlers["chat.postMessage"] = func(s *Server, c Call) map[string]any {
		out := post(s, c)
		if ts, _ := out["ts"].(string); ts != "" {
			s.mu.Lock()
			s.msgs[ts] = &Message{Channel: c.Get("channel"), TS: ts, Thread: c.Get("thread_ts"), Text: textOf(c),
				Metadata: c.Get("metadata"), Blocks: c.Get("blocks"), seq: s.nextSeqLocked()}
			s.mu.Unlock()
		}
		return out
	}
	s.handlers["chat.update"] = func(s *Server, c Call) map[string]any {
		s.mu.Lock()
		m := s.msgs[c.Get("ts")]
		if m == nil {
			s.mu.Unlock()
			return map[string]any{"ok": false, "error": "message_not_found"}
		}
		m.Text = textOf(c)
		m.Updates++
		if md := c.Get("metadata"); md != "" {
			m.Metadata = md
		}
		if _, ok := c.Params["blocks"]; ok {
			m.Blocks = c.Get("blocks")
		}
		s.mu.Unlock()
		return update(s, c)
	}
	s.handlers["chat.startStream"] = func(s *Server, c Call) map[string]any {
		if c.Get("thread_ts") == "" {
			return map[string]any{"ok": false, "error": "invalid_thread_ts"}
		}
		text, tasks, errCode := content(c)
		if errCode != "" {
			return map[string]any{"ok": false, "error": errCode}
		}
		ts := s.NextTS()
		s.mu.Lock()
		s.msgs[ts] = &Message{Channel: c.Get("channel"), TS: ts, Thread: c.Get("thread_ts"), Text: text, Tasks: tasks,
			Stream: true, Streaming: true, seq: s.nextSeqLocked()}
		s.mu.Unlock()
		return map[string]any{"channel": c.Get("channel"), "ts": ts}
	}
	streamCall := func(stop bool) Handler {
		return func(s *Server, c Call) map[string]any {
			text, tasks, errCode := content(c)
			if errCode != "" {
				return map[string]any{"ok": false, "error": errCode}
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			m := s.msgs[c.Get("ts")]
			switch {
			case m == nil:
				return map[string]any{"ok": false, "error": "message_not_found"}
			case !m.Streaming:
				return map[string]any{"ok": false, "error": ErrNotStreaming}
			}
			m.Text += text
			m.Tasks = append(m.Tasks, tasks...)
			if stop {
				m.Streaming = false
			} else {
				m.Appends++
			}
			return map[string]any{"channel": m.Channel, "ts": m.TS}
		}
	}
	// chat.delete removes a message (Deleted lists it).
	s.handlers["chat.delete"] = func(s *Server, c Call) map[string]any {
		s.mu.Lock()
		defer s.mu.Unlock()
		m := s.msgs[c.Get("ts")]
		if m == nil || m.Channel != c.Get("channel") {
			return map[string]any{"ok": false, "error": "message_not_found"}
		}
		delete(s.msgs, m.TS)
		s.deleted = append(s.deleted, *m)
		return map[string]any{"channel": m.Channel, "ts": m.TS}
	}
	s.handlers["chat.appendStream"] = streamCall(false)
	s.handlers["chat.stopStream"] = streamCall(true)
	// conversations.replies and conversations.history list the messages
	// of a thread or of the channel's top level, oldest first, with their
	// metadata when include_all_metadata is set (no paging: one page).
	listing := func(replies bool) Handler {
		return func(s *Server, c Call) map[string]any {
			s.mu.Lock()
			defer s.mu.Unlock()
			var ms []*Message
			for _, m := range s.msgs {
				if m.Channel != c.Get("channel") {
					continue
				}
				if replies && m.Thread != c.Get("ts") || !replies && m.Thread != "" {
					continue
				}
				ms = append(ms, m)
			}
			slices.SortFunc(ms, func(a, b *Message) int { return a.seq - b.seq })
			out := []map[string]any{}
			for _, m := range ms {
				o := map[string]any{"type": "message", "ts": m.TS, "text": m.Text, "bot_id": "B0BOT"}
				if m.Thread != "" {
					o["thread_ts"] = m.Thread
				}
				if m.Metadata != "" && c.Get("include_all_metadata") == "1" {
					o["metadata"] = json.RawMessage(m.Metadata)
				}
				out = append(out, o)
			}
			return map[string]any{"messages": out, "has_more": false}
		}
	}
	s.handlers["conversations.replies"] = listing(true)
	s.handlers["conversations.history"] = listing(false)
	// assistant.threads.setSuggestedPrompts and setTitle (Prompts, Titles)
	// need the thread.
	thread := func(s *Server, c Call) map[string]any {
		if c.Get("channel_id") == "" || c.Get("thread_ts") == "" {
			return map[string]any{"ok": false, "error": "invalid_arguments"}
		}
		return map[string]any{}
	}
	s.handlers["assistant.threads.setSuggestedPrompts"] = thread
	s.handlers["assistant.threads.setTitle"] = thread
	s.handlers["assistant.threads.setStatus"] = func(s *Server, c Call) map[string]any {
		if c.Get("channel_id") == "" || c.Get("thread_ts") == "" {
			return map[string]any{"ok": false, "error": "invalid_arguments"}
		}
		return map[string]any{}
	}
}

// textOf is a post's or update's text: markdown_text, else text.
func textOf(c Call) string {
	if t := c.Get("markdown_text"); t != "" {
		return t
	}
	return c.Get("text")
}

// content is a stream call's markdown text and task updates, from
// markdown_text or chunks; errCode is set for what Slack refuses.
func content(c Call) (text string, tasks []Task, errCode string) {
	text = c.Get("markdown_text")
	if raw := c.Get("chunks"); raw != "" {
		if text != "" {
			return "", nil, "invalid_arguments"
		}
		var chunks []chunk
		if err := json.Unmarshal([]byte(raw), &chunks); err != nil {
			return "", nil, "invalid_chunks"
		}
		for _, ch := range chunks {
			switch ch.Type {
			case "markdown_text":
				text += ch.Text
			case "task_update":
				tasks = append(tasks, ch.Task)
			default:
				return "", nil, "invalid_chunks"
			}
		}
	}
	if utf8.RuneCountInString(text) > MarkdownLimit {
		return "", nil, "msg_too_long"
	}
	return text, tasks, ""
}

// Message returns the message with timestamp ts.
func (s *Server) Message(ts string) (Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.msgs[ts]
	if !ok {
		return Message{}, false
	}
	out := *m
	out.Tasks = append([]Task(nil), m.Tasks...)
	return out, true
}

// Messages returns the messages posted or streamed in channel (all when
// channel is ""), oldest first.
func (s *Server) Messages(channel string) []Message {
	var out []Message
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.msgs {
		if channel == "" || m.Channel == channel {
			cp := *m
			cp.Tasks = append([]Task(nil), m.Tasks...)
			out = append(out, cp)
		}
	}
	slices.SortFunc(out, func(a, b Message) int { return strings.Compare(a.TS, b.TS) })
	return out
}

// Deleted returns the messages chat.delete removed, in order.
func (s *Server) Deleted() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.deleted...)
}

// nextSeqLocked orders a new message after every earlier one (deleted
// ones included).
func (s *Server) nextSeqLocked() int {
	s.msgSeq++
	return s.msgSeq
}

// Statuses returns the assistant.threads.setStatus calls received.
func (s *Server) Statuses() []Status {
	var out []Status
	for _, c := range s.Calls("assistant.threads.setStatus") {
		out = append(out, Status{Channel: c.Get("channel_id"), Thread: c.Get("thread_ts"), Status: c.Get("status")})
	}
	return out
}

// Prompts is one assistant.threads.setSuggestedPrompts call.
type Prompts struct {
	Channel, Thread, Title string
	Prompts                []struct{ Title, Message string }
}

// SuggestedPrompts returns the assistant.threads.setSuggestedPrompts calls
// received.
func (s *Server) SuggestedPrompts() []Prompts {
	var out []Prompts
	for _, c := range s.Calls("assistant.threads.setSuggestedPrompts") {
		p := Prompts{Channel: c.Get("channel_id"), Thread: c.Get("thread_ts"), Title: c.Get("title")}
		_ = json.Unmarshal([]byte(c.Get("prompts")), &p.Prompts)
		out = append(out, p)
	}
	return out
}

// Titles returns the assistant.threads.setTitle calls received.
func (s *Server) Titles() []Status {
	var out []Status
	for _, c := range s.Calls("assistant.threads.setTitle") {
		out = append(out, Status{Channel: c.Get("channel_id"), Thread: c.Get("thread_ts"), Status: c.Get("title")})
	}
	return out
}
