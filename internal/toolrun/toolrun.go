// Package toolrun runs a workspace tool: the command a tools/ manifest
// declares, under the one tool policy (the sandbox), with the call's
// arguments as JSON on stdin and its result read from stdout. Loading and
// checking manifests is the workspace package's job; this one only runs
// what it was given.
package toolrun

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/sandbox"
	"github.com/fastagent/fastagent/internal/tools"
)

const (
	// outputDrain is how long a tool's output pipes may stay open after the
	// command exits (a background child holding them is not waited for).
	outputDrain = 500 * time.Millisecond
	// stderrKeep bounds the stderr kept for error results.
	stderrKeep = 64 << 10
	// stderrLines and stderrBytes bound the stderr tail shown to the model.
	stderrLines = 20
	stderrBytes = 4 << 10
	// RuntimeSlack is added to a tool's own timeout (and kill grace) for the
	// runtime's bound, so the tool's timeout reports first.
	RuntimeSlack = 10 * time.Second
)

// Command is what a tool runs: a shell line (bash -c in the working
// directory) or an argv list (argv[0] with a slash, when relative, is taken
// from the tools folder).
type Command struct {
	Shell string
	Argv  []string
}

// Def is a checked tool manifest; it never changes once built.
type Def struct {
	Name, Description string
	Params            json.RawMessage
	Cmd               Command
	Timeout           time.Duration
	Idempotent        bool
	Deferred          bool
	Sequential        bool
	RequiresApproval  bool
	JSONOutput        bool
	// ToolsDir is the absolute path of the tools folder.
	ToolsDir  string
	Validator *tools.Validator
}

// Tool runs a workspace tool's command: arguments as JSON on stdin, the
// result on stdout, in its own process group, with the bash tool's
// environment allowlist, killed (with its children) on timeout or abort.
type Tool struct {
	Def     *Def
	Timeout time.Duration
	// ExtraEnv are the definition's env: entries, beside the allowlist.
	ExtraEnv  []string
	Box       *sandbox.Sandbox
	Protected []tools.Protected
	Network   bool
}

// WithTimeout is the tool with another timeout (fastagent.yaml's
// tools.<name>.timeout).
func (t *Tool) WithTimeout(d time.Duration) *Tool {
	c := *t
	c.Timeout = d
	return &c
}

// Spec implements agent.Tool; the runtime's bound leaves the tool's own
// timeout and kill grace room to report first.
func (t *Tool) Spec() agent.ToolSpec {
	d := t.Def
	return agent.ToolSpec{
		Name:             d.Name,
		Description:      d.Description,
		Parameters:       d.Params,
		Idempotent:       d.Idempotent,
		Sequential:       d.Sequential,
		Deferred:         d.Deferred,
		RequiresApproval: d.RequiresApproval,
		Timeout:          t.Timeout + tools.DefaultBashKillGrace + RuntimeSlack,
	}
}

// jsonOutput is what a tool with "output: json" prints.
type jsonOutput struct {
	Content *string         `json:"content"`
	IsError bool            `json:"isError"`
	Details json.RawMessage `json:"details"`
}

// outputDetails is the ToolResult.Details of a truncated output (as the
// built-in tools write it).
type outputDetails struct {
	FullOutput          string `json:"fullOutput"`
	FullOutputTruncated bool   `json:"fullOutputTruncated,omitempty"`
}

// Run implements agent.Tool: it validates the arguments, runs the command
// confined and reads its result; a failure the model can act on is an
// error result, not a Go error.
func (t *Tool) Run(ctx context.Context, call agent.ToolCall) (agent.ToolResult, error) {
	d := t.Def
	if err := d.Validator.Validate(t.Spec(), call.Args); err != nil {
		return errorResult("%s", err.Error()), nil
	}
	if _, err := tools.WorkDir(call.Dir); err != nil {
		return agent.ToolResult{}, err
	}
	stdin := []byte("{}")
	if raw := bytes.TrimSpace(call.Args); len(raw) > 0 && string(raw) != "null" {
		var buf bytes.Buffer
		if err := json.Compact(&buf, raw); err != nil {
			return errorResult("invalid arguments for %s: %v", d.Name, err), nil
		}
		stdin = buf.Bytes()
	}
	out, truncated, failed, err := t.Exec(ctx, call, stdin)
	if err != nil {
		return agent.ToolResult{}, err
	}
	if failed != "" {
		return agent.ToolResult{Content: failed, IsError: true}, nil
	}
	if d.JSONOutput {
		return parseJSONOutput(d.Name, out, truncated), nil
	}
	return textResult(out, truncated), nil
}

