package workspace

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/toolrun"
	"github.com/fastagent/fastagent/internal/tools"
)

// ToolsDir is the folder of workspace tools inside the agent dir.
const ToolsDir = "tools"

// DefaultToolTimeout bounds a workspace tool call whose manifest gives no
// timeout.
const DefaultToolTimeout = 60 * time.Second

// toolName is what providers accept as a function name.
var toolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// manifestExts are the manifest file extensions in tools/; any other file
// there (scripts, data) is ignored.
var manifestExts = map[string]bool{".yaml": true, ".yml": true, ".json": true}

// manifest is tools/<name>.yaml (or .json): a tool run as a command that
// reads its arguments as JSON on stdin and writes its result to stdout.
type manifest struct {
	Name        string   `yaml:"name"`
	Description string   `yaml:"description"`
	Parameters  any      `yaml:"parameters"`
	Command     command  `yaml:"command"`
	Timeout     Duration `yaml:"timeout"`
	Idempotent  bool     `yaml:"idempotent"`
	Deferred    bool     `yaml:"deferred"`
	Sequential  bool     `yaml:"sequential"`
	// RequiresApproval makes each call wait for a human approve/deny.
	RequiresApproval bool `yaml:"requiresApproval"`
	// Output is text (stdout is the result, the default) or json (stdout is
	// {"content": "...", "isError": false}).
	Output string `yaml:"output"`
	// Network gives the command egress through the sandbox's proxy
	// (default: tools.network of fastagent.yaml).
	Network *OnOff `yaml:"network"`
}

// command is a shell command line (run with bash -c in the working
// directory) or an argv list (argv[0] with a slash, when relative, is
// resolved against the tools folder).
type command toolrun.Command

func (c *command) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		return n.Decode(&c.Shell)
	case yaml.SequenceNode:
		if err := n.Decode(&c.Argv); err != nil {
			return typeError(n, "command: want a command line or a list of strings (program and arguments)")
		}
		return nil
	}
	return typeError(n, "command: want a command line or a list of strings (program and arguments)")
}

// toolDef is a parsed, checked manifest with where it came from; it never
// changes once built.
type toolDef struct {
	toolrun.Def
	network *OnOff
	file    string // absolute path of the manifest
	rel     string // manifest path relative to the agent dir
}

// manifestCache keeps parsed manifests by path while their content is
// unchanged, so a definition reloaded for every call does not recompile
// schemas.
type manifestCache struct {
	mu      sync.Mutex
	entries map[string]cachedManifest
}

type cachedManifest struct {
	content string
	def     *toolDef
	err     error
}

func (c *manifestCache) get(path string, content []byte, parse func() (*toolDef, error)) (*toolDef, error) {
	c.mu.Lock()
	e, ok := c.entries[path]
	c.mu.Unlock()
	if ok && e.content == string(content) {
		return e.def, e.err
	}
	def, err := parse()
	c.mu.Lock()
	if c.entries == nil {
		c.entries = map[string]cachedManifest{}
	}
	c.entries[path] = cachedManifest{content: string(content), def: def, err: err}
	c.mu.Unlock()
	return def, err
}

// workspaceTool is a loaded workspace tool with where it came from.
type workspaceTool struct {
	*toolrun.Tool
	file, rel string
}

// workspaceTools loads tools/*.{yaml,yml,json} of the agent dir. A broken
// manifest is a diagnostic and is skipped; the others still load.
func (l *Loader) workspaceTools(d *Definition) ([]workspaceTool, []Diagnostic) {
	agentDir := d.Workspace.AgentDir
	dir := filepath.Join(agentDir, ToolsDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, []Diagnostic{{File: dir, Message: err.Error()}}
	}
	realAgent, err := filepath.EvalSymlinks(agentDir)
	if err != nil {
		realAgent = agentDir
	}
	var out []workspaceTool
	var diags []Diagnostic
	byName := map[string]string{}
	for _, e := range entries {
		ext := filepath.Ext(e.Name())
		if !manifestExts[ext] || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		rel := filepath.ToSlash(filepath.Join(ToolsDir, e.Name()))
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			diags = append(diags, Diagnostic{File: path, Message: fmt.Sprintf("unreadable tool manifest: %v; skipped", err)})
			continue
		}
		if !within(realAgent, real) {
			diags = append(diags, Diagnostic{File: path, Message: "tool manifest resolves outside the agent dir (symlink); refused"})
			continue
		}
		if st, err := os.Stat(real); err != nil || st.IsDir() {
			continue
		}
		b, err := os.ReadFile(real)
		if err != nil {
			diags = append(diags, Diagnostic{File: path, Message: fmt.Sprintf("unreadable tool manifest: %v; skipped", err)})
			continue
		}
		def, err := l.manifests.get(path, b, func() (*toolDef, error) {
			return parseManifest(path, rel, b)
		})
		if err != nil {
			diags = append(diags, Diagnostic{File: path, Message: err.Error() + "; tool skipped"})
			continue
		}
		if prev, ok := byName[def.Name]; ok {
			diags = append(diags, Diagnostic{File: path, Message: fmt.Sprintf("tool %q is already defined by %s; this file is ignored", def.Name, prev)})
			continue
		}
		byName[def.Name] = rel
		out = append(out, workspaceTool{
			Tool: &toolrun.Tool{Def: &def.Def, Timeout: def.Timeout, ExtraEnv: d.Config.Env, Box: l.Sandbox,
				Protected: l.protected(d), Network: d.Config.ToolNetwork(def.Name, def.network)},
			file: path,
			rel:  rel,
		})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Def.Name < out[j].Def.Name })
	return out, diags
}

