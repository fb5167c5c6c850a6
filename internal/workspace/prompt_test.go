package workspace

import (
	"context"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// rootPlaceholder stands for the temporary copy of a fixture in goldens.
const rootPlaceholder = "<ROOT>"

// copyFixture copies testdata/<name> into a new temporary directory and
// returns it.
func copyFixture(t *testing.T, name string) string {
	t.Helper()
	src := filepath.Join("testdata", name)
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if e.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, info.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// loadIn loads the workspace at root/wd with the AGENTS.md walk stopped at
// root and an empty environment.
func loadIn(t *testing.T, root, wd, agentDir string) *Definition {
	t.Helper()
	l, err := NewLoader(filepath.Join(root, wd), agentDir)
	if err != nil {
		t.Fatal(err)
	}
	l.contextStop = root
	l.Getenv = func(string) string { return "" }
	d, err := l.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

var dateLine = regexp.MustCompile(`(?i)\b\d{4}-\d{2}-\d{2}\b|\bdate\b|\btoday\b`)

func TestPromptGolden(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		fixture  string // testdata folder (default name)
		wd       string // working directory inside the fixture
		setup    func(t *testing.T, root string)
		contains []string
		omits    []string
		// order lists substrings that must appear in this order.
		order []string
	}{
		{
			name:     "default",
			contains: []string{DefaultIdentity, "Working directory: " + rootPlaceholder + "\n"},
			omits:    []string{"# Project context", "# Skills", "search_tools"},
		},
		{
			name: "persona",
			setup: func(t *testing.T, root string) {
				// A skill symlinked from outside the agent dir is refused.
				outside := filepath.Join(t.TempDir(), "stolen")
				if err := os.MkdirAll(outside, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(outside, "SKILL.md"), []byte("---\nname: stolen\ndescription: Not yours.\n---\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(outside, filepath.Join(root, "skills", "stolen")); err != nil {
					t.Fatal(err)
				}
			},
			contains: []string{
				"You are Quill, the release editor",
				"- review (" + rootPlaceholder + "/skills/review/SKILL.md): Review a documentation change",
				"skills/stolen/SKILL.md: skill resolves outside the agent dir (symlink); refused",
			},
			omits: []string{DefaultIdentity, "internal-only", "Rotate the docs", "Not yours"},
			order: []string{"You are Quill", "# Project context", "# Skills", "# Runtime"},
		},
		{
			name: "agentdir",
			wd:   "repo",
			contains: []string{
				"You are the CI keeper",
				"- deploy (" + rootPlaceholder + "/repo/agent/skills/deploy/SKILL.md): Deploy the service: build, push, roll out.",
				"Working directory: " + rootPlaceholder + "/repo\n",
			},
			// The walk stops at the workspace: an AGENTS.md above it (here
			// the fixture's root) is not read.
			omits: []string{DefaultIdentity, "Outer context"},
			order: []string{
				"## " + rootPlaceholder + "/repo/agent/AGENTS.md\n\nAgent context",
				"## " + rootPlaceholder + "/repo/AGENTS.md\n\nRepository context",
			},
		},
		{
			name:    "contextroot",
			fixture: "agentdir",
			wd:      "repo",
			setup: func(t *testing.T, root string) {
				// contextRoot: .. walks one level further, to the fixture's root.
				f, err := os.OpenFile(filepath.Join(root, "repo", "fastagent.yaml"), os.O_APPEND|os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				if _, err := f.WriteString("contextRoot: ..\n"); err != nil {
					t.Fatal(err)
				}
			},
			order: []string{
				"## " + rootPlaceholder + "/repo/agent/AGENTS.md\n\nAgent context",
				"## " + rootPlaceholder + "/repo/AGENTS.md\n\nRepository context",
				"## " + rootPlaceholder + "/AGENTS.md\n\nOuter context",
			},
		},
		{
			name:     "deferred",
			contains: []string{"More tools exist than are listed; call search_tools"},
			omits:    []string{"calendar_events", "weather"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fixture := c.fixture
			if fixture == "" {
				fixture = c.name
			}
			root := copyFixture(t, fixture)
			if c.setup != nil {
				c.setup(t, root)
			}
			d := loadIn(t, root, c.wd, "")
			prompt := d.SystemPrompt()
			var b strings.Builder
			b.WriteString(prompt)
			b.WriteString("\n-- diagnostics --\n")
			for _, diag := range d.Diagnostics {
				b.WriteString(diag.String() + "\n")
			}
			got := strings.ReplaceAll(b.String(), root, rootPlaceholder)

			golden := filepath.Join("testdata", c.name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -run TestPromptGolden -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("prompt differs from %s (rerun with -update if the change is intended)\n--- got ---\n%s\n--- want ---\n%s", golden, got, want)
			}

			// The goldens can be regenerated; these facts must hold anyway.
			for _, s := range c.contains {
				if !strings.Contains(got, s) {
					t.Errorf("output lacks %q", s)
				}
			}
			for _, s := range c.omits {
				if strings.Contains(strings.ReplaceAll(prompt, root, rootPlaceholder), s) {
					t.Errorf("prompt contains %q", s)
				}
			}
			last := -1
			for _, s := range c.order {
				i := strings.Index(got, s)
				if i < 0 || i < last {
					t.Errorf("%q missing or out of order", s)
				}
				last = i
			}
			runtime := prompt[strings.LastIndex(prompt, "# Runtime"):]
			if dateLine.MatchString(runtime) {
				t.Errorf("runtime context has a date: %q", runtime)
			}
			if want := "Working directory: " + d.Workspace.Dir; !strings.Contains(runtime, want) {
				t.Errorf("runtime context %q lacks %q", runtime, want)
			}
		})
	}
}

// TestPromptStableAcrossActivation: activating a deferred tool changes the
// tools sent, never the system prompt (the provider's prefix cache).
func TestPromptStableAcrossActivation(t *testing.T) {
	t.Parallel()
	root := copyFixture(t, "deferred")
	d := loadIn(t, root, "", "")
	before := d.SystemPrompt()
	specs := d.ActiveSpecs([]string{"calendar_events"})
	if !hasSpec(specs, "calendar_events") {
		t.Fatalf("activated tool missing from %v", specNames(specs))
	}
	if after := d.SystemPrompt(); after != before {
		t.Fatalf("system prompt changed after activation")
	}
}
