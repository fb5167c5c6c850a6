package workspace

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/sandbox/sandboxtest"

	"github.com/fastagent/fastagent/agent"
)

// writeFiles creates files under dir; *.sh files are executable.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(name, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
}

// load writes files into a new workspace and loads it.
func load(t *testing.T, files map[string]string, configure func(*Loader)) *Definition {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, files)
	l, err := NewLoader(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	l.contextStop = dir
	l.Getenv = func(string) string { return "" }
	l.Sandbox = sandboxtest.Box()
	if configure != nil {
		configure(l)
	}
	d, err := l.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func hasSpec(specs []agent.ToolSpec, name string) bool {
	for _, s := range specs {
		if s.Name == name {
			return true
		}
	}
	return false
}

func specNames(specs []agent.ToolSpec) []string {
	var out []string
	for _, s := range specs {
		out = append(out, s.Name)
	}
	return out
}

func origins(d *Definition) map[string]string {
	m := map[string]string{}
	for _, e := range d.Tools {
		m[e.Tool.Spec().Name] = e.Origin
	}
	return m
}

func diagText(d *Definition) string {
	var b strings.Builder
	for _, x := range d.Diagnostics {
		b.WriteString(x.String() + "\n")
	}
	return b.String()
}

// fakeTool is a Go-registered (or MCP) tool.
type fakeTool struct {
	name     string
	deferred bool
}

func (f fakeTool) Spec() agent.ToolSpec {
	return agent.ToolSpec{Name: f.name, Description: "fake " + f.name, Deferred: f.deferred}
}

func (f fakeTool) Run(context.Context, agent.ToolCall) (agent.ToolResult, error) {
	return agent.ToolResult{Content: "ran " + f.name}, nil
}

func TestAgentDirResolution(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		files    map[string]string
		flag     string
		wantDir  string // agent dir relative to the workspace
		wantCfg  string // config file relative to the workspace ("" = none)
		wantTool string // a workspace tool that must load
		wantErr  string
	}{
		{name: "default is the working directory", files: map[string]string{"persona.md": "p"}, wantDir: "."},
		{
			name:    "config agentDir",
			files:   map[string]string{"fastagent.yaml": "agentDir: bot\n", "bot/persona.md": "p"},
			wantDir: "bot", wantCfg: "fastagent.yaml",
		},
		{
			name:    "flag wins over config",
			files:   map[string]string{"fastagent.yaml": "agentDir: bot\n", "bot/persona.md": "p", "other/persona.md": "o"},
			flag:    "other",
			wantDir: "other", wantCfg: "fastagent.yaml",
		},
		{
			name: "flag with config inside the agent dir",
			files: map[string]string{
				"fastagent.yaml":        "model: openai/root-model\n",
				".agent/fastagent.yaml": "model: openai/agent-model\n",
				".agent/tools/hi.yaml":  "description: say hi\ncommand: echo hi\n",
			},
			flag:    ".agent",
			wantDir: ".agent", wantCfg: ".agent/fastagent.yaml", wantTool: "hi",
		},
		{
			name:    "missing agent dir",
			files:   map[string]string{"fastagent.yaml": "agentDir: nowhere\n"},
			wantErr: "check agentDir / --agent-dir",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			writeFiles(t, dir, c.files)
			l, err := NewLoader(dir, c.flag)
			if err != nil {
				t.Fatal(err)
			}
			l.Getenv = func(string) string { return "" }
			d, err := l.Load(context.Background())
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Workspace.Dir != dir {
				t.Errorf("Dir = %s, want %s (the working directory never moves)", d.Workspace.Dir, dir)
			}
			if want := filepath.Join(dir, c.wantDir); d.Workspace.AgentDir != want {
				t.Errorf("AgentDir = %s, want %s", d.Workspace.AgentDir, want)
			}
			wantCfg := ""
			if c.wantCfg != "" {
				wantCfg = filepath.Join(dir, c.wantCfg)
			}
			if d.ConfigPath != wantCfg {
				t.Errorf("ConfigPath = %q, want %q", d.ConfigPath, wantCfg)
			}
			if c.wantTool != "" {
				if o := origins(d)[c.wantTool]; o != "workspace:tools/"+c.wantTool+".yaml" {
					t.Errorf("tool %s origin %q; tools %v", c.wantTool, o, origins(d))
				}
				if d.Config.Model != "openai/agent-model" {
					t.Errorf("model %q: the agent dir's config was not used", d.Config.Model)
				}
			}
		})
	}
}

