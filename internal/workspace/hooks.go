package workspace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/toolrun"
	"github.com/fastagent/fastagent/internal/tools"
)

// HooksDir is the folder of hook files (hooks/<name>.yaml) in the agent dir.
const HooksDir = "hooks"

// Hook events: where in a turn a hook runs.
const (
	// HookBeforeAgentStart runs before a turn's first model call.
	HookBeforeAgentStart = "before_agent_start"
	// HookBeforeTool runs before a tool call (before its approval, if it
	// needs one): it may deny it, stop the turn or replace its arguments.
	HookBeforeTool = "before_tool"
	// HookAfterTool runs after a tool call ran; it sees the result.
	HookAfterTool = "after_tool"
	// HookTurnEnd runs when the model ends the turn (a reply without tool
	// calls); a context answer makes the model go on.
	HookTurnEnd = "turn_end"
	// HookBeforeCompact runs before a compaction of the context in a turn.
	HookBeforeCompact = "before_compact"
)

// HookEvents lists the events, in the order of a turn.
var HookEvents = []string{HookBeforeAgentStart, HookBeforeTool, HookAfterTool, HookTurnEnd, HookBeforeCompact}

// What a hook's failure means (Hook.OnError).
const (
	HookDeny  = "deny"
	HookAllow = "allow"
)

// Hook timeouts: the default, and the most a hook file may ask for.
const (
	DefaultHookTimeout = 10 * time.Second
	MaxHookTimeout     = 60 * time.Second
)

// Hook is one hooks/<name>.yaml: a command the runtime runs at an event of
// the turn, confined like a tool, with a JSON document on stdin and its
// decision as JSON on stdout.
type Hook struct {
	// Name is the file's name without its extension; File its path
	// relative to the agent dir (hooks/<name>.yaml).
	Name string `json:"name"`
	File string `json:"file"`
	// Event is one of HookEvents.
	Event string `json:"event"`
	// Match are tool-name globs (before_tool, after_tool); none matches
	// every tool.
	Match []string `json:"match,omitempty"`
	// Command is the executable's absolute path (inside the agent dir);
	// Args its arguments.
	Command string   `json:"command"`
	Args    []string `json:"args,omitempty"`
	// Timeout bounds one run; OnError is what a failure means (deny or
	// allow).
	Timeout time.Duration `json:"timeout"`
	OnError string        `json:"onError"`
	// Network gives the command egress through the sandbox's proxy.
	Network bool `json:"network,omitempty"`

	networkSet bool // the file says network: (else tools.network)
	runner     *toolrun.Tool
}

// Matches reports whether the hook runs for a call of tool (always for
// events that are not about a tool).
func (h Hook) Matches(tool string) bool {
	if h.Event != HookBeforeTool && h.Event != HookAfterTool {
		return true
	}
	if len(h.Match) == 0 {
		return true
	}
	for _, g := range h.Match {
		if ok, _ := path.Match(g, tool); ok {
			return true
		}
	}
	return false
}

// HookRun is what one run of a hook's command gave: its stdout, or why it
// failed (Failed: an exit status, a timeout, a refused start, with the
// stderr's tail).
type HookRun struct {
	Stdout string
	Failed string
}

// Run runs the hook's command confined (the tool sandbox, the agent's
// protected paths, no worker secrets) in the workspace with input on stdin.
// Only cancellation is an error.
func (h Hook) Run(ctx context.Context, dir, session, call string, input []byte) (HookRun, error) {
	if h.runner == nil {
		return HookRun{Failed: "the hook was not loaded by a workspace loader"}, nil
	}
	out, truncated, failed, err := h.runner.Exec(ctx, agent.ToolCall{ID: call, Session: session, Dir: dir}, input)
	if err != nil {
		return HookRun{}, err
	}
	if rest, ok := strings.CutPrefix(failed, "Tool "+h.Name+" "); ok {
		failed = "it " + rest
	}
	if failed == "" && truncated {
		failed = fmt.Sprintf("its answer is longer than %s", tools.FormatSize(tools.DefaultMaxDetailsBytes))
	}
	return HookRun{Stdout: out, Failed: failed}, nil
}

// HooksFor returns the hooks of event that match tool, in file-name order.
func (d *Definition) HooksFor(event, tool string) []Hook {
	var out []Hook
	for _, h := range d.Hooks {
		if h.Event == event && h.Matches(tool) {
			out = append(out, h)
		}
	}
	return out
}

