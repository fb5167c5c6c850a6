package workspace

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"golang.org/x/net/http/httpguts"
	"gopkg.in/yaml.v3"

	"github.com/fastagent/fastagent/internal/mcp"
	"github.com/fastagent/fastagent/internal/models"
)

// ConfigFile is the name of the definition's config file.
const ConfigFile = "fastagent.yaml"

// Config is fastagent.yaml. Unknown keys and bad values are errors that name
// the file, the key and the reason.
type Config struct {
	// Model is "provider/model", e.g. openai/gpt-4o-mini; FASTAGENT_MODEL overrides it.
	Model string `yaml:"model"`
	// ChatModel serves a turn's first step and every step after which no
	// tool ran; ToolModel the step after a tool step (Flowbot's dual-model
	// routing). Either empty means Model. Compaction uses the chat model.
	ChatModel string `yaml:"chatModel"`
	ToolModel string `yaml:"toolModel"`
	// Models is a fallback chain [primary, fallback…]: when a step's model
	// fails with a retryable error after its attempts, or is rate-limited
	// for longer than FallbackAfter, the next model serves the step. The
	// primary is Model (models[0] when model is unset).
	Models []string `yaml:"models"`
	// ThinkingLevel is off, minimal, low, medium or high: OpenAI reasoning
	// effort or an Anthropic thinking budget, for reasoning models only.
	ThinkingLevel string `yaml:"thinkingLevel"`
	// AgentDir moves the agent surface into a subfolder of the working directory.
	AgentDir string `yaml:"agentDir"`
	// ContextRoot is where the AGENTS.md walk up from the workspace stops:
	// the workspace itself by default, or an ancestor such as the
	// repository root ("..", or an absolute path).
	ContextRoot string `yaml:"contextRoot"`
	// CodingTools is true (all built-ins, the default), false (none) or a list of names.
	CodingTools CodingTools `yaml:"codingTools"`
	// MaxSteps bounds model calls per turn.
	MaxSteps int `yaml:"maxSteps"`
	// IdempotencyWindow is how long a finished turn's key is answered from
	// its record instead of running again (default 24h);
	// FASTAGENT_IDEMPOTENCY_WINDOW overrides it.
	IdempotencyWindow Duration `yaml:"idempotencyWindow"`
	// Retry tunes model-call retries and worker-loss detection.
	Retry RetryConfig `yaml:"retry"`
	// Tools holds per-tool settings by tool name; its keys sandbox,
	// network and networkAllow are the workspace-wide ToolPolicy.
	Tools map[string]ToolConfig `yaml:"tools"`
	// ToolPolicy is filled from tools: (see ToolPolicy).
	ToolPolicy ToolPolicy `yaml:"-"`
	// Env names extra environment variables passed to bash and workspace
	// tools. Names of the worker's own secrets (see IsSecretEnv) are refused
	// unless AllowSecretEnv lists them.
	Env []string `yaml:"env"`
	// AllowSecretEnv lists worker secrets that env may pass to tools and
	// that mcpServers.*.env may expand with ${NAME}; nothing else of the
	// kind is allowed.
	AllowSecretEnv []string `yaml:"allowSecretEnv"`
	// SelfEdit lets the agent's write and edit tools change persona.md,
	// AGENTS.md and skills/ (default false). The rules (RulePaths) are never
	// writable by the agent.
	SelfEdit bool `yaml:"selfEdit"`
	// MCPServers are Model Context Protocol servers whose tools the agent gets.
	MCPServers map[string]MCPServer `yaml:"mcpServers"`
	// HTTP is where the ingress listens.
	HTTP HTTPConfig `yaml:"http"`
	// SelfSchedule enables the wake and unwake tools.
	SelfSchedule bool `yaml:"selfSchedule"`
	// AskUser adds the ask_user tool: the model asks the person a question
	// and the turn waits (until approvals.timeout) for the answer.
	AskUser bool `yaml:"askUser"`
	// ContextWindow overrides the model catalog's context window (tokens).
	ContextWindow int `yaml:"contextWindow"`
	// Compaction keeps a long session's context inside the window.
	Compaction CompactionConfig `yaml:"compaction"`
	// Limits are budgets the session workflow enforces (0 or unset: none).
	Limits LimitsConfig `yaml:"limits"`
	// Approvals tunes the human decision a gated tool call
	// (requiresApproval) waits for; tools.<name> may override it.
	Approvals ApprovalsConfig `yaml:"approvals"`
	// Delegation lets the agent hand sub-tasks to agents (itself
	// included) with the delegate tool; unset, it has no such tool.
	Delegation DelegationConfig `yaml:"delegation"`
	// Activities places groups of activities on task queues of their own:
	// the session schedules them there, and workers started for that group
	// (fastagent worker --activities tools) serve them, on machines of
	// their own (GPU boxes, a network zone).
	Activities ActivitiesConfig `yaml:"activities"`
	// Memory gives the agent long-term memory: remember, recall and
	// forget, scoped by principal (docs/memory.md).
	Memory MemoryConfig `yaml:"memory"`
	// Delivery lets the agent send messages and files to chat channels,
	// people and issues (send_message, send_file): the targets it may
	// send to (docs/delivery.md).
	Delivery DeliveryConfig `yaml:"delivery"`
	// Conversation tunes how a session takes messages that arrive while
	// it is busy (docs/conversation.md).
	Conversation ConversationConfig `yaml:"conversation"`
	// Sessions tunes the lifecycle of sessions (idleTTL).
	Sessions SessionsConfig `yaml:"sessions"`
}