func TestModelSource(t *testing.T) {
	t.Parallel()
	files := map[string]string{"fastagent.yaml": "model: openai/from-file\n"}
	d := load(t, files, nil)
	if d.Config.Model != "openai/from-file" || d.ModelSource != d.ConfigPath || d.ConfigPath == "" {
		t.Errorf("file: model %q source %q config %q", d.Config.Model, d.ModelSource, d.ConfigPath)
	}
	d = load(t, files, func(l *Loader) {
		l.Getenv = func(k string) string {
			if k == "FASTAGENT_MODEL" {
				return "anthropic/from-env"
			}
			return ""
		}
	})
	if d.Config.Model != "anthropic/from-env" || d.ModelSource != "FASTAGENT_MODEL" {
		t.Errorf("env: model %q source %q", d.Config.Model, d.ModelSource)
	}
	if d := load(t, nil, nil); d.Config.Model != "" || d.ModelSource != "" {
		t.Errorf("unset: model %q source %q", d.Config.Model, d.ModelSource)
	}

	dir := t.TempDir()
	l, _ := NewLoader(dir, "")
	l.Getenv = func(string) string { return "gpt-4o" }
	if _, err := l.Load(context.Background()); err == nil || !strings.Contains(err.Error(), "FASTAGENT_MODEL") || !strings.Contains(err.Error(), "provider/model") {
		t.Errorf("bad FASTAGENT_MODEL: err = %v", err)
	}
}

func TestToolPrecedenceAndCollisions(t *testing.T) {
	t.Parallel()
	files := map[string]string{
		"tools/read.yaml":   "description: my own read\ncommand: cat\n",
		"tools/lookup.yaml": "description: workspace lookup\ncommand: cat\n",
		"tools/search.yaml": "description: workspace search\ncommand: cat\n",
		"tools/mine.yaml":   "description: only here\ncommand: cat\n",
	}
	mcp := fakeMCP{tools: []MCPTool{{Server: "docs", Tool: fakeTool{name: "search"}}, {Server: "docs", Tool: fakeTool{name: "lookup"}}}}
	d := load(t, map[string]string{
		"fastagent.yaml":    "mcpServers:\n  docs:\n    url: http://127.0.0.1:1/mcp\n    allowPrivate: true\n",
		"tools/read.yaml":   files["tools/read.yaml"],
		"tools/lookup.yaml": files["tools/lookup.yaml"],
		"tools/search.yaml": files["tools/search.yaml"],
		"tools/mine.yaml":   files["tools/mine.yaml"],
	}, func(l *Loader) {
		l.Extra = []agent.Tool{fakeTool{name: "lookup"}, fakeTool{name: "bash"}}
		l.MCP = mcp
	})
	want := map[string]string{
		"read":   OriginBuiltin,
		"bash":   OriginBuiltin,
		"lookup": OriginGo,
		"search": "mcp:docs",
		"mine":   "workspace:tools/mine.yaml",
	}
	got := origins(d)
	for name, origin := range want {
		if got[name] != origin {
			t.Errorf("tool %s origin %q, want %q", name, got[name], origin)
		}
	}
	var order []string
	for _, e := range d.Tools {
		order = append(order, e.Tool.Spec().Name)
	}
	if strings.Join(order, ",") != "read,bash,edit,write,lookup,search,mine" {
		t.Errorf("tool order %v", order)
	}
	wantCollisions := []Collision{
		{Name: "bash", Kept: "builtin", Skipped: "go"},
		{Name: "lookup", Kept: "go", Skipped: "mcp:docs"},
		{Name: "lookup", Kept: "go", Skipped: "workspace:tools/lookup.yaml"},
		{Name: "read", Kept: "builtin", Skipped: "workspace:tools/read.yaml"},
		{Name: "search", Kept: "mcp:docs", Skipped: "workspace:tools/search.yaml"},
	}
	if len(d.Collisions) != len(wantCollisions) {
		t.Fatalf("collisions %+v, want %+v", d.Collisions, wantCollisions)
	}
	for _, w := range wantCollisions {
		found := false
		for _, c := range d.Collisions {
			found = found || c == w
		}
		if !found {
			t.Errorf("collision %+v not reported; got %+v", w, d.Collisions)
		}
	}
	if diags := diagText(d); !strings.Contains(diags, filepath.Join("tools", "read.yaml")+`: tool "read" is already defined (builtin)`) {
		t.Errorf("diagnostics do not name the losing file:\n%s", diags)
	}

	// With coding tools off, the workspace's read is the read tool.
	d = load(t, map[string]string{"fastagent.yaml": "codingTools: false\n", "tools/read.yaml": files["tools/read.yaml"]}, nil)
	if o := origins(d)["read"]; o != "workspace:tools/read.yaml" || len(d.Collisions) != 0 {
		t.Errorf("codingTools false: read origin %q, collisions %v", o, d.Collisions)
	}
	// A subset keeps only the named built-ins.
	d = load(t, map[string]string{"fastagent.yaml": "codingTools: [read]\n"}, nil)
	if names := specNames(d.ActiveSpecs(nil)); strings.Join(names, ",") != "read" {
		t.Errorf("codingTools [read]: tools %v", names)
	}
}

type fakeMCP struct {
	tools []MCPTool
	diags []Diagnostic
}

