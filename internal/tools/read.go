package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/fastagent/fastagent/agent"
)

type readTool struct{ opts Options }

func (t *readTool) Spec() agent.ToolSpec {
	return agent.ToolSpec{
		Name: NameRead,
		Description: fmt.Sprintf("Read the contents of a text file. Output is truncated to %d lines or %s (whichever is hit first); "+
			"use offset/limit for large files, and when you need the whole file continue with offset until complete.",
			DefaultMaxLines, FormatSize(DefaultMaxBytes)),
		Parameters: readSchema,
		Idempotent: true,
	}
}

type readArgs struct {
	Path   string   `json:"path"`
	Offset *float64 `json:"offset"`
	Limit  *float64 `json:"limit"`
}

func (t *readTool) Run(ctx context.Context, call agent.ToolCall) (agent.ToolResult, error) {
	var a readArgs
	realDir, res, err := prepare(t.Spec(), call, &a)
	if res != nil || err != nil {
		return deref(res), err
	}
	path, err := resolvePath(call.Dir, realDir, a.Path)
	if err != nil {
		return errorResult("%v", err), nil
	}
	if p, ok := protectedBy(t.opts.Protected, path); ok && p.Secret {
		return errorResult("read refused: %s is not readable by the agent (%s)", a.Path, p.Reason), nil
	}
	rel, err := filepath.Rel(realDir, path)
	if err != nil {
		return errorResult("cannot read %s: %v", a.Path, err), nil
	}
	hookBeforeOpen()
	data, res := t.load(ctx, realDir, rel, a.Path, t.opts.Protected)
	if err := ctx.Err(); err != nil {
		return agent.ToolResult{}, fmt.Errorf("read: %w", err)
	}
	if res != nil {
		return *res, nil
	}
	if bytes.IndexByte(data[:min(len(data), 8192)], 0) >= 0 {
		return errorResult("%s appears to be a binary file; inspect it with bash (e.g. file, xxd | head)", a.Path), nil
	}
	text := string(data)
	total := CountLines(text)

	start := 1
	if a.Offset != nil {
		start = int(*a.Offset)
	}
	if total == 0 && start == 1 {
		return agent.ToolResult{Content: "[The file is empty.]"}, nil
	}
	if start > total {
		return errorResult("offset %d is beyond the end of %s (%d lines total)", start, a.Path, total), nil
	}
	selected := text[lineStart(text, start):]
	end := total // last line selected
	if a.Limit != nil {
		if n := int(*a.Limit); start-1+n < total {
			end = start - 1 + n
			selected = text[lineStart(text, start):lineStart(text, end+1)]
		}
	}

	return t.page(a.Path, selected, start, end, total), nil
}

// page is the model's view of the selected lines [start, end] of a file
// of total lines: their head within the default limits, with a note saying
// how to read on (offset, or bash for a line longer than the limit) and the
// selection in Details when it was cut.
func (t *readTool) page(name, selected string, start, end, total int) agent.ToolResult {
	tr := TruncateHead(selected, DefaultMaxLines, DefaultMaxBytes)
	var note string
	switch {
	case tr.PartialLine:
		note = fmt.Sprintf("[Line %d is %s, longer than the %s limit; only its start is shown. "+
			"Read the rest with bash, e.g. sed -n '%dp' %s | tail -c +%d | head -c %d.",
			start, FormatSize(lineLen(selected)), FormatSize(DefaultMaxBytes), start, shellQuote(name), tr.OutputBytes+1, DefaultMaxBytes)
		if start < end {
			note += fmt.Sprintf(" Use offset=%d to continue after it.", start+1)
		}
		note += "]"
	case tr.Truncated:
		last := start + tr.OutputLines - 1
		note = fmt.Sprintf("[Showing lines %d-%d of %d. Use offset=%d to continue.]", start, last, total, last+1)
	case end < total:
		note = fmt.Sprintf("[%d more lines in file. Use offset=%d to continue.]", total-end, end+1)
	}
	out := tr.Content
	if note != "" {
		if out != "" && !strings.HasSuffix(out, "\n") {
			out += "\n"
		}
		out += "\n" + note
	}
	r := agent.ToolResult{Content: out}
	if tr.Truncated {
		d := outputDetails{FullOutput: selected}
		if len(selected) > t.opts.MaxDetailsBytes {
			d.FullOutput = selected[:runeStartAtOrBefore(selected, t.opts.MaxDetailsBytes)]
			d.FullOutputTruncated = true
		}
		r.Details = detailsJSON(d)
	}
	return r
}

