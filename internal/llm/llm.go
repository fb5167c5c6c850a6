// Package llm gives the runtime streaming access to chat models through
// langchaingo: OpenAI and OpenAI-compatible hosts (Azure OpenAI, Mistral,
// OpenRouter, vLLM, LM Studio, any other), Anthropic, Gemini, Vertex AI,
// Amazon Bedrock and Ollama. A Model turns a transcript into one assistant message, reporting
// text and thinking deltas as they arrive, and every failure as an *Error
// that says whether retrying can help.
package llm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/models"
	"github.com/fastagent/fastagent/transcript"
	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/llms/anthropic"
	"github.com/tmc/langchaingo/llms/openai"
)

// Model generates assistant messages. Implementations are safe for
// concurrent use.
type Model interface {
	// Name returns the "provider/model" spec the model was created from.
	Name() string
	// Generate streams one assistant reply to req. onDelta (may be nil) is
	// called with text and thinking deltas in order, never after Generate
	// returns, and must not block for long. Every error is an *Error.
	Generate(ctx context.Context, req Request, onDelta func(Delta)) (transcript.Message, error)
}

// Request is the input of one model call.
type Request struct {
	System    string
	Messages  []transcript.Message
	Tools     []agent.ToolSpec
	MaxTokens int // 0 = provider default
	// Thinking is the thinking level (off, minimal, low, medium, high; ""
	// = off). It reaches reasoning models only (models.Info.Reasoning):
	// OpenAI as reasoning_effort, Anthropic as an extended-thinking budget
	// (ThinkingBudget).
	Thinking string
}

// Thinking levels.
const (
	ThinkingOff     = "off"
	ThinkingMinimal = "minimal"
	ThinkingLow     = "low"
	ThinkingMedium  = "medium"
	ThinkingHigh    = "high"
)

// ThinkingBudget is the Anthropic extended-thinking budget (tokens) of a
// level; 0 means thinking stays off.
func ThinkingBudget(level string) int {
	switch level {
	case ThinkingMinimal:
		return 1024
	case ThinkingLow:
		return 2048
	case ThinkingMedium:
		return 8192
	case ThinkingHigh:
		return 24576
	}
	return 0
}

// reasoningEffort is the OpenAI reasoning_effort of a level for the model
// named name; "" leaves the provider's default (OpenAI reasoning models
// cannot switch thinking off). "minimal" exists for the gpt-5 family only:
// o-series models and gpt-5.1 onwards refuse it (400 on every turn), so
// they get "low", the least thinking they take.
func reasoningEffort(name, level string) string {
	switch level {
	case ThinkingMinimal:
		if name == "gpt-5" || strings.HasPrefix(name, "gpt-5-") {
			return level
		}
		return ThinkingLow
	case ThinkingLow, ThinkingMedium, ThinkingHigh:
		return level
	}
	return ""
}

// Delta kinds.
const (
	DeltaText     = "text"
	DeltaThinking = "thinking"
)

// Delta is a piece of streamed output: Kind is DeltaText or DeltaThinking.
type Delta struct {
	Kind string
	Text string
}

// Options configures New. The zero value is usable.
type Options struct {
	// Getenv reads configuration and secrets; nil means os.Getenv. Secrets
	// are only ever read through it, never passed as arguments.
	Getenv func(string) string
	// HTTPClient is the client to send requests with; nil means a client
	// with http.DefaultTransport. Its transport is wrapped, not modified.
	HTTPClient *http.Client
	// StallTimeout bounds the silence before the response headers and
	// between stream chunks; 0 means 60s.
	StallTimeout time.Duration
}

// DefaultStallTimeout is the StallTimeout used when Options leaves it zero.
const DefaultStallTimeout = 60 * time.Second

// ErrNotConfigured is wrapped by the errors New returns for a missing or
// malformed spec, key or endpoint.
var ErrNotConfigured = errors.New("model not configured")

const (
	defaultOpenAIURL    = "https://api.openai.com/v1"
	defaultAnthropicURL = "https://api.anthropic.com/v1"
	defaultOllamaHost   = "http://127.0.0.1:11434"
	// localToken is sent as the API key to local servers that need none.
	localToken = "no-key"
	// defaultAnthropicMaxTokens replaces langchaingo's default of 2048,
	// which is too small for an agent turn.
	defaultAnthropicMaxTokens = 8192
)

