package tools

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func lines(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "line%d\n", i)
	}
	return b.String()
}

func TestRead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "small.txt"), "hello\nworld\n")
	writeFile(t, filepath.Join(dir, "ten.txt"), lines(1, 10))
	writeFile(t, filepath.Join(dir, "big.txt"), lines(1, 3000))
	wide := strings.Repeat(strings.Repeat("w", 999)+"\n", 100)
	writeFile(t, filepath.Join(dir, "wide.txt"), wide)
	longLine := strings.Repeat("L", 60*1024) + "\nsecond\n"
	writeFile(t, filepath.Join(dir, "long.txt"), longLine)
	writeFile(t, filepath.Join(dir, "empty.txt"), "")
	writeFile(t, filepath.Join(dir, "bin.dat"), "\x7fELF\x00\x01\x02")
	writeFile(t, filepath.Join(dir, "sub", "nested.txt"), "nested\n")

	cases := []struct {
		name     string
		args     map[string]any
		want     string // exact content, or prefix when wantNote is set
		wantNote string
		isError  bool
		details  string // expected fullOutput; "" means no details
	}{
		{name: "whole file", args: map[string]any{"path": "small.txt"}, want: "hello\nworld\n"},
		{name: "nested", args: map[string]any{"path": "sub/nested.txt"}, want: "nested\n"},
		{name: "absolute inside", args: map[string]any{"path": filepath.Join(dir, "small.txt")}, want: "hello\nworld\n"},
		{name: "offset and limit", args: map[string]any{"path": "ten.txt", "offset": 3, "limit": 2},
			want: "line3\nline4\n", wantNote: "[6 more lines in file. Use offset=5 to continue.]"},
		{name: "offset to end", args: map[string]any{"path": "ten.txt", "offset": 9}, want: "line9\nline10\n"},
		{name: "limit past end", args: map[string]any{"path": "ten.txt", "offset": 9, "limit": 50}, want: "line9\nline10\n"},
		{name: "offset beyond end", args: map[string]any{"path": "ten.txt", "offset": 11}, want: "offset 11 is beyond the end of ten.txt (10 lines total)", isError: true},
		{name: "line limit", args: map[string]any{"path": "big.txt"},
			want: lines(1, 2000), wantNote: "[Showing lines 1-2000 of 3000. Use offset=2001 to continue.]", details: lines(1, 3000)},
		{name: "continue", args: map[string]any{"path": "big.txt", "offset": 2001}, want: lines(2001, 3000)},
		{name: "limited then truncated", args: map[string]any{"path": "big.txt", "offset": 100, "limit": 2500},
			want: lines(100, 2099), wantNote: "[Showing lines 100-2099 of 3000. Use offset=2100 to continue.]", details: lines(100, 2599)},
		{name: "byte limit", args: map[string]any{"path": "wide.txt"},
			want: wide[:51*1000], wantNote: "[Showing lines 1-51 of 100. Use offset=52 to continue.]", details: wide},
		{name: "long first line", args: map[string]any{"path": "long.txt"},
			want: strings.Repeat("L", DefaultMaxBytes), wantNote: "Use offset=2 to continue after it.]", details: longLine},
		{name: "empty", args: map[string]any{"path": "empty.txt"}, want: "[The file is empty.]"},
		{name: "missing", args: map[string]any{"path": "nope.txt"}, want: "file not found: nope.txt", isError: true},
		{name: "directory", args: map[string]any{"path": "sub"}, want: "sub is a directory", isError: true},
		{name: "binary", args: map[string]any{"path": "bin.dat"}, want: "bin.dat appears to be a binary file", isError: true},
	}
	read := testTools(Options{})[NameRead]
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := run(t, read, dir, c.args)
			if r.IsError != c.isError {
				t.Fatalf("IsError = %v: %s", r.IsError, r.Content)
			}
			switch {
			case c.isError:
				if !strings.HasPrefix(r.Content, c.want) {
					t.Fatalf("content %q, want prefix %q", r.Content, c.want)
				}
			case c.wantNote != "":
				if !strings.HasPrefix(r.Content, c.want) || !strings.HasSuffix(r.Content, c.wantNote) {
					t.Fatalf("content %q…%q, want %q…%q", head(r.Content), tail(r.Content), head(c.want), c.wantNote)
				}
			default:
				if r.Content != c.want {
					t.Fatalf("content %q, want %q", r.Content, c.want)
				}
			}
			if c.details == "" {
				if len(r.Details) != 0 {
					t.Fatalf("unexpected details %s", head(string(r.Details)))
				}
			} else if d := details(t, r); d.FullOutput != c.details || d.FullOutputTruncated {
				t.Fatalf("details fullOutput has %d bytes, want %d", len(d.FullOutput), len(c.details))
			}
		})
	}
}

