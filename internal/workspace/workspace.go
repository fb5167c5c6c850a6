// Package workspace loads a file-defined agent: fastagent.yaml, persona.md,
// AGENTS.md files, skills and tools, and assembles the system prompt. The
// definition is re-read for every model call (by an activity, never by
// workflow code), so edits take effect on the next turn without a restart.
package workspace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/delivery"
	"github.com/fastagent/fastagent/internal/memory"
	"github.com/fastagent/fastagent/internal/sandbox"
	"github.com/fastagent/fastagent/internal/toolrun"
	"github.com/fastagent/fastagent/internal/tools"
	"github.com/fastagent/fastagent/internal/waketools"
	"github.com/fastagent/fastagent/workflows/agentloop"
	"github.com/fastagent/fastagent/workflows/wakes"
)

// Workspace locates an agent: Dir is the working directory tools run in;
// AgentDir holds the agent surface (persona.md, skills/, tools/, …) and
// defaults to Dir.
type Workspace struct {
	Dir      string
	AgentDir string
}

// Diagnostic is a problem found while loading that did not stop the load
// (a broken tool file, a name collision).
type Diagnostic struct {
	File    string `json:"file"`
	Message string `json:"message"`
}

func (d Diagnostic) String() string { return d.File + ": " + d.Message }

// Definition is a loaded agent.
type Definition struct {
	Workspace Workspace
	Config    Config
	// ConfigPath is the fastagent.yaml that was read ("" when there is none).
	ConfigPath string
	// ModelSource says where Config.Model came from: "FASTAGENT_MODEL", the
	// config file's path, or "" when no model is set.
	ModelSource  string
	Persona      string
	ContextFiles []ContextFile
	Skills       []Skill
	// Tools in precedence order: built-ins, then Go-registered, then MCP,
	// then workspace tools, then search_tools. Earlier names win.
	Tools []ToolEntry
	// Hooks are hooks/*.yaml in file-name order.
	Hooks []Hook
	// Collisions lists tools skipped because an earlier one had their name
	// (each is also a diagnostic).
	Collisions  []Collision
	Diagnostics []Diagnostic
}

// Origins of tools (ToolEntry.Origin); workspace and MCP tools carry a
// suffix: "workspace:tools/x.yaml", "mcp:<server>".
const (
	OriginBuiltin   = "builtin"
	OriginGo        = "go"
	OriginMCP       = "mcp:"
	OriginWorkspace = "workspace:"
)

// ToolEntry is a tool and where it came from.
type ToolEntry struct {
	Tool   agent.Tool
	Origin string // builtin, go, mcp:<server>, workspace:<file>
}

// Collision is a tool that lost to an earlier one of the same name.
type Collision struct {
	Name    string `json:"name"`
	Kept    string `json:"kept"`    // origin of the tool in use
	Skipped string `json:"skipped"` // origin of the ignored one
}

// ContextFile is one AGENTS.md.
type ContextFile struct {
	Path    string
	Content string
}

// Loader loads the definition of one workspace on demand. It is safe for
// concurrent use.
type Loader struct {
	ws Workspace
	// Extra are Go tools registered by a library user on the worker.
	Extra []agent.Tool
	// MCP provides the tools of the config's mcpServers (NewLoader sets
	// one backed by internal/mcp; nil means no MCP tools).
	MCP MCPSource
	// Getenv reads the worker's environment (default os.Getenv).
	Getenv func(string) string
	// Wakes bounds the wake/unwake tools (selfSchedule: true); zero values
	// take FastAgent's bounds.
	Wakes waketools.Options
	// Sandbox confines every process a tool starts (bash, workspace tools,
	// MCP stdio servers); without one they refuse to run.
	Sandbox *sandbox.Sandbox
	// CustomModels are model specs served by clients an embedder built
	// (fastagent.Options.Models): the config may name them whatever their
	// provider.
	CustomModels map[string]bool

	// othersMu guards others: what no tool of this agent may change or
	// read beyond its own rules (SetOthers).
	othersMu sync.Mutex
	others   []tools.Protected

	// contextStop, when set, ends the AGENTS.md walk at this directory
	// instead of the filesystem root (tests use it to stay in a fixture).
	contextStop string
	folders     folderIDs
	manifests   manifestCache
	mcpDefault  *mcpManagers
}

