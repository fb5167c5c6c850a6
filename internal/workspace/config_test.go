package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		yaml string
		// each error must name the key and give the reason, on this line
		want []ConfigError
	}{
		{
			name: "unknown top-level key with a near miss",
			yaml: "model: openai/gpt-4o-mini\nthinking_level: low\n",
			want: []ConfigError{{Line: 2, Key: "thinking_level", Reason: "unknown key (did you mean thinkingLevel?)"}},
		},
		{
			name: "unknown activity group",
			yaml: "activities:\n  gpu:\n    taskQueue: gpu\n",
			want: []ConfigError{{Line: 2, Key: "activities.gpu", Reason: "unknown key (activities takes: tools, model)"}},
		},
		{
			name: "whileBusy not known",
			yaml: "conversation:\n  whileBusy: shout\n",
			want: []ConfigError{{Key: "conversation.whileBusy", Reason: `"shout" is not one of queue, steer, interrupt, reject`}},
		},
		{
			name: "memory scope not known",
			yaml: "memory:\n  enabled: true\n  scope: team\n",
			want: []ConfigError{{Key: "memory.scope", Reason: `"team" is not a scope`}},
		},
		{
			name: "memory injection without memory",
			yaml: "memory:\n  inject: {count: 3}\n",
			want: []ConfigError{{Key: "memory.inject.count", Reason: "memory injection needs memory.enabled: true"}},
		},
		{
			name: "memory injection too large",
			yaml: "memory:\n  enabled: true\n  inject: {count: 3, maxTokens: 100000}\n",
			want: []ConfigError{{Key: "memory.inject.maxTokens", Reason: "100000 is out of range"}},
		},
		{
			name: "delivery target not known",
			yaml: "delivery:\n  allow: [\"slack:#ops\", \"email:me@example.com\"]\n",
			want: []ConfigError{{Key: "delivery.allow.1", Reason: `"email:me@example.com": unknown kind "email"`}},
		},
		{
			name: "delivery target malformed",
			yaml: "delivery:\n  allow: [\"slack:ops\"]\n",
			want: []ConfigError{{Key: "delivery.allow.0", Reason: `"slack:ops" is not a slack target: write slack:#channel-name`}},
		},
		{
			name: "activity task queue with a space",
			yaml: "activities:\n  tools:\n    taskQueue: my gpus\n",
			want: []ConfigError{{Line: 3, Key: "activities.tools.taskQueue", Reason: `"my gpus" is not a task queue name`}},
		},
		{
			name: "activity task queue reserved by Temporal",
			yaml: "activities:\n  model: {taskQueue: __temporal_x}\n",
			want: []ConfigError{{Key: "activities.model.taskQueue", Reason: `"__temporal_x" is not a task queue name`}},
		},
		{
			name: "bad chatModel",
			yaml: "chatModel: gpt-4o\n",
			want: []ConfigError{{Line: 1, Key: "chatModel", Reason: `"gpt-4o" is not provider/model`}},
		},
		{
			name: "bad toolModel",
			yaml: "toolModel: nosuch/large\n",
			want: []ConfigError{{Line: 1, Key: "toolModel", Reason: `"nosuch/large" is not provider/model`}},
		},
		{
			name: "bad fallback in models",
			yaml: "models: [openai/gpt-4o, nope]\n",
			want: []ConfigError{{Key: "models", Reason: `"nope" is not provider/model`}},
		},
		{
			name: "unknown nested key lists the known ones",
			yaml: "http:\n  port: 8080\n  bind: 0.0.0.0\n",
			want: []ConfigError{{Line: 3, Key: "http.bind", Reason: "unknown key (http takes: host, port, detachGrace, allowedOrigins, allowedHosts, invoke, admission)"}},
		},
		{
			name: "unknown admission key",
			yaml: "http:\n  admission:\n    maxQueue: 3\n",
			want: []ConfigError{{Line: 3, Key: "http.admission.maxQueue", Reason: "unknown key (http.admission takes: maxInFlight, maxBacklog, maxBacklogAge, retryAfter)"}},
		},
		{
			name: "negative admission limit",
			yaml: "http:\n  admission:\n    maxInFlight: -1\n",
			want: []ConfigError{{Key: "http.admission", Reason: "limits must not be negative"}},
		},
		{
			name: "negative per-principal limit",
			yaml: "limits:\n  perPrincipal:\n    turnsPerMinute: -5\n",
			want: []ConfigError{{Key: "limits.perPrincipal", Reason: "limits must not be negative"}},
		},
		{
			name: "unknown per-principal key",
			yaml: "limits:\n  perPrincipal:\n    tokensPerHour: 3\n",
			want: []ConfigError{{Line: 3, Key: "limits.perPrincipal.tokensPerHour", Reason: "unknown key (limits.perPrincipal takes: concurrentTurns, turnsPerMinute, tokensPerDay, exemptAdmins, exempt)"}},
		},
		{
			name: "idle TTL below the default idempotency window",
			yaml: "sessions:\n  idleTTL: 1h\n",
			want: []ConfigError{{Line: 2, Key: "sessions.idleTTL", Reason: "1h0m0s is shorter than the idempotency window (24h0m0s): the minimum is 24h0m0s"}},
		},
		{
			name: "idle TTL below a configured idempotency window",
			yaml: "idempotencyWindow: 2h\nsessions:\n  idleTTL: 90m\n",
			want: []ConfigError{{Line: 3, Key: "sessions.idleTTL", Reason: "1h30m0s is shorter than the idempotency window (2h0m0s): the minimum is 2h0m0s"}},
		},
		{
			name: "negative idle TTL",
			yaml: "sessions:\n  idleTTL: -1h\n",
			want: []ConfigError{{Line: 2, Key: "sessions.idleTTL", Reason: `"-1h" is not a duration`}},
		},
		{
			name: "approval timeout out of range",
			yaml: "approvals:\n  timeout: 500ms\n",
			want: []ConfigError{{Key: "approvals.timeout", Reason: "500ms is out of range 1s..720h"}},
		},
		{
			name: "delegation agent name",
			yaml: "delegation:\n  agents:\n    Reviewer Bot: {}\n",
			want: []ConfigError{{Key: "delegation.agents", Reason: `agent name "Reviewer Bot": use 1-40 lowercase letters`}},
		},
		{
			name: "delegation depth out of range",
			yaml: "delegation:\n  agents: {self: {}}\n  maxDepth: 9\n",
			want: []ConfigError{{Key: "delegation.maxDepth", Reason: "9 is out of range 1..5 (unset: 2)"}},
		},
		{
			name: "a tool's approval timeout out of range",
			yaml: "tools:\n  deploy: {approvalTimeout: 800h}\n",
			want: []ConfigError{{Key: "tools.deploy.approvalTimeout", Reason: "800h0m0s is out of range 1s..720h"}},
		},
		{
			name: "blank approver",
			yaml: "approvals:\n  approvers: [alice, \" \"]\n",
			want: []ConfigError{{Key: "approvals.approvers", Reason: `entry 2 is " "`}},
		},
		{
			name: "unknown approvals key",
			yaml: "approvals:\n  deadline: 1h\n",
			want: []ConfigError{{Line: 2, Key: "approvals.deadline", Reason: "unknown key (approvals takes: timeout, approvers)"}},
		},
		{
			name: "unknown nested key with a typo",
			yaml: "http:\n  hots: 0.0.0.0\n",
			want: []ConfigError{{Line: 2, Key: "http.hots", Reason: "unknown key (did you mean host?)"}},
		},
		{
			name: "unknown key in a tools entry",
			yaml: "tools:\n  deploy:\n    retries: 3\n",
			want: []ConfigError{{Line: 3, Key: "tools.deploy.retries", Reason: "unknown key (a tools entry takes: timeout, maxAttempts, idempotent, requiresApproval, deferred, network, approvalTimeout, approvers)"}},
		},
		{
			name: "bad thinkingLevel",
			yaml: "model: openai/gpt-4o-mini\nthinkingLevel: max\n",
			want: []ConfigError{{Line: 2, Key: "thinkingLevel", Reason: `"max" is not one of off, minimal, low, medium, high`}},
		},
		{
			name: "bad codingTools entry",
			yaml: "codingTools:\n  - read\n  - grep\n",
			want: []ConfigError{{Line: 3, Key: "codingTools", Reason: `unknown coding tool "grep" (known: read, bash, edit, write)`}},
		},
		{
			name: "codingTools of the wrong kind",
			yaml: "codingTools: some\n",
			want: []ConfigError{{Line: 1, Key: "codingTools", Reason: "want true, false or a list of tool names (read, bash, edit, write)"}},
		},
		{
			name: "bad duration",
			yaml: "retry:\n  modelTimeout: 5 minutes\n",
			want: []ConfigError{{Line: 2, Key: "retry.modelTimeout", Reason: `"5 minutes" is not a duration like 30s or 5m`}},
		},
		{
			name: "negative duration",
			yaml: "tools:\n  deploy:\n    timeout: -3\n",
			want: []ConfigError{{Line: 3, Key: "tools.deploy.timeout", Reason: "-3: a duration must not be negative"}},
		},
		{
			name: "wrong type",
			yaml: "maxSteps: lots\n",
			want: []ConfigError{{Line: 1, Key: "maxSteps", Reason: `want a number, got a string ("lots")`}},
		},
		{
			name: "out of range",
			yaml: "http:\n  port: 70000\n",
			want: []ConfigError{{Line: 2, Key: "http.port", Reason: "70000 is not a TCP port"}},
		},
		{
			name: "bad model",
			yaml: "model: gpt-4o\n",
			want: []ConfigError{{Line: 1, Key: "model", Reason: `"gpt-4o" is not provider/model with provider openai, anthropic, ollama, azure, gemini, vertex, bedrock, mistral, openrouter, vllm, lmstudio or openai-compatible (e.g. openai/gpt-4o-mini)`}},
		},
		{
			name: "mcp server with command and url",
			yaml: "mcpServers:\n  gh:\n    command: gh-mcp\n    url: http://x\n",
			want: []ConfigError{{Line: 2, Key: "mcpServers.gh", Reason: "set exactly one of command (stdio) or url (streamable HTTP or SSE)"}},
		},
		{
			name: "mcp headers on a stdio server",
			yaml: "mcpServers:\n  gh:\n    command: gh-mcp\n    headers: {X-A: b}\n",
			want: []ConfigError{{Line: 4, Key: "mcpServers.gh.headers", Reason: "applies only to a server with url:"}},
		},
		{
			name: "mcp unknown transport",
			yaml: "mcpServers:\n  gh:\n    url: https://mcp.example.com/\n    transport: websocket\n",
			want: []ConfigError{{Line: 4, Key: "mcpServers.gh.transport", Reason: `"websocket" is not streamable-http or sse`}},
		},
		{
			name: "mcp secret header over plain http",
			yaml: "mcpServers:\n  gh:\n    url: http://mcp.example.com/\n    headers:\n      Authorization: Bearer ${GH_TOKEN}\n",
			want: []ConfigError{{Line: 5, Key: "mcpServers.gh.headers.Authorization", Reason: "would send a secret in clear text over http://; use an https:// URL"}},
		},
		{
			name: "mcp oauth with an Authorization header",
			yaml: "mcpServers:\n  gh:\n    url: https://mcp.example.com/\n    oauth: true\n    headers:\n      Authorization: Bearer x\n",
			want: []ConfigError{{Line: 6, Key: "mcpServers.gh.headers.Authorization", Reason: "set either oauth: true or an Authorization header, not both"}},
		},
		{
			name: "mcp loopback url without allowPrivate",
			yaml: "mcpServers:\n  local:\n    url: http://127.0.0.1:9000/mcp\n",
			want: []ConfigError{{Line: 3, Key: "mcpServers.local.url", Reason: "address refused: 127.0.0.1 is a loopback address; if the MCP server is on this machine or your own network, set allowPrivate: true on its mcpServers entry"}},
		},
		{
			name: "mcp link-local url even with allowPrivate",
			yaml: "mcpServers:\n  meta:\n    url: http://169.254.169.254/\n    allowPrivate: true\n",
			want: []ConfigError{{Line: 3, Key: "mcpServers.meta.url", Reason: "address refused: 169.254.169.254 is a link-local address (cloud metadata and the like): an MCP server is never reached there"}},
		},
		{
			name: "several problems at once",
			yaml: "modle: x\nretry:\n  heartbeat: soon\n",
			want: []ConfigError{
				{Line: 1, Key: "modle", Reason: "unknown key (did you mean model?)"},
				{Line: 3, Key: "retry.heartbeat", Reason: `"soon" is not a duration like 30s or 5m`},
			},
		},
		{
			name: "unknown compaction key",
			yaml: "compaction:\n  keepRecent: 100\n",
			want: []ConfigError{{Line: 2, Key: "compaction.keepRecent", Reason: "unknown key (compaction takes: enabled, reserveTokens, keepRecentTokens)"}},
		},
		{
			name: "compaction.enabled not a boolean",
			yaml: "compaction:\n  enabled: sometimes\n",
			want: []ConfigError{{Line: 2, Key: "compaction.enabled", Reason: "want true or false"}},
		},
		{
			name: "contextWindow too small",
			yaml: "contextWindow: 100\n",
			want: []ConfigError{{Line: 1, Key: "contextWindow", Reason: "100 is out of range 1024..10000000 tokens"}},
		},
		{
			name: "negative reserveTokens",
			yaml: "compaction:\n  reserveTokens: -1\n",
			want: []ConfigError{{Line: 2, Key: "compaction.reserveTokens", Reason: "-1 is not a token count"}},
		},
		{
			name: "reserveTokens larger than half the window",
			yaml: "contextWindow: 4000\ncompaction:\n  reserveTokens: 3000\n",
			want: []ConfigError{{Line: 3, Key: "compaction.reserveTokens", Reason: "3000 leaves no room for the conversation"}},
		},
		{
			name: "keepRecentTokens that compaction cannot honour",
			yaml: "contextWindow: 4000\ncompaction:\n  reserveTokens: 1000\n  keepRecentTokens: 2000\n",
			want: []ConfigError{{Line: 4, Key: "compaction.keepRecentTokens", Reason: "2000 would keep more than half"}},
		},
		{
			name: "not a mapping",
			yaml: "- model\n",
			want: []ConfigError{{Line: 1, Reason: "the file must be a mapping of settings (key: value), e.g. model: openai/gpt-4o-mini"}},
		},
		{
			name: "not YAML",
			yaml: "model: [unclosed\n",
			want: []ConfigError{{Reason: "not valid YAML"}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, ConfigFile)
			if err := os.WriteFile(path, []byte(c.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := LoadConfig(dir)
			if err == nil {
				t.Fatal("no error")
			}
			var got []*ConfigError
			var joined interface{ Unwrap() []error }
			if errors.As(err, &joined) {
				for _, e := range joined.Unwrap() {
					var ce *ConfigError
					if errors.As(e, &ce) {
						got = append(got, ce)
					}
				}
			} else {
				var ce *ConfigError
				if errors.As(err, &ce) {
					got = append(got, ce)
				}
			}
			if len(got) != len(c.want) {
				t.Fatalf("got %d errors, want %d: %v", len(got), len(c.want), err)
			}
			for i, w := range c.want {
				g := got[i]
				if g.File != path {
					t.Errorf("file %q, want %q", g.File, path)
				}
				if w.Line != 0 && g.Line != w.Line {
					t.Errorf("line %d, want %d (%v)", g.Line, w.Line, g)
				}
				if g.Key != w.Key {
					t.Errorf("key %q, want %q (%v)", g.Key, w.Key, g)
				}
				if !strings.HasPrefix(g.Reason, w.Reason) {
					t.Errorf("reason %q, want %q", g.Reason, w.Reason)
				}
				// The message a user reads names all three.
				msg := err.Error()
				for _, part := range []string{path, w.Key, w.Reason} {
					if !strings.Contains(msg, part) {
						t.Errorf("message %q lacks %q", msg, part)
					}
				}
			}
		})
	}
}