// Exec runs the command confined with stdin and returns what it printed
// (its head, truncated when it printed more than the details limit).
// failed, when set, says why it did not succeed — no sandbox, a refused
// start, a timeout or abort, an exit status — with the tails of its stderr
// and stdout; only an internal problem is an error.
func (t *Tool) Exec(ctx context.Context, call agent.ToolCall, stdin []byte) (out string, truncated bool, failed string, err error) {
	d := t.Def
	dir, err := tools.WorkDir(call.Dir)
	if err != nil {
		return "", false, "", err
	}
	if t.Box == nil {
		return "", false, fmt.Sprintf("Tool %s cannot run: %v", d.Name, tools.ErrNoSandbox), nil
	}
	cmd, err := t.command(dir, call)
	if err != nil {
		return "", false, "", err
	}
	cmd.Stdin = bytes.NewReader(stdin)
	stdout := &headBuffer{max: tools.DefaultMaxDetailsBytes}
	stderr := &tailBuffer{max: stderrKeep}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if ctx.Err() != nil {
		return "", false, fmt.Sprintf("Tool %s was aborted before it started.", d.Name), nil
	}
	// The workspace tool runs under the one tool policy: the workspace
	// writable but its rules, no secrets, the network only if it has it.
	tools.Confine(cmd, dir, t.Protected, t.Network)
	proc, err := t.Box.Start(ctx, cmd)
	if err != nil {
		hint := ""
		if errors.Is(err, syscall.EACCES) || strings.Contains(err.Error(), "permission denied") {
			hint = " (is the script executable? chmod +x it)"
		}
		return "", false, fmt.Sprintf("Tool %s could not start: %v%s", d.Name, err, hint), nil
	}
	// Whatever the tool leaves running is killed on every return.
	defer proc.Kill()
	stopped, waitErr := t.wait(ctx, proc)
	out, truncated = stdout.result()
	status := stopped
	if status == "" && waitErr != nil {
		status = d.failure(waitErr)
	}
	if status != "" {
		text := status
		if tail := strings.TrimSpace(tools.TruncateTail(stderr.String(), stderrLines, stderrBytes).Content); tail != "" {
			text += "\n\nstderr:\n" + tail
		}
		if s := strings.TrimSpace(out); s != "" {
			text += "\n\nstdout:\n" + tools.TruncateHead(s, stderrLines, stderrBytes).Content
		}
		return out, truncated, text, nil
	}
	return out, truncated, "", nil
}

// command is the process a call runs: the tool's argv (a relative program
// path is taken from the tools folder) or its shell line under bash, with
// the allowlisted environment and the call's identity.
func (t *Tool) command(dir string, call agent.ToolCall) (*sandbox.Cmd, error) {
	d := t.Def
	cmd := &sandbox.Cmd{Dir: dir, WaitDelay: outputDrain}
	if d.Cmd.Argv == nil {
		bash, err := exec.LookPath("bash")
		if err != nil {
			return nil, fmt.Errorf("workspace: bash not found: %w", err)
		}
		cmd.Path, cmd.Args = bash, []string{"bash", "-c", d.Cmd.Shell}
	} else {
		prog := d.Cmd.Argv[0]
		if strings.ContainsRune(prog, '/') && !filepath.IsAbs(prog) {
			prog = filepath.Join(d.ToolsDir, prog)
		}
		cmd.Path, cmd.Args = prog, append([]string{d.Cmd.Argv[0]}, d.Cmd.Argv[1:]...)
	}
	cmd.Env = append(tools.CommandEnv(t.ExtraEnv),
		"FASTAGENT_TOOL_NAME="+d.Name,
		"FASTAGENT_TOOL_DIR="+d.ToolsDir,
		"FASTAGENT_SESSION="+call.Session,
		"FASTAGENT_CALL_ID="+call.ID,
	)
	return cmd, nil
}

