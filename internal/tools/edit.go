package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/fastagent/fastagent/agent"
)

type editTool struct {
	locks     *fileLocks
	protected []Protected
}

func (t *editTool) Spec() agent.ToolSpec {
	return agent.ToolSpec{
		Name: NameEdit,
		Description: "Edit a file by replacing exact text. oldText must match exactly one place in the file, " +
			"including whitespace and indentation. Use this for precise, surgical edits.",
		Parameters: editSchema,
	}
}

type editArgs struct {
	Path    string `json:"path"`
	OldText string `json:"oldText"`
	NewText string `json:"newText"`
}

func (t *editTool) Run(_ context.Context, call agent.ToolCall) (agent.ToolResult, error) {
	var a editArgs
	realDir, res, err := prepare(t.Spec(), call, &a)
	if res != nil || err != nil {
		return deref(res), err
	}
	path, err := resolvePath(call.Dir, realDir, a.Path)
	if err != nil {
		return errorResult("%v", err), nil
	}
	if a.OldText == "" {
		return errorResult("oldText must not be empty; to create or overwrite a whole file use write"), nil
	}
	if a.OldText == a.NewText {
		return errorResult("oldText and newText are identical; there is nothing to change"), nil
	}
	if p, ok := protectedBy(t.protected, path); ok {
		return refuseProtected(NameEdit, a.Path, realDir, p), nil
	}
	unlock := t.locks.lock(path)
	defer unlock()
	rel, err := filepath.Rel(realDir, path)
	if err != nil {
		return errorResult("cannot edit %s: %v", a.Path, err), nil
	}
	hookBeforeOpen()
	f, err := openForWrite(realDir, rel, os.O_RDWR, false, false, t.protected)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return errorResult("file not found: %s", a.Path), nil
	case errors.Is(err, errIsDir):
		return errorResult("%s is a directory, not a file", a.Path), nil
	case err != nil:
		return errorResult("cannot edit %s: %v", a.Path, err), nil
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return errorResult("cannot read %s: %v", a.Path, err), nil
	}
	content := string(data)
	oldText, newText := a.OldText, a.NewText
	n := countOccurrences(content, oldText)
	if n == 0 && strings.Contains(content, "\r\n") && strings.Contains(oldText, "\n") && !strings.Contains(oldText, "\r\n") {
		// The model usually sends LF line endings for a CRLF file.
		crlf := func(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") }
		if m := countOccurrences(content, crlf(oldText)); m > 0 {
			oldText, newText, n = crlf(oldText), crlf(newText), m
		}
	}
	switch {
	case n == 0:
		return errorResult("could not find oldText in %s. It must match the file exactly, including whitespace, indentation "+
			"and line breaks; read the file again to get its current text.", a.Path), nil
	case n > 1:
		return errorResult("found %d occurrences of oldText in %s, but it must match exactly one. "+
			"Include more surrounding lines in oldText (and newText) to make it unique.", n, a.Path), nil
	}
	i := strings.Index(content, oldText)
	updated := content[:i] + newText + content[i+len(oldText):]
	if err := f.Truncate(0); err != nil {
		return errorResult("cannot write %s: %v", a.Path, err), nil
	}
	if _, err := f.WriteAt([]byte(updated), 0); err != nil {
		return errorResult("cannot write %s: %v", a.Path, err), nil
	}
	if err := f.Close(); err != nil {
		return errorResult("cannot write %s: %v", a.Path, err), nil
	}
	line := strings.Count(content[:i], "\n") + 1
	return agent.ToolResult{Content: fmt.Sprintf("Successfully replaced %s with %s at line %d of %s.",
		plural(CountLines(oldText), "line"), plural(CountLines(newText), "line"), line, a.Path)}, nil
}

// countOccurrences counts the (possibly overlapping) occurrences of sub in s.
func countOccurrences(s, sub string) int {
	n := 0
	for i := 0; ; {
		j := strings.Index(s[i:], sub)
		if j < 0 {
			return n
		}
		n++
		i += j + 1
	}
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