func TestConfigValid(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	yaml := `# comments are fine
model: anthropic/claude-sonnet-4-5
thinkingLevel: off
codingTools: [read, edit]
maxSteps: 40
retry: {modelAttempts: 5, modelTimeout: 90, heartbeat: 30s}
tools:
  deploy: {timeout: 2m, maxAttempts: 3, idempotent: true, deferred: true}
  bash: {requiresApproval: true, approvers: [alice, bob], approvalTimeout: 2h}
env: [GITHUB_TOKEN, DEPLOY_REGION]
allowSecretEnv: [GITHUB_TOKEN, OPENAI_API_KEY]
mcpServers:
  gh: {command: gh-mcp, env: {TOKEN: "${GITHUB_TOKEN}", KEY: "${OPENAI_API_KEY}", HOME: "${HOME}"}}
http: {host: 0.0.0.0, port: 9000, admission: {maxInFlight: 200, maxBacklog: 50, maxBacklogAge: 500ms, retryAfter: 3s}}
limits: {perPrincipal: {concurrentTurns: 2, turnsPerMinute: 20, tokensPerDay: 50000, exemptAdmins: false, exempt: [ci-bot]}}
selfSchedule: true
selfEdit: true
contextWindow: 32000
compaction: {enabled: false, reserveTokens: 4000, keepRecentTokens: 8000}
approvals: {timeout: 30m, approvers: [ops-lead]}
conversation: {whileBusy: steer}
activities:
  tools: {taskQueue: gpu}
  model:
    taskQueue: llm-zone
`
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.Conversation.WhileBusy != "steer" {
		t.Errorf("conversation.whileBusy %q", c.Conversation.WhileBusy)
	}
	if c.ThinkingLevel != "off" {
		t.Errorf("thinkingLevel %q (YAML 1.1 would read off as false)", c.ThinkingLevel)
	}
	if !c.CodingTools.Enabled("edit") || c.CodingTools.Enabled("bash") {
		t.Errorf("codingTools %+v", c.CodingTools)
	}
	if time.Duration(c.Retry.ModelTimeout) != 90*time.Second || time.Duration(c.Tools["deploy"].Timeout) != 2*time.Minute {
		t.Errorf("durations %v %v", c.Retry.ModelTimeout, c.Tools["deploy"].Timeout)
	}
	if c.HTTP.Port != 9000 || c.HTTP.Host != "0.0.0.0" || !c.SelfSchedule || !c.SelfEdit || c.Env[0] != "GITHUB_TOKEN" {
		t.Errorf("config %+v", c)
	}
	if a := c.HTTP.Admission; a.MaxInFlight != 200 || a.MaxBacklog != 50 || a.MaxBacklogAge == nil ||
		time.Duration(*a.MaxBacklogAge) != 500*time.Millisecond || a.RetryAfter == nil || time.Duration(*a.RetryAfter) != 3*time.Second {
		t.Errorf("http.admission %+v", a)
	}
	if pp := c.Limits.PerPrincipal; pp.ConcurrentTurns != 2 || pp.TurnsPerMinute != 20 || pp.TokensPerDay != 50000 || pp.ExemptAdmins == nil || *pp.ExemptAdmins || len(pp.Exempt) != 1 || pp.Exempt[0] != "ci-bot" {
		t.Errorf("limits.perPrincipal %+v", pp)
	}
	if c.ContextWindow != 32000 || c.Compaction.On() || c.Compaction.ReserveTokens != 4000 || c.Compaction.KeepRecentTokens != 8000 {
		t.Errorf("compaction %d %+v", c.ContextWindow, c.Compaction)
	}
	for _, tc := range []struct {
		tool      string
		timeout   time.Duration
		approvers string
	}{
		{"bash", 2 * time.Hour, "alice,bob"},     // the tool's own settings
		{"deploy", 30 * time.Minute, "ops-lead"}, // approvals:
	} {
		timeout, approvers := c.Approval(tc.tool)
		if timeout != tc.timeout || strings.Join(approvers, ",") != tc.approvers {
			t.Errorf("Approval(%s) = %v %v, want %v %s", tc.tool, timeout, approvers, tc.timeout, tc.approvers)
		}
	}
	if timeout, approvers := (Config{}).Approval("bash"); timeout != DefaultApprovalTimeout || approvers != nil {
		t.Errorf("default Approval = %v %v, want %v and no list", timeout, approvers, DefaultApprovalTimeout)
	}
	if c.Activities.Tools.TaskQueue != "gpu" || c.Activities.Model.TaskQueue != "llm-zone" {
		t.Errorf("activities %+v", c.Activities)
	}
	if !(CompactionConfig{}).On() {
		t.Error("compaction is on by default")
	}
	for _, empty := range []string{"", "# nothing yet\n"} {
		if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte(empty), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadConfig(dir); err != nil {
			t.Errorf("empty config %q: %v", empty, err)
		}
	}
}