// NewLoader returns a loader for dir. agentDir, when not empty, overrides the
// config's agentDir (relative to dir).
func NewLoader(dir, agentDir string) (*Loader, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	if st, err := os.Stat(abs); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("workspace: %s is not a directory", abs)
	}
	ws := Workspace{Dir: abs}
	if agentDir != "" {
		ws.AgentDir = resolveUnder(abs, agentDir)
	}
	mcps := &mcpManagers{log: slog.Default()}
	return &Loader{ws: ws, Getenv: os.Getenv, MCP: mcps, mcpDefault: mcps}, nil
}

// SetOthers gives the loader what no tool of this agent may change, or
// read when Secret, beyond its own rules: the rules, secrets files and
// state dirs of the other agents the worker serves (OthersPaths) and the
// worker's own state dir and tokens file. They join the protected list of
// every tool from the next load on.
func (l *Loader) SetOthers(list []tools.Protected) {
	l.othersMu.Lock()
	defer l.othersMu.Unlock()
	l.others = append([]tools.Protected(nil), list...)
}

// protected is the list every tool of d gets: the agent's own rules
// (ProtectedPaths), the others' (SetOthers), and the paths the sandbox
// hides from every tool (so that the in-process tools refuse them too).
func (l *Loader) protected(d *Definition) []tools.Protected {
	out := ProtectedPaths(d.Workspace, d.Config.SelfEdit)
	seen := map[string]bool{}
	for _, p := range out {
		seen[p.Path] = true
	}
	add := func(p tools.Protected) {
		if p.Path = filepath.Clean(p.Path); p.Path != "" && !seen[p.Path] {
			seen[p.Path] = true
			out = append(out, p)
		}
	}
	for _, p := range hookProtected(d) {
		add(p)
	}
	l.othersMu.Lock()
	for _, p := range l.others {
		add(p)
	}
	l.othersMu.Unlock()
	if l.Sandbox != nil {
		for _, h := range l.Sandbox.Hidden() {
			add(tools.Protected{Path: h, Reason: "it holds the worker's secrets or credentials", Secret: true, IfExists: true})
		}
	}
	return out
}

// Close stops the MCP servers the loader started (stdio servers are
// terminated with their process groups). Call it when the worker stops.
func (l *Loader) Close() {
	if l.mcpDefault != nil {
		l.mcpDefault.Close()
	}
}

// hasContent reports whether the file at p exists with more than
// whitespace in it: an empty agent-dir fastagent.yaml (the sandbox's
// placeholder, which keeps tools from creating one) does not hide the
// workspace's.
func hasContent(p string) bool {
	b, err := os.ReadFile(p)
	return err == nil && strings.TrimSpace(string(b)) != ""
}

// resolveContextRoot returns the directory the AGENTS.md walk stops at:
// contextRoot (relative to the workspace, or absolute) when it is the
// workspace or one of its ancestors, else the workspace.
func resolveContextRoot(dir, contextRoot string) string {
	if contextRoot == "" {
		return dir
	}
	root := resolveUnder(dir, contextRoot)
	if rel, err := filepath.Rel(root, dir); err != nil || strings.HasPrefix(rel, "..") {
		return dir
	}
	return root
}

func resolveUnder(base, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(base, p)
}

// Workspace returns the loader's workspace (AgentDir may be resolved later
// from the config).
func (l *Loader) Workspace() Workspace { return l.ws }

