package modelserver

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Request is a recorded chat completions request, decoded from its JSON body.
type Request struct {
	// Seq numbers the requests the server received, from 1.
	Seq       int
	Model     string
	Messages  []Message
	Tools     []Tool
	Stream    bool
	MaxTokens int // max_completion_tokens, or max_tokens when that is absent
	// ThinkingBudget is the Anthropic extended-thinking budget_tokens, 0
	// when thinking is not enabled.
	ThinkingBudget int
	// Temperature is the request's temperature, nil when absent.
	Temperature *float64
	// APIKey is the key the client sent (x-api-key, or the bearer token).
	APIKey string
	// Raw is the request body as received.
	Raw json.RawMessage

	// Received is when the request was decoded.
	Received time.Time
	// FirstDelta is when the first content chunk (thinking, text or tool
	// call) of the reply was written and flushed; zero until then.
	FirstDelta time.Time
	// Done is when the last event ("data: [DONE]") of a streamed reply was
	// flushed; zero until then and for other replies.
	Done time.Time
	// Aborted reports that the client went away before the reply finished.
	Aborted bool
}

// Message is one message of a request. Content holds the text: the string
// content, or the text parts joined with "\n" when content is an array.
type Message struct {
	Role       string
	Content    string
	Parts      []Part // set when content was an array of parts
	Name       string
	ToolCalls  []ToolCall
	ToolCallID string
}

// Part is one element of an array content: Type "text" with Text, or
// "image_url" with ImageURL (often a data: URL).
type Part struct {
	Type     string
	Text     string
	ImageURL string
}

// Tool is a function tool offered to the model. Parameters is the raw JSON
// Schema.
type Tool struct {
	Name        string
	Description string
	Parameters  json.RawMessage
}

// LastUserText returns the text of the last message with role "user", or ""
// when there is none. It is what EnqueueFor keys are matched against.
func (r Request) LastUserText() string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			return r.Messages[i].Content
		}
	}
	return ""
}

// Roles returns the roles of the messages in order.
func (r Request) Roles() []string {
	out := make([]string, len(r.Messages))
	for i, m := range r.Messages {
		out[i] = m.Role
	}
	return out
}

type wireRequest struct {
	Model               string          `json:"model"`
	Messages            []wireMessage   `json:"messages"`
	Tools               []wireTool      `json:"tools"`
	Stream              bool            `json:"stream"`
	MaxTokens           int             `json:"max_tokens"`
	MaxCompletionTokens int             `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	StreamOptions       json.RawMessage `json:"stream_options"`
	ReasoningEffort     string          `json:"reasoning_effort"`
}

type wireMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       string          `json:"name"`
	ToolCalls  []wireToolCall  `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
}

type wireToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type wireTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

type wirePart struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	ImageURL struct {
		URL string `json:"url"`
	} `json:"image_url"`
}

// decodeRequest parses a chat completions body.
func decodeRequest(body []byte) (Request, error) {
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return Request{}, fmt.Errorf("modelserver: invalid request body: %w", err)
	}
	if err := checkReasoningEffort(w.Model, w.ReasoningEffort); err != nil {
		return Request{}, err
	}
	req := Request{
		Model:       w.Model,
		Stream:      w.Stream,
		MaxTokens:   w.MaxCompletionTokens,
		Temperature: w.Temperature,
		Raw:         append(json.RawMessage(nil), body...),
	}
	if req.MaxTokens == 0 {
		req.MaxTokens = w.MaxTokens
	}
	for i, wm := range w.Messages {
		m := Message{Role: wm.Role, Name: wm.Name, ToolCallID: wm.ToolCallID}
		if err := decodeContent(wm.Content, &m); err != nil {
			return Request{}, fmt.Errorf("modelserver: message %d: %w", i, err)
		}
		for _, tc := range wm.ToolCalls {
			m.ToolCalls = append(m.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Args: tc.Function.Arguments})
		}
		req.Messages = append(req.Messages, m)
	}
	for _, wt := range w.Tools {
		req.Tools = append(req.Tools, Tool{
			Name:        wt.Function.Name,
			Description: wt.Function.Description,
			Parameters:  wt.Function.Parameters,
		})
	}
	return req, nil
}

// decodeContent accepts a string, null or an array of parts.
func decodeContent(raw json.RawMessage, m *Message) error {
	s := strings.TrimSpace(string(raw))
	switch {
	case s == "" || s == "null":
		return nil
	case strings.HasPrefix(s, `"`):
		return json.Unmarshal(raw, &m.Content)
	case strings.HasPrefix(s, "["):
		var parts []wirePart
		if err := json.Unmarshal(raw, &parts); err != nil {
			return fmt.Errorf("invalid content parts: %w", err)
		}
		var texts []string
		for _, p := range parts {
			m.Parts = append(m.Parts, Part{Type: p.Type, Text: p.Text, ImageURL: p.ImageURL.URL})
			if p.Type == "text" {
				texts = append(texts, p.Text)
			}
		}
		m.Content = strings.Join(texts, "\n")
		return nil
	default:
		return fmt.Errorf("content must be a string, null or an array, got %.20s", s)
	}
}

// checkReasoningEffort refuses a reasoning_effort the model does not take,
// as the OpenAI API does: "minimal" exists for the gpt-5 family only
// (o-series models and gpt-5.1 onwards answer 400).
func checkReasoningEffort(model, effort string) error {
	if effort != "minimal" {
		return nil
	}
	if model == "gpt-5" || strings.HasPrefix(model, "gpt-5-") {
		return nil
	}
	return fmt.Errorf("unsupported value: 'reasoning_effort' does not support 'minimal' with this model (%s). Supported values are: 'low', 'medium', and 'high'", model)
}