func TestReadDetailsCapped(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "big.txt"), lines(1, 3000))
	r := run(t, testTools(Options{MaxDetailsBytes: 100})[NameRead], dir, map[string]any{"path": "big.txt"})
	if d := details(t, r); !d.FullOutputTruncated || len(d.FullOutput) > 100 || !strings.HasPrefix(d.FullOutput, "line1\n") {
		t.Fatalf("details = %+v", d)
	}
}

func TestReadMaxFileBytes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "f.txt"), strings.Repeat("x", 1000))
	r := run(t, testTools(Options{Read: ReadOptions{MaxFileBytes: 10}})[NameRead], dir, map[string]any{"path": "f.txt"})
	if !r.IsError || !strings.Contains(r.Content, "larger than") {
		t.Fatalf("got %+v", r)
	}
}

func head(s string) string {
	if len(s) > 80 {
		return s[:80]
	}
	return s
}

func tail(s string) string {
	if len(s) > 120 {
		return s[len(s)-120:]
	}
	return s
}

func TestEdit(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		file     string
		args     map[string]any
		want     string // file content after
		content  string // substring of the result content
		isError  bool
		fileMode os.FileMode
	}{
		{name: "replace once", file: "a\nfoo\nb\n", args: map[string]any{"oldText": "foo", "newText": "bar\nbaz"},
			want: "a\nbar\nbaz\nb\n", content: "Successfully replaced 1 line with 2 lines at line 2 of f.txt"},
		{name: "delete", file: "keep remove keep", args: map[string]any{"oldText": " remove", "newText": ""}, want: "keep keep"},
		{name: "not found", file: "abc", args: map[string]any{"oldText": "xyz", "newText": "q"}, want: "abc",
			content: "could not find oldText in f.txt", isError: true},
		{name: "whitespace must match", file: "if x {\n\treturn\n}\n", args: map[string]any{"oldText": "if x {\n    return", "newText": "q"},
			want: "if x {\n\treturn\n}\n", content: "could not find", isError: true},
		{name: "two occurrences", file: "dup dup", args: map[string]any{"oldText": "dup", "newText": "one"}, want: "dup dup",
			content: "found 2 occurrences of oldText in f.txt", isError: true},
		{name: "overlapping occurrences", file: "aaa", args: map[string]any{"oldText": "aa", "newText": "b"}, want: "aaa",
			content: "found 2 occurrences", isError: true},
		{name: "empty oldText", file: "abc", args: map[string]any{"oldText": "", "newText": "x"}, want: "abc",
			content: "oldText must not be empty", isError: true},
		{name: "identical", file: "abc", args: map[string]any{"oldText": "b", "newText": "b"}, want: "abc",
			content: "identical", isError: true},
		{name: "crlf file", file: "one\r\ntwo\r\nthree\r\n", args: map[string]any{"oldText": "one\ntwo\n", "newText": "1\n2\n"},
			want: "1\r\n2\r\nthree\r\n"},
		{name: "mode kept", file: "#!/bin/sh\necho hi\n", args: map[string]any{"oldText": "hi", "newText": "ho"},
			want: "#!/bin/sh\necho ho\n", fileMode: 0o755},
	}
	edit := testTools(Options{})[NameEdit]
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "f.txt")
			writeFile(t, path, c.file)
			if c.fileMode != 0 {
				if err := os.Chmod(path, c.fileMode); err != nil {
					t.Fatal(err)
				}
			}
			args := map[string]any{"path": "f.txt"}
			for k, v := range c.args {
				args[k] = v
			}
			r := run(t, edit, dir, args)
			if r.IsError != c.isError || !strings.Contains(r.Content, c.content) {
				t.Fatalf("result %+v, want IsError=%v containing %q", r, c.isError, c.content)
			}
			if got := readFile(t, path); got != c.want {
				t.Fatalf("file = %q, want %q", got, c.want)
			}
			if c.fileMode != 0 {
				if fi, _ := os.Stat(path); fi.Mode().Perm() != c.fileMode {
					t.Fatalf("mode = %v, want %v", fi.Mode().Perm(), c.fileMode)
				}
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		t.Parallel()
		r := run(t, edit, t.TempDir(), map[string]any{"path": "nope", "oldText": "a", "newText": "b"})
		if !r.IsError || !strings.Contains(r.Content, "file not found: nope") {
			t.Fatalf("got %+v", r)
		}
	})
}