func (f fakeMCP) Tools(_ context.Context, _ MCPContext, servers map[string]MCPServer) ([]MCPTool, []Diagnostic) {
	var out []MCPTool
	for _, t := range f.tools {
		if _, ok := servers[t.Server]; ok {
			out = append(out, t)
		}
	}
	return out, f.diags
}

func TestMCPSeam(t *testing.T) {
	t.Parallel()
	mcp := fakeMCP{
		tools: []MCPTool{{Server: "cal", Tool: fakeTool{name: "list_events"}}, {Server: "gh", Tool: fakeTool{name: "open_issue"}}},
		diags: []Diagnostic{{File: "mcp:broken", Message: "server exited"}},
	}
	d := load(t, map[string]string{"fastagent.yaml": "mcpServers:\n  cal:\n    command: cal-mcp\n    deferred: true\n  gh:\n    url: https://example.com/mcp\n"}, func(l *Loader) { l.MCP = mcp })
	o := origins(d)
	if o["list_events"] != "mcp:cal" || o["open_issue"] != "mcp:gh" {
		t.Errorf("origins %v", o)
	}
	specs := d.ActiveSpecs(nil)
	if hasSpec(specs, "list_events") || !hasSpec(specs, "open_issue") || !hasSpec(specs, SearchToolsName) {
		t.Errorf("a deferred server's tools must wait for search_tools: %v", specNames(specs))
	}
	if !strings.Contains(diagText(d), "mcp:broken: server exited") {
		t.Errorf("MCP diagnostics lost: %s", diagText(d))
	}
	// No servers configured: the source is not consulted.
	d = load(t, nil, func(l *Loader) { l.MCP = mcp })
	if _, ok := d.Tool("open_issue"); ok {
		t.Error("MCP tools loaded without mcpServers")
	}
}

func TestUnusedToolSettings(t *testing.T) {
	t.Parallel()
	d := load(t, map[string]string{"fastagent.yaml": "tools:\n  nope:\n    maxAttempts: 3\n  bash:\n    maxAttempts: 2\n"}, nil)
	diags := diagText(d)
	if !strings.Contains(diags, `tools.nope: there is no tool named "nope"`) || strings.Contains(diags, "tools.bash") {
		t.Errorf("diagnostics:\n%s", diags)
	}
	if d.MaxAttempts("bash") != 2 {
		t.Errorf("MaxAttempts(bash) = %d", d.MaxAttempts("bash"))
	}
}

func TestChannelsAndSchedules(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"agent/channels/slack.yaml":             "x",
		"agent/channels/telegram.yaml.disabled": "x",
		"agent/channels/.hidden":                "x",
		"agent/schedules/daily.yaml":            "x",
	})
	ws := Workspace{Dir: dir, AgentDir: filepath.Join(dir, "agent")}
	ch := ws.Channels()
	if len(ch) != 2 || ch[0].Name != "slack" || !ch[0].Enabled || ch[1].Name != "telegram" || ch[1].Enabled {
		t.Errorf("channels %+v", ch)
	}
	if s := ws.Schedules(); len(s) != 1 || s[0].Name != "daily" || s[0].Path != filepath.Join(dir, "agent/schedules/daily.yaml") {
		t.Errorf("schedules %+v", s)
	}
	if s := (Workspace{Dir: dir}).Schedules(); s != nil {
		t.Errorf("schedules of the working dir %+v", s)
	}
}

func symlink(target, link string) error { return os.Symlink(target, link) }

func contextWithTimeout(t *testing.T, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), d)
}

// sessions.idleTTL may not be shorter than the idempotency window in
// effect: FASTAGENT_IDEMPOTENCY_WINDOW, which overrides the file's, is
// checked too, and the error names the minimum.
func TestIdleTTLAgainstTheWindowFromTheEnvironment(t *testing.T) {
	t.Parallel()
	files := map[string]string{"fastagent.yaml": "idempotencyWindow: 1h\nsessions:\n  idleTTL: 2h\n"}
	if d := load(t, files, nil); time.Duration(d.Config.Sessions.IdleTTL) != 2*time.Hour {
		t.Fatalf("idleTTL %v", d.Config.Sessions.IdleTTL)
	}
	dir := t.TempDir()
	writeFiles(t, dir, files)
	l, err := NewLoader(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	l.Sandbox = sandboxtest.Box()
	l.Getenv = func(k string) string {
		if k == "FASTAGENT_IDEMPOTENCY_WINDOW" {
			return "3h"
		}
		return ""
	}
	_, err = l.Load(context.Background())
	if err == nil || !strings.Contains(err.Error(), "FASTAGENT_IDEMPOTENCY_WINDOW") || !strings.Contains(err.Error(), "sessions.idleTTL") ||
		!strings.Contains(err.Error(), "the minimum is 3h0m0s") {
		t.Errorf("idleTTL 2h under a 3h window from the environment: err = %v", err)
	}
}
