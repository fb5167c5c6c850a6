package llm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/fastagent/fastagent/transcript"
	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/llms/anthropic"
	"github.com/tmc/langchaingo/llms/openai"
)

// model is a Model backed by a langchaingo client.
type model struct {
	spec     string // "provider/model"
	provider string
	name     string // model name sent to the provider
	keyEnv   string // env var of the API key, for messages
	urlEnv   string // env var of the endpoint, for messages
	baseURL  string
	secret   string // the API key, scrubbed from messages
	// noPromptCache leaves out Anthropic's cache_control breakpoints.
	noPromptCache bool
	// opaque: the client's HTTP exchange does not go through our transport
	// (a wrapped client, Vertex AI's gRPC), so errors are classified by
	// their text.
	opaque bool

	flavor          flavor
	legacyMaxTokens bool
	reasoning       bool // the catalog says the model thinks
	maxOutput       int  // the catalog's output limit, 0 unknown
	stall           time.Duration
	client          *http.Client
	llm             llms.Model
}

// Name implements Model.
func (m *model) Name() string { return m.spec }

// Generate implements Model. It always streams, so that a silent provider
// is detected by the stall watchdog; langchaingo does not retry, and
// neither does Generate.
func (m *model) Generate(ctx context.Context, req Request, onDelta func(Delta)) (transcript.Message, error) {
	if err := ctx.Err(); err != nil {
		return transcript.Message{}, &Error{Model: m.spec, Kind: KindCanceled, Message: "call canceled: " + err.Error(), err: err}
	}
	var thinking *thinkingSet
	if m.flavor == flavorAnthropic {
		thinking = newThinkingSet()
	}
	msgs, err := toMessages(m.flavor, req.System, req.Messages, thinking)
	if err != nil {
		return transcript.Message{}, m.invalid(err)
	}
	tools, err := toTools(req.Tools)
	if err != nil {
		return transcript.Message{}, m.invalid(err)
	}

	sink := &deltaSink{fn: onDelta}
	defer sink.close()
	callCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	rec := &recorder{dog: startWatchdog(m.stall, cancel)}
	defer rec.dog.stop()
	if m.flavor.plain() {
		sink.kick = rec.dog.kick
	}
	switch {
	case m.flavor == flavorOpenAI && m.reasoning:
		// langchaingo v0.1.14 never sends reasoning_effort: the transport adds it.
		if effort := reasoningEffort(m.name, req.Thinking); effort != "" {
			rec.extra = map[string]any{"reasoning_effort": effort}
		}
	case m.flavor == flavorAnthropic:
		// The transport adds cache breakpoints, sends back signed thinking
		// blocks, and reads new ones off the stream (anthropic.go).
		rec.edit = anthropicEdit(thinking, !m.noPromptCache)
		rec.watch = &thinkingWatch{}
		// It sends thinking too: langchaingo v0.1.14 drops the
		// budget for model names it does not know (claude-haiku-4-5) and
		// always sends temperature 0, which the API refuses with thinking.
		if budget, _ := m.anthropicLimits(req); budget > 0 {
			rec.extra = map[string]any{
				"thinking":    map[string]any{"type": "enabled", "budget_tokens": budget},
				"temperature": 1,
			}
		}
	}
	callCtx = context.WithValue(callCtx, recorderKey{}, rec)

	resp, err := m.llm.GenerateContent(callCtx, msgs, m.callOptions(req, tools, sink)...)
	if err == nil && m.flavor.plain() && !sink.streamedText() {
		// A wrapped client that does not stream: its answer is one delta.
		for _, c := range resp.Choices {
			if c != nil {
				sink.emit(DeltaText, []byte(c.Content))
			}
		}
	}
	sink.close()
	if err != nil {
		if _, status, _, _ := rec.snapshot(); status == http.StatusOK && ctx.Err() == nil && context.Cause(callCtx) == nil &&
			(errors.Is(err, anthropic.ErrEmptyResponse) || errors.Is(err, openai.ErrEmptyResponse)) {
			return transcript.Message{}, m.truncated()
		}
		return transcript.Message{}, m.classify(ctx, callCtx, rec, err)
	}
	msg, stop := m.toMessage(resp)
	if rec.watch != nil {
		msg.ThinkingBlocks = rec.watch.result()
	}
	if stop == "" && m.flavor.plain() && ctx.Err() == nil && context.Cause(callCtx) == nil {
		// Not every langchaingo client reports a stop reason: a wrapped
		// client's complete response is taken as the end of the reply.
		stop = "stop"
	}
	if stop == "" {
		// A partial answer: the caller canceled, the watchdog fired, or the
		// stream just ended early.
		if ctx.Err() != nil || context.Cause(callCtx) != nil {
			return transcript.Message{}, m.classify(ctx, callCtx, rec, context.Cause(callCtx))
		}
		return transcript.Message{}, m.truncated()
	}
	msg.StopReason, msg.ErrorMessage = mapStop(stop, len(msg.ToolCalls) > 0)
	return msg, nil
}