// wait waits for the tool until it exits, times out or is aborted (then
// its process group is stopped); stopped says why it was stopped.
func (t *Tool) wait(ctx context.Context, proc *sandbox.Process) (stopped string, waitErr error) {
	d := t.Def
	waitDone := make(chan error, 1)
	go func() { waitDone <- proc.Wait() }()
	timer := time.NewTimer(t.Timeout)
	defer timer.Stop()
	select {
	case waitErr = <-waitDone:
	case <-timer.C:
		stopped = fmt.Sprintf("Tool %s timed out after %s; its process group was killed.", d.Name, t.Timeout)
		waitErr = tools.Stop(proc, waitDone, tools.DefaultBashKillGrace)
	case <-ctx.Done():
		stopped = fmt.Sprintf("Tool %s was aborted; its process group was killed.", d.Name)
		waitErr = tools.Stop(proc, waitDone, tools.DefaultBashKillGrace)
	}
	if errors.Is(waitErr, sandbox.ErrWaitDelay) {
		waitErr = nil // exited fine; a background child held the output open
	}
	return stopped, waitErr
}

// failure says how a tool process failed.
func (d *Def) failure(waitErr error) string {
	var ee *sandbox.ExitError
	switch {
	case errors.As(waitErr, &ee) && ee.Status.Signaled():
		return fmt.Sprintf("Tool %s was terminated by signal %s.", d.Name, ee.Status.Signal())
	case errors.As(waitErr, &ee):
		return fmt.Sprintf("Tool %s failed with exit code %d.", d.Name, ee.ExitCode())
	default:
		return fmt.Sprintf("Tool %s failed: %v", d.Name, waitErr)
	}
}

// textResult makes the model's view of an output: its head within the
// default limits, with a note and the full output in Details when cut.
func textResult(out string, dropped bool) agent.ToolResult {
	tr := tools.TruncateHead(out, tools.DefaultMaxLines, tools.DefaultMaxBytes)
	r := agent.ToolResult{Content: tr.Content}
	if tr.Truncated || dropped {
		r.Content = strings.TrimRight(tr.Content, "\n") + fmt.Sprintf("\n\n[Output truncated to its first %d of %d lines (limit %d lines or %s). Ask the tool for less output.]",
			tr.OutputLines, tr.TotalLines, tools.DefaultMaxLines, tools.FormatSize(tools.DefaultMaxBytes))
		if b, err := json.Marshal(outputDetails{FullOutput: out, FullOutputTruncated: dropped}); err == nil {
			r.Details = b
		}
	}
	if strings.TrimSpace(r.Content) == "" {
		r.Content = "(no output)"
	}
	return r
}

func parseJSONOutput(name, out string, dropped bool) agent.ToolResult {
	if dropped {
		return errorResult("Tool %s declares output: json but printed more than %s.", name, tools.FormatSize(tools.DefaultMaxDetailsBytes))
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	var j jsonOutput
	if err := dec.Decode(&j); err != nil || j.Content == nil {
		why := "it has no \"content\" string"
		if err != nil {
			why = err.Error()
		}
		return errorResult("Tool %s declares output: json but its output is not {\"content\": \"…\", \"isError\": false}: %s. Output: %s",
			name, why, tools.TruncateHead(out, 5, 500).Content)
	}
	r := textResult(*j.Content, false)
	r.IsError = j.IsError
	if len(j.Details) > 0 && r.Details == nil && string(j.Details) != "null" {
		r.Details = j.Details
	}
	return r
}

func errorResult(format string, args ...any) agent.ToolResult {
	return agent.ToolResult{Content: fmt.Sprintf(format, args...), IsError: true}
}

// headBuffer keeps the first max bytes written to it.
type headBuffer struct {
	max     int
	mu      sync.Mutex
	buf     []byte
	dropped bool
}

func (b *headBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - len(b.buf); room < len(p) {
		b.buf = append(b.buf, p[:max(room, 0)]...)
		b.dropped = true
	} else {
		b.buf = append(b.buf, p...)
	}
	return len(p), nil
}

func (b *headBuffer) result() (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.ToValidUTF8(string(b.buf), "\uFFFD"), b.dropped
}

// tailBuffer keeps (at least) the last max bytes written to it.
type tailBuffer struct {
	max int
	mu  sync.Mutex
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > 2*b.max {
		n := copy(b.buf, b.buf[len(b.buf)-b.max:])
		b.buf = b.buf[:n]
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.ToValidUTF8(string(b.buf), "\uFFFD")
}