// Load reads the definition from disk. A broken config is an error; broken
// skills and tools are diagnostics.
func (l *Loader) Load(ctx context.Context) (*Definition, error) {
	ws := l.ws
	if ws.AgentDir != "" {
		if err := l.folders.check(ws); err != nil {
			return nil, err
		}
	}
	cfgDir := ws.Dir
	if ws.AgentDir != "" && hasContent(filepath.Join(ws.AgentDir, ConfigFile)) {
		cfgDir = ws.AgentDir
	}
	cfg, err := loadConfig(cfgDir, l.CustomModels)
	if err != nil {
		return nil, err
	}
	if cfg.Model == "" && len(cfg.Models) > 0 {
		cfg.Model = cfg.Models[0]
	}
	d := &Definition{Config: cfg}
	if _, err := os.Stat(filepath.Join(cfgDir, ConfigFile)); err == nil {
		d.ConfigPath = filepath.Join(cfgDir, ConfigFile)
	}
	if ws.AgentDir == "" {
		ws.AgentDir = ws.Dir
		if cfg.AgentDir != "" {
			ws.AgentDir = resolveUnder(ws.Dir, cfg.AgentDir)
			if err := l.folders.check(ws); err != nil {
				return nil, err
			}
		}
	}
	if st, err := os.Stat(ws.AgentDir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("workspace: agent dir %s is not a directory (check agentDir / --agent-dir)", ws.AgentDir)
	}
	d.Workspace = ws
	getenv := l.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if cfg.Model != "" {
		d.ModelSource = d.ConfigPath
	}
	if m := getenv("FASTAGENT_MODEL"); m != "" {
		d.Config.Model = m
		d.ModelSource = "FASTAGENT_MODEL"
		if err := d.Config.validateWith(l.CustomModels); err != nil {
			return nil, fmt.Errorf("FASTAGENT_MODEL: %w", err)
		}
	}
	if w := getenv("FASTAGENT_IDEMPOTENCY_WINDOW"); w != "" {
		v, err := time.ParseDuration(w)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("FASTAGENT_IDEMPOTENCY_WINDOW: %q is not a positive duration like 24h or 90m", w)
		}
		d.Config.IdempotencyWindow = Duration(v)
		if err := d.Config.ValidateIdleTTL(); err != nil {
			return nil, fmt.Errorf("FASTAGENT_IDEMPOTENCY_WINDOW: %s: %w", d.ConfigPath, err)
		}
	}
	if d.Hooks, err = loadHooks(ws.AgentDir); err != nil {
		return nil, err
	}
	prot := l.protected(d)
	l.armHooks(d, prot)
	if b, ok := readPrompt(filepath.Join(ws.AgentDir, "persona.md"), prot, &d.Diagnostics); ok {
		d.Persona = strings.TrimSpace(string(b))
	}
	root := resolveContextRoot(ws.Dir, cfg.ContextRoot)
	if cfg.ContextRoot != "" && root != filepath.Clean(resolveUnder(ws.Dir, cfg.ContextRoot)) {
		return nil, &ConfigError{File: d.ConfigPath, Key: "contextRoot",
			Reason: fmt.Sprintf("%s is not the workspace %s or one of its parent directories", cfg.ContextRoot, ws.Dir)}
	}
	d.ContextFiles = contextFiles(ws, root, l.contextStop, prot, &d.Diagnostics)
	d.Skills, d.Diagnostics = loadSkills(ws.AgentDir, d.Diagnostics, prot)
	l.addTools(ctx, d, prot)
	return d, nil
}

// maxPromptFile bounds a file the loader copies into the prompt.
const maxPromptFile = 8 << 20

// readPrompt reads a prompt file (tools.ReadPromptFile): a missing one is
// not there (false); one that cannot be taken is a diagnostic.
func readPrompt(p string, prot []tools.Protected, diags *[]Diagnostic) ([]byte, bool) {
	b, err := tools.ReadPromptFile(p, prot, maxPromptFile)
	switch {
	case err == nil:
		return b, true
	case errors.Is(err, fs.ErrNotExist):
	default:
		*diags = append(*diags, Diagnostic{File: p, Message: "not loaded: " + err.Error()})
	}
	return nil, false
}

