package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the repository, from this package.
var root = filepath.Join("..", "..")

// Every link in the repository's Markdown resolves.
func TestRepositoryLinks(t *testing.T) {
	var files []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "bin" || strings.HasPrefix(d.Name(), ".fastagent")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") && !strings.Contains(p, "testdata") {
			rel, _ := filepath.Rel(root, p)
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	problems, err := Check(root, files)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

func TestCheckFindsDeadLinks(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.md", "# Title\n\n## Tool sandbox\n\n[ok](#tool-sandbox) [bad](#nope) [file](b.md#part-two) [gone](c.md) [x](https://e.x/#y) `[not](a link)`\n")
	write("b.md", "# B\n\n## Part two\n")
	problems, err := Check(dir, []string{"a.md"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.Target)
	}
	if strings.Join(got, ",") != "#nope,c.md" {
		t.Errorf("problems %v, want #nope and c.md", got)
	}
	if s := Slug("Security → Tool sandbox"); s != "security--tool-sandbox" {
		t.Errorf("slug %q", s)
	}
}

// GitHub keeps the text of a code span in a heading's anchor: only the
// backticks go.
func TestSlugKeepsCodeSpanText(t *testing.T) {
	for title, want := range map[string]string{
		"The session's `deliver` signal (a public contract)": "the-sessions-deliver-signal-a-public-contract",
		"fastagent session approve":                          "fastagent-session-approve",
		"`fastagent dev`":                                    "fastagent-dev",
		"Thinking, usage and model routing":                  "thinking-usage-and-model-routing",
	} {
		if got := Slug(title); got != want {
			t.Errorf("Slug(%q) = %q, want %q", title, got, want)
		}
	}
}

// A reference-style link definition ([name]: target) is a link too.
func TestCheckFindsDeadReferenceLinks(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.md"), []byte("# A\n\nSee [the guide][g] and [home][h].\n\n[g]: guide.md\n[h]: #a\n  [x]: #nowhere\n\n```\n[y]: gone.md\n```\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	problems, err := Check(dir, []string{"a.md"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.String())
	}
	if want := "a.md:5: guide.md: no such file,a.md:7: #nowhere: no such heading"; strings.Join(got, ",") != want {
		t.Errorf("problems %q, want %q", got, want)
	}
}

// The README is the entry point a newcomer reads in one sitting: the two
// commands, a first agent, how a turn flows, and links to docs/.
func TestReadmeIsAShortEntryPoint(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	if n := strings.Count(readme, "\n"); n > 400 {
		t.Errorf("README.md has %d lines; keep it at most 400 and move reference material to docs/", n)
	}
	// .ci/run runs `make test`; the README's two commands are its contract.
	for _, want := range []string{"make dev ", "make test ", "## The two commands", "## How a turn flows", "(docs/cli.md)", "(docs/layout.md)"} {
		if !strings.Contains(readme, want) {
			t.Errorf("README.md lacks %q", want)
		}
	}
}

// docs/layout.md lists every Go package (the repository's module and
// examples/), one table row each, with the path in the first column, and
// nothing that is not there any more.
func TestLayoutListsEveryPackage(t *testing.T) {
	pkgs, err := Packages(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 10 {
		t.Fatalf("found only %d packages under %s: %v", len(pkgs), root, pkgs)
	}
	paths, err := TablePaths(filepath.Join(root, "docs", "layout.md"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, p := range paths {
		listed[strings.TrimSuffix(p, "/")] = true
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("docs/layout.md lists %s, which is not in the repository", p)
		}
	}
	for _, pkg := range pkgs {
		want := pkg
		if pkg == "." {
			want = "fastagent.go" // the root package is its file
		}
		if !listed[want] {
			t.Errorf("docs/layout.md has no row for the package %s/ (first column `%s/`)", pkg, pkg)
		}
	}
}

// The documentation speaks to users of the repository: nothing in it may
// point at what they cannot see (the team's notes, trackers, work rounds).
func TestDocsSpeakToUsers(t *testing.T) {
	internal := regexp.MustCompile(`(?i)closing notes?|(in|of) the issues|this round|next round|previous round|helper session|the brief`)
	var files []string
	for _, pattern := range []string{"*.md", "docs/*.md", "deploy/*.md", "examples/*/*.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := internal.FindString(line); m != "" {
				rel, _ := filepath.Rel(root, f)
				t.Errorf("%s:%d: %q refers to something readers cannot see: %s", rel, i+1, m, line)
			}
		}
	}
}

// A repository path the docs name in code (`internal/ingress/auth_test.go`,
// `workflows/agentloop`) exists: packages move, and the docs move with them.
func TestDocsNameExistingPaths(t *testing.T) {
	repoPath := regexp.MustCompile("`((?:internal|cmd|workflows|agent|examples|deploy|hooks|transcript|activities|worker|ingress)/[A-Za-z0-9_./-]*)`")
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(root, "README.md"), filepath.Join(root, "DESIGN.md"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range repoPath.FindAllStringSubmatch(line, -1) {
				if _, err := os.Stat(filepath.Join(root, strings.TrimSuffix(m[1], "/"))); err != nil {
					rel, _ := filepath.Rel(root, f)
					t.Errorf("%s:%d: %s is not in the repository", rel, i+1, m[1])
				}
			}
		}
	}
}