func TestWrite(t *testing.T) {
	t.Parallel()
	write := testTools(Options{})[NameWrite]
	t.Run("create nested", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		r := run(t, write, dir, map[string]any{"path": "a/b/c.txt", "content": "héllo\n"})
		if r.IsError || r.Content != "Successfully wrote 7 bytes to a/b/c.txt" {
			t.Fatalf("got %+v", r)
		}
		if got := readFile(t, filepath.Join(dir, "a/b/c.txt")); got != "héllo\n" {
			t.Fatalf("file = %q", got)
		}
	})
	t.Run("overwrite", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "f"), "old content that is longer")
		if r := run(t, write, dir, map[string]any{"path": "f", "content": "new"}); r.IsError {
			t.Fatalf("got %+v", r)
		}
		if got := readFile(t, filepath.Join(dir, "f")); got != "new" {
			t.Fatalf("file = %q", got)
		}
	})
	t.Run("empty content", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		if r := run(t, write, dir, map[string]any{"path": "empty", "content": ""}); r.IsError {
			t.Fatalf("got %+v", r)
		}
		if got := readFile(t, filepath.Join(dir, "empty")); got != "" {
			t.Fatalf("file = %q", got)
		}
	})
	t.Run("absolute inside", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		if r := run(t, write, dir, map[string]any{"path": filepath.Join(dir, "abs.txt"), "content": "x"}); r.IsError {
			t.Fatalf("got %+v", r)
		}
		readFile(t, filepath.Join(dir, "abs.txt"))
	})
	t.Run("directory", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"d", "."} {
			if r := run(t, write, dir, map[string]any{"path": p, "content": "x"}); !r.IsError || !strings.Contains(r.Content, "directory") {
				t.Fatalf("%s: got %+v", p, r)
			}
		}
	})
}

func TestConfinement(t *testing.T) {
	t.Parallel()
	outside := t.TempDir() // under the system temp dir, outside dir
	writeFile(t, filepath.Join(outside, "secret.txt"), "secret\n")
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "inside.txt"), "inside\n")
	mustSymlink(t, outside, filepath.Join(dir, "outlink"))                            // dir link to outside
	mustSymlink(t, filepath.Join(outside, "secret.txt"), filepath.Join(dir, "slink")) // file link to outside
	mustSymlink(t, filepath.Join(outside, "created-through-link"), filepath.Join(dir, "dangling"))
	mustSymlink(t, "inside.txt", filepath.Join(dir, "goodlink"))            // relative link inside
	mustSymlink(t, "new-target.txt", filepath.Join(dir, "dangling-inside")) // dangling link inside
	mustSymlink(t, "../", filepath.Join(dir, "parent"))

	tools := testTools(Options{})
	refused := []string{
		"../x",
		"../../etc/passwd",
		"sub/../../x",
		"/etc/passwd",
		filepath.Join(outside, "secret.txt"),
		"outlink/secret.txt",
		"outlink/new.txt",
		"slink",
		"dangling",
		"parent/x",
		filepath.Join(dir, "outlink", "secret.txt"),
	}
	for _, p := range refused {
		for _, name := range []string{NameRead, NameEdit, NameWrite} {
			args := map[string]any{"path": p, "content": "pwned", "oldText": "secret", "newText": "pwned"}
			r := run(t, tools[name], dir, args)
			if !r.IsError || !strings.Contains(r.Content, "is outside the working directory "+dir) {
				t.Errorf("%s %q: got %+v, want an outside-the-working-directory error", name, p, r)
			}
		}
	}
	if got := readFile(t, filepath.Join(outside, "secret.txt")); got != "secret\n" {
		t.Fatalf("outside file modified: %q", got)
	}
	for _, f := range []string{"created-through-link", "new.txt", "x"} {
		if _, err := os.Lstat(filepath.Join(outside, f)); err == nil {
			t.Fatalf("%s was created outside the working directory", f)
		}
	}

	allowed := []struct{ path, want string }{
		{"inside.txt", "inside\n"},
		{"./inside.txt", "inside\n"},
		{"sub/../inside.txt", "inside\n"},
		{"../" + filepath.Base(dir) + "/inside.txt", "inside\n"},
		{filepath.Join(dir, "inside.txt"), "inside\n"},
		{"goodlink", "inside\n"},
	}
	for _, a := range allowed {
		r := run(t, tools[NameRead], dir, map[string]any{"path": a.path})
		if r.IsError || r.Content != a.want {
			t.Errorf("read %q: got %+v", a.path, r)
		}
	}
	// Writing through a dangling link that stays inside creates its target.
	if r := run(t, tools[NameWrite], dir, map[string]any{"path": "dangling-inside", "content": "via link"}); r.IsError {
		t.Fatalf("write through inside link: %+v", r)
	}
	if got := readFile(t, filepath.Join(dir, "new-target.txt")); got != "via link" {
		t.Fatalf("link target = %q", got)
	}

	// A working directory given through a symbolic link: absolute paths in
	// either spelling are inside.
	alias := filepath.Join(t.TempDir(), "alias")
	mustSymlink(t, dir, alias)
	for _, p := range []string{filepath.Join(alias, "inside.txt"), filepath.Join(dir, "inside.txt"), "inside.txt"} {
		r := run(t, tools[NameRead], alias, map[string]any{"path": p})
		if r.IsError || r.Content != "inside\n" {
			t.Errorf("read %q in %s: got %+v", p, alias, r)
		}
	}
	if r := run(t, tools[NameRead], alias, map[string]any{"path": "../x"}); !r.IsError {
		t.Errorf("../x from alias accepted: %+v", r)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}
