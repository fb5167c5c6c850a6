package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/sandbox"
	"github.com/fastagent/fastagent/internal/toolprogress"
)

// outputDrain is how long bash waits for the output pipe to close after the
// shell exits; background processes that keep it open are not waited for.
const outputDrain = 500 * time.Millisecond

// defaultPath is used when the worker has no PATH.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// envAllowlist names the worker environment variables passed to commands
// (besides LC_* and BashOptions.ExtraEnv).
var envAllowlist = []string{"PATH", "HOME", "USER", "LANG", "TERM", "TZ", "TMPDIR"}

type bashTool struct{ opts Options }

func (t *bashTool) Spec() agent.ToolSpec {
	return agent.ToolSpec{
		Name: NameBash,
		Description: fmt.Sprintf("Execute a bash command in the working directory. Returns stdout and stderr combined. "+
			"Output is truncated to the last %d lines or %s (whichever is hit first). "+
			"Optionally provide a timeout in seconds (default %s, at most %s); on timeout the command and its children are killed.",
			DefaultMaxLines, FormatSize(DefaultMaxBytes), fmtSeconds(t.opts.Bash.DefaultTimeout), fmtSeconds(t.opts.Bash.MaxTimeout)),
		Parameters: bashSchema,
		// Leave room for the kill grace so the runtime's bound does not cut
		// the command short before its own timeout reports.
		Timeout: t.opts.Bash.MaxTimeout + t.opts.Bash.KillGrace + 30*time.Second,
	}
}

type bashArgs struct {
	Command string   `json:"command"`
	Timeout *float64 `json:"timeout"`
}

func (t *bashTool) Run(ctx context.Context, call agent.ToolCall) (agent.ToolResult, error) {
	var a bashArgs
	realDir, res, err := prepare(t.Spec(), call, &a)
	if res != nil || err != nil {
		return deref(res), err
	}
	timeout := t.opts.Bash.DefaultTimeout
	if a.Timeout != nil && *a.Timeout > 0 {
		timeout = time.Duration(*a.Timeout * float64(time.Second))
	}
	timeout = min(timeout, t.opts.Bash.MaxTimeout)

	if t.opts.Sandbox == nil {
		return errorResult("bash cannot run: %v", ErrNoSandbox), nil
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		return agent.ToolResult{}, fmt.Errorf("tools: bash not found: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return errorResult("Command was aborted before it started."), nil
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return agent.ToolResult{}, fmt.Errorf("tools: bash output pipe: %w", err)
	}
	// stdin is /dev/null; stdout and stderr share the pipe.
	cmd := &sandbox.Cmd{Path: bash, Args: []string{"bash", "-c", a.Command}, Dir: realDir, Env: t.env(),
		Stdout: pw, Stderr: pw}
	Confine(cmd, realDir, t.opts.Protected, t.opts.Bash.Network)
	proc, err := t.opts.Sandbox.Start(ctx, cmd)
	_ = pw.Close()
	if err != nil {
		_ = pr.Close()
		return errorResult("bash could not start: %v", err), nil
	}
	// Whatever the command leaves running is killed on every return.
	defer proc.Kill()

	stopped, out, waitErr := t.wait(ctx, proc, pr, timeout)
	return bashResult(stopped, waitErr, out), nil
}

// wait reads the command's output until the command ends, times out or is
// aborted (then its process group is stopped), and says why it stopped
// early ("" when it ended by itself).
func (t *bashTool) wait(ctx context.Context, proc *sandbox.Process, pr *os.File, timeout time.Duration) (stopped string, out *tailBuffer, waitErr error) {
	out = &tailBuffer{max: t.opts.MaxDetailsBytes}
	readDone := make(chan struct{})
	go func() {
		// The output is read as it comes; its last line is the call's
		// progress (agent.ReportProgress; the runtime throttles it).
		_, _ = io.Copy(io.MultiWriter(out, &lineProgress{ctx: ctx}), pr)
		close(readDone)
	}()
	waitDone := make(chan error, 1)
	go func() { waitDone <- proc.Wait() }()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case waitErr = <-waitDone:
	case <-timer.C:
		stopped = fmt.Sprintf("Command timed out after %s", fmtSeconds(timeout))
		waitErr = Stop(proc, waitDone, t.opts.Bash.KillGrace)
	case <-ctx.Done():
		stopped = "Command was aborted"
		waitErr = Stop(proc, waitDone, t.opts.Bash.KillGrace)
	}
	// The shell is done: what it started goes with it, so the output pipe
	// closes unless something escaped the call.
	proc.Kill()
	select {
	case <-readDone:
	case <-time.After(outputDrain):
		// Something outside the shell still holds the pipe; stop reading.
		_ = pr.Close()
		<-readDone
	}
	_ = pr.Close()
	return stopped, out, waitErr
}