func (l *Loader) addTools(ctx context.Context, d *Definition, protected []tools.Protected) {
	seen := map[string]string{}
	add := func(t agent.Tool, origin, file string) {
		name := t.Spec().Name
		if prev, ok := seen[name]; ok {
			d.Collisions = append(d.Collisions, Collision{Name: name, Kept: prev, Skipped: origin})
			d.Diagnostics = append(d.Diagnostics, Diagnostic{File: file, Message: fmt.Sprintf("tool %q is already defined (%s); this one (%s) is ignored", name, prev, origin)})
			return
		}
		seen[name] = origin
		d.Tools = append(d.Tools, ToolEntry{Tool: d.configure(t), Origin: origin})
	}
	for _, t := range tools.Builtin(tools.Options{
		Bash:      tools.BashOptions{ExtraEnv: d.Config.Env, Network: d.Config.ToolNetwork(tools.NameBash, nil)},
		Protected: protected, Sandbox: l.Sandbox,
	}) {
		if d.Config.CodingTools.Enabled(t.Spec().Name) {
			add(t, OriginBuiltin, OriginBuiltin)
		}
	}
	for _, t := range l.Extra {
		if ft, ok := t.(tools.FileTool); ok {
			t = ft.WithProtected(protected)
		}
		add(t, OriginGo, OriginGo)
	}
	if l.MCP != nil && len(d.Config.MCPServers) > 0 {
		mts, diags := l.MCP.Tools(ctx, MCPContext{Workspace: d.Workspace, Sandbox: l.Sandbox, Protected: protected, Config: d.Config}, d.Config.MCPServers)
		d.Diagnostics = append(d.Diagnostics, diags...)
		for _, mt := range mts {
			t := mt.Tool
			if d.Config.MCPServers[mt.Server].Deferred {
				t = deferredTool{t}
			}
			add(t, OriginMCP+mt.Server, OriginMCP+mt.Server)
		}
	}
	wts, diags := l.workspaceTools(d)
	d.Diagnostics = append(d.Diagnostics, diags...)
	for _, wt := range wts {
		add(wt.Tool, OriginWorkspace+wt.rel, wt.file)
	}
	if _, taken := seen[SearchToolsName]; !taken && d.hasDeferred() {
		add(newSearchTool(d), OriginBuiltin, OriginBuiltin)
	}
	if _, taken := seen[AskUserName]; !taken && d.Config.AskUser {
		add(askUserTool{}, OriginBuiltin, OriginBuiltin)
	}
	if _, taken := seen[agentloop.DelegateTool]; !taken && len(d.Config.Delegation.Agents) > 0 {
		add(delegateTool{agents: d.Config.Delegation.Agents}, OriginBuiltin, OriginBuiltin)
	}
	if d.Config.SelfSchedule {
		// An authored wake or unwake replaces both built-ins.
		_, w := seen[wakes.WakeName]
		_, u := seen[wakes.UnwakeName]
		if !w && !u {
			for _, t := range waketools.Tools(l.Wakes) {
				add(t, OriginBuiltin, OriginBuiltin)
			}
		}
	}
	for _, t := range configuredBuiltins(d, protected) {
		if _, taken := seen[t.Spec().Name]; !taken {
			add(t, OriginBuiltin, OriginBuiltin)
		}
	}
	for _, name := range sortedKeys(d.Config.Tools) {
		if _, ok := seen[name]; !ok {
			file := d.ConfigPath
			if file == "" {
				file = ConfigFile
			}
			d.Diagnostics = append(d.Diagnostics, Diagnostic{File: file, Message: fmt.Sprintf("tools.%s: there is no tool named %q; these settings are unused", name, name)})
		}
	}
}

// configuredBuiltins are the built-in tools fastagent.yaml turns on by a
// block of its own: memory's (memory.enabled) and delivery's
// (delivery.allow), the latter reading files with protected.
func configuredBuiltins(d *Definition, protected []tools.Protected) []agent.Tool {
	var out []agent.Tool
	if d.Config.Memory.Enabled {
		out = append(out, memory.Tools(d.Config.Memory.ScopeOrDefault(), d.Config.Memory.OwnerlessWrites)...)
	}
	if d.Config.Delivery.Enabled() {
		out = append(out, delivery.Tools(d.Config.Delivery.Allowed(), protected)...)
	}
	return out
}

