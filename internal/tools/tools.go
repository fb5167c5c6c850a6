// Package tools provides the built-in coding tools read, bash, edit and
// write, with the names and parameters of pi's tools.
//
// Every tool is confined to the call's working directory (agent.ToolCall.Dir):
// paths are resolved against it, and paths leading outside it, directly, via
// "..", or through symbolic links, are refused. Failures the model can act on
// are reported as IsError results; a returned Go error means the call could
// not be carried out at all (for example a missing working directory).
package tools

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/sandbox"
)

// Names of the built-in tools.
const (
	NameRead  = "read"
	NameBash  = "bash"
	NameEdit  = "edit"
	NameWrite = "write"
)

// Defaults for Options.
const (
	DefaultMaxDetailsBytes = 4 << 20
	DefaultMaxFileBytes    = 64 << 20
	DefaultBashTimeout     = 120 * time.Second
	DefaultBashMaxTimeout  = 10 * time.Minute
	DefaultBashKillGrace   = 2 * time.Second
)

// Options configures the built-in tools; the zero value uses the defaults.
type Options struct {
	Read ReadOptions
	Bash BashOptions
	// MaxDetailsBytes bounds the full output kept in ToolResult.Details
	// (default DefaultMaxDetailsBytes); beyond it the head (read) or tail
	// (bash) is kept and fullOutputTruncated is set.
	MaxDetailsBytes int
	// Protected lists the paths write and edit refuse to change (the
	// agent's own rules; see workspace.ProtectedPaths); bash gets them
	// read-only (or hidden, the secret ones) from the sandbox.
	Protected []Protected
	// Sandbox confines bash's commands; without one bash refuses to run.
	Sandbox *sandbox.Sandbox
}

// ReadOptions configures the read tool.
type ReadOptions struct {
	// MaxFileBytes is the largest file read will load (default
	// DefaultMaxFileBytes); larger files are refused with a hint to use bash.
	MaxFileBytes int64
}

// BashOptions configures the bash tool.
type BashOptions struct {
	// ExtraEnv names worker environment variables passed to commands in
	// addition to the allowlist (PATH, HOME, USER, LANG, LC_*, TERM, TZ,
	// TMPDIR). Nothing else of the worker's environment is passed.
	ExtraEnv []string
	// DefaultTimeout applies when the call gives none (default 120s).
	DefaultTimeout time.Duration
	// MaxTimeout caps the timeout a call may ask for (default 10m).
	MaxTimeout time.Duration
	// KillGrace is the time between SIGTERM and SIGKILL to the command's
	// process group on timeout or abort (default 2s).
	KillGrace time.Duration
	// Network gives commands egress through the sandbox's proxy
	// (tools.network / tools.bash.network); off by default.
	Network bool
}

func (o Options) withDefaults() Options {
	if o.MaxDetailsBytes <= 0 {
		o.MaxDetailsBytes = DefaultMaxDetailsBytes
	}
	if o.Read.MaxFileBytes <= 0 {
		o.Read.MaxFileBytes = DefaultMaxFileBytes
	}
	if o.Bash.DefaultTimeout <= 0 {
		o.Bash.DefaultTimeout = DefaultBashTimeout
	}
	if o.Bash.MaxTimeout <= 0 {
		o.Bash.MaxTimeout = DefaultBashMaxTimeout
	}
	if o.Bash.DefaultTimeout > o.Bash.MaxTimeout {
		o.Bash.DefaultTimeout = o.Bash.MaxTimeout
	}
	if o.Bash.KillGrace <= 0 {
		o.Bash.KillGrace = DefaultBashKillGrace
	}
	return o
}

// Builtin returns the built-in tools in the order read, bash, edit, write.
// edit and write share per-file locks, so concurrent calls on one file do
// not interleave.
func Builtin(opts Options) []agent.Tool {
	opts = opts.withDefaults()
	locks := new(fileLocks)
	return []agent.Tool{
		&readTool{opts: opts},
		&bashTool{opts: opts},
		&editTool{locks: locks, protected: opts.Protected},
		&writeTool{locks: locks, protected: opts.Protected},
	}
}

// ByName returns the tool in list whose spec is named name.
func ByName(list []agent.Tool, name string) (agent.Tool, bool) {
	for _, t := range list {
		if t.Spec().Name == name {
			return t, true
		}
	}
	return nil, false
}

// outputDetails is the ToolResult.Details of a truncated output.
type outputDetails struct {
	FullOutput string `json:"fullOutput"`
	// FullOutputTruncated: the output exceeded MaxDetailsBytes and
	// FullOutput holds only part of it.
	FullOutputTruncated bool `json:"fullOutputTruncated,omitempty"`
}

func detailsJSON(d outputDetails) json.RawMessage {
	b, err := json.Marshal(d)
	if err != nil {
		return nil
	}
	return b
}

func errorResult(format string, args ...any) agent.ToolResult {
	return agent.ToolResult{Content: fmt.Sprintf(format, args...), IsError: true}
}

// prepare validates and decodes the call's arguments into v and checks the
// working directory. A non-nil *ToolResult is an error result to return.
func prepare(spec agent.ToolSpec, call agent.ToolCall, v any) (string, *agent.ToolResult, error) {
	if err := ValidateArgs(spec, call.Args); err != nil {
		r := errorResult("%s", err.Error())
		return "", &r, nil
	}
	if len(call.Args) > 0 {
		if err := json.Unmarshal(call.Args, v); err != nil {
			r := errorResult("invalid arguments for %s: %v", spec.Name, err)
			return "", &r, nil
		}
	}
	realDir, err := workDir(call.Dir)
	if err != nil {
		return "", nil, err
	}
	return realDir, nil, nil
}

// fileLocks serialises mutations of one file with striped mutexes.
type fileLocks struct {
	stripes [64]sync.Mutex
}

func (l *fileLocks) lock(path string) func() {
	h := fnv.New32a()
	_, _ = h.Write([]byte(path))
	m := &l.stripes[h.Sum32()%uint32(len(l.stripes))]
	m.Lock()
	return m.Unlock
}