func (m *model) callOptions(req Request, tools []llms.Tool, sink *deltaSink) []llms.CallOption {
	var opts []llms.CallOption
	if len(tools) > 0 {
		opts = append(opts, llms.WithTools(tools))
	}
	maxTokens := req.MaxTokens
	if m.flavor == flavorAnthropic {
		_, maxTokens = m.anthropicLimits(req)
	}
	if maxTokens > 0 {
		opts = append(opts, llms.WithMaxTokens(maxTokens))
	}
	if m.legacyMaxTokens {
		opts = append(opts, openai.WithLegacyMaxTokensField())
	}
	switch m.flavor {
	case flavorGeneric, flavorGoogle:
		opts = append(opts, llms.WithStreamingFunc(sink.textStream))
	case flavorBedrock:
		// Not streamed: langchaingo's bedrock stream carries text only.
	case flavorAnthropic:
		// langchaingo's Anthropic client streams only when StreamingFunc is
		// set; thinking deltas go to StreamingReasoningFunc.
		opts = append(opts, llms.WithStreamingFunc(sink.textStream), llms.WithStreamingReasoningFunc(sink.thinkingStream))
	default:
		// Setting only the reasoning func: with both, the openai client
		// would deliver every content chunk twice.
		opts = append(opts, llms.WithStreamingReasoningFunc(sink.openAIStream))
	}
	return opts
}

// anthropicLimits returns the extended-thinking budget (0: thinking off)
// and max_tokens of an Anthropic call. Thinking is on for reasoning models
// at a level above off. A step that answers tool results thinks only when
// the assistant message it continues kept its signed thinking blocks: the
// API then requires them at the start of that assistant turn, and a step
// without thinking is always accepted (a reply recorded before blocks
// were kept, or made by another model of the fallback chain). max_tokens must exceed the budget and leave room for
// the answer; the model's output limit caps both.
func (m *model) anthropicLimits(req Request) (budget, maxTokens int) {
	maxTokens = req.MaxTokens
	if maxTokens == 0 {
		maxTokens = defaultAnthropicMaxTokens
	}
	budget = ThinkingBudget(req.Thinking)
	if budget == 0 || !m.reasoning || (answersToolResults(req.Messages) && !continuesThinking(req.Messages)) {
		return 0, maxTokens
	}
	maxTokens = max(maxTokens, budget+defaultAnthropicMaxTokens)
	if m.maxOutput > 0 && maxTokens > m.maxOutput {
		maxTokens = m.maxOutput
		budget = min(budget, maxTokens/2)
	}
	return budget, maxTokens
}

// answersToolResults reports whether msgs end with tool results (possibly
// followed by user messages, such as steering) after the last assistant
// message: the call continues an assistant turn that used tools.
func answersToolResults(msgs []transcript.Message) bool {
	for i := len(msgs) - 1; i >= 0; i-- {
		switch msgs[i].Role {
		case transcript.RoleToolResult:
			return true
		case transcript.RoleAssistant:
			return false
		}
	}
	return false
}

// continuesThinking reports whether the last assistant message of msgs
// has signed thinking blocks that go back to the API.
func continuesThinking(msgs []transcript.Message) bool {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == transcript.RoleAssistant {
			return sendsBack(msgs[i])
		}
	}
	return false
}

func (m *model) invalid(err error) *Error {
	return &Error{Model: m.spec, Kind: KindInvalidRequest, Message: "could not build the request: " + m.scrub(err.Error()), err: err}
}

func (m *model) truncated() *Error {
	return &Error{Model: m.spec, Kind: KindTruncated, Status: http.StatusOK, Retryable: true,
		Message: "the model stream ended without a finish reason (the reply is incomplete)"}
}