func TestIsSecretEnv(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"OPENAI_API_KEY": true, "ANTHROPIC_API_KEY": true, "TEMPORAL_API_KEY": true, "TEMPORAL_TLS_CERT": true,
		"TEMPORAL_TLS_KEY": true, "FASTAGENT_STORE": true, "FASTAGENT_API_TOKEN": true, "FASTAGENT_API_TOKENS": true,
		"NATS_TOKEN": true, "NATS_CREDS": true, "SLACK_SIGNING_SECRET": true, "PG_DSN": true, "openai_api_key": true,
		"PATH": false, "GOPATH": false, "DEPLOY_REGION": false, "TEMPORAL_ADDRESS": false, "LANG": false,
	} {
		if got := IsSecretEnv(name); got != want {
			t.Errorf("IsSecretEnv(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestProtectedPaths(t *testing.T) {
	t.Parallel()
	ws := Workspace{Dir: "/w", AgentDir: "/w/agent"}
	has := func(list []string, p string) bool {
		for _, x := range list {
			if x == p {
				return true
			}
		}
		return false
	}
	paths := func(selfEdit bool) []string {
		var out []string
		for _, p := range ProtectedPaths(ws, selfEdit) {
			out = append(out, p.Path)
		}
		return out
	}
	locked, open := paths(false), paths(true)
	for _, p := range []string{"/w/fastagent.yaml", "/w/tools", "/w/channels", "/w/schedules", "/w/.fastagent", "/w/.env", "/w/.git",
		"/w/agent/fastagent.yaml", "/w/agent/tools"} {
		if !has(locked, p) || !has(open, p) {
			t.Errorf("%s not protected", p)
		}
	}
	for _, p := range []string{"/w/agent/persona.md", "/w/agent/AGENTS.md", "/w/agent/skills", "/w/AGENTS.md"} {
		if !has(locked, p) {
			t.Errorf("%s writable without selfEdit", p)
		}
		if has(open, p) {
			t.Errorf("%s protected with selfEdit", p)
		}
	}
}

func TestModelFor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		cfg        Config
		afterTools bool
		want       []string
	}{
		{"model only", Config{Model: "openai/a"}, true, []string{"openai/a"}},
		{"chat model for chat steps", Config{Model: "openai/a", ChatModel: "openai/c", ToolModel: "openai/t"}, false, []string{"openai/c"}},
		{"tool model after tools", Config{Model: "openai/a", ChatModel: "openai/c", ToolModel: "openai/t"}, true, []string{"openai/t"}},
		{"chat model after tools without a tool model", Config{Model: "openai/a", ChatModel: "openai/c"}, true, []string{"openai/c"}},
		{"fallback chain", Config{Models: []string{"openai/a", "anthropic/b", "ollama/c"}}, false, []string{"openai/a", "anthropic/b", "ollama/c"}},
		{"model replaces models[0]", Config{Model: "openai/x", Models: []string{"openai/a", "anthropic/b"}}, false, []string{"openai/x", "anthropic/b"}},
		{"routed primary keeps the fallbacks", Config{Models: []string{"openai/a", "anthropic/b"}, ToolModel: "openai/t"}, true, []string{"openai/t", "openai/a", "anthropic/b"}},
		{"no duplicates", Config{Models: []string{"openai/a", "openai/c"}, ChatModel: "openai/c"}, false, []string{"openai/c", "openai/a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.cfg.ModelFor(tt.afterTools); strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("ModelFor(%v) = %v, want %v", tt.afterTools, got, tt.want)
			}
		})
	}
}

