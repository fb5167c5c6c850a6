package devserver

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fake writes a shell script named like the program that prints line and
// exits (or, with line "", exits at once).
func fake(t *testing.T, line string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), Program)
	body := "#!/bin/sh\nread cfg\n"
	if line != "" {
		body += "echo '" + line + "'\n"
	}
	if err := os.WriteFile(p, []byte(body), 0o700); err != nil { //nolint:gosec // G306: a test program
		t.Fatal(err)
	}
	return p
}

// FASTAGENT_DEVSERVER comes first, and a wrong one is an error naming it.
func TestFindTheVariableFirst(t *testing.T) {
	p := fake(t, "")
	t.Setenv(EnvBinary, p)
	if got, err := Find(nil); err != nil || got != p {
		t.Fatalf("Find = %q %v", got, err)
	}
	t.Setenv(EnvBinary, filepath.Join(t.TempDir(), "missing"))
	if _, err := Find(nil); err == nil || !strings.Contains(err.Error(), EnvBinary) {
		t.Fatalf("a missing program: %v", err)
	}
}

// Without the variable (and none next to the test binary), PATH is next.
func TestFindOnPath(t *testing.T) {
	p := fake(t, "")
	t.Setenv(EnvBinary, "")
	t.Setenv("PATH", filepath.Dir(p)+string(os.PathListSeparator)+os.Getenv("PATH"))
	if got, err := Find(nil); err != nil || got != p {
		t.Fatalf("Find = %q %v", got, err)
	}
}

// What the child says when it cannot serve reaches the caller; a program
// that speaks another protocol, or says nothing, is a clear error.
func TestStartReportsTheChild(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{`{"protocol":1,"error":"temporal frontend port: 127.0.0.1:7233 is in use (choose another with --temporal-port)"}`, "choose another with --temporal-port"},
		{`{"protocol":2,"ready":{"frontend":"x"}}`, "speaks protocol 2"},
		{`Temporal dev server ready`, "speaks protocol 0"},
		{``, "exited before it served"},
	} {
		_, err := Start(context.Background(), Options{Binary: fake(t, tc.line), LogWriter: io.Discard, NoSearchAttributes: true})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want %q", tc.line, err, tc.want)
		}
	}
}

// This test runs in the checkout: Find would build from it, keyed by the
// content of cmd/fastagent-devserver (a change of a source file is a new
// build; of a test file, not).
func TestCheckoutBuildKey(t *testing.T) {
	root := checkout()
	if root == "" || moduleOf(filepath.Join(root, "go.mod")) != mainModule {
		t.Fatalf("checkout() = %q from a test of the checkout", root)
	}
	fakeRoot := t.TempDir()
	dir := filepath.Join(fakeRoot, childDir)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module "+childModule+"\n")
	write("main.go", "package main\n")
	k1, err := sourceKey(fakeRoot)
	if err != nil {
		t.Fatal(err)
	}
	write("main_test.go", "package main\n")
	if k2, _ := sourceKey(fakeRoot); k2 != k1 {
		t.Error("a test file changed the build key")
	}
	write("main.go", "package main\n\nfunc main() {}\n")
	if k3, _ := sourceKey(fakeRoot); k3 == k1 {
		t.Error("a changed source file kept the build key")
	}
}

func TestVersionRef(t *testing.T) {
	for v, want := range map[string]string{
		"v0.1.0":                               "v0.1.0",
		"v0.0.0-20261130120000-abcdef123456":   "abcdef123456",
		"v0.1.1-0.20261130120000-abcdef123456": "abcdef123456",
		"v0.2.0-rc.1":                          "v0.2.0-rc.1",
	} {
		if got := versionRef(v); got != want {
			t.Errorf("versionRef(%s) = %s, want %s", v, got, want)
		}
	}
}

// A child that dies before it serves (a service port taken between its
// draw and its bind, by another server starting on the machine) is started
// again.
func TestStartAgainAfterADeathAtStart(t *testing.T) {
	real, err := Find(nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, Program)
	script := "#!/bin/sh\nif [ ! -e " + dir + "/died ]; then touch " + dir + "/died; exit 1; fi\nexec " + real + " \"$@\"\n"
	if err := os.WriteFile(p, []byte(script), 0o700); err != nil { //nolint:gosec // G306: a test program
		t.Fatal(err)
	}
	s, err := Start(context.Background(), Options{Binary: p, UIPort: -1, LogWriter: io.Discard, NoSearchAttributes: true})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	s.Stop()
	if _, err := os.Stat(filepath.Join(dir, "died")); err != nil {
		t.Fatal("the first child did not die: the test tested nothing")
	}
}

// A new build removes the cached builds nobody used for a week, and keeps
// the others.
func TestPruneBuilds(t *testing.T) {
	cache := t.TempDir()
	for _, k := range []string{"src-old", "src-recent", "src-new"} {
		if err := os.MkdirAll(filepath.Join(cache, k), 0o750); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-unusedFor - time.Hour)
	if err := os.Chtimes(filepath.Join(cache, "src-old"), old, old); err != nil {
		t.Fatal(err)
	}
	pruneBuilds(cache, "src-new")
	for k, want := range map[string]bool{"src-old": false, "src-recent": true, "src-new": true} {
		if _, err := os.Stat(filepath.Join(cache, k)); (err == nil) != want {
			t.Errorf("%s: kept = %v, want %v", k, err == nil, want)
		}
	}
}