// SessionsConfig is fastagent.yaml's sessions: block.
type SessionsConfig struct {
	// IdleTTL closes a session that stayed idle this long — no turn
	// running or queued, no wake-up pending — and deletes its transcript
	// and turn records (0 or unset: sessions live until deleted). It may
	// not be shorter than the idempotency window.
	IdleTTL Duration `yaml:"idleTTL"`
}

// DefaultIdempotencyWindow is idempotencyWindow's default.
const DefaultIdempotencyWindow = 24 * time.Hour

// Window is the idempotency window in effect: idempotencyWindow, else
// DefaultIdempotencyWindow.
func (c Config) Window() time.Duration {
	if c.IdempotencyWindow > 0 {
		return time.Duration(c.IdempotencyWindow)
	}
	return DefaultIdempotencyWindow
}

// ValidateIdleTTL refuses a sessions.idleTTL shorter than the idempotency
// window: deleting a session deletes its turn records, and a key retried
// inside the window would then run its turn a second time.
func (c Config) ValidateIdleTTL() error {
	ttl := time.Duration(c.Sessions.IdleTTL)
	switch {
	case ttl < 0:
		return badKey("must not be negative (0 or unset: sessions never expire)", "sessions", "idleTTL")
	case ttl > 0 && ttl < c.Window():
		return badKey(fmt.Sprintf("%s is shorter than the idempotency window (%s): the minimum is %s — deleting a session deletes "+
			"its turn records, so a request retried with the same Idempotency-Key inside the window would run again "+
			"(shorten idempotencyWindow: to allow a shorter idleTTL)", ttl, c.Window(), c.Window()), "sessions", "idleTTL")
	}
	return nil
}

// ConversationConfig is fastagent.yaml's conversation: block.
type ConversationConfig struct {
	// WhileBusy is what a message does when its session is already
	// running a turn: queue (the default: it runs next, as a turn of its
	// own), steer (folded into the running turn), interrupt (the running
	// turn is aborted, the message runs) or reject (refused as busy). A
	// channel file's whileBusy, or an HTTP request's, overrides it.
	WhileBusy string `yaml:"whileBusy"`
}

// WhileBusyModes are the values of conversation.whileBusy.
var WhileBusyModes = []string{"queue", "steer", "interrupt", "reject"}

// ActivitiesConfig is fastagent.yaml's activities: block, by group.
type ActivitiesConfig struct {
	// Tools are tool calls (Tool.Execute).
	Tools ActivityGroupConfig `yaml:"tools"`
	// Model are model calls, compactions and rewinds (Model.Generate,
	// Session.Compact, Session.Rewind): everything that calls a model.
	Model ActivityGroupConfig `yaml:"model"`
}

// ActivityGroupConfig says where one group of activities runs.
type ActivityGroupConfig struct {
	// TaskQueue is the task queue the group's activities are scheduled on
	// ("": the session's own).
	TaskQueue string `yaml:"taskQueue"`
}