// A spec an embedder serves with its own client may name any provider; the
// same spec without one is refused.
func TestCustomModelSpec(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte("model: acme/house\nmodels: [acme/house, openai/gpt-4o-mini]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(dir); err == nil || !strings.Contains(err.Error(), `"acme/house" is not provider/model`) {
		t.Fatalf("without a client for it: %v, want the spec refused", err)
	}
	c, err := loadConfig(dir, map[string]bool{"acme/house": true})
	if err != nil || c.Model != "acme/house" {
		t.Fatalf("with a client for it: %+v, %v", c, err)
	}
}

// The delegate tool exists only when delegation.agents names someone, and
// its calls resolve to the agent's queue and the bounds, or to a reason
// the model reads.
func TestDelegationResolve(t *testing.T) {
	t.Parallel()
	d := DelegationConfig{Agents: map[string]DelegateAgent{"self": {}, "reviewer": {TaskQueue: "reviewer-q"}}, MaxChildren: 2}
	got, refused := d.Resolve([]byte(`{"agent":"reviewer","task":"check it"}`))
	if refused != "" || got.TaskQueue != "reviewer-q" || got.Task != "check it" || got.MaxDepth != DefaultDelegationDepth ||
		got.MaxChildren != 2 || got.Timeout != DefaultDelegationTimeout {
		t.Errorf("resolve = %+v %q", got, refused)
	}
	for args, want := range map[string]string{
		`{"agent":"boss","task":"x"}`:  `No agent "boss" to delegate to; this agent may delegate to: reviewer, self.`,
		`{"agent":"self","task":"  "}`: "delegate needs a task",
		`{"agent":"self","task":"` + strings.Repeat("x", MaxDelegateTask+1) + `"}`: "a delegated task may have at most",
		`not json`: "delegate needs",
	} {
		if got, refused := d.Resolve([]byte(args)); got != nil || !strings.Contains(refused, want) {
			t.Errorf("resolve %.40s = %+v %q, want a refusal with %q", args, got, refused, want)
		}
	}
	spec := delegateTool{agents: d.Agents}.Spec()
	if !strings.Contains(string(spec.Parameters), `"enum":["reviewer","self"]`) || !strings.Contains(spec.Description, "self: you, with a fresh context") {
		t.Errorf("delegate spec = %s / %s", spec.Parameters, spec.Description)
	}
}