// parseManifest reads and checks one manifest; the error says what to fix.
func parseManifest(path, rel string, b []byte) (*toolDef, error) {
	stem := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	if !toolName.MatchString(stem) {
		return nil, fmt.Errorf("%q is not a valid tool name (the file name without extension: letters, digits, _ and -, at most 64)", stem)
	}
	if filepath.Ext(path) == ".json" {
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			return nil, fmt.Errorf("not valid JSON: %w", err)
		}
	}
	var m manifest
	if err := decodeStrict(b, &m); err != nil {
		return nil, err
	}
	if m.Name != "" && m.Name != stem {
		return nil, fmt.Errorf("name: %q does not match the file name %q (the name comes from the file; drop the name key or rename the file)", m.Name, stem)
	}
	if strings.TrimSpace(m.Description) == "" {
		return nil, errors.New("description: missing (the model decides when to call the tool from it)")
	}
	switch {
	case m.Command.Shell == "" && len(m.Command.Argv) == 0:
		return nil, errors.New("command: missing (a command line, or a list: [./script.sh, arg])")
	case m.Command.Argv != nil && strings.TrimSpace(m.Command.Argv[0]) == "":
		return nil, errors.New("command: the first element (the program) is empty")
	}
	switch m.Output {
	case "", "text", "json":
	default:
		return nil, fmt.Errorf("output: %q is not text or json", m.Output)
	}
	params, err := parametersJSON(m.Parameters)
	if err != nil {
		return nil, err
	}
	def := &toolDef{
		Def: toolrun.Def{
			Name:             stem,
			Description:      strings.TrimSpace(m.Description),
			Params:           params,
			Cmd:              toolrun.Command(m.Command),
			Timeout:          time.Duration(m.Timeout),
			Idempotent:       m.Idempotent,
			Deferred:         m.Deferred,
			Sequential:       m.Sequential,
			RequiresApproval: m.RequiresApproval,
			JSONOutput:       m.Output == "json",
			ToolsDir:         filepath.Dir(path),
			Validator:        new(tools.Validator),
		},
		network: m.Network,
		file:    path,
		rel:     rel,
	}
	if def.Timeout <= 0 {
		def.Timeout = DefaultToolTimeout
	}
	// Compiling the schema is the check: an invalid schema is an error
	// other than invalid arguments.
	spec := agent.ToolSpec{Name: def.Name, Parameters: def.Params}
	if err := def.Validator.Validate(spec, json.RawMessage(`{}`)); err != nil {
		var ae *tools.ArgsError
		if !errors.As(err, &ae) {
			return nil, fmt.Errorf("parameters: not a valid JSON Schema: %s", strings.TrimPrefix(err.Error(), "tools: "))
		}
	}
	return def, nil
}

// decodeStrict decodes YAML (or JSON, which YAML reads) refusing unknown keys.
func decodeStrict(b []byte, m *manifest) error {
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return fmt.Errorf("not valid YAML/JSON: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return errors.New("a tool manifest must be a mapping with description, parameters and command")
	}
	doc := root.Content[0]
	for i := 0; i+1 < len(doc.Content); i += 2 {
		k := doc.Content[i]
		switch k.Value {
		case "name", "description", "parameters", "command", "timeout", "idempotent", "deferred", "sequential", "requiresApproval", "output", "network":
		default:
			return fmt.Errorf("line %d: unknown key %q (a tool manifest takes: name, description, parameters, command, timeout, idempotent, deferred, sequential, requiresApproval, output, network)", k.Line, k.Value)
		}
	}
	if err := doc.Decode(m); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			var msgs []string
			for _, e := range te.Errors {
				line, msg := splitLine(e)
				if key := keyAtLine(&root, line); key != "" && !strings.HasPrefix(msg, key+":") {
					msg = key + ": " + msg
				}
				msgs = append(msgs, fmt.Sprintf("line %d: %s", line, msg))
			}
			return errors.New(strings.Join(msgs, "; "))
		}
		return err
	}
	return nil
}

// parametersJSON turns the manifest's parameters into a JSON Schema object
// ("type": "object" is added when missing; no parameters is an empty object).
func parametersJSON(p any) (json.RawMessage, error) {
	if p == nil {
		return json.RawMessage(`{"type":"object","properties":{}}`), nil
	}
	m, ok := p.(map[string]any)
	if !ok {
		return nil, errors.New("parameters: want a JSON Schema object, e.g. {type: object, properties: {city: {type: string}}}")
	}
	switch t := m["type"]; t {
	case nil:
		m["type"] = "object"
	case "object":
	default:
		return nil, fmt.Errorf("parameters: type must be object (the arguments are one JSON object), got %v", t)
	}
	if _, ok := m["properties"]; !ok {
		m["properties"] = map[string]any{}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("parameters: cannot be written as JSON: %w", err)
	}
	return b, nil
}
