package workspace

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

// ApprovalSetting is a tool's requiresApproval: in fastagent.yaml — a bool,
// or a condition under which a call needs no person:
//
//	requiresApproval: {unless: {command: "^(git status|git diff|ls)( |$)"}}
//	requiresApproval: {unless: {path: ["notes/**", "*.md"]}}
//
// A call matching unless runs without waiting; any other waits.
type ApprovalSetting struct {
	// On is the plain setting; a mapping turns it on.
	On bool
	// Unless, when set, lets matching calls through without a person.
	Unless *ApprovalUnless
}

// ApprovalUnless is the condition of a conditional approval. Command is a
// regular expression over a call's command argument, matched from its start
// (anchor its end as you mean it); Path is a list of globs over a call's path argument, relative
// to the workspace (* within one segment, ** across segments). A call
// matches when every condition set matches.
type ApprovalUnless struct {
	Command string   `yaml:"command"`
	Path    []string `yaml:"path"`

	command *regexp.Regexp
	paths   []*regexp.Regexp
}

// UnmarshalYAML reads a bool or {unless: {command, path}}.
func (a *ApprovalSetting) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		return n.Decode(&a.On)
	}
	if n.Kind != yaml.MappingNode {
		return typeError(n, "requiresApproval: want true, false or {unless: {command: <regexp>, path: [<glob>, …]}}")
	}
	var unless *yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; k.Value != "unless" {
			return typeError(k, fmt.Sprintf("requiresApproval: unknown key %q (want unless: {command: <regexp>, path: [<glob>, …]})", k.Value))
		}
		unless = n.Content[i+1]
	}
	if unless == nil || unless.Kind != yaml.MappingNode {
		return typeError(n, "requiresApproval: want unless: {command: <regexp>, path: [<glob>, …]}")
	}
	u := &ApprovalUnless{}
	for i := 0; i+1 < len(unless.Content); i += 2 {
		k, v := unless.Content[i], unless.Content[i+1]
		switch k.Value {
		case "command":
			if v.Kind != yaml.ScalarNode {
				return typeError(v, "requiresApproval.unless.command: want a regular expression")
			}
			u.Command = v.Value
		case "path":
			switch v.Kind {
			case yaml.ScalarNode:
				u.Path = []string{v.Value}
			case yaml.SequenceNode:
				if err := v.Decode(&u.Path); err != nil {
					return typeError(v, "requiresApproval.unless.path: want a list of globs")
				}
			default:
				return typeError(v, "requiresApproval.unless.path: want a glob or a list of globs")
			}
		default:
			return typeError(k, fmt.Sprintf("requiresApproval.unless: unknown key %q (want command or path)", k.Value))
		}
	}
	a.On, a.Unless = true, u
	return nil
}

// compile checks and compiles the condition; the error names the field.
func (u *ApprovalUnless) compile(path ...string) error {
	at := func(key string) []string { return append(append([]string{}, path...), key) }
	if u.Command == "" && len(u.Path) == 0 {
		return badKey("unless needs command (a regular expression) or path (globs)", path...)
	}
	if u.Command != "" {
		if _, err := regexp.Compile(u.Command); err != nil {
			return badKey(fmt.Sprintf("%q is not a valid regular expression: %v", u.Command, err), at("command")...)
		}
		// Matched from the command's start however it is written: an
		// unanchored "git status" must not waive "rm -rf / # git status".
		re, err := regexp.Compile(`\A(?:` + u.Command + `)`)
		if err != nil {
			return badKey(fmt.Sprintf("%q is not a valid regular expression: %v", u.Command, err), at("command")...)
		}
		u.command = re
	}
	u.paths = nil
	for i, g := range u.Path {
		re, err := globRegexp(g)
		if err != nil {
			return &keyError{path: at("path"), reason: fmt.Sprintf("entry %d %q: %v", i+1, g, err), item: i + 1}
		}
		u.paths = append(u.paths, re)
	}
	return nil
}

// shellChain matches what lets one command line run more than one
// command, or send output somewhere: ; & | ` $( newlines and redirections.
var shellChain = regexp.MustCompile("[;&|`\\n\\r<>]|\\$\\(")

// Waives reports whether a call with args (a JSON object) matches the
// condition, so it needs no person; dir is the workspace. A command
// containing shell operators that chain commands or redirect never
// matches; a path outside the workspace (.., an absolute path elsewhere)
// never matches.
func (u *ApprovalUnless) Waives(args json.RawMessage, dir string) bool {
	if u == nil || (u.command == nil && len(u.paths) == 0) {
		return false
	}
	var a map[string]any
	if json.Unmarshal(args, &a) != nil || ambiguousKeys(args) {
		return false
	}
	if u.command != nil {
		cmd, ok := a["command"].(string)
		if !ok || !commandMatches(u.command, cmd) {
			return false
		}
	}
	if len(u.paths) > 0 {
		p, ok := a["path"].(string)
		if !ok || !pathMatches(u.paths, p, dir) {
			return false
		}
	}
	return true
}

