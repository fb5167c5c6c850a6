// Package pisession reads and writes pi's JSONL session format (version 3):
// a "session" header line, then one entry per line linked by parent IDs.
// Export keeps what pi's tools read; fastagent-only facts ride along in
// extra fields pi ignores, so an exported session imports back unchanged.
package pisession

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fastagent/fastagent/transcript"
)

// Version is the pi session format version written.
const Version = 3

// MaxLine bounds one line of an imported file (8 MiB: images are inline).
const MaxLine = 8 << 20

// Header is the first line of a pi session file.
type Header struct {
	Type          string `json:"type"`
	Version       int    `json:"version"`
	ID            string `json:"id"`
	Timestamp     string `json:"timestamp"`
	Cwd           string `json:"cwd"`
	ParentSession string `json:"parentSession,omitempty"`
}

// LineError is a bad line of an imported file.
type LineError struct {
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

// customPrefix marks pi entry types kept verbatim as custom entries
// (model_change, label, …): they never enter the model context.
const customPrefix = "pi:"

// line is one entry line, both ways.
type line struct {
	Type      string  `json:"type"`
	ID        string  `json:"id"`
	ParentID  *string `json:"parentId"`
	Timestamp string  `json:"timestamp"`

	Message *message `json:"message,omitempty"`
	// compaction
	Summary          *string `json:"summary,omitempty"`
	FirstKeptEntryID string  `json:"firstKeptEntryId,omitempty"`
	TokensBefore     int     `json:"tokensBefore,omitempty"`
	// branch_summary
	FromID string `json:"fromId,omitempty"`
	// custom
	CustomType string          `json:"customType,omitempty"`
	Data       json.RawMessage `json:"data,omitempty"`
	// custom_message
	Content json.RawMessage `json:"content,omitempty"`
}

type message struct {
	Role         string          `json:"role"`
	Content      json.RawMessage `json:"content"`
	Model        string          `json:"model,omitempty"`
	Provider     string          `json:"provider,omitempty"`
	Usage        *usage          `json:"usage,omitempty"`
	StopReason   string          `json:"stopReason,omitempty"`
	ErrorMessage string          `json:"errorMessage,omitempty"`
	ToolCallID   string          `json:"toolCallId,omitempty"`
	ToolName     string          `json:"toolName,omitempty"`
	Details      json.RawMessage `json:"details,omitempty"`
	IsError      *bool           `json:"isError,omitempty"`
	Timestamp    int64           `json:"timestamp"`
	// fastagent-only, ignored by pi
	Source         string   `json:"source,omitempty"`
	AddedToolNames []string `json:"addedToolNames,omitempty"`
}

type usage struct {
	Input       int `json:"input"`
	Output      int `json:"output"`
	CacheRead   int `json:"cacheRead"`
	CacheWrite  int `json:"cacheWrite"`
	TotalTokens int `json:"totalTokens"`
}

type part struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	Thinking  string          `json:"thinking,omitempty"`
	Data      string          `json:"data,omitempty"`
	MimeType  string          `json:"mimeType,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// Encode writes a session as pi JSONL: the header, then entries in order.
func Encode(w io.Writer, h Header, entries []transcript.Entry) error {
	h.Type, h.Version = "session", Version
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(h); err != nil {
		return fmt.Errorf("pisession: header: %w", err)
	}
	for _, e := range entries {
		if e.Type == transcript.TypeCustom && e.Custom != nil && strings.HasPrefix(e.Custom.Kind, customPrefix) && json.Valid(e.Custom.Data) {
			// A pi entry kept verbatim.
			if _, err := bw.Write(append(bytes.TrimSpace(e.Custom.Data), '\n')); err != nil {
				return fmt.Errorf("pisession: entry %q: %w", e.ID, err)
			}
			continue
		}
		l, err := toLine(e)
		if err != nil {
			return fmt.Errorf("pisession: entry %q: %w", e.ID, err)
		}
		if err := enc.Encode(l); err != nil {
			return fmt.Errorf("pisession: entry %q: %w", e.ID, err)
		}
	}
	return bw.Flush()
}

func toLine(e transcript.Entry) (line, error) {
	l := line{Type: e.Type, ID: e.ID, Timestamp: e.Time.UTC().Format(time.RFC3339Nano)}
	if e.ParentID != "" {
		p := e.ParentID
		l.ParentID = &p
	}
	switch {
	case e.Type == transcript.TypeMessage && e.Message != nil:
		m, err := toMessage(*e.Message, e.Time)
		if err != nil {
			return l, err
		}
		l.Message = &m
	case e.Type == transcript.TypeCompaction && e.Compaction != nil:
		s := e.Compaction.Summary
		l.Summary, l.FirstKeptEntryID, l.TokensBefore = &s, e.Compaction.FirstKeptEntryID, e.Compaction.TokensBefore
	case e.Type == transcript.TypeBranchSummary && e.BranchSummary != nil:
		s := e.BranchSummary.Summary
		l.Summary, l.FromID = &s, e.BranchSummary.FromID
	case e.Type == transcript.TypeCustom && e.Custom != nil:
		l.CustomType, l.Data = e.Custom.Kind, e.Custom.Data
	default:
		return l, fmt.Errorf("entry type %q has no %s payload", e.Type, e.Type)
	}
	return l, nil
}

func toMessage(m transcript.Message, at time.Time) (message, error) {
	out := message{Role: m.Role, Model: m.Model, StopReason: m.StopReason, ErrorMessage: m.ErrorMessage,
		ToolCallID: m.ToolCallID, ToolName: m.ToolName, Details: m.Details, Timestamp: at.UnixMilli(),
		Source: m.Source, AddedToolNames: m.AddedToolNames}
	if p, _, ok := strings.Cut(m.Model, "/"); ok {
		out.Provider = p
	}
	if m.Usage != nil {
		out.Usage = &usage{Input: m.Usage.Input, Output: m.Usage.Output, CacheRead: m.Usage.CacheRead, CacheWrite: m.Usage.CacheWrite, TotalTokens: m.Usage.Total}
	}
	var parts []part
	switch m.Role {
	case transcript.RoleUser:
		if m.Text != "" || len(m.Images) == 0 {
			parts = append(parts, part{Type: "text", Text: m.Text})
		}
		for _, im := range m.Images {
			parts = append(parts, part{Type: "image", Data: im.Data, MimeType: im.MimeType})
		}
	case transcript.RoleAssistant:
		if m.Thinking != "" {
			parts = append(parts, part{Type: "thinking", Thinking: m.Thinking})
		}
		if m.Text != "" {
			parts = append(parts, part{Type: "text", Text: m.Text})
		}
		for _, tc := range m.ToolCalls {
			args := tc.Args
			if len(args) == 0 {
				args = json.RawMessage("{}")
			}
			parts = append(parts, part{Type: "toolCall", ID: tc.ID, Name: tc.Name, Arguments: args})
		}
	case transcript.RoleToolResult:
		parts = append(parts, part{Type: "text", Text: m.Text})
		isErr := m.IsError
		out.IsError = &isErr
	default:
		return out, fmt.Errorf("message role %q is not user, assistant or toolResult", m.Role)
	}
	if parts == nil {
		parts = []part{}
	}
	b, err := json.Marshal(parts)
	if err != nil {
		return out, err
	}
	out.Content = b
	return out, nil
}

// Decode reads a pi JSONL session: the header (optional) and its entries,
// validated line by line — each a JSON object with an id unique in the
// file, a parentId naming an earlier entry (or null), a known message role.
// The first bad line is a *LineError; nothing is returned with it.
func Decode(r io.Reader) (Header, []transcript.Entry, error) {
	var h Header
	var out []transcript.Entry
	seen := map[string]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxLine)
	n := 0
	for sc.Scan() {
		n++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		bad := func(format string, a ...any) (Header, []transcript.Entry, error) {
			return Header{}, nil, &LineError{Line: n, Err: fmt.Errorf(format, a...)}
		}
		var l line
		if err := json.Unmarshal(raw, &l); err != nil {
			return bad("not a JSON object: %v", err)
		}
		if l.Type == "session" {
			if len(out) > 0 || h.Type != "" {
				return bad("a session header must be the first line")
			}
			if err := json.Unmarshal(raw, &h); err != nil {
				return bad("session header: %v", err)
			}
			if h.Version > Version {
				return bad("session format version %d is newer than %d", h.Version, Version)
			}
			continue
		}
		if l.Type == "" {
			return bad("missing \"type\"")
		}
		if l.ID == "" {
			return bad("entry of type %q has no id", l.Type)
		}
		if seen[l.ID] {
			return bad("entry id %q appears twice", l.ID)
		}
		e, err := entryOf(l, raw, seen)
		if err != nil {
			return bad("%w", err)
		}
		seen[l.ID] = true
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return Header{}, nil, &LineError{Line: n + 1, Err: fmt.Errorf("line longer than %d bytes", MaxLine)}
		}
		return Header{}, nil, fmt.Errorf("pisession: read: %w", err)
	}
	return h, out, nil
}

// entryOf converts one entry line (raw is its text): its parent must be
// among the IDs seen on earlier lines; a type pi has but the transcript does
// not is kept verbatim as a custom entry, never in context.
func entryOf(l line, raw []byte, seen map[string]bool) (transcript.Entry, error) {
	e := transcript.Entry{ID: l.ID, Type: l.Type}
	if l.ParentID != nil && *l.ParentID != "" {
		if !seen[*l.ParentID] {
			return e, fmt.Errorf("entry %q names parent %q, which no earlier line defines", l.ID, *l.ParentID)
		}
		e.ParentID = *l.ParentID
	}
	if l.Timestamp != "" {
		t, err := time.Parse(time.RFC3339Nano, l.Timestamp)
		if err != nil {
			return e, fmt.Errorf("entry %q: timestamp %q is not RFC 3339", l.ID, l.Timestamp)
		}
		e.Time = t.UTC()
	}
	switch l.Type {
	case transcript.TypeMessage:
		if l.Message == nil {
			return e, fmt.Errorf("message entry %q has no message", l.ID)
		}
		m, err := fromMessage(*l.Message)
		if err != nil {
			return e, fmt.Errorf("message entry %q: %w", l.ID, err)
		}
		e.Message = &m
	case transcript.TypeCompaction:
		if l.Summary == nil || l.FirstKeptEntryID == "" {
			return e, fmt.Errorf("compaction entry %q needs summary and firstKeptEntryId", l.ID)
		}
		e.Compaction = &transcript.Compaction{Summary: *l.Summary, FirstKeptEntryID: l.FirstKeptEntryID, TokensBefore: l.TokensBefore}
	case transcript.TypeBranchSummary:
		if l.Summary == nil {
			return e, fmt.Errorf("branch_summary entry %q needs a summary", l.ID)
		}
		e.BranchSummary = &transcript.BranchSummary{FromID: l.FromID, Summary: *l.Summary}
	case transcript.TypeCustom:
		if l.CustomType == "" {
			return e, fmt.Errorf("custom entry %q needs customType", l.ID)
		}
		e.Custom = &transcript.Custom{Kind: l.CustomType, Data: l.Data}
	case "custom_message":
		// In context as a user message (pi).
		text, _, err := contentOf(l.Content)
		if err != nil {
			return e, fmt.Errorf("custom_message entry %q: %w", l.ID, err)
		}
		e.Type = transcript.TypeMessage
		e.Message = &transcript.Message{Role: transcript.RoleUser, Text: text, Source: "custom_message"}
	default:
		// model_change, thinking_level_change, label, session_info, …
		e.Type = transcript.TypeCustom
		e.Custom = &transcript.Custom{Kind: customPrefix + l.Type, Data: append(json.RawMessage(nil), raw...)}
	}
	return e, nil
}

func fromMessage(m message) (transcript.Message, error) {
	out := transcript.Message{Role: m.Role, Model: m.Model, StopReason: m.StopReason, ErrorMessage: m.ErrorMessage,
		ToolCallID: m.ToolCallID, ToolName: m.ToolName, Details: m.Details, Source: m.Source, AddedToolNames: m.AddedToolNames}
	if m.Model != "" && m.Provider != "" && !strings.Contains(m.Model, "/") {
		out.Model = m.Provider + "/" + m.Model
	}
	if m.Usage != nil {
		out.Usage = &transcript.Usage{Input: m.Usage.Input, Output: m.Usage.Output, CacheRead: m.Usage.CacheRead, CacheWrite: m.Usage.CacheWrite, Total: m.Usage.TotalTokens}
	}
	switch m.Role {
	case transcript.RoleUser, transcript.RoleAssistant, transcript.RoleToolResult:
	default:
		return out, fmt.Errorf("message role %q is not user, assistant or toolResult", m.Role)
	}
	text, parts, err := contentOf(m.Content)
	if err != nil {
		return out, err
	}
	if parts == nil {
		out.Text = text
	}
	var texts []string
	for _, p := range parts {
		switch p.Type {
		case "text":
			texts = append(texts, p.Text)
		case "thinking":
			out.Thinking += p.Thinking
		case "image":
			if p.Data == "" || p.MimeType == "" {
				return out, errors.New("an image part needs data and mimeType")
			}
			out.Images = append(out.Images, transcript.Image{MimeType: p.MimeType, Data: p.Data})
		case "toolCall":
			if m.Role != transcript.RoleAssistant || p.ID == "" || p.Name == "" {
				return out, errors.New("a toolCall part needs an assistant message, an id and a name")
			}
			args := p.Arguments
			if len(args) == 0 {
				args = json.RawMessage("{}")
			}
			out.ToolCalls = append(out.ToolCalls, transcript.ToolCall{ID: p.ID, Name: p.Name, Args: args})
		default:
			return out, fmt.Errorf("unknown content part type %q", p.Type)
		}
	}
	if parts != nil {
		out.Text = strings.Join(texts, "")
	}
	if m.IsError != nil {
		out.IsError = *m.IsError
	}
	if m.Role == transcript.RoleToolResult && m.ToolCallID == "" {
		return out, errors.New("a toolResult message needs toolCallId")
	}
	return out, nil
}

// contentOf reads pi content: a string, or a list of parts.
func contentOf(raw json.RawMessage) (string, []part, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", nil, fmt.Errorf("content: %w", err)
		}
		return s, nil, nil
	}
	parts := []part{}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", nil, fmt.Errorf("content must be a string or a list of parts: %w", err)
	}
	return "", parts, nil
}
