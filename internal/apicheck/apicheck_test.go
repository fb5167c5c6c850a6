package apicheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const root = "../.."

// publicPackages finds every importable package outside internal/, cmd/
// and examples/: each one is public API whether it means to be or not.
func publicPackages(t *testing.T) []string {
	t.Helper()
	var dirs []string
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			switch {
			case rel == ".":
			case strings.HasPrefix(d.Name(), "."), d.Name() == "testdata",
				rel == "internal", rel == "cmd", rel == "examples", rel == "deploy":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			dir := filepath.Dir(rel)
			if !seen[dir] {
				seen[dir] = true
				dirs = append(dirs, dir)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// No exported declaration of a public package names an internal type: an
// embedder could not write it down, and every change to the internal type
// would silently change the public API.
func TestPublicAPINamesNoInternalType(t *testing.T) {
	dirs := publicPackages(t)
	for _, want := range []string{".", "agent", "transcript", "hooks", "workflows", "activities", "worker", "ingress"} {
		if !contains(dirs, want) {
			t.Fatalf("public package %q not found among %v: the walk is broken", want, dirs)
		}
	}
	for _, dir := range dirs {
		p, err := Scan(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%-20s %3d exported names", dir, len(p.Exported))
		for _, l := range p.Leaks {
			t.Errorf("%v", l)
		}
	}
}

// The scan finds a leak through each way a type can be exported.
func TestScanFindsLeaks(t *testing.T) {
	dir := t.TempDir()
	src := `package leaky

import (
	"context"
	st "example.com/m/internal/store"
	"example.com/m/internal/feed"
)

type Alias = st.Entry
type Options struct {
	Store st.Store
	quiet feed.Bus
	feed.Bus
}
type Doer interface{ Do(context.Context) (*st.Entry, error) }
func New(b feed.Bus) {}
func (o Options) Get() map[string][]st.Entry { return nil }
func (o Options) hidden() st.Entry { return st.Entry{} }
var Default st.Store
func helper(st.Store) {}
`
	if err := os.WriteFile(filepath.Join(dir, "leaky.go"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := Scan(dir, ".")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, l := range p.Leaks {
		got[l.Decl+" "+l.Type] = true
	}
	want := []string{"Alias st.Entry", "Options.Store st.Store", "Options.Bus feed.Bus", "Doer.Do st.Entry", "New feed.Bus", "Options.Get st.Entry", "Default st.Store"}
	for _, w := range want {
		if !got[w] {
			t.Errorf("missed leak %q; found %v", w, got)
		}
	}
	if len(p.Leaks) != len(want) {
		t.Errorf("found %d leaks, want %d: %v", len(p.Leaks), len(want), p.Leaks)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
