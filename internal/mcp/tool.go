package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/tools"
)

// toolDef is one listed MCP tool: its name on the server and its spec for
// the model (without Deferred, which comes from the server configuration).
type toolDef struct {
	remote string
	spec   agent.ToolSpec
}

func newToolDef(t *sdk.Tool) toolDef {
	params := json.RawMessage(`{"type":"object","properties":{}}`)
	if t.InputSchema != nil {
		if b, err := json.Marshal(t.InputSchema); err == nil && !bytes.Equal(b, []byte("null")) {
			params = b
		}
	}
	desc := t.Description
	if desc == "" {
		desc = t.Title
	}
	if desc == "" && t.Annotations != nil {
		desc = t.Annotations.Title
	}
	idempotent := t.Annotations != nil && (t.Annotations.ReadOnlyHint || t.Annotations.IdempotentHint)
	return toolDef{
		remote: t.Name,
		spec: agent.ToolSpec{
			Name:        modelToolName(t.Name),
			Description: desc,
			Parameters:  params,
			Idempotent:  idempotent,
		},
	}
}

// modelToolName makes name acceptable to model providers: ASCII letters,
// digits, '_' and '-', at most 64 characters.
func modelToolName(name string) string {
	s := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' {
			return r
		}
		return '_'
	}, name)
	if len(s) > maxToolName {
		s = s[:maxToolName]
	}
	return s
}

// tool is an MCP tool as an agent.Tool.
type tool struct {
	c      *client
	remote string
	spec   agent.ToolSpec
}

// Spec implements agent.Tool.
func (t *tool) Spec() agent.ToolSpec { return t.spec }

// Run implements agent.Tool: it calls the tool on the server. The server's
// own failures are IsError results; a broken connection is retried once for
// idempotent tools and otherwise reported as an IsError result saying that
// the outcome is unknown. Cancelling ctx cancels the call.
func (t *tool) Run(ctx context.Context, call agent.ToolCall) (agent.ToolResult, error) {
	args := bytes.TrimSpace(call.Args)
	if len(args) == 0 || bytes.Equal(args, []byte("null")) {
		args = []byte("{}")
	}
	if !json.Valid(args) || args[0] != '{' {
		return agent.ToolResult{IsError: true, Content: fmt.Sprintf("The arguments of %s must be a JSON object.", t.spec.Name)}, nil
	}
	name := t.c.srv.Name
	for attempt := 1; ; attempt++ {
		cn, err := t.c.connect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return agent.ToolResult{}, fmt.Errorf("mcp: server %q: tool %s: %w", name, t.remote, ctx.Err())
			}
			return agent.ToolResult{}, fmt.Errorf("mcp: server %q is not available: %w", name, err)
		}
		res, err := t.c.call(ctx, cn, t.remote, json.RawMessage(args))
		switch {
		case err == nil:
			return toResult(res), nil
		case ctx.Err() != nil:
			return agent.ToolResult{}, fmt.Errorf("mcp: server %q: tool %s: %w", name, t.remote, ctx.Err())
		case t.c.m.ctx.Err() != nil:
			return agent.ToolResult{}, fmt.Errorf("mcp: server %q: tool %s: %w during the call; its outcome is unknown", name, t.remote, errClosed)
		case isProtocolError(err):
			return agent.ToolResult{IsError: true, Content: fmt.Sprintf("MCP server %s refused the call of %s: %v", name, t.remote, err)}, nil
		}
		// The connection is broken: the next use reconnects.
		t.c.drop(cn)
		safe := notDelivered(err)
		if attempt == 1 && (t.spec.Idempotent || safe) {
			t.c.log.Warn("MCP connection failed during a call; retrying on a new connection", "tool", t.remote, "error", err)
			continue
		}
		if !t.spec.Idempotent && !safe {
			return agent.ToolResult{IsError: true, Content: fmt.Sprintf(
				"The connection to MCP server %s broke during the call of %s (%v). The outcome is unknown: the call may or may not have taken effect.",
				name, t.remote, err)}, nil
		}
		return agent.ToolResult{}, fmt.Errorf("mcp: server %q: tool %s: %w", name, t.remote, err)
	}
}