// validTaskQueue reports whether a task queue name is one Temporal takes:
// no whitespace or control characters, not reserved, at most 255 bytes.
func validTaskQueue(name string) bool {
	if name == "" || len(name) > 255 || strings.HasPrefix(name, "__temporal") || strings.HasPrefix(name, "/__temporal_sys/") {
		return false
	}
	for _, r := range name {
		if r <= ' ' || r == 0x7f || unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

func (a ActivitiesConfig) validate() error {
	for _, g := range []struct {
		name  string
		queue string
	}{{"tools", a.Tools.TaskQueue}, {"model", a.Model.TaskQueue}} {
		if g.queue != "" && !validTaskQueue(g.queue) {
			return badKey(fmt.Sprintf("%q is not a task queue name (no spaces, not starting with __temporal, at most 255 bytes)", g.queue),
				"activities", g.name, "taskQueue")
		}
	}
	return nil
}

// ApprovalsConfig says how long a gated call waits and who may decide it.
type ApprovalsConfig struct {
	// Timeout is how long a call waits for a decision (a durable timer)
	// before it is denied and the model told why (default 1h).
	Timeout Duration `yaml:"timeout"`
	// Approvers, when set, are the only principals who may decide (token
	// principal names, a channel's users as its events name them, or a
	// channel's role: slack:admins, the Slack workspace's admins and
	// owners); unset, the session's owner and admins may.
	Approvers []string `yaml:"approvers"`
}

// DefaultApprovalTimeout is approvals.timeout's default.
const DefaultApprovalTimeout = time.Hour

// maxApprovalTimeout bounds approvals.timeout: a wait longer than this is
// a forgotten call, not a decision pending.
const maxApprovalTimeout = 30 * 24 * time.Hour

// LimitsConfig bounds what a turn and a session may spend. A turn past a
// budget fails with code limit_exceeded.
type LimitsConfig struct {
	// TurnTokens bounds the tokens (input + output) of one turn.
	TurnTokens int64 `yaml:"turnTokens"`
	// TurnTime bounds the wall time of one turn.
	TurnTime Duration `yaml:"turnTime"`
	// SessionTokensPerDay bounds the tokens of one session per UTC day.
	SessionTokensPerDay int64 `yaml:"sessionTokensPerDay"`
	// PerPrincipal bounds the turns one API principal starts over HTTP,
	// checked by the ingress before anything is started.
	PerPrincipal PerPrincipalConfig `yaml:"perPrincipal"`
}

// PerPrincipalConfig bounds one principal's new HTTP turns (invoke and
// follow-ups) on an ingress process; an unset or zero field is no limit.
type PerPrincipalConfig struct {
	// ConcurrentTurns bounds the principal's turns running at once.
	ConcurrentTurns int `yaml:"concurrentTurns"`
	// TurnsPerMinute bounds the turns the principal starts in any minute.
	TurnsPerMinute int `yaml:"turnsPerMinute"`
	// TokensPerDay bounds the tokens (input + output) of the principal's
	// turns per UTC day, checked before each new turn.
	TokensPerDay int64 `yaml:"tokensPerDay"`
	// ExemptAdmins leaves admin principals unlimited (default true).
	ExemptAdmins *bool `yaml:"exemptAdmins"`
	// Exempt are principals never limited (service accounts, for one).
	Exempt []string `yaml:"exempt"`
}

// CompactionConfig tunes automatic compaction (pi's algorithm).
type CompactionConfig struct {
	// Enabled turns automatic compaction on (the default) or off; a manual
	// compaction (POST /sessions/{id}/compact) runs either way.
	Enabled *bool `yaml:"enabled"`
	// ReserveTokens are kept free below the window: the context is compacted
	// once it exceeds contextWindow − reserveTokens (default 16384).
	ReserveTokens int `yaml:"reserveTokens"`
	// KeepRecentTokens of the newest messages stay verbatim (default 20000).
	KeepRecentTokens int `yaml:"keepRecentTokens"`
}

// On reports whether automatic compaction is enabled.
func (c CompactionConfig) On() bool { return c.Enabled == nil || *c.Enabled }

// RetryConfig tunes model-call retries.
type RetryConfig struct {
	ModelAttempts int      `yaml:"modelAttempts"`
	ModelTimeout  Duration `yaml:"modelTimeout"`
	// Heartbeat is how long a silent worker may go before its call is
	// declared lost.
	Heartbeat Duration `yaml:"heartbeat"`
	// FallbackAfter is the longest rate-limit wait (Retry-After) a model
	// with a fallback (models:) is waited for; a longer one hands the step
	// to the fallback at once (default 30s).
	FallbackAfter Duration `yaml:"fallbackAfter"`
}

// DefaultFallbackAfter is RetryConfig.FallbackAfter's default.
const DefaultFallbackAfter = 30 * time.Second

// ToolConfig overrides one tool's runtime settings.
type ToolConfig struct {
	Timeout     Duration `yaml:"timeout"`
	MaxAttempts int      `yaml:"maxAttempts"`
	Idempotent  *bool    `yaml:"idempotent"`
	// RequiresApproval is true, false or {unless: {command, path}}
	// (ApprovalSetting).
	RequiresApproval *ApprovalSetting `yaml:"requiresApproval"`
	Deferred         *bool            `yaml:"deferred"`
	// Network overrides tools.network for this tool.
	Network *OnOff `yaml:"network" json:",omitempty"`
	// ApprovalTimeout and Approvers override approvals: for this tool.
	ApprovalTimeout Duration `yaml:"approvalTimeout"`
	Approvers       []string `yaml:"approvers"`

	// setting holds a scalar or list found under tools: (a ToolPolicy key).
	setting *yaml.Node
}

// MCPServer is one MCP server: a command (stdio) or a URL (streamable HTTP,
// or the legacy SSE transport).
type MCPServer struct {
	Command string            `yaml:"command"`
	Args    []string          `yaml:"args"`
	Env     map[string]string `yaml:"env"`
	URL     string            `yaml:"url"`
	// Deferred keeps the server's tools out of the request until activated.
	Deferred bool `yaml:"deferred"`
	// Network gives a stdio server egress (default tools.network).
	Network *OnOff `yaml:"network" json:",omitempty"`
	// Transport of a url: server: streamable-http (default; "http" too)
	// or sse (the legacy HTTP+SSE transport).
	Transport string `yaml:"transport" json:",omitempty"`
	// Headers are sent with every request to a url: server; values may
	// reference the worker's variables as ${NAME}, expanded by the worker
	// when it connects (never written to history, never seen by tools).
	Headers map[string]string `yaml:"headers" json:",omitempty"`
	// AllowPrivate lets a url: server be on loopback or a private network
	// (the deployment's own services stay refused).
	AllowPrivate bool `yaml:"allowPrivate" json:",omitempty"`
	// OAuth makes the worker send the token `fastagent mcp login <name>`
	// stored in the state dir, and refresh it.
	OAuth bool `yaml:"oauth" json:",omitempty"`
}

// MCPTransport is s's transport as internal/mcp names it.
func (s MCPServer) MCPTransport() string {
	if s.Transport == "sse" {
		return mcp.TransportSSE
	}
	if s.URL != "" {
		return mcp.TransportStreamable
	}
	return ""
}

// validate checks a url: server's transport, headers and address.
func (s MCPServer) validate(name string) error {
	if (s.Command == "") == (s.URL == "") {
		return badKey("set exactly one of command (stdio) or url (streamable HTTP or SSE)", "mcpServers", name)
	}
	if s.URL == "" {
		for _, k := range []struct {
			key string
			set bool
		}{{"transport", s.Transport != ""}, {"headers", len(s.Headers) > 0}, {"allowPrivate", s.AllowPrivate}, {"oauth", s.OAuth}} {
			if k.set {
				return badKey("applies only to a server with url:", "mcpServers", name, k.key)
			}
		}
		return nil
	}
	u, err := url.Parse(s.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return badKey(fmt.Sprintf("%q is not an http or https URL", s.URL), "mcpServers", name, "url")
	}
	if err := mcp.CheckURLHost(u.Hostname(), u.Port(), s.AllowPrivate); err != nil {
		return badKey(err.Error(), "mcpServers", name, "url")
	}
	switch s.Transport {
	case "", "http", "streamable-http", "sse":
	default:
		return badKey(fmt.Sprintf("%q is not streamable-http or sse", s.Transport), "mcpServers", name, "transport")
	}
	if s.Network != nil {
		return badKey("applies only to a stdio server (a url: server is reached by the worker; see allowPrivate)", "mcpServers", name, "network")
	}
	if s.OAuth && !safeName.MatchString(name) {
		return badKey("a server with oauth: true needs a name of letters, digits, '.', '-' and '_' (its login is stored under that name)", "mcpServers", name)
	}
	plain := u.Scheme == "http" && !isLoopbackHost(u.Hostname())
	for _, k := range sortedKeys(s.Headers) {
		if !httpguts.ValidHeaderFieldName(k) || !httpguts.ValidHeaderFieldValue(s.Headers[k]) {
			return badKey("is not a valid HTTP header", "mcpServers", name, "headers", k)
		}
		if s.OAuth && strings.EqualFold(k, "Authorization") {
			return badKey("set either oauth: true or an Authorization header, not both", "mcpServers", name, "headers", k)
		}
		if plain && len(mcp.EnvRefs(s.Headers[k])) > 0 {
			return badKey("would send a secret in clear text over http://; use an https:// URL", "mcpServers", name, "headers", k)
		}
	}
	return nil
}

// safeName is a name usable as a file name.
var safeName = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]*$`)

func isLoopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(h)
	return err == nil && ip.IsLoopback()
}

// HTTPConfig is the ingress address and stream behaviour.
type HTTPConfig struct {
	Host string `yaml:"host"`
	Port int    `yaml:"port"`
	// DetachGrace is the longest a turn whose client disconnected keeps
	// running, waiting for the client to re-attach, when the request asked
	// for it (Resume-Within); default 15s, 0 = never. A client that did not
	// ask cancels its turn by disconnecting.
	DetachGrace *Duration `yaml:"detachGrace"`
	// AllowedOrigins are the browser origins the API answers
	// ("https://app.example.com"); a request with another Origin is refused.
	AllowedOrigins []string `yaml:"allowedOrigins"`
	// AllowedHosts are the Host names the API answers besides the loopback
	// names (DNS rebinding defence).
	AllowedHosts []string `yaml:"allowedHosts"`
	// Invoke keeps POST /invoke mounted when channel files exist (as in
	// FastAgent, the default route is off once the agent has channels).
	Invoke *bool `yaml:"invoke"`
	// Admission refuses new turns (HTTP 429 with Retry-After; channels: a
	// busy reply) while the system is saturated. Off unless a limit is set.
	Admission AdmissionConfig `yaml:"admission"`
}

// AdmissionConfig are the saturation limits of the ingress; an unset or
// zero field is no limit.
type AdmissionConfig struct {
	// MaxInFlight bounds the turns streaming through one ingress process.
	MaxInFlight int `yaml:"maxInFlight"`
	// MaxBacklog bounds the tasks waiting on the task queue for a worker.
	MaxBacklog int64 `yaml:"maxBacklog"`
	// MaxBacklogAge bounds how long the oldest waiting task has waited.
	MaxBacklogAge *Duration `yaml:"maxBacklogAge"`
	// RetryAfter is what a refused caller is told to wait (default 2s).
	RetryAfter *Duration `yaml:"retryAfter"`
}

// CodingTools selects built-in coding tools.
type CodingTools struct {
	Set   bool
	All   bool
	Names []string
}

// codingToolNames are the names codingTools accepts.
var codingToolNames = []string{"read", "bash", "edit", "write"}

// UnmarshalYAML accepts a bool or a list of tool names.
func (c *CodingTools) UnmarshalYAML(n *yaml.Node) error {
	c.Set = true
	var b bool
	if n.Kind == yaml.ScalarNode && n.Decode(&b) == nil {
		c.All = b
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return typeError(n, "want true, false or a list of tool names (read, bash, edit, write)")
	}
	var names []string
	for _, item := range n.Content {
		var name string
		if item.Kind != yaml.ScalarNode || item.Decode(&name) != nil {
			return typeError(item, "want a list of tool names (read, bash, edit, write)")
		}
		known := false
		for _, k := range codingToolNames {
			known = known || k == name
		}
		if !known {
			return typeError(item, fmt.Sprintf("unknown coding tool %q (known: read, bash, edit, write)", name))
		}
		names = append(names, name)
	}
	c.Names = names
	return nil
}

// Enabled reports whether the built-in tool name is on.
func (c CodingTools) Enabled(name string) bool {
	if !c.Set || c.All {
		return !c.Set || c.All
	}
	for _, n := range c.Names {
		if n == name {
			return true
		}
	}
	return false
}

// Duration is a time.Duration written as "30s", "5m" or a number of seconds.
type Duration time.Duration

// UnmarshalYAML parses "90s", "2m" or 90.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return typeError(n, "want a duration like 30s or 5m")
	}
	var secs float64
	if err := n.Decode(&secs); err == nil {
		if secs < 0 {
			return typeError(n, fmt.Sprintf("%s: a duration must not be negative", n.Value))
		}
		*d = Duration(secs * float64(time.Second))
		return nil
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil || v < 0 {
		return typeError(n, fmt.Sprintf("%q is not a duration like 30s or 5m", n.Value))
	}
	*d = Duration(v)
	return nil
}

// typeError reports a bad value the way yaml.v3 collects them, so one decode
// reports every bad value rather than the first.
func typeError(n *yaml.Node, msg string) error {
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %s", n.Line, msg)}}
}

// modelSpec matches provider/model for every provider internal/llm serves
// (docs/providers.md).
var modelSpec = regexp.MustCompile(`^(openai|anthropic|ollama|azure|gemini|vertex|bedrock|mistral|openrouter|vllm|lmstudio|openai-compatible)/\S+$`)

// badModelSpec is the reason a model string is refused.
func badModelSpec(spec string) string {
	return fmt.Sprintf("%q is not provider/model with provider openai, anthropic, ollama, azure, gemini, vertex, bedrock, mistral, openrouter, vllm, lmstudio or openai-compatible (e.g. openai/gpt-4o-mini)", spec)
}

// ConfigError is one problem in a config file: the file, the line (0 when
// unknown), the key as a dotted path (http.port, tools.deploy.timeout) and
// the reason.
type ConfigError struct {
	File   string
	Line   int
	Key    string
	Reason string
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Reason)
	return b.String()
}

// LoadConfig reads fastagent.yaml from dir; a missing file yields defaults.
// A bad file yields one *ConfigError per problem (joined with errors.Join).
func LoadConfig(dir string) (Config, error) { return loadConfig(dir, nil) }

// loadConfig is LoadConfig accepting the custom model specs (see
// validateWith).
func loadConfig(dir string, custom map[string]bool) (Config, error) {
	var c Config
	path := filepath.Join(dir, ConfigFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		line, msg := splitLine(strings.TrimPrefix(err.Error(), "yaml: "))
		return c, &ConfigError{File: path, Line: line, Reason: "not valid YAML: " + msg}
	}
	if len(root.Content) == 0 {
		return c, nil // empty file or only comments
	}
	if doc := root.Content[0]; doc.Kind != yaml.MappingNode {
		return c, &ConfigError{File: path, Line: doc.Line, Reason: "the file must be a mapping of settings (key: value), e.g. model: openai/gpt-4o-mini"}
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return c, decodeErrors(path, &root, err)
	}
	if err := c.claimToolPolicy(path); err != nil {
		return c, err
	}
	if err := c.validateWith(custom); err != nil {
		var ke *keyError
		if errors.As(err, &ke) {
			line := lineOf(&root, ke.path)
			if ke.item > 0 {
				line = itemLine(&root, ke.path, ke.item-1, line)
			}
			return c, &ConfigError{File: path, Line: line, Key: strings.Join(ke.path, "."), Reason: ke.reason}
		}
		return c, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// keyError is a bad value found by validate.
type keyError struct {
	path   []string
	reason string
	// item, when positive, is the 1-based list item of path at fault.
	item int
}

func (e *keyError) Error() string { return strings.Join(e.path, ".") + ": " + e.reason }

func badKey(reason string, path ...string) error { return &keyError{path: path, reason: reason} }

// validateWith checks the settings; custom names model specs served by
// clients an embedder built (fastagent.Options.Models), which may name any
// provider.
func (c Config) validateWith(custom map[string]bool) error {
	if err := c.validateModels(custom); err != nil {
		return err
	}
	switch c.ThinkingLevel {
	case "", "off", "minimal", "low", "medium", "high":
	default:
		return badKey(fmt.Sprintf("%q is not one of off, minimal, low, medium, high", c.ThinkingLevel), "thinkingLevel")
	}
	if c.MaxSteps < 0 || c.MaxSteps > 1000 {
		return badKey(fmt.Sprintf("%d is out of range 1..1000", c.MaxSteps), "maxSteps")
	}
	if c.Retry.ModelAttempts < 0 || c.Retry.ModelAttempts > 100 {
		return badKey(fmt.Sprintf("%d is out of range 1..100", c.Retry.ModelAttempts), "retry", "modelAttempts")
	}
	if c.Retry.Heartbeat != 0 && time.Duration(c.Retry.Heartbeat) < time.Second {
		return badKey("must be at least 1s", "retry", "heartbeat")
	}
	if err := c.validateCompaction(); err != nil {
		return err
	}
	if err := c.validateLimits(); err != nil {
		return err
	}
	if c.HTTP.DetachGrace != nil && *c.HTTP.DetachGrace < 0 {
		return badKey("a negative duration; use 0 to abort at once when a client disconnects", "http", "detachGrace")
	}
	if a := c.HTTP.Admission; a.MaxInFlight < 0 || a.MaxBacklog < 0 {
		return badKey("limits must not be negative (0 or unset: no limit)", "http", "admission")
	}
	if c.HTTP.Port < 0 || c.HTTP.Port > 65535 {
		return badKey(fmt.Sprintf("%d is not a TCP port", c.HTTP.Port), "http", "port")
	}
	if err := validateApproval(c.Approvals.Timeout, c.Approvals.Approvers, "approvals", "timeout", "approvers"); err != nil {
		return err
	}
	if err := c.validateTools(); err != nil {
		return err
	}
	for _, name := range sortedKeys(c.MCPServers) {
		if err := c.MCPServers[name].validate(name); err != nil {
			return err
		}
	}
	if err := c.Delegation.validate(); err != nil {
		return err
	}
	if err := c.Activities.validate(); err != nil {
		return err
	}
	if err := c.Memory.validate(); err != nil {
		return err
	}
	if err := c.Delivery.validate(); err != nil {
		return err
	}
	if w := c.Conversation.WhileBusy; w != "" && !slices.Contains(WhileBusyModes, w) {
		return badKey(fmt.Sprintf("%q is not one of %s", w, strings.Join(WhileBusyModes, ", ")), "conversation", "whileBusy")
	}
	if err := c.ValidateIdleTTL(); err != nil {
		return err
	}
	return c.validateEnv()
}

// validateTools checks each tool's settings: attempts, approval timeouts and
// approvers, the unless of a conditional approval.
func (c Config) validateTools() error {
	for _, name := range sortedKeys(c.Tools) {
		t := c.Tools[name]
		if t.MaxAttempts < 0 || t.MaxAttempts > 100 {
			return badKey(fmt.Sprintf("%d is out of range 1..100", t.MaxAttempts), "tools", name, "maxAttempts")
		}
		if err := validateApproval(t.ApprovalTimeout, t.Approvers, "tools", name, "approvalTimeout", "approvers"); err != nil {
			return err
		}
		if ra := t.RequiresApproval; ra != nil && ra.Unless != nil {
			if err := ra.Unless.compile("tools", name, "requiresApproval", "unless"); err != nil {
				return err
			}
		}
	}
	return nil
}

// validateLimits checks the turn and session budgets and the limits per
// principal: none may be negative.
func (c Config) validateLimits() error {
	if l := c.Limits; l.TurnTokens < 0 || l.SessionTokensPerDay < 0 || l.TurnTime < 0 {
		return badKey("budgets must not be negative (0 or unset: no limit)", "limits")
	}
	if p := c.Limits.PerPrincipal; p.ConcurrentTurns < 0 || p.TurnsPerMinute < 0 || p.TokensPerDay < 0 {
		return badKey("limits must not be negative (0 or unset: no limit)", "limits", "perPrincipal")
	}
	return nil
}

// validateApproval checks an approval timeout and approver list found
// under path (whose last two elements name the two keys).
func validateApproval(timeout Duration, approvers []string, path ...string) error {
	at, keys := path[:len(path)-2], path[len(path)-2:]
	if timeout != 0 && (time.Duration(timeout) < time.Second || time.Duration(timeout) > maxApprovalTimeout) {
		return badKey(fmt.Sprintf("%s is out of range 1s..720h (unset: %s)", time.Duration(timeout), DefaultApprovalTimeout),
			append(slices.Clone(at), keys[0])...)
	}
	for i, a := range approvers {
		if strings.TrimSpace(a) == "" || strings.TrimSpace(a) != a {
			return badKey(fmt.Sprintf("entry %d is %q: want a principal or user name without surrounding spaces", i+1, a),
				append(slices.Clone(at), keys[1])...)
		}
	}
	return nil
}

// Approval returns how long a call of the tool name waits for a decision
// and who may decide it (nil: the session's owner and admins).
func (c Config) Approval(name string) (time.Duration, []string) {
	timeout, approvers := time.Duration(c.Approvals.Timeout), c.Approvals.Approvers
	if t, ok := c.Tools[name]; ok {
		if t.ApprovalTimeout != 0 {
			timeout = time.Duration(t.ApprovalTimeout)
		}
		if len(t.Approvers) > 0 {
			approvers = t.Approvers
		}
	}
	if timeout == 0 {
		timeout = DefaultApprovalTimeout
	}
	return timeout, approvers
}

// validateModels checks model, chatModel, toolModel and the models chain.
func (c Config) validateModels(custom map[string]bool) error {
	known := func(spec string) bool { return modelSpec.MatchString(spec) || custom[spec] }
	if c.Model != "" && !known(c.Model) {
		return badKey(badModelSpec(c.Model), "model")
	}
	for _, k := range []struct{ key, spec string }{{"chatModel", c.ChatModel}, {"toolModel", c.ToolModel}} {
		if k.spec != "" && !known(k.spec) {
			return badKey(badModelSpec(k.spec), k.key)
		}
	}
	if len(c.Models) > maxModels {
		return badKey(fmt.Sprintf("lists %d models; at most %d (a primary and its fallbacks)", len(c.Models), maxModels), "models")
	}
	for i, spec := range c.Models {
		if !known(spec) {
			return &keyError{path: []string{"models"}, item: i + 1,
				reason: badModelSpec(spec)}
		}
	}
	return nil
}

// validateEnv checks what reaches tools' environments: env: names, and
// that no worker secret is handed to a tool or an MCP server unless
// allowSecretEnv lists it.
func (c Config) validateEnv() error {
	for i, e := range c.AllowSecretEnv {
		if !mcp.IsVarName(e) {
			return &keyError{path: []string{"allowSecretEnv"}, item: i + 1, reason: fmt.Sprintf("%q is not an environment variable name", e)}
		}
	}
	for i, e := range c.Env {
		if e == "" || strings.ContainsAny(e, "= ") {
			return &keyError{path: []string{"env"}, item: i + 1, reason: fmt.Sprintf("%q is not an environment variable name", e)}
		}
		if IsSecretEnv(e) && !slices.Contains(c.AllowSecretEnv, e) {
			return &keyError{path: []string{"env"}, item: i + 1, reason: fmt.Sprintf("%s looks like one of the worker's own secrets; "+
				"tools (bash, workspace tools) would see it. To pass it anyway, list it under allowSecretEnv", e)}
		}
	}
	for _, name := range sortedKeys(c.MCPServers) {
		env := c.MCPServers[name].Env
		for _, k := range sortedKeys(env) {
			for _, ref := range mcp.EnvRefs(env[k]) {
				if IsSecretEnv(ref) && !slices.Contains(c.AllowSecretEnv, ref) {
					return badKey(fmt.Sprintf("${%s} would hand one of the worker's own secrets to this MCP server; "+
						"to allow it, list %s under allowSecretEnv (fastagent.yaml is not writable by the agent, so only the operator can)", ref, ref),
						"mcpServers", name, "env", k)
				}
			}
		}
	}
	return nil
}

// maxContextWindow bounds contextWindow (no model has ten million tokens).
const maxContextWindow = 10_000_000

// minContextWindow is the smallest window compaction can work in.
const minContextWindow = 1024

func (c Config) validateCompaction() error {
	if c.ContextWindow != 0 && (c.ContextWindow < minContextWindow || c.ContextWindow > maxContextWindow) {
		return badKey(fmt.Sprintf("%d is out of range %d..%d tokens", c.ContextWindow, minContextWindow, maxContextWindow), "contextWindow")
	}
	cp := c.Compaction
	if cp.ReserveTokens < 0 || cp.ReserveTokens > maxContextWindow {
		return badKey(fmt.Sprintf("%d is not a token count (0..%d)", cp.ReserveTokens, maxContextWindow), "compaction", "reserveTokens")
	}
	if cp.KeepRecentTokens < 0 || cp.KeepRecentTokens > maxContextWindow {
		return badKey(fmt.Sprintf("%d is not a token count (0..%d)", cp.KeepRecentTokens, maxContextWindow), "compaction", "keepRecentTokens")
	}
	if c.ContextWindow == 0 {
		return nil
	}
	if cp.ReserveTokens >= c.ContextWindow/2 {
		return badKey(fmt.Sprintf("%d leaves no room for the conversation in a window of %d; keep it under half of contextWindow", cp.ReserveTokens, c.ContextWindow), "compaction", "reserveTokens")
	}
	reserve := models.NewBudget(c.ContextWindow, cp.ReserveTokens, 0).Reserve
	if room := c.ContextWindow - reserve; cp.KeepRecentTokens > room/2 {
		return badKey(fmt.Sprintf("%d would keep more than half of what a compacted context may hold (%d = contextWindow − reserveTokens); keep it at most %d", cp.KeepRecentTokens, room, room/2), "compaction", "keepRecentTokens")
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

var (
	lineRE      = regexp.MustCompile(`^line (\d+): (.*)$`)
	unknownRE   = regexp.MustCompile(`^field (\S+) not found in type (\S+)$`)
	cannotRE    = regexp.MustCompile("^cannot unmarshal (!!\\w+)(?: `(.*)`)? into (.+)$")
	yamlTagName = map[string]string{"!!str": "a string", "!!int": "a number", "!!float": "a number", "!!bool": "a boolean", "!!seq": "a list", "!!map": "a mapping", "!!null": "nothing"}
)

// decodeErrors turns yaml.v3's decode errors into ConfigErrors naming the
// key (found by line in the parsed document) and the reason in user terms.
func decodeErrors(path string, root *yaml.Node, err error) error {
	var msgs []string
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	} else {
		msgs = []string{strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	var errs []error
	for _, m := range msgs {
		line, msg := splitLine(m)
		key := keyAtLine(root, line)
		switch {
		case unknownRE.MatchString(msg):
			sm := unknownRE.FindStringSubmatch(msg)
			msg = unknownKeyReason(sm[1], sm[2])
			if key == "" {
				key = sm[1]
			}
		case cannotRE.MatchString(msg):
			sm := cannotRE.FindStringSubmatch(msg)
			got := yamlTagName[sm[1]]
			if got == "" {
				got = sm[1]
			}
			if sm[2] != "" {
				got += " (" + strconv.Quote(sm[2]) + ")"
			}
			msg = fmt.Sprintf("want %s, got %s", wantName(sm[3]), got)
		}
		errs = append(errs, &ConfigError{File: path, Line: line, Key: key, Reason: msg})
	}
	return errors.Join(errs...)
}

func splitLine(s string) (int, string) {
	if m := lineRE.FindStringSubmatch(s); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n, m[2]
	}
	return 0, s
}

// configTypes are the mappings of fastagent.yaml, by Go type name, with the
// key path users know them by.
var configTypes = map[string]struct {
	t     reflect.Type
	where string
}{
	"workspace.Config":              {reflect.TypeOf(Config{}), "the file"},
	"workspace.RetryConfig":         {reflect.TypeOf(RetryConfig{}), "retry"},
	"workspace.ToolConfig":          {reflect.TypeOf(ToolConfig{}), "a tools entry"},
	"workspace.MCPServer":           {reflect.TypeOf(MCPServer{}), "an mcpServers entry"},
	"workspace.HTTPConfig":          {reflect.TypeOf(HTTPConfig{}), "http"},
	"workspace.AdmissionConfig":     {reflect.TypeOf(AdmissionConfig{}), "http.admission"},
	"workspace.CompactionConfig":    {reflect.TypeOf(CompactionConfig{}), "compaction"},
	"workspace.LimitsConfig":        {reflect.TypeOf(LimitsConfig{}), "limits"},
	"workspace.PerPrincipalConfig":  {reflect.TypeOf(PerPrincipalConfig{}), "limits.perPrincipal"},
	"workspace.ApprovalsConfig":     {reflect.TypeOf(ApprovalsConfig{}), "approvals"},
	"workspace.ActivitiesConfig":    {reflect.TypeOf(ActivitiesConfig{}), "activities"},
	"workspace.ActivityGroupConfig": {reflect.TypeOf(ActivityGroupConfig{}), "an activities entry"},
}

func unknownKeyReason(name, typ string) string {
	ct, ok := configTypes[typ]
	if !ok {
		return "unknown key"
	}
	var known []string
	for i := 0; i < ct.t.NumField(); i++ {
		if tag, _, _ := strings.Cut(ct.t.Field(i).Tag.Get("yaml"), ","); tag != "" && tag != "-" {
			known = append(known, tag)
		}
	}
	if k := nearest(name, known); k != "" {
		return fmt.Sprintf("unknown key (did you mean %s?)", k)
	}
	return fmt.Sprintf("unknown key (%s takes: %s)", ct.where, strings.Join(known, ", "))
}

func wantName(goType string) string {
	switch goType {
	case "int", "int64", "uint", "float64":
		return "a number"
	case "bool":
		return "true or false"
	case "string":
		return "a string"
	case "[]string":
		return "a list of strings"
	}
	if strings.HasPrefix(goType, "map[") || strings.HasPrefix(goType, "workspace.") {
		return "a mapping (key: value)"
	}
	return goType
}

// keyAtLine returns the dotted path of the deepest mapping key on line in
// the document (sequence items report their list's key).
func keyAtLine(root *yaml.Node, line int) string {
	if line <= 0 {
		return ""
	}
	var walk func(n *yaml.Node, prefix string) (string, bool)
	walk = func(n *yaml.Node, prefix string) (string, bool) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				if p, ok := walk(c, prefix); ok {
					return p, true
				}
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := k.Value
				if prefix != "" {
					p = prefix + "." + k.Value
				}
				if v.Kind == yaml.MappingNode {
					if sub, ok := walk(v, p); ok {
						return sub, true
					}
				}
				if k.Line == line || v.Line == line || (v.Kind == yaml.SequenceNode && seqHasLine(v, line)) {
					return p, true
				}
			}
		}
		return "", false
	}
	p, _ := walk(root, "")
	return p
}

func seqHasLine(n *yaml.Node, line int) bool {
	for _, c := range n.Content {
		if c.Line == line {
			return true
		}
	}
	return false
}

// lineOf returns the line of the key at path in the document, or 0.
func lineOf(root *yaml.Node, path []string) int {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := 0
	for _, key := range path {
		if n.Kind != yaml.MappingNode {
			return line
		}
		found := false
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				line, n, found = n.Content[i].Line, n.Content[i+1], true
				break
			}
		}
		if !found {
			return line
		}
	}
	return line
}

// itemLine returns the line of item i of the list at path, or fallback.
func itemLine(root *yaml.Node, path []string, i, fallback int) int {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	for _, key := range path {
		if n.Kind != yaml.MappingNode {
			return fallback
		}
		var next *yaml.Node
		for j := 0; j+1 < len(n.Content); j += 2 {
			if n.Content[j].Value == key {
				next = n.Content[j+1]
				break
			}
		}
		if next == nil {
			return fallback
		}
		n = next
	}
	if n.Kind != yaml.SequenceNode || i >= len(n.Content) {
		return fallback
	}
	return n.Content[i].Line
}

// nearest returns the known key name most likely meant (same letters
// ignoring case, _ and -, or at most two edits away), or "".
func nearest(name string, known []string) string {
	norm := func(s string) string { return strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(s)) }
	best, bestDist := "", 3
	for _, k := range known {
		d := editDistance(norm(name), norm(k))
		if len(k) <= 4 && d > 1 {
			continue
		}
		if d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance (insertions,
// deletions, substitutions and adjacent transpositions).
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// maxModels bounds the fallback chain.
const maxModels = 8

// ModelFor returns the model chain of a step: the routed primary (toolModel
// after a tool step, else chatModel, else model) followed by the fallbacks
// of models, each once.
func (c Config) ModelFor(afterTools bool) []string {
	primary := c.Model
	if primary == "" && len(c.Models) > 0 {
		primary = c.Models[0]
	}
	if c.ChatModel != "" {
		primary = c.ChatModel
	}
	if afterTools && c.ToolModel != "" {
		primary = c.ToolModel
	}
	chain := []string{primary}
	for i, m := range c.Models {
		if i == 0 && c.Model != "" && m != c.Model {
			// models[0] is the primary's slot; a model: (or FASTAGENT_MODEL)
			// replaces it.
			continue
		}
		if !slices.Contains(chain, m) {
			chain = append(chain, m)
		}
	}
	return chain
}

// ModelSpecs are the distinct "provider/model" specs the configuration
// names (model, chatModel, toolModel, the fallback chain), in that order.
func (c Config) ModelSpecs() []string {
	var out []string
	for _, s := range append([]string{c.Model, c.ChatModel, c.ToolModel}, c.Models...) {
		if s = strings.TrimSpace(s); s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