// hookFile is hooks/<name>.yaml as written.
type hookFile struct {
	Event   string    `yaml:"event"`
	Match   hookMatch `yaml:"match"`
	Command command   `yaml:"command"`
	Timeout *Duration `yaml:"timeout"`
	OnError string    `yaml:"onError"`
	Network *OnOff    `yaml:"network"`
}

// hookMatch is one glob string ("bash|write_*": alternatives) or a list.
type hookMatch []string

func (m *hookMatch) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*m = strings.Split(n.Value, "|")
		return nil
	case yaml.SequenceNode:
		var l []string
		if err := n.Decode(&l); err != nil {
			return typeError(n, "match: want a tool-name glob (bash|write_*) or a list of them")
		}
		*m = l
		return nil
	}
	return typeError(n, "match: want a tool-name glob (bash|write_*) or a list of them")
}

var hookKeys = []string{"event", "match", "command", "timeout", "onError", "network"}

// loadHooks reads hooks/*.yaml (and .yml) of the agent dir. Unlike a broken
// tool, a broken hook fails the load: a guard that silently did not load
// would let what it guards run.
func loadHooks(agentDir string) ([]Hook, error) {
	dir := filepath.Join(agentDir, HooksDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("workspace: %s: %w", dir, err)
	}
	realAgent, err := filepath.EvalSymlinks(agentDir)
	if err != nil {
		realAgent = agentDir
	}
	var out []Hook
	for _, e := range entries {
		ext := filepath.Ext(e.Name())
		if (ext != ".yaml" && ext != ".yml") || strings.HasPrefix(e.Name(), ".") || e.IsDir() {
			continue
		}
		file := filepath.Join(dir, e.Name())
		rel := filepath.ToSlash(filepath.Join(HooksDir, e.Name()))
		real, err := filepath.EvalSymlinks(file)
		if err != nil || !within(realAgent, real) {
			return nil, &ConfigError{File: file, Reason: "the hook file resolves outside the agent dir (symlink) or cannot be read; refused"}
		}
		b, err := os.ReadFile(real)
		if err != nil {
			return nil, &ConfigError{File: file, Reason: err.Error()}
		}
		h, err := parseHook(realAgent, agentDir, file, rel, b)
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// parseHook reads and checks one hook file; the error names the file, the
// line and the key to fix.
func parseHook(realAgent, agentDir, file, rel string, b []byte) (Hook, error) {
	bad := func(line int, key, reason string) error {
		return &ConfigError{File: file, Line: line, Key: key, Reason: reason}
	}
	stem := strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	if !toolName.MatchString(stem) {
		return Hook{}, bad(0, "", fmt.Sprintf("%q is not a valid hook name (the file name without extension: letters, digits, _ and -, at most 64)", stem))
	}
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return Hook{}, bad(0, "", "not valid YAML: "+strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return Hook{}, bad(0, "", "a hook file must be a mapping with event and command")
	}
	doc := root.Content[0]
	lines := map[string]int{}
	for i := 0; i+1 < len(doc.Content); i += 2 {
		k := doc.Content[i]
		known := false
		for _, want := range hookKeys {
			known = known || k.Value == want
		}
		if !known {
			return Hook{}, bad(k.Line, k.Value, "unknown key (a hook file takes: "+strings.Join(hookKeys, ", ")+")")
		}
		lines[k.Value] = k.Line
	}
	var f hookFile
	if err := doc.Decode(&f); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) && len(te.Errors) > 0 {
			line, msg := splitLine(te.Errors[0])
			key := keyAtLine(&root, line)
			return Hook{}, bad(line, key, strings.TrimPrefix(msg, key+": "))
		}
		return Hook{}, bad(0, "", err.Error())
	}
	h := Hook{Name: stem, File: rel, Event: f.Event, Timeout: DefaultHookTimeout}
	known := false
	for _, ev := range HookEvents {
		known = known || f.Event == ev
	}
	if !known {
		if f.Event == "" {
			return Hook{}, bad(lines["event"], "event", "missing (one of "+strings.Join(HookEvents, ", ")+")")
		}
		return Hook{}, bad(lines["event"], "event", fmt.Sprintf("%q is not an event (one of %s)", f.Event, strings.Join(HookEvents, ", ")))
	}
	if len(f.Match) > 0 {
		if h.Event != HookBeforeTool && h.Event != HookAfterTool {
			return Hook{}, bad(lines["match"], "match", "only before_tool and after_tool hooks match tool names")
		}
		for _, g := range f.Match {
			g = strings.TrimSpace(g)
			if g == "" {
				return Hook{}, bad(lines["match"], "match", "an empty pattern (write bash|write_*, or leave match out to match every tool)")
			}
			if _, err := path.Match(g, ""); err != nil {
				return Hook{}, bad(lines["match"], "match", fmt.Sprintf("%q is not a valid glob: %v", g, err))
			}
			h.Match = append(h.Match, g)
		}
	}
	argv := f.Command.Argv
	if argv == nil && f.Command.Shell != "" {
		argv = []string{f.Command.Shell}
	}
	if len(argv) == 0 || strings.TrimSpace(argv[0]) == "" {
		return Hook{}, bad(lines["command"], "command", "missing (the path of an executable in the agent folder, like ./hooks/guard.sh)")
	}
	prog := strings.TrimSpace(argv[0])
	if f.Command.Argv == nil && strings.ContainsAny(prog, " \t\n;|&$`") {
		return Hook{}, bad(lines["command"], "command", fmt.Sprintf("%q is not a path: a hook runs an executable file in the agent folder, not a shell line (put the line in a script; give arguments as a list: [./hooks/guard.sh, --strict])", prog))
	}
	abs := prog
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(agentDir, abs)
	}
	realProg, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return Hook{}, bad(lines["command"], "command", fmt.Sprintf("%s: no such file in the agent folder %s", prog, agentDir))
	}
	if !within(realAgent, realProg) {
		return Hook{}, bad(lines["command"], "command", fmt.Sprintf("%s is outside the agent folder %s; a hook runs only an executable inside it", prog, agentDir))
	}
	st, err := os.Stat(realProg)
	switch {
	case err != nil:
		return Hook{}, bad(lines["command"], "command", err.Error())
	case !st.Mode().IsRegular():
		return Hook{}, bad(lines["command"], "command", prog+" is not a regular file")
	case st.Mode().Perm()&0o111 == 0:
		return Hook{}, bad(lines["command"], "command", prog+" is not executable (chmod +x it)")
	}
	h.Command, h.Args = realProg, argv[1:]
	if f.Timeout != nil {
		d := time.Duration(*f.Timeout)
		if d <= 0 || d > MaxHookTimeout {
			return Hook{}, bad(lines["timeout"], "timeout", fmt.Sprintf("%s is out of range (more than 0, at most %s)", d, MaxHookTimeout))
		}
		h.Timeout = d
	}
	switch f.OnError {
	case "":
		h.OnError = HookAllow
		if h.Event == HookBeforeTool {
			h.OnError = HookDeny
		}
	case HookDeny, HookAllow:
		h.OnError = f.OnError
	default:
		return Hook{}, bad(lines["onError"], "onError", fmt.Sprintf("%q is not deny or allow", f.OnError))
	}
	if f.Network != nil {
		n := bool(*f.Network)
		h.Network = n
		h.networkSet = true
	}
	return h, nil
}

