// Package workspace loads a file-defined agent: fastagent.yaml, persona.md,
// AGENTS.md files, skills and tools, and assembles the system prompt. The
// definition is re-read for every model call (by an activity, never by
// workflow code), so edits take effect on the next turn without a restart.
package workspace

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/tools"
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
	Workspace    Workspace
	Config       Config
	Persona      string
	ContextFiles []ContextFile
	Skills       []Skill
	// Tools in precedence order: built-ins, then Go-registered, then MCP,
	// then workspace tools. Earlier names win.
	Tools       []ToolEntry
	Diagnostics []Diagnostic
}

// ToolEntry is a tool and where it came from.
type ToolEntry struct {
	Tool   agent.Tool
	Origin string // builtin, go, mcp:<server>, workspace:<file>
}

// ContextFile is one AGENTS.md.
type ContextFile struct {
	Path    string
	Content string
}

// Loader loads the definition of one workspace on demand.
type Loader struct {
	ws Workspace
	// Extra are Go tools registered by a library user on the worker.
	Extra []agent.Tool
	// Getenv reads the worker's environment (default os.Getenv).
	Getenv func(string) string
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
	return &Loader{ws: ws, Getenv: os.Getenv}, nil
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

// Load reads the definition from disk.
func (l *Loader) Load(ctx context.Context) (*Definition, error) {
	ws := l.ws
	cfgDir := ws.Dir
	if ws.AgentDir != "" {
		if _, err := os.Stat(filepath.Join(ws.AgentDir, ConfigFile)); err == nil {
			cfgDir = ws.AgentDir
		}
	}
	cfg, err := LoadConfig(cfgDir)
	if err != nil {
		return nil, err
	}
	if ws.AgentDir == "" {
		ws.AgentDir = ws.Dir
		if cfg.AgentDir != "" {
			ws.AgentDir = resolveUnder(ws.Dir, cfg.AgentDir)
		}
	}
	if st, err := os.Stat(ws.AgentDir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("workspace: agent dir %s is not a directory (check agentDir / --agent-dir)", ws.AgentDir)
	}
	getenv := l.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if m := getenv("FASTAGENT_MODEL"); m != "" {
		cfg.Model = m
		if err := cfg.validate(); err != nil {
			return nil, fmt.Errorf("FASTAGENT_MODEL: %w", err)
		}
	}
	d := &Definition{Workspace: ws, Config: cfg}
	if b, err := os.ReadFile(filepath.Join(ws.AgentDir, "persona.md")); err == nil {
		d.Persona = strings.TrimSpace(string(b))
	}
	d.ContextFiles = contextFiles(ws)
	d.Skills, d.Diagnostics = loadSkills(ws.AgentDir, d.Diagnostics)
	d.addTools(l.Extra, getenv)
	return d, nil
}

func (d *Definition) addTools(extra []agent.Tool, getenv func(string) string) {
	seen := map[string]string{}
	add := func(t agent.Tool, origin string) {
		name := t.Spec().Name
		if prev, ok := seen[name]; ok {
			d.Diagnostics = append(d.Diagnostics, Diagnostic{File: origin, Message: fmt.Sprintf("tool %q is already defined by %s; this one is ignored", name, prev)})
			return
		}
		seen[name] = origin
		d.Tools = append(d.Tools, ToolEntry{Tool: d.configure(t), Origin: origin})
	}
	for _, t := range tools.Builtin(tools.Options{Bash: tools.BashOptions{ExtraEnv: d.Config.Env}}) {
		if d.Config.CodingTools.Enabled(t.Spec().Name) {
			add(t, "builtin")
		}
	}
	for _, t := range extra {
		add(t, "go")
	}
}

// configure applies per-tool settings from the config.
func (d *Definition) configure(t agent.Tool) agent.Tool {
	tc, ok := d.Config.Tools[t.Spec().Name]
	if !ok {
		return t
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
		s.RequiresApproval = *c.cfg.RequiresApproval
	}
	if c.cfg.Deferred != nil {
		s.Deferred = *c.cfg.Deferred
	}
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
	on := map[string]bool{}
	for _, n := range activated {
		on[n] = true
	}
	var out []agent.ToolSpec
	for _, t := range d.Tools {
		s := t.Tool.Spec()
		if !s.Deferred || on[s.Name] {
			out = append(out, s)
		}
	}
	return out
}

// contextFiles returns the agent dir's AGENTS.md, then every AGENTS.md from
// the working directory up to the filesystem root.
func contextFiles(ws Workspace) []ContextFile {
	var out []ContextFile
	seen := map[string]bool{}
	read := func(dir string) {
		p := filepath.Join(dir, "AGENTS.md")
		if seen[p] {
			return
		}
		seen[p] = true
		if b, err := os.ReadFile(p); err == nil {
			out = append(out, ContextFile{Path: p, Content: strings.TrimSpace(string(b))})
		}
	}
	if ws.AgentDir != "" {
		read(ws.AgentDir)
	}
	for dir := ws.Dir; ; {
		read(dir)
		parent := filepath.Dir(dir)
		if parent == dir {
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

func loadSkills(agentDir string, diags []Diagnostic) ([]Skill, []Diagnostic) {
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
		b, err := os.ReadFile(real)
		if err != nil {
			diags = append(diags, Diagnostic{File: p, Message: err.Error()})
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