// bashResult is the tool result of a finished command: its output's tail
// (with a note on how to see more when cut) and, for a failure, why.
func bashResult(stopped string, waitErr error, out *tailBuffer) agent.ToolResult {
	output, totalLines, total, dropped := out.result()
	r := agent.ToolResult{}
	tr := TruncateTail(output, DefaultMaxLines, DefaultMaxBytes)
	text := tr.Content
	if tr.Truncated || dropped {
		startLine := totalLines - tr.OutputLines + 1
		var note string
		if tr.PartialLine {
			note = fmt.Sprintf("[Showing the last %s of line %d (the output has %d lines, %s). ",
				FormatSize(tr.OutputBytes), totalLines, totalLines, FormatSize(total))
		} else {
			note = fmt.Sprintf("[Showing lines %d-%d of %d (output truncated to the last %d lines or %s). ",
				startLine, totalLines, totalLines, DefaultMaxLines, FormatSize(DefaultMaxBytes))
		}
		note += "To see more, redirect the output to a file and read it, or filter it with grep, head or tail.]"
		text = note + "\n\n" + text
		r.Details = detailsJSON(outputDetails{FullOutput: output, FullOutputTruncated: dropped})
	}
	if strings.TrimSpace(text) == "" {
		text = "(no output)"
	}
	if status := exitStatus(stopped, waitErr); status != "" {
		r.IsError = true
		text = strings.TrimRight(text, "\n") + "\n\n" + status
	}
	r.Content = text
	return r
}

// exitStatus says why a command failed ("" when it succeeded).
func exitStatus(stopped string, waitErr error) string {
	switch {
	case stopped != "":
		return stopped + "; its process group was killed."
	case waitErr == nil:
		return ""
	}
	var ee *sandbox.ExitError
	if !errors.As(waitErr, &ee) {
		return fmt.Sprintf("Command failed: %v", waitErr)
	}
	if ee.Status.Signaled() {
		return fmt.Sprintf("Command was terminated by signal %d (%s)", int(ee.Status.Signal()), ee.Status.Signal())
	}
	return fmt.Sprintf("Command failed with exit code %d", ee.ExitCode())
}

// env returns the command environment: the allowlisted variables of the
// worker's environment and nothing else.
func (t *bashTool) env() []string {
	var env []string
	hasPath := false
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if slices.Contains(envAllowlist, name) || strings.HasPrefix(name, "LC_") || slices.Contains(t.opts.Bash.ExtraEnv, name) {
			env = append(env, kv)
			hasPath = hasPath || name == "PATH"
		}
	}
	if !hasPath {
		env = append(env, "PATH="+defaultPath)
	}
	return env
}

func fmtSeconds(d time.Duration) string {
	return fmt.Sprintf("%gs", d.Seconds())
}

// progressTail bounds the output lineProgress looks at for the last line.
const progressTail = 4 << 10

// progressScan is how much of the tail each write scans for the last line.
const progressScan = 1 << 10

// lineProgress reports the last line of what is written to it so far as
// the call's progress.
type lineProgress struct {
	ctx  context.Context
	tail []byte
}

func (w *lineProgress) Write(p []byte) (int, error) {
	w.tail = append(w.tail, p...)
	if len(w.tail) > 2*progressTail {
		n := copy(w.tail, w.tail[len(w.tail)-progressTail:])
		w.tail = w.tail[:n]
	}
	// The last line is in the last KiB: a longer line is cut to its end
	// by Clean anyway, and each write then costs the same however much
	// the tail holds.
	if line := toolprogress.LastLine(w.tail[max(0, len(w.tail)-progressScan):]); line != "" {
		agent.ReportProgress(w.ctx, agent.Progress{Message: line})
	}
	return len(p), nil
}

// tailBuffer keeps the last max bytes written to it (at least; it trims
// lazily) and counts all lines.
type tailBuffer struct {
	max int

	mu       sync.Mutex
	buf      []byte
	total    int
	newlines int
	last     byte
	dropped  bool
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(p) == 0 {
		return 0, nil
	}
	b.total += len(p)
	b.newlines += bytes.Count(p, []byte{'\n'})
	b.last = p[len(p)-1]
	b.buf = append(b.buf, p...)
	if len(b.buf) > 2*b.max {
		n := copy(b.buf, b.buf[len(b.buf)-b.max:])
		b.buf = b.buf[:n]
		b.dropped = true
	}
	return len(p), nil
}

// result returns the kept output, the total numbers of lines and bytes
// written, and whether the start of the output was dropped.
func (b *tailBuffer) result() (string, int, int, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := string(b.buf)
	dropped := b.dropped
	if len(s) > b.max {
		s = s[runeStartAtOrAfter(s, len(s)-b.max):]
		dropped = true
	}
	lines := b.newlines
	if b.total > 0 && b.last != '\n' {
		lines++
	}
	return s, lines, b.total, dropped
}