// ambiguousKeys reports whether args repeat a key or spell "command" or
// "path" in another case: encoding/json (which the tools decode with)
// takes a key in any case and the last of duplicates, another decoder the
// first, so the condition could judge one value and the tool run another.
func ambiguousKeys(args json.RawMessage) bool {
	dec := json.NewDecoder(bytes.NewReader(args))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return true
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return true
		}
		k, _ := t.(string)
		for _, name := range []string{"command", "path"} {
			// EqualFold as encoding/json matches names (Unicode folding).
			if strings.EqualFold(k, name) && k != name {
				return true
			}
		}
		if seen[k] {
			return true
		}
		seen[k] = true
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return true
		}
	}
	return false
}

func commandMatches(re *regexp.Regexp, cmd string) bool {
	if shellChain.MatchString(cmd) {
		return false
	}
	return re.MatchString(cmd)
}

func pathMatches(globs []*regexp.Regexp, p, dir string) bool {
	if p == "" || strings.IndexByte(p, 0) >= 0 {
		return false
	}
	p = filepath.ToSlash(p)
	if filepath.IsAbs(p) {
		if dir == "" {
			return false
		}
		rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(p))
		if err != nil {
			return false
		}
		p = filepath.ToSlash(rel)
	}
	p = filepath.ToSlash(filepath.Clean(p))
	if p == "." || p == ".." || strings.HasPrefix(p, "../") || strings.HasPrefix(p, "/") {
		return false
	}
	if !anyMatch(globs, p) {
		return false
	}
	// A symlink on the way may lead elsewhere: where the path really
	// leads (as far as it exists) must match too. A workspace this
	// process cannot see (the model step on another machine) is judged
	// by the path as written.
	if dir == "" {
		return true
	}
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return true
	}
	real, ok := resolveExisting(filepath.Join(realDir, filepath.FromSlash(p)))
	if !ok {
		return false
	}
	rel, err := filepath.Rel(realDir, real)
	if err != nil {
		return false
	}
	rel = filepath.ToSlash(rel)
	if rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return false
	}
	return anyMatch(globs, rel)
}

func anyMatch(globs []*regexp.Regexp, p string) bool {
	for _, g := range globs {
		if g.MatchString(p) {
			return true
		}
	}
	return false
}

// resolveExisting resolves the symlinks of the longest existing prefix of
// p and appends the rest (which does not exist yet); false when p cannot
// be resolved.
func resolveExisting(p string) (string, bool) {
	rest := ""
	for cur := p; ; {
		if real, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(real, rest), true
		} else if !os.IsNotExist(err) {
			return "", false
		}
		if _, err := os.Lstat(cur); err == nil {
			return "", false // a dangling symlink: where it leads is unknown
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return "", false
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

// globRegexp compiles a workspace glob: * and ? within a path segment,
// ** any number of segments, [...] a character class.
func globRegexp(g string) (*regexp.Regexp, error) {
	if g == "" {
		return nil, fmt.Errorf("an empty glob")
	}
	if strings.HasPrefix(g, "/") || g == ".." || strings.HasPrefix(g, "../") || strings.Contains(g, "/../") || strings.HasSuffix(g, "/..") {
		return nil, fmt.Errorf("a glob is relative to the workspace and stays inside it (no leading /, no ..)")
	}
	if _, err := filepath.Match(strings.ReplaceAll(g, "**", "*"), ""); err != nil {
		return nil, fmt.Errorf("not a valid glob: %w", err)
	}
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(g); i++ {
		c := g[i]
		switch {
		case c == '*' && i+1 < len(g) && g[i+1] == '*':
			i++
			if i+1 < len(g) && g[i+1] == '/' {
				i++
				b.WriteString("(?:.*/)?") // **/ : zero or more segments
			} else {
				b.WriteString(".*")
			}
		case c == '*':
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
		case c == '[':
			j := strings.IndexByte(g[i:], ']')
			if j < 0 {
				return nil, fmt.Errorf("not a valid glob: an unclosed [")
			}
			class := g[i+1 : i+j]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			b.WriteString("[" + strings.ReplaceAll(class, `\`, `\\`) + "]")
			i += j
		case c == '\\' && i+1 < len(g):
			i++
			b.WriteString(regexp.QuoteMeta(string(g[i])))
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}

// ApprovalWaived reports whether a call of the tool name with args needs
// no person under the tool's requiresApproval: unless condition.
func (d *Definition) ApprovalWaived(name string, args json.RawMessage) bool {
	tc, ok := d.Config.Tools[name]
	if !ok || tc.RequiresApproval == nil || !tc.RequiresApproval.On || tc.RequiresApproval.Unless == nil {
		return false
	}
	u := tc.RequiresApproval.Unless
	// The condition judges arguments the tool takes: a "command" the model
	// adds to a tool without that parameter says nothing of what it runs.
	t, ok := d.Tool(name)
	if !ok {
		return false
	}
	params := t.Spec().Parameters
	if (u.Command != "" && !declares(params, "command")) || (len(u.Path) > 0 && !declares(params, "path")) {
		return false
	}
	return u.Waives(args, d.Workspace.Dir)
}

// declares reports whether a tool's parameters schema lists key among its
// properties.
func declares(params json.RawMessage, key string) bool {
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if json.Unmarshal(params, &s) != nil {
		return false
	}
	_, ok := s.Properties[key]
	return ok
}