// configure applies per-tool settings from the config.
func (d *Definition) configure(t agent.Tool) agent.Tool {
	tc, ok := d.Config.Tools[t.Spec().Name]
	if !ok {
		return t
	}
	if ct, ok := t.(*toolrun.Tool); ok && tc.Timeout > 0 {
		// The command's own timeout moves, and with it the runtime bound.
		t = ct.WithTimeout(time.Duration(tc.Timeout))
		tc.Timeout = 0
	}
	return configuredTool{Tool: t, cfg: tc}
}

type configuredTool struct {
	agent.Tool
	cfg ToolConfig
}

func (c configuredTool) Spec() agent.ToolSpec {
	s := c.Tool.Spec()
	if c.cfg.Timeout > 0 {
		s.Timeout = timeDuration(c.cfg.Timeout)
	}
	if c.cfg.Idempotent != nil {
		s.Idempotent = *c.cfg.Idempotent
	}
	if c.cfg.RequiresApproval != nil {
		s.RequiresApproval = c.cfg.RequiresApproval.On
	}
	if c.cfg.Deferred != nil {
		s.Deferred = *c.cfg.Deferred
	}
	return s
}

// deferredTool keeps a tool out of the request until activated.
type deferredTool struct{ agent.Tool }

func (t deferredTool) Spec() agent.ToolSpec {
	s := t.Tool.Spec()
	s.Deferred = true
	return s
}

// Tool finds a tool by name.
func (d *Definition) Tool(name string) (agent.Tool, bool) {
	for _, t := range d.Tools {
		if t.Tool.Spec().Name == name {
			return t.Tool, true
		}
	}
	return nil, false
}

// MaxAttempts is the configured retry bound of an idempotent tool (0 = default).
func (d *Definition) MaxAttempts(name string) int { return d.Config.Tools[name].MaxAttempts }

// ActiveSpecs returns the specs sent to the model: every tool that is not
// deferred, plus the deferred ones activated in this session.
func (d *Definition) ActiveSpecs(activated []string) []agent.ToolSpec {
	return d.specs("", activated)
}

// SessionSpecs is ActiveSpecs for one session: tools that exist only in
// some sessions (SessionTool, such as a channel's tools) are left out of
// the others.
func (d *Definition) SessionSpecs(session string, activated []string) []agent.ToolSpec {
	return d.specs(session, activated)
}

func (d *Definition) specs(session string, activated []string) []agent.ToolSpec {
	on := map[string]bool{}
	for _, n := range activated {
		on[n] = true
	}
	var out []agent.ToolSpec
	for _, t := range d.Tools {
		s := t.Tool.Spec()
		if session != "" && !ForSession(t.Tool, session) {
			continue
		}
		if !s.Deferred || on[s.Name] {
			out = append(out, s)
		}
	}
	return out
}

// SessionTool is implemented by a tool that exists only in some sessions:
// a channel's tool (slack_send_file) in that channel's sessions.
type SessionTool interface {
	ForSession(session string) bool
}

// ForSession reports whether t exists in session: true unless t (or the
// tool it wraps) is a SessionTool refusing it.
func ForSession(t agent.Tool, session string) bool {
	for {
		switch w := t.(type) {
		case SessionTool:
			return w.ForSession(session)
		case configuredTool:
			t = w.Tool
		case deferredTool:
			t = w.Tool
		default:
			return true
		}
	}
}

