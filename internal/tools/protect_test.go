package tools

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
)

// protectedList mirrors workspace.ProtectedPaths for dir (the tools package
// cannot import workspace).
func protectedList(dir string) []Protected {
	var out []Protected
	for _, rel := range []string{"fastagent.yaml", "tools", "channels", "schedules", ".fastagent", ".env", ".git", "persona.md"} {
		out = append(out, Protected{Path: filepath.Join(dir, rel), Reason: "test rule"})
	}
	return out
}

func TestWriteEditRefuseProtected(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	existing := map[string]string{
		"fastagent.yaml":      "model: openai/x\n",
		"tools/deploy.yaml":   "name: deploy\n",
		"channels/slack.yaml": "x: 1\n",
		"schedules/a.yaml":    "x: 1\n",
		".fastagent/state":    "x: 1\n",
		".env":                "SECRET=1\n",
		".git/config":         "x: 1\n",
		"persona.md":          "x: 1\n",
		"free.txt":            "x: 1\n",
	}
	for p, c := range existing {
		writeFile(t, filepath.Join(dir, p), c)
	}
	mustSymlink(t, "fastagent.yaml", filepath.Join(dir, "cfglink"))
	mustSymlink(t, "tools", filepath.Join(dir, "toolslink"))
	tl := testTools(Options{Protected: protectedList(dir)})
	cases := []struct{ path, rule string }{
		{"fastagent.yaml", "fastagent.yaml"},
		{"./fastagent.yaml", "fastagent.yaml"},
		{filepath.Join(dir, "fastagent.yaml"), "fastagent.yaml"},
		{"tools/deploy.yaml", "tools"},
		{"tools/x.yaml", "tools"},
		{"tools/sub/new.yaml", "tools"},
		{"channels/slack.yaml", "channels"},
		{"schedules/new.yaml", "schedules"},
		{".fastagent/state", ".fastagent"},
		{".env", ".env"},
		{".git/config", ".git"},
		{".git/hooks/pre-commit", ".git"},
		{"persona.md", "persona.md"},
		{"cfglink", "fastagent.yaml"},
		{"toolslink/x.yaml", "tools"},
		{"sub/../tools/y.yaml", "tools"},
	}
	for _, c := range cases {
		for _, name := range []string{NameWrite, NameEdit} {
			args := map[string]any{"path": c.path, "content": "pwned", "oldText": "x: 1", "newText": "pwned"}
			r := run(t, tl[name], dir, args)
			if !r.IsError || !strings.Contains(r.Content, name+" refused: "+c.path+" is protected ("+c.rule+")") {
				t.Errorf("%s %q: got %+v, want a protected-path refusal naming %s", name, c.path, r, c.rule)
			}
		}
	}
	for p, c := range existing {
		if got := readFile(t, filepath.Join(dir, p)); got != c {
			t.Errorf("%s changed to %q", p, got)
		}
	}
	for _, p := range []string{"tools/x.yaml", "tools/sub", "schedules/new.yaml", ".git/hooks", "tools/y.yaml"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); err == nil {
			t.Errorf("%s was created", p)
		}
	}
	// Unprotected files stay writable, and read still reads protected ones.
	if r := run(t, tl[NameEdit], dir, map[string]any{"path": "free.txt", "oldText": "x: 1", "newText": "y"}); r.IsError {
		t.Fatalf("edit free.txt: %+v", r)
	}
	if r := run(t, tl[NameRead], dir, map[string]any{"path": "fastagent.yaml"}); r.IsError {
		t.Fatalf("read fastagent.yaml: %+v", r)
	}
}

// TestOpenForWriteSymlinkSwap swaps a checked directory for a symbolic link
// between the check and the open, as a concurrent bash call could.
func TestOpenForWriteSymlinkSwap(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a", "x"), "inside")
	writeFile(t, filepath.Join(dir, "tools", "x"), "rule")
	writeFile(t, filepath.Join(outside, "x"), "outside")
	for _, target := range []string{filepath.Join(dir, "tools"), outside} {
		// The path "a/x" was resolved and checked while a was a directory.
		if err := os.RemoveAll(filepath.Join(dir, "a")); err != nil {
			t.Fatal(err)
		}
		mustSymlink(t, target, filepath.Join(dir, "a"))
		for _, create := range []bool{false, true} {
			f, err := openForWrite(dir, "a/x", os.O_WRONLY, create, create, nil)
			if err == nil {
				f.Close()
				t.Fatalf("swap to %s: opened through the link", target)
			}
			if !errors.Is(err, errChanged) && !strings.Contains(err.Error(), "escapes") {
				t.Errorf("swap to %s: err = %v, want errChanged", target, err)
			}
		}
		// The final component swapped for a link.
		if err := os.Remove(filepath.Join(dir, "a")); err != nil {
			t.Fatal(err)
		}
		mustSymlink(t, filepath.Join(target, "x"), filepath.Join(dir, "b"))
		if f, err := openForWrite(dir, "b", os.O_WRONLY, true, true, nil); err == nil {
			f.Close()
			t.Fatalf("final link to %s followed", target)
		}
		os.Remove(filepath.Join(dir, "b"))
	}
	if got := readFile(t, filepath.Join(dir, "tools", "x")); got != "rule" {
		t.Fatalf("tools/x = %q", got)
	}
	if got := readFile(t, filepath.Join(outside, "x")); got != "outside" {
		t.Fatalf("outside/x = %q", got)
	}
}

