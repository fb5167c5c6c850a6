package workspace

import (
	"context"

	"encoding/json"
	"errors"
	"github.com/fastagent/fastagent/agent"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func loadPolicy(t *testing.T, yaml string) (Config, error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return LoadConfig(dir)
}

func argsJSON(t *testing.T, k, v string) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(map[string]string{k: v})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A command matches unless only as the regexp says and never when it
// chains or redirects: `ls; rm -rf x` still needs a person.
func TestApprovalUnlessCommand(t *testing.T) {
	c, err := loadPolicy(t, `tools:
  bash:
    requiresApproval:
      unless:
        command: "^(git status|git diff|ls)( |$)"
`)
	if err != nil {
		t.Fatal(err)
	}
	ra := c.Tools["bash"].RequiresApproval
	if ra == nil || !ra.On || ra.Unless == nil {
		t.Fatalf("requiresApproval = %+v, want on with unless", ra)
	}
	for cmd, want := range map[string]bool{
		"git status":           true,
		"git status --short":   true,
		"ls":                   true,
		"ls -la notes":         true,
		"git diff HEAD~1":      true,
		"lsblk":                false,
		"git statusx":          false,
		"rm -rf x":             false,
		"echo ls":              false,
		"ls; rm -rf x":         false,
		"ls && rm x":           false,
		"ls || rm x":           false,
		"ls | sh":              false,
		"ls & rm x":            false,
		"ls `rm x`":            false,
		"ls $(rm x)":           false,
		"ls\nrm x":             false,
		"ls\rrm x":             false,
		"ls > /etc/passwd":     false,
		"ls < x":               false,
		"git status 2>&1":      false,
		"git diff >> out.txt":  false,
		"git status\t--short":  false, // the regexp asks for a space
		"ls ${HOME}":           true,  // expansion, not a second command
		"git status && git ps": false,
	} {
		if got := ra.Unless.Waives(argsJSON(t, "command", cmd), "/ws"); got != want {
			t.Errorf("%q waived = %v, want %v", cmd, got, want)
		}
	}
	for _, args := range []string{`{}`, `{"command": 3}`, `not json`, `{"path":"ls"}`} {
		if ra.Unless.Waives(json.RawMessage(args), "/ws") {
			t.Errorf("%s waived, want a person", args)
		}
	}
}

// Paths match relative to the workspace after cleaning; .. and absolute
// paths outside never match.
func TestApprovalUnlessPath(t *testing.T) {
	c, err := loadPolicy(t, `tools:
  write:
    requiresApproval: {unless: {path: ["notes/**", "*.md"]}}
  edit:
    requiresApproval: {unless: {path: "docs/*.txt"}}
`)
	if err != nil {
		t.Fatal(err)
	}
	u := c.Tools["write"].RequiresApproval.Unless
	for p, want := range map[string]bool{
		"notes/a.txt":             true,
		"notes/deep/er/b.json":    true,
		"./notes/a.txt":           true,
		"README.md":               true,
		"x/../README.md":          true,
		"docs/README.md":          false, // * stays in one segment
		"notes/../secret.txt":     false,
		"../notes/a.txt":          false,
		"notes/../../etc/passwd":  false,
		"../x.md":                 false,
		"/ws/notes/a.txt":         true,
		"/ws/../ws2/notes/a.txt":  false,
		"/etc/notes/a.txt":        false,
		"/ws2/README.md":          false,
		"notes":                   false,
		"":                        false,
		".":                       false,
		"notesx/a.txt":            false,
		"src/main.go":             false,
		"notes/a\x00.txt":         false,
		"/ws/notes/../../x.md":    false,
		"notes/./sub/../file.txt": true,
	} {
		if got := u.Waives(argsJSON(t, "path", p), "/ws"); got != want {
			t.Errorf("%q waived = %v, want %v", p, got, want)
		}
	}
	e := c.Tools["edit"].RequiresApproval.Unless
	if !e.Waives(argsJSON(t, "path", "docs/a.txt"), "/ws") || e.Waives(argsJSON(t, "path", "docs/a/b.txt"), "/ws") {
		t.Error("a single glob string does not match as a list of one")
	}
}

// Plain bools keep working; a bad regexp or glob is a load error naming
// the file and the field.
func TestApprovalSettingErrors(t *testing.T) {
	c, err := loadPolicy(t, "tools:\n  bash:\n    requiresApproval: true\n  write:\n    requiresApproval: false\n")
	if err != nil {
		t.Fatal(err)
	}
	if ra := c.Tools["bash"].RequiresApproval; ra == nil || !ra.On || ra.Unless != nil {
		t.Errorf("bash: %+v", ra)
	}
	if ra := c.Tools["write"].RequiresApproval; ra == nil || ra.On {
		t.Errorf("write: %+v", ra)
	}
	for _, tc := range []struct{ yaml, key, reason string }{
		{"tools:\n  bash:\n    requiresApproval: {unless: {command: \"(ls\"}}\n", "tools.bash.requiresApproval.unless.command", "not a valid regular expression"},
		{"tools:\n  write:\n    requiresApproval: {unless: {path: [\"ok/**\", \"[abc\"]}}\n", "tools.write.requiresApproval.unless.path", "entry 2"},
		{"tools:\n  write:\n    requiresApproval: {unless: {path: [\"../x/**\"]}}\n", "tools.write.requiresApproval.unless.path", "stays inside"},
		{"tools:\n  write:\n    requiresApproval: {unless: {path: [\"/etc/**\"]}}\n", "tools.write.requiresApproval.unless.path", "no leading /"},
		{"tools:\n  write:\n    requiresApproval: {unless: {}}\n", "tools.write.requiresApproval.unless", "needs command"},
	} {
		_, err := loadPolicy(t, tc.yaml)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Key != tc.key || !strings.Contains(ce.Reason, tc.reason) || !strings.HasSuffix(ce.File, ConfigFile) {
			t.Errorf("%q: err = %v (%#v), want %s: …%s…", tc.yaml, err, ce, tc.key, tc.reason)
		}
	}
	for _, y := range []string{
		"tools:\n  bash:\n    requiresApproval: {unles: {command: ls}}\n",
		"tools:\n  bash:\n    requiresApproval: {unless: {cmd: ls}}\n",
		"tools:\n  bash:\n    requiresApproval: [ls]\n",
	} {
		if _, err := loadPolicy(t, y); err == nil || !strings.Contains(err.Error(), ConfigFile) || !strings.Contains(err.Error(), "requiresApproval") {
			t.Errorf("%q: err = %v, want a load error naming the file and requiresApproval", y, err)
		}
	}
}

// A symlink inside the workspace that leads out of the globs (or out of
// the workspace) does not match; a real directory and a path not created
// yet do.
func TestApprovalUnlessPathSymlinks(t *testing.T) {
	ws, outside := t.TempDir(), t.TempDir()
	for _, d := range []string{"notes", "src"} {
		if err := os.MkdirAll(filepath.Join(ws, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		"notes/to-src":     filepath.Join(ws, "src"),
		"notes/to-outside": outside,
		"notes/main.go":    filepath.Join(ws, "src", "main.go"),
	} {
		if err := os.Symlink(target, filepath.Join(ws, link)); err != nil {
			t.Fatal(err)
		}
	}
	c, err := loadPolicy(t, "tools:\n  write:\n    requiresApproval: {unless: {path: [\"notes/**\"]}}\n")
	if err != nil {
		t.Fatal(err)
	}
	u := c.Tools["write"].RequiresApproval.Unless
	for p, want := range map[string]bool{
		"notes/a.txt":            true,
		"notes/new/dir/b.txt":    true,
		"notes/to-src/main.go":   false,
		"notes/to-outside/x.txt": false,
		"notes/main.go":          false,
		"src/main.go":            false,
	} {
		if got := u.Waives(argsJSON(t, "path", p), ws); got != want {
			t.Errorf("%q waived = %v, want %v", p, got, want)
		}
	}
}

// An unanchored expression still matches only from the command's start:
// `git status` must not waive `rm -rf / # git status`.
func TestApprovalUnlessCommandAnchoredAtStart(t *testing.T) {
	c, err := loadPolicy(t, "tools:\n  bash:\n    requiresApproval: {unless: {command: \"git status\"}}\n")
	if err != nil {
		t.Fatal(err)
	}
	u := c.Tools["bash"].RequiresApproval.Unless
	for cmd, want := range map[string]bool{
		"git status":             true,
		"git status --short":     true,
		"rm -rf / # git status":  false,
		"echo git status":        false,
		"FOO=x git status":       false,
		" git status":            false,
		"rm -rf ~ #\tgit status": false,
	} {
		if got := u.Waives(argsJSON(t, "command", cmd), "/ws"); got != want {
			t.Errorf("%q waived = %v, want %v", cmd, got, want)
		}
	}
	// An alternation anchored in its first branch only ("^a|b") is
	// anchored as a whole.
	c, err = loadPolicy(t, "tools:\n  bash:\n    requiresApproval: {unless: {command: \"^git status|ls\"}}\n")
	if err != nil {
		t.Fatal(err)
	}
	u = c.Tools["bash"].RequiresApproval.Unless
	if u.Waives(argsJSON(t, "command", "rm -rf / # ls"), "/ws") || !u.Waives(argsJSON(t, "command", "ls -la"), "/ws") {
		t.Error(`"^git status|ls" is not anchored as a whole`)
	}
}

// The tools decode arguments with encoding/json, which takes a key in any
// case and the last of duplicates: a second "Command"/"PATH" key (or a
// repeated one) must not let the condition judge one value while the tool
// runs another.
func TestApprovalUnlessRefusesAmbiguousKeys(t *testing.T) {
	c, err := loadPolicy(t, `tools:
  bash:
    requiresApproval: {unless: {command: "^ls( |$)"}}
  write:
    requiresApproval: {unless: {path: ["notes/**"]}}
`)
	if err != nil {
		t.Fatal(err)
	}
	cmd, path := c.Tools["bash"].RequiresApproval.Unless, c.Tools["write"].RequiresApproval.Unless
	for _, args := range []string{
		`{"command":"ls","Command":"rm -rf ~"}`,
		`{"COMMAND":"rm -rf ~","command":"ls"}`,
		`{"command":"rm -rf ~","command":"ls"}`,
		`{"command":"ls","command":"rm -rf ~"}`,
	} {
		if cmd.Waives(json.RawMessage(args), "/ws") {
			t.Errorf("bash %s waived, want a person", args)
		}
	}
	for _, args := range []string{
		`{"path":"notes/a.md","Path":".env","content":"x"}`,
		`{"path":"notes/a.md","path":".env","content":"x"}`,
		`{"pAth":".env","path":"notes/a.md","content":"x"}`,
	} {
		if path.Waives(json.RawMessage(args), "/ws") {
			t.Errorf("write %s waived, want a person", args)
		}
	}
	if !cmd.Waives(json.RawMessage(`{"command":"ls","timeout":3}`), "/ws") || !path.Waives(json.RawMessage(`{"path":"notes/a.md","content":"x"}`), "/ws") {
		t.Error("plain calls no longer waived")
	}
}

type paramTool struct{ params string }

func (t paramTool) Spec() agent.ToolSpec {
	return agent.ToolSpec{Name: "deploy", Parameters: json.RawMessage(t.params), RequiresApproval: true}
}

func (paramTool) Run(context.Context, agent.ToolCall) (agent.ToolResult, error) {
	return agent.ToolResult{}, nil
}

// A condition judges an argument the tool takes: a tool without a
// "command" (or "path") parameter is not waived by a "command" the model
// adds beside the arguments it does run with.
func TestApprovalWaivedOnlyOnDeclaredArguments(t *testing.T) {
	c, err := loadPolicy(t, `tools:
  deploy:
    requiresApproval: {unless: {command: "^ls( |$)", path: ["notes/**"]}}
`)
	if err != nil {
		t.Fatal(err)
	}
	def := func(params string) *Definition {
		return &Definition{Config: c, Tools: []ToolEntry{{Tool: paramTool{params}}}}
	}
	args := json.RawMessage(`{"env":"prod","command":"ls","path":"notes/a"}`)
	for params, want := range map[string]bool{
		`{"type":"object","properties":{"env":{"type":"string"}}}`:                                         false,
		`{"type":"object","properties":{"env":{"type":"string"},"command":{"type":"string"}}}`:             false,
		`{"type":"object","properties":{"command":{"type":"string"},"path":{"type":"string"}}}`:            true,
		`{"type":"object","properties":{"command":{},"path":{}},"additionalProperties":{"type":"string"}}`: true,
		``: false,
	} {
		if got := def(params).ApprovalWaived("deploy", args); got != want {
			t.Errorf("params %s: waived = %v, want %v", params, got, want)
		}
	}
}