// armHooks gives every hook of d its runner: the tool sandbox with d's
// protected paths, its network setting (default tools.network), the
// definition's env: entries beside the tools' allowlist.
func (l *Loader) armHooks(d *Definition, prot []tools.Protected) {
	for i := range d.Hooks {
		h := &d.Hooks[i]
		if !h.networkSet {
			h.Network = d.Config.ToolPolicy.Network
		}
		h.runner = &toolrun.Tool{
			Def: &toolrun.Def{
				Name:     h.Name,
				Cmd:      toolrun.Command{Argv: append([]string{h.Command}, h.Args...)},
				Timeout:  h.Timeout,
				ToolsDir: filepath.Join(d.Workspace.AgentDir, HooksDir),
			},
			Timeout:   h.Timeout,
			ExtraEnv:  d.Config.Env,
			Box:       l.Sandbox,
			Protected: prot,
			Network:   h.Network,
		}
	}
}

// hookProtected lists what no tool may change because a hook runs it: the
// hook commands (wherever in the agent folder they are).
func hookProtected(d *Definition) []tools.Protected {
	var out []tools.Protected
	for _, h := range d.Hooks {
		out = append(out, tools.Protected{Path: h.Command, Reason: "it is run by the agent's hook " + h.File})
	}
	return out
}
