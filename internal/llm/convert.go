package llm

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/transcript"
	"github.com/tmc/langchaingo/llms"
)

// flavor selects how messages are shaped for a provider's langchaingo client.
type flavor int

const (
	flavorOpenAI flavor = iota
	flavorAnthropic
	// flavorGeneric is a langchaingo client an embedder built (Wrap):
	// messages shaped as for OpenAI, text streamed through StreamingFunc.
	flavorGeneric
	// flavorGoogle is langchaingo's googleai or vertex client: messages
	// shaped as for OpenAI, text streamed through StreamingFunc.
	flavorGoogle
	// flavorBedrock is langchaingo's bedrock client: messages shaped as for
	// OpenAI but images as bytes; called without streaming (its streaming
	// path drops tool calls), the reply arriving as one delta.
	flavorBedrock
)

// plain reports whether f streams text through StreamingFunc only and may
// not report a stop reason (not the openai or anthropic client).
func (f flavor) plain() bool {
	return f == flavorGeneric || f == flavorGoogle || f == flavorBedrock
}

// toMessages converts the system prompt and transcript messages to
// langchaingo messages.
//
// User messages become text plus images (data: URLs for OpenAI-compatible
// servers, binary parts for Anthropic). Assistant messages become text plus
// tool calls; assistant messages with neither are left out. Each tool
// result becomes its own tool message with exactly one ToolCallResponse.
//
// langchaingo's Anthropic client reads only the first part of an assistant
// message, so for Anthropic an assistant message is split into one message
// for the text and one per tool call; the Anthropic API joins consecutive
// messages of the same role into one turn.
//
// With thinking set (Anthropic), an assistant message whose signed thinking
// blocks go back starts with a placeholder part the transport replaces.
func toMessages(f flavor, system string, msgs []transcript.Message, thinking *thinkingSet) ([]llms.MessageContent, error) {
	var out []llms.MessageContent
	if system != "" {
		out = append(out, llms.TextParts(llms.ChatMessageTypeSystem, system))
	}
	for i, m := range msgs {
		switch m.Role {
		case transcript.RoleUser:
			mc, err := userMessage(f, m)
			if err != nil {
				return nil, fmt.Errorf("message %d: %w", i, err)
			}
			out = append(out, mc)
		case transcript.RoleAssistant:
			am := assistantMessages(f, m)
			if thinking != nil && len(am) > 0 && sendsBack(m) {
				out = append(out, llms.TextParts(llms.ChatMessageTypeAI, thinking.add(m.ThinkingBlocks)))
			}
			out = append(out, am...)
		case transcript.RoleToolResult:
			if m.ToolCallID == "" {
				return nil, fmt.Errorf("message %d: tool result without a tool call ID", i)
			}
			out = append(out, llms.MessageContent{
				Role: llms.ChatMessageTypeTool,
				Parts: []llms.ContentPart{llms.ToolCallResponse{
					ToolCallID: m.ToolCallID,
					Name:       m.ToolName,
					Content:    m.Text,
				}},
			})
		default:
			return nil, fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
	}
	return out, nil
}

func userMessage(f flavor, m transcript.Message) (llms.MessageContent, error) {
	mc := llms.MessageContent{Role: llms.ChatMessageTypeHuman}
	if m.Text != "" || len(m.Images) == 0 {
		mc.Parts = append(mc.Parts, llms.TextPart(m.Text))
	}
	for j, img := range m.Images {
		if f == flavorAnthropic || f == flavorBedrock {
			data, err := base64.StdEncoding.DecodeString(img.Data)
			if err != nil {
				return mc, fmt.Errorf("image %d is not valid base64: %w", j, err)
			}
			mc.Parts = append(mc.Parts, llms.BinaryPart(img.MimeType, data))
			continue
		}
		mc.Parts = append(mc.Parts, llms.ImageURLPart("data:"+img.MimeType+";base64,"+img.Data))
	}
	return mc, nil
}

func assistantMessages(f flavor, m transcript.Message) []llms.MessageContent {
	var parts []llms.ContentPart
	if m.Text != "" {
		parts = append(parts, llms.TextPart(m.Text))
	}
	for _, tc := range m.ToolCalls {
		args := string(tc.Args)
		if len(tc.Args) == 0 || string(tc.Args) == "null" {
			args = "{}"
		}
		parts = append(parts, llms.ToolCall{
			ID:           tc.ID,
			Type:         "function",
			FunctionCall: &llms.FunctionCall{Name: tc.Name, Arguments: args},
		})
	}
	if len(parts) == 0 {
		return nil
	}
	if f != flavorAnthropic {
		return []llms.MessageContent{{Role: llms.ChatMessageTypeAI, Parts: parts}}
	}
	out := make([]llms.MessageContent, len(parts))
	for i, p := range parts {
		out[i] = llms.MessageContent{Role: llms.ChatMessageTypeAI, Parts: []llms.ContentPart{p}}
	}
	return out
}

// toTools converts tool specs to langchaingo function tools. A spec without
// parameters gets an empty object schema.
func toTools(specs []agent.ToolSpec) ([]llms.Tool, error) {
	out := make([]llms.Tool, 0, len(specs))
	for _, s := range specs {
		var params any
		if len(s.Parameters) > 0 {
			if err := json.Unmarshal(s.Parameters, &params); err != nil {
				return nil, fmt.Errorf("tool %q: parameters are not valid JSON: %w", s.Name, err)
			}
		}
		if params == nil {
			params = map[string]any{"type": "object", "properties": map[string]any{}}
		}
		out = append(out, llms.Tool{
			Type: "function",
			Function: &llms.FunctionDefinition{
				Name:        s.Name,
				Description: s.Description,
				Parameters:  params,
			},
		})
	}
	return out, nil
}
