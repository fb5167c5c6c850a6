package tools

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// swapWorkspace is a workspace with the worker's secrets in it and the
// protected list a worker gives the tools.
func swapWorkspace(t *testing.T) (dir string, prot []Protected) {
	t.Helper()
	dir = t.TempDir()
	for name, body := range map[string]string{
		".fastagent/temporal-token": "canary-temporal-token",
		".fastagent/api-token":      "canary-api-token",
		".env":                      "OPENAI_API_KEY=canary-env",
		"fastagent.yaml":            "model: openai/gpt-4o-mini\n",
		"notes.txt":                 "fine\n",
		"sub/notes.txt":             "fine\n",
	} {
		writeFile(t, filepath.Join(dir, name), body)
	}
	prot = []Protected{
		{Path: filepath.Join(dir, ".fastagent"), Reason: "state", Secret: true, Dir: true},
		{Path: filepath.Join(dir, ".env"), Reason: "secrets", Secret: true},
		{Path: filepath.Join(dir, "fastagent.yaml"), Reason: "config"},
	}
	return dir, prot
}

// hookSwap replaces name (in dir) by a symbolic link to target once the
// tool has checked the path and before it opens it — what a bash loop
// swapping a link wins now and then, made certain.
func hookSwap(t *testing.T, dir, name, target string) {
	t.Helper()
	var once sync.Once
	beforeOpen = func() {
		once.Do(func() {
			p := filepath.Join(dir, name)
			if err := os.RemoveAll(p); err != nil {
				t.Error(err)
			}
			if err := os.Symlink(target, p); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(func() { beforeOpen = nil })
}

// A symbolic link swapped in between read's check of the path and its
// open is not followed, to a secret of the worker or anywhere: the file
// opened is what was checked, or nothing.
func TestReadDoesNotFollowALinkSwappedAfterTheCheck(t *testing.T) {
	for _, walk := range []bool{false, true} {
		t.Run(map[bool]string{false: "openat2", true: "walk"}[walk], func(t *testing.T) { readSwaps(t, walk) })
	}
}

func readSwaps(t *testing.T, walk bool) {
	withoutOpenat2(t, walk)
	for _, c := range []struct{ name, target string }{
		{"notes.txt", ".fastagent/temporal-token"},
		{"notes.txt", ".fastagent/api-token"},
		{"notes.txt", ".env"},
		{"sub", ".fastagent"},
	} {
		dir, prot := swapWorkspace(t)
		read := testTools(Options{Protected: prot})[NameRead]
		path := c.name
		if c.name == "sub" {
			path = "sub/notes.txt"
			if err := os.WriteFile(filepath.Join(dir, ".fastagent/notes.txt"), []byte("canary-state"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		hookSwap(t, dir, c.name, c.target)
		r := run(t, read, dir, map[string]any{"path": path})
		if strings.Contains(r.Content, "canary") {
			t.Errorf("read %s swapped to %s after the check: %q", path, c.target, r.Content)
		} else if !r.IsError {
			t.Errorf("read %s swapped to %s: %+v, want an error", path, c.target, r)
		}
		// The same through the helper channels use to send files.
		dir, prot = swapWorkspace(t)
		if c.name == "sub" {
			if err := os.WriteFile(filepath.Join(dir, ".fastagent/notes.txt"), []byte("canary-state"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		hookSwap(t, dir, c.name, c.target)
		data, _, res, err := ReadWorkspaceFile(context.Background(), dir, path, prot, 1<<20)
		if err != nil || strings.Contains(string(data), "canary") || res == nil {
			t.Errorf("ReadWorkspaceFile %s swapped to %s: %q %+v %v", path, c.target, data, res, err)
		}
		beforeOpen = nil
	}
}

// Write and edit: a link swapped in after the check is not written
// through, to a protected file or out of the workspace.
func TestWriteEditDoNotFollowALinkSwappedAfterTheCheck(t *testing.T) {
	for _, walk := range []bool{false, true} {
		t.Run(map[bool]string{false: "openat2", true: "walk"}[walk], func(t *testing.T) { writeSwaps(t, walk) })
	}
}

// withoutOpenat2 makes the open walk the path one folder at a time, as on
// a kernel without openat2.
func withoutOpenat2(t *testing.T, walk bool) {
	noOpenat2 = walk
	t.Cleanup(func() { noOpenat2 = false })
}

func writeSwaps(t *testing.T, walk bool) {
	withoutOpenat2(t, walk)
	outside := t.TempDir()
	writeFile(t, filepath.Join(outside, "x"), "fine\n")
	for _, target := range []string{".env", "fastagent.yaml", filepath.Join(outside, "x")} {
		for _, name := range []string{NameWrite, NameEdit} {
			dir, prot := swapWorkspace(t)
			tl := testTools(Options{Protected: prot})
			hookSwap(t, dir, "notes.txt", target)
			r := run(t, tl[name], dir, map[string]any{"path": "notes.txt", "content": "pwned", "oldText": "fine", "newText": "pwned"})
			if !r.IsError {
				t.Errorf("%s through a link to %s swapped in after the check: %+v", name, target, r)
			}
			for _, p := range []string{filepath.Join(dir, ".env"), filepath.Join(dir, "fastagent.yaml"), filepath.Join(outside, "x")} {
				if strings.Contains(readFile(t, p), "pwned") {
					t.Errorf("%s wrote %s through a link swapped in after the check", name, p)
				}
			}
			// A folder of the path swapped for a link.
			dir, prot = swapWorkspace(t)
			tl = testTools(Options{Protected: prot})
			hookSwap(t, dir, "sub", filepath.Dir(target))
			r = run(t, tl[name], dir, map[string]any{"path": "sub/" + filepath.Base(target), "content": "pwned", "oldText": "OPENAI", "newText": "pwned"})
			if !r.IsError {
				t.Errorf("%s through a folder link to %s swapped in after the check: %+v", name, filepath.Dir(target), r)
			}
			beforeOpen = nil
		}
	}
}

// The working directory itself is a directory to read, as before.
func TestReadWorkingDirectoryIsADirectory(t *testing.T) {
	dir, prot := swapWorkspace(t)
	r := run(t, testTools(Options{Protected: prot})[NameRead], dir, map[string]any{"path": "."})
	if !r.IsError || !strings.Contains(r.Content, "is a directory") {
		t.Errorf("read .: %+v", r)
	}
}