// TestReadSymlinkSwap: read opens through os.Root, so a link swapped in
// after the path was resolved cannot lead outside.
func TestReadSymlinkSwap(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	writeFile(t, filepath.Join(outside, "secret"), "secret")
	dir := t.TempDir()
	mustSymlink(t, outside, filepath.Join(dir, "a"))
	rt := &readTool{opts: Options{}.withDefaults()}
	data, res := rt.load(context.Background(), dir, "a/secret", "a/secret", nil)
	if res == nil || strings.Contains(string(data), "secret") {
		t.Fatalf("read through swapped link: data %q, result %+v", data, res)
	}
}

func TestWriteRefusesHardLink(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	writeFile(t, filepath.Join(outside, "secret"), "secret")
	dir := t.TempDir()
	if err := os.Link(filepath.Join(outside, "secret"), filepath.Join(dir, "hl")); err != nil {
		t.Skipf("cannot hard link across temp dirs: %v", err)
	}
	tl := testTools(Options{})
	for _, name := range []string{NameWrite, NameEdit} {
		r := run(t, tl[name], dir, map[string]any{"path": "hl", "content": "pwned", "oldText": "secret", "newText": "pwned"})
		if !r.IsError || !strings.Contains(r.Content, "more than one hard link") {
			t.Errorf("%s: got %+v, want a hard-link refusal", name, r)
		}
	}
	if got := readFile(t, filepath.Join(outside, "secret")); got != "secret" {
		t.Fatalf("outside file = %q", got)
	}
}

func TestSpecialFilesRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	specials := map[string]string{"fifo": "named pipe"}
	// /dev/null's device numbers (1,3); needs CAP_MKNOD (root in CI).
	if err := syscall.Mknod(filepath.Join(dir, "null"), syscall.S_IFCHR|0o666, 1<<8|3); err == nil {
		specials["null"] = "character device"
	} else {
		t.Logf("no device test: %v", err)
	}
	tl := testTools(Options{})
	for name, kind := range specials {
		for _, tool := range []string{NameRead, NameWrite, NameEdit} {
			done := make(chan struct{})
			var got string
			var isErr bool
			go func() {
				defer close(done)
				r := run(t, tl[tool], dir, map[string]any{"path": name, "content": "x", "oldText": "a", "newText": "b"})
				got, isErr = r.Content, r.IsError
			}()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("%s %s: blocked", tool, name)
			}
			if !isErr || !strings.Contains(got, kind) {
				t.Errorf("%s %s: got %q, want a refusal naming %s", tool, name, got, kind)
			}
		}
	}
}

func TestReadHonoursContext(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "f.txt"), "hello\n")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	read := testTools(Options{})[NameRead]
	res, err := read.Run(ctx, agent.ToolCall{ID: "c1", Name: NameRead, Args: mustJSON(t, map[string]any{"path": "f.txt"}), Dir: dir})
	if !errors.Is(err, context.Canceled) || strings.Contains(res.Content, "hello") {
		t.Fatalf("got %+v, %v; want context.Canceled and no content", res, err)
	}
}

// The state dir and .env are not even readable: the session database and
// the operator's secrets live there.
func TestReadRefusesSecretPaths(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, ".fastagent"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{".env": "OPENAI_API_KEY=canary-env", ".fastagent/sessions.db": "canary-db", "notes.txt": "fine"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(".env", filepath.Join(dir, "innocent.txt")); err != nil {
		t.Fatal(err)
	}
	prot := []Protected{
		{Path: filepath.Join(dir, ".fastagent"), Reason: "state", Secret: true},
		{Path: filepath.Join(dir, ".env"), Reason: "secrets", Secret: true},
	}
	read := testTools(Options{Protected: prot})[NameRead]
	for _, p := range []string{".env", ".fastagent/sessions.db", "innocent.txt", "./.fastagent/../.env"} {
		r := run(t, read, dir, map[string]any{"path": p})
		if !r.IsError || strings.Contains(r.Content, "canary") {
			t.Errorf("read %s: %+v", p, r)
		}
	}
	if r := run(t, read, dir, map[string]any{"path": "notes.txt"}); r.IsError || !strings.Contains(r.Content, "fine") {
		t.Errorf("read notes.txt: %+v", r)
	}
	// Control: without the list the same read leaks.
	open := testTools(Options{})[NameRead]
	if r := run(t, open, dir, map[string]any{"path": ".env"}); !strings.Contains(r.Content, "canary-env") {
		t.Errorf("control: %+v", r)
	}
}