const usage = "set FASTAGENT_MODEL=openai/gpt-4o-mini and OPENAI_API_KEY " +
	"(OPENAI_BASE_URL for an OpenAI-compatible server), or anthropic/<model> with ANTHROPIC_API_KEY " +
	"(ANTHROPIC_BASE_URL for a proxy or gateway), " +
	"or ollama/<model> (OLLAMA_HOST, default " + defaultOllamaHost + "); " +
	"also gemini/, vertex/, bedrock/, azure/, mistral/, openrouter/, vllm/, lmstudio/ and openai-compatible/ " +
	"(see docs/providers.md for their environment variables)"

// New returns the model named by spec, "provider/model": openai/<model>
// (OPENAI_API_KEY, optional OPENAI_BASE_URL and OPENAI_ORGANIZATION),
// anthropic/<model> (ANTHROPIC_API_KEY, optional ANTHROPIC_BASE_URL),
// ollama/<model> (OLLAMA_HOST), and the providers of providers.go (azure,
// gemini, vertex, bedrock, mistral, openrouter, vllm, lmstudio,
// openai-compatible; docs/providers.md lists their variables). A key may be
// empty when the base URL points at loopback.
func New(spec string, opts Options) (Model, error) {
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, fmt.Errorf("llm: no model configured: %s: %w", usage, ErrNotConfigured)
	}
	provider, name, ok := strings.Cut(spec, "/")
	if !ok || provider == "" || name == "" {
		return nil, fmt.Errorf("llm: model %q is not of the form provider/model: %s: %w", spec, usage, ErrNotConfigured)
	}
	stall := opts.StallTimeout
	if stall <= 0 {
		stall = DefaultStallTimeout
	}
	info := models.Lookup(spec)
	m := &model{spec: spec, provider: provider, name: name, stall: stall, client: wrapClient(opts.HTTPClient),
		reasoning: info.Reasoning, maxOutput: info.MaxOutput}
	var err error
	switch provider {
	case "openai":
		err = m.initOpenAI(getenv)
	case "anthropic":
		err = m.initAnthropic(getenv)
	case "ollama":
		err = m.initOllama(getenv)
	case "azure":
		err = m.initAzure(getenv)
	case "gemini":
		err = m.initGemini(getenv)
	case "vertex":
		err = m.initVertex(getenv)
	case "bedrock":
		err = m.initBedrock(getenv)
	default:
		c, ok := compatibles[provider]
		if !ok {
			return nil, fmt.Errorf("llm: unknown model provider %q in %q: %s: %w", provider, spec, usage, ErrNotConfigured)
		}
		err = m.initCompatible(c, getenv)
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Wrap returns a Model over a langchaingo client built elsewhere (any
// provider langchaingo supports, or a test double), named spec
// ("provider/model", as fastagent.yaml names it). Messages are shaped as for
// OpenAI-compatible servers and text is streamed through the client's
// StreamingFunc, whose chunks also feed the stall watchdog. Errors other
// than cancellation, a stall or a context overflow are retryable.
func Wrap(spec string, client llms.Model, opts Options) (Model, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" || client == nil {
		return nil, fmt.Errorf("llm: a wrapped model needs a spec and a client: %w", ErrNotConfigured)
	}
	provider, name, ok := strings.Cut(spec, "/")
	if !ok {
		provider, name = "custom", spec
	}
	stall := opts.StallTimeout
	if stall <= 0 {
		stall = DefaultStallTimeout
	}
	info := models.Lookup(spec)
	return &model{spec: spec, provider: provider, name: name, stall: stall, flavor: flavorGeneric, opaque: true,
		llm: client, maxOutput: info.MaxOutput, baseURL: "(custom client)"}, nil
}

func (m *model) initOpenAI(getenv func(string) string) error {
	m.keyEnv = "OPENAI_API_KEY"
	m.urlEnv = "OPENAI_BASE_URL"
	base := strings.TrimSpace(getenv("OPENAI_BASE_URL"))
	if base == "" {
		base = defaultOpenAIURL
	}
	u, err := checkURL("OPENAI_BASE_URL", base)
	if err != nil {
		return err
	}
	m.baseURL = strings.TrimSuffix(u.String(), "/")
	key := getenv("OPENAI_API_KEY")
	if key == "" {
		if !isLoopback(u) {
			return fmt.Errorf("llm: %s needs OPENAI_API_KEY: set it in the environment "+
				"(or point OPENAI_BASE_URL at a local OpenAI-compatible server, which needs no key): %w", m.spec, ErrNotConfigured)
		}
		key = localToken
	} else {
		m.secret = key
	}
	m.flavor = flavorOpenAI
	// Compatible servers know max_tokens; only OpenAI itself requires
	// max_completion_tokens for its newest models.
	m.legacyMaxTokens = u.Host != "api.openai.com"
	llm, err := openai.New(
		openai.WithToken(key),
		openai.WithModel(m.name),
		openai.WithBaseURL(m.baseURL),
		openai.WithOrganization(getenv("OPENAI_ORGANIZATION")),
		openai.WithHTTPClient(m.client),
	)
	if err != nil {
		return fmt.Errorf("llm: %s: creating the OpenAI client: %w", m.spec, err)
	}
	m.llm = llm
	return nil
}

func (m *model) initAnthropic(getenv func(string) string) error {
	m.keyEnv = "ANTHROPIC_API_KEY"
	m.urlEnv = "ANTHROPIC_BASE_URL"
	base := strings.TrimSpace(getenv("ANTHROPIC_BASE_URL"))
	if base == "" {
		base = defaultAnthropicURL
	}
	u, err := checkURL("ANTHROPIC_BASE_URL", base)
	if err != nil {
		return err
	}
	// Anthropic's SDKs take the host ("https://api.anthropic.com") and add
	// /v1; langchaingo wants the /v1 in the base. Both spellings work.
	m.baseURL = strings.TrimSuffix(u.String(), "/")
	if !strings.HasSuffix(m.baseURL, "/v1") {
		m.baseURL += "/v1"
	}
	key := getenv("ANTHROPIC_API_KEY")
	if key == "" {
		if !isLoopback(u) {
			return fmt.Errorf("llm: %s needs ANTHROPIC_API_KEY: set it in the environment: %w", m.spec, ErrNotConfigured)
		}
		key = localToken
	} else {
		m.secret = key
	}
	m.flavor = flavorAnthropic
	llm, err := anthropic.New(
		anthropic.WithToken(key),
		anthropic.WithModel(m.name),
		anthropic.WithBaseURL(m.baseURL),
		anthropic.WithHTTPClient(m.client),
	)
	if err != nil {
		return fmt.Errorf("llm: %s: creating the Anthropic client: %w", m.spec, err)
	}
	m.llm = llm
	return nil
}

// initOllama talks to Ollama's OpenAI-compatible endpoint (/v1): unlike
// langchaingo's native ollama client it supports tools.
func (m *model) initOllama(getenv func(string) string) error {
	m.urlEnv = "OLLAMA_HOST"
	host := strings.TrimSpace(getenv("OLLAMA_HOST"))
	if host == "" {
		host = defaultOllamaHost
	}
	if !strings.Contains(host, "://") {
		host = "http://" + host
	}
	u, err := checkURL("OLLAMA_HOST", host)
	if err != nil {
		return err
	}
	if u.Port() == "" {
		u.Host = net.JoinHostPort(u.Hostname(), "11434")
	}
	m.baseURL = strings.TrimSuffix(u.String(), "/") + "/v1"
	m.flavor = flavorOpenAI
	m.legacyMaxTokens = true
	llm, err := openai.New(
		openai.WithToken(localToken),
		openai.WithModel(m.name),
		openai.WithBaseURL(m.baseURL),
		openai.WithOrganization(""),
		openai.WithHTTPClient(m.client),
	)
	if err != nil {
		return fmt.Errorf("llm: %s: creating the Ollama client: %w", m.spec, err)
	}
	m.llm = llm
	return nil
}

// checkURL parses an endpoint setting and insists on http(s) with a host.
func checkURL(env, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		shown := raw
		if err == nil {
			shown = u.Redacted()
		}
		return nil, fmt.Errorf("llm: %s=%q is not an http(s) URL such as http://127.0.0.1:8080/v1: %w", env, shown, ErrNotConfigured)
	}
	return u, nil
}

// isLoopback reports whether u names this machine.
func isLoopback(u *url.URL) bool {
	h := u.Hostname()
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// wrapClient returns a copy of c (or a default client) whose transport
// records each call's status and feeds its stall watchdog.
func wrapClient(c *http.Client) *http.Client {
	var cp http.Client
	if c != nil {
		cp = *c
	}
	base := cp.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	cp.Transport = &recordingTransport{base: base}
	return &cp
}

// KeyEnv is the variable the API key of spec's provider is read from
// ("" for a provider that takes none, or one New does not know).
func KeyEnv(spec string) string {
	provider, _, _ := strings.Cut(strings.TrimSpace(spec), "/")
	switch provider {
	case "openai":
		return "OPENAI_API_KEY"
	case "anthropic":
		return "ANTHROPIC_API_KEY"
	}
	return ""
}