// contextFiles returns the agent dir's AGENTS.md, then every AGENTS.md from
// the working directory up to root (the workspace itself unless
// contextRoot names an ancestor, such as the repository root; never
// further, so nothing above the project can inject instructions), or up to
// stop when that is nearer (tests).
func contextFiles(ws Workspace, root, stop string, prot []tools.Protected, diags *[]Diagnostic) []ContextFile {
	var out []ContextFile
	seen := map[string]bool{}
	read := func(dir string) {
		p := filepath.Join(dir, "AGENTS.md")
		if seen[p] {
			return
		}
		seen[p] = true
		// An empty one (the sandbox's placeholder, for one) adds nothing.
		if b, ok := readPrompt(p, prot, diags); ok && strings.TrimSpace(string(b)) != "" {
			out = append(out, ContextFile{Path: p, Content: strings.TrimSpace(string(b))})
		}
	}
	if ws.AgentDir != "" {
		read(ws.AgentDir)
	}
	if root == "" {
		root = ws.Dir
	}
	for dir := ws.Dir; ; {
		read(dir)
		parent := filepath.Dir(dir)
		if parent == dir || dir == root || (stop != "" && dir == stop) {
			break
		}
		dir = parent
	}
	return out
}

// Skill is skills/<name>/SKILL.md.
type Skill struct {
	Name        string
	Description string
	Path        string
	// DisableModelInvocation hides the skill from the prompt listing.
	DisableModelInvocation bool
}

func loadSkills(agentDir string, diags []Diagnostic, prot []tools.Protected) ([]Skill, []Diagnostic) {
	root := filepath.Join(agentDir, "skills")
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, diags
	}
	realAgent, err := filepath.EvalSymlinks(agentDir)
	if err != nil {
		realAgent = agentDir
	}
	var out []Skill
	for _, e := range entries {
		p := filepath.Join(root, e.Name(), "SKILL.md")
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			if e.IsDir() || e.Type()&os.ModeSymlink != 0 {
				diags = append(diags, Diagnostic{File: p, Message: "skill has no SKILL.md; skipped"})
			}
			continue
		}
		if !within(realAgent, real) {
			diags = append(diags, Diagnostic{File: p, Message: "skill resolves outside the agent dir (symlink); refused"})
			continue
		}
		b, ok := readPrompt(real, prot, &diags)
		if !ok {
			continue
		}
		fm, err := frontmatter(string(b))
		if err != nil {
			diags = append(diags, Diagnostic{File: p, Message: err.Error()})
			continue
		}
		s := Skill{Name: fm["name"], Description: fm["description"], Path: p, DisableModelInvocation: fm["disable-model-invocation"] == "true"}
		if s.Name == "" {
			s.Name = e.Name()
		}
		if s.Description == "" {
			diags = append(diags, Diagnostic{File: p, Message: "skill has no description in its frontmatter; skipped"})
			continue
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, diags
}

func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// frontmatter reads simple "key: value" lines between --- fences.
func frontmatter(s string) (map[string]string, error) {
	s = strings.TrimPrefix(s, "\ufeff")
	if !strings.HasPrefix(s, "---") {
		return nil, fmt.Errorf("SKILL.md must start with a --- frontmatter block (name, description)")
	}
	rest := strings.TrimPrefix(s, "---")
	end := strings.Index(rest, "\n---")
	if end < 0 {
		return nil, fmt.Errorf("SKILL.md frontmatter is not closed with ---")
	}
	out := map[string]string{}
	for _, line := range strings.Split(rest[:end], "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		out[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"'`)
	}
	return out, nil
}

// ParseSkill reads a SKILL.md's front matter as the loader does: name
// (default dirName) and description (required). It is what `fastagent add
// skill` checks before it copies a skill in.
func ParseSkill(b []byte, dirName string) (Skill, error) {
	fm, err := frontmatter(string(b))
	if err != nil {
		return Skill{}, err
	}
	s := Skill{Name: fm["name"], Description: fm["description"], DisableModelInvocation: fm["disable-model-invocation"] == "true"}
	if s.Name == "" {
		s.Name = dirName
	}
	if s.Description == "" {
		return Skill{}, errors.New("SKILL.md has no description in its frontmatter (the model picks skills by it)")
	}
	if !safeName.MatchString(s.Name) {
		return Skill{}, fmt.Errorf("skill name %q must be letters, digits, '.', '-' and '_'", s.Name)
	}
	return s, nil
}