// readChunk is how much read loads between checks of its context.
const readChunk = 256 << 10

// load reads rel (relative to realDir) without following any symbolic
// link (openBeneath), so a link swapped in after the path was checked
// cannot lead to a secret or outside realDir; the opened file is checked
// again against protected (its Secret entries) by where it is. Only
// regular files are read: FIFOs, devices and sockets are refused before
// and after opening (the open does not block), and the context is checked
// between chunks. A non-nil result is the error to return.
func (t *readTool) load(ctx context.Context, realDir, rel, shown string, protected []Protected) ([]byte, *agent.ToolResult) {
	fail := func(format string, args ...any) ([]byte, *agent.ToolResult) {
		r := errorResult(format, args...)
		return nil, &r
	}
	check := func(m fs.FileMode, size int64) ([]byte, *agent.ToolResult) {
		switch {
		case m.IsDir():
			return fail("%s is a directory, not a file; use bash (ls) to list it", shown)
		case !m.IsRegular():
			return fail("%s is %s, not a regular file; read refuses it (it could block or never end)", shown, fileKind(m))
		case size > t.opts.Read.MaxFileBytes:
			return fail("%s is %s, larger than the %s read limit; inspect parts of it with bash (head, tail, sed -n, grep)",
				shown, FormatSize(int(size)), FormatSize(int(t.opts.Read.MaxFileBytes)))
		}
		return nil, nil
	}
	if rel == "." {
		return check(fs.ModeDir, 0)
	}
	var refused *agent.ToolResult
	o, err := openBeneath(realDir, rel, os.O_RDONLY, false, false, func(m fs.FileMode, st *unix.Stat_t) error {
		if _, r := check(m, st.Size); r != nil {
			refused = r
			return errRefused
		}
		return nil
	})
	switch {
	case refused != nil:
		return nil, refused
	case errors.Is(err, fs.ErrNotExist):
		return fail("file not found: %s", shown)
	case err != nil:
		return fail("cannot read %s: %v", shown, err)
	}
	f := o.f
	defer f.Close()
	if _, r := check(fileMode(o.st.Mode), o.st.Size); r != nil {
		return nil, r
	}
	if err := checkOpened(o, realDir, protected, func(p Protected) bool { return p.Secret }); err != nil {
		return fail("cannot read %s: %v", shown, err)
	}
	var buf bytes.Buffer
	lim := io.LimitReader(f, t.opts.Read.MaxFileBytes+1)
	for {
		if err := ctx.Err(); err != nil {
			return fail("read of %s was cancelled: %v", shown, err)
		}
		n, err := io.CopyN(&buf, lim, readChunk)
		if errors.Is(err, io.EOF) || (err == nil && n < readChunk) {
			break
		}
		if err != nil {
			return fail("cannot read %s: %v", shown, err)
		}
	}
	if int64(buf.Len()) > t.opts.Read.MaxFileBytes {
		return fail("%s grew past the %s read limit while being read; inspect parts of it with bash (head, tail, sed -n, grep)",
			shown, FormatSize(int(t.opts.Read.MaxFileBytes)))
	}
	return buf.Bytes(), nil
}

// errRefused stops openBeneath when its check already has the answer.
var errRefused = errors.New("refused")

// lineStart returns the byte index at which 1-based line n of s begins, or
// len(s) when s has fewer lines.
func lineStart(s string, n int) int {
	i := 0
	for ; n > 1; n-- {
		j := strings.IndexByte(s[i:], '\n')
		if j < 0 {
			return len(s)
		}
		i += j + 1
	}
	return i
}

// lineLen returns the length of the first line of s, without its newline.
func lineLen(s string) int {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return i
	}
	return len(s)
}

// shellQuote quotes s for a bash command line.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func deref(r *agent.ToolResult) agent.ToolResult {
	if r == nil {
		return agent.ToolResult{}
	}
	return *r
}