// toResult turns an MCP result into what the model sees: text contents
// joined by newlines, other contents summarised, bounded like every other
// tool's output (the head within tools.DefaultMaxLines and
// tools.DefaultMaxBytes, with a note). Details carries the structured
// content when it fits in tools.DefaultMaxDetailsBytes; when the text was
// cut and there is no structured content, it carries the full text (capped
// the same way) as {"fullOutput": …}.
func toResult(res *sdk.CallToolResult) agent.ToolResult {
	var parts []string
	for _, c := range res.Content {
		parts = append(parts, contentText(c))
	}
	text := strings.Join(parts, "\n")
	var structured []byte
	if res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			structured = b
			if len(parts) == 0 {
				text = string(b)
			}
		}
	}
	out := agent.ToolResult{Content: text, IsError: res.IsError}
	if len(structured) > 0 && len(structured) <= tools.DefaultMaxDetailsBytes {
		out.Details = structured
	}
	tr := tools.TruncateHead(text, tools.DefaultMaxLines, tools.DefaultMaxBytes)
	if !tr.Truncated {
		return out
	}
	out.Content = strings.TrimRight(tr.Content, "\n") + fmt.Sprintf("\n\n[Output truncated to its first %d of %d lines, %s of %s (limit %d lines or %s). Ask the tool for less output.]",
		tr.OutputLines, tr.TotalLines, tools.FormatSize(tr.OutputBytes), tools.FormatSize(tr.TotalBytes), tools.DefaultMaxLines, tools.FormatSize(tools.DefaultMaxBytes))
	if out.Details == nil {
		d := struct {
			FullOutput          string `json:"fullOutput"`
			FullOutputTruncated bool   `json:"fullOutputTruncated,omitempty"`
		}{FullOutput: text}
		if len(text) > tools.DefaultMaxDetailsBytes {
			d.FullOutput = strings.ToValidUTF8(text[:tools.DefaultMaxDetailsBytes], "")
			d.FullOutputTruncated = true
		}
		if b, err := json.Marshal(d); err == nil {
			out.Details = b
		}
	}
	return out
}

func contentText(c sdk.Content) string {
	switch c := c.(type) {
	case *sdk.TextContent:
		return c.Text
	case *sdk.ImageContent:
		return fmt.Sprintf("[image: %s, %d bytes]", orUnknown(c.MIMEType), len(c.Data))
	case *sdk.AudioContent:
		return fmt.Sprintf("[audio: %s, %d bytes]", orUnknown(c.MIMEType), len(c.Data))
	case *sdk.ResourceLink:
		s := "[resource link: " + c.URI
		if c.Name != "" && c.Name != c.URI {
			s += " (" + c.Name + ")"
		}
		if c.MIMEType != "" {
			s += ", " + c.MIMEType
		}
		return s + "]"
	case *sdk.EmbeddedResource:
		r := c.Resource
		if r == nil {
			return "[resource]"
		}
		if r.Text != "" {
			return fmt.Sprintf("[resource: %s]\n%s", r.URI, r.Text)
		}
		return fmt.Sprintf("[resource: %s, %s, %d bytes]", r.URI, orUnknown(r.MIMEType), len(r.Blob))
	default:
		b, err := c.MarshalJSON()
		var wire struct {
			Type string `json:"type"`
		}
		if err == nil && json.Unmarshal(b, &wire) == nil && wire.Type != "" {
			return "[" + wire.Type + " content]"
		}
		return "[content]"
	}
}

func orUnknown(mime string) string {
	if mime == "" {
		return "unknown type"
	}
	return mime
}

// Compile-time check.
var _ agent.Tool = (*tool)(nil)
