package doccheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every link in the repository's Markdown resolves.
func TestRepositoryLinks(t *testing.T) {
	root := filepath.Join("..", "..")
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