// toMessage folds the response choices into one assistant message (the
// Anthropic client returns one choice per content block) and returns the
// provider's raw stop reason, "" when there was none.
func (m *model) toMessage(resp *llms.ContentResponse) (transcript.Message, string) {
	msg := transcript.Message{Role: transcript.RoleAssistant, Model: m.spec}
	var stop string
	var u transcript.Usage
	for _, c := range resp.Choices {
		if c == nil {
			continue
		}
		msg.Text += c.Content
		thinking := c.ReasoningContent
		if _, ok := c.GenerationInfo["ThinkingSignature"]; ok && thinking == "" {
			thinking, _ = c.GenerationInfo["ThinkingContent"].(string) // an Anthropic thinking block
		}
		msg.Thinking += thinking
		for _, tc := range c.ToolCalls {
			if t, ok := toolCall(tc); ok {
				msg.ToolCalls = append(msg.ToolCalls, t)
			}
		}
		if stop == "" {
			stop = c.StopReason
		}
		// PromptTokens/CompletionTokens: openai, googleai; InputTokens/
		// OutputTokens: anthropic; input_tokens/output_tokens: bedrock.
		u.Input = max(u.Input, intInfo(c.GenerationInfo, "PromptTokens"), intInfo(c.GenerationInfo, "InputTokens"),
			intInfo(c.GenerationInfo, "input_tokens"))
		u.Output = max(u.Output, intInfo(c.GenerationInfo, "CompletionTokens"), intInfo(c.GenerationInfo, "OutputTokens"),
			intInfo(c.GenerationInfo, "output_tokens"))
		u.Total = max(u.Total, intInfo(c.GenerationInfo, "TotalTokens"))
		u.CacheRead = max(u.CacheRead, intInfo(c.GenerationInfo, "PromptCachedTokens"), intInfo(c.GenerationInfo, "CacheReadInputTokens"))
		u.CacheWrite = max(u.CacheWrite, intInfo(c.GenerationInfo, "CacheCreationInputTokens"))
	}
	if u.Total == 0 {
		u.Total = u.Input + u.Output
	}
	if u != (transcript.Usage{}) {
		msg.Usage = &u
	}
	return msg, stop
}

// toolCall converts one langchaingo tool call. Entries with neither ID, name
// nor arguments are artefacts of langchaingo's index-less delta merging and
// are dropped.
func toolCall(tc llms.ToolCall) (transcript.ToolCall, bool) {
	if tc.FunctionCall == nil {
		return transcript.ToolCall{}, false
	}
	args := strings.TrimSpace(tc.FunctionCall.Arguments)
	if tc.ID == "" && tc.FunctionCall.Name == "" && args == "" {
		return transcript.ToolCall{}, false
	}
	id := tc.ID
	if id == "" {
		id = newCallID()
	}
	return transcript.ToolCall{ID: id, Name: tc.FunctionCall.Name, Args: rawArgs(args)}, true
}

// rawArgs keeps valid JSON as is, makes "" an empty object, and turns
// anything else (a model's broken JSON) into a JSON string so the transcript
// stays valid JSON and the tool reports the bad arguments.
func rawArgs(args string) json.RawMessage {
	if args == "" {
		return json.RawMessage(`{}`)
	}
	if json.Valid([]byte(args)) {
		return json.RawMessage(args)
	}
	b, _ := json.Marshal(args)
	return b
}

func newCallID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "call_" + hex.EncodeToString(b[:])
}

func intInfo(info map[string]any, key string) int {
	switch v := info[key].(type) {
	case int:
		return v
	case int32:
		return int(v)
	case int64:
		return int(v)
	case float64:
		return int(v)
	}
	return 0
}

// mapStop maps a provider stop reason to a transcript stop reason, with an
// error message for replies the provider cut off itself.
func mapStop(reason string, hasToolCalls bool) (stop, errMsg string) {
	switch strings.ToLower(reason) {
	case "tool_calls", "function_call", "tool_use":
		return transcript.StopToolUse, ""
	case "length", "max_tokens", "model_context_window_exceeded", "finishreasonmaxtokens":
		return transcript.StopLength, ""
	case "content_filter", "refusal", "finishreasonsafety", "finishreasonrecitation", "finishreasonblocklist",
		"finishreasonprohibitedcontent", "finishreasonspii":
		return transcript.StopError, "the model provider stopped the reply (" + reason + ")"
	}
	// "stop", "end_turn", "stop_sequence" and anything new. Some compatible
	// servers say "stop" after tool calls.
	if hasToolCalls {
		return transcript.StopToolUse, ""
	}
	return transcript.StopEnd, ""
}
