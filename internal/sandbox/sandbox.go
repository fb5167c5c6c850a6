// Package sandbox confines every process a tool starts — bash, workspace
// tools, MCP stdio servers — under one default-deny policy, and refuses to
// start them when nothing can confine them.
//
// The policy: the file system is read-only except the paths a call may write
// (the workspace) and a private temporary directory per call; the agent's
// rules inside them stay read-only whether or not they exist yet; the state
// dir, secret files and credentials are not readable at all; there is no
// network unless the call asks for it, and then only through the egress
// proxy (internal/egress), which never dials the control plane, loopback or
// link-local addresses; no secret reaches a tool through its environment or
// /proc; a call's processes end with the call.
//
// Two mechanisms enforce it (see Mode): Linux namespaces where the kernel
// lets an unprivileged process create them, otherwise Landlock plus seccomp
// (what a container under Docker's default seccomp profile still allows).
// Both run in a helper process: the worker's own executable, re-executed once
// (/proc/self/exe, never looked up through PATH) with an empty environment.
// The helper prepares each call on a fresh OS thread — namespaces, mounts,
// Landlock rules, seccomp filter, dropped capabilities — and forks the tool
// from that thread, which then dies; nothing else is executed to set a call
// up, so a call costs about a millisecond on top of the tool itself.
package sandbox

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fastagent/fastagent/internal/egress"
)

// Mode is a confinement mechanism.
type Mode string

const (
	// Namespaces runs each call in its own user, PID, mount, IPC and
	// network namespaces (plus a Landlock domain where the kernel has one,
	// which keeps concurrent calls from each other's /proc).
	Namespaces Mode = "namespaces"
	// Landlock confines each call with a Landlock ruleset (file system and,
	// from ABI 4, TCP) and a seccomp filter, without namespaces.
	Landlock Mode = "landlock"
	// Off runs tools unconfined. Only an explicit tools.sandbox: off or
	// FASTAGENT_SANDBOX=off selects it.
	Off Mode = "off"
)

// ParseMode reads a setting: "" or "auto" (namespaces, else Landlock),
// "namespaces", "landlock" or "off".
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.ToLower(strings.TrimSpace(s))); m {
	case "", "auto":
		return "", nil
	case Namespaces, Landlock, Off:
		return m, nil
	}
	return "", fmt.Errorf("sandbox: unknown mode %q (want auto, namespaces, landlock or off)", s)
}

// Config configures a Sandbox.
type Config struct {
	// Mode is the mechanism to use; "" tries Namespaces, then Landlock.
	// Naming one uses only that one: if it is unavailable, no tool runs.
	Mode Mode
	// Hidden are paths no tool may read, wherever they are: the state dir,
	// the API-token file, codec/TLS/App keys. Files that the worker's secret
	// variables name (secretenv.Files) and DefaultHidden are added.
	Hidden []string
	// Egress is the network policy of calls that have the network.
	Egress egress.Policy
	// Logger receives the startup report and refused network requests.
	Logger *slog.Logger
	// Executable is the program re-executed as the helper; default
	// /proc/self/exe (tests can point it elsewhere).
	Executable string

	// landlockABI, when below the kernel's, is the Landlock ABI the helper
	// uses instead: tests take an older kernel's path on a newer one.
	landlockABI int
}

// DefaultHidden are credential files and directories in the worker's home
// that no tool reads, whatever the policy: SSH and GPG keys, cloud and
// cluster credentials, registry and git credentials.
var DefaultHidden = []string{".ssh", ".gnupg", ".aws", ".azure", ".config/gcloud", ".kube", ".docker",
	".netrc", ".git-credentials", ".config/gh", ".pgpass", ".npmrc", ".pypirc", ".config/fastagent"}

// Status says which mechanism confines tools and what it enforces; it is
// shown by fastagent info, logged at startup and reported by /health.
type Status struct {
	// Mode is the mechanism in use; "" when none works (tools are refused).
	Mode Mode `json:"mode"`
	// Enforces lists what the mechanism enforces, in words.
	Enforces []string `json:"enforces,omitempty"`
	// LandlockABI is the kernel's Landlock ABI version (0: none).
	LandlockABI int `json:"landlockABI,omitempty"`
	// Error says why no tool runs, and what to do about it.
	Error string `json:"error,omitempty"`
	// Warning is set when tools run unconfined.
	Warning string `json:"warning,omitempty"`
}

// Cmd is one tool process to start: what exec.Cmd would hold, plus the
// call's part of the policy.
type Cmd struct {
	// Path is the program (absolute, or relative to Dir); Args includes
	// argv[0].
	Path string
	Args []string
	// Env is the complete environment; the sandbox adds TMPDIR and, with
	// Network, the proxy variables.
	Env []string
	Dir string
	// Stdin, Stdout and Stderr are as in exec.Cmd (nil: /dev/null).
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Writable are the trees the call may change (the workspace).
	Writable []string
	// Protected stay read-only inside Writable, whether or not they exist:
	// a missing one is created empty first (Rule.Dir says as what), so that
	// a tool cannot create it either.
	Protected []Rule
	// Hidden are unreadable for this call (besides Config.Hidden).
	Hidden []string
	// Network gives the call egress through the proxy.
	Network bool
	// WaitDelay bounds how long Wait waits for Stdout/Stderr to close after
	// the process exited (background children holding them); 0: forever.
	WaitDelay time.Duration
}

// Rule is a path tools may read but never write.
type Rule struct {
	Path string
	// Dir: create a missing one as an empty directory (else an empty file).
	Dir bool
	// Private: create a missing one owner-only (0700, 0600) — a secrets
	// file or state dir, also in Hidden, that no tool may create first.
	Private bool
}

// ExitError is a tool process that exited non-zero or was killed.
type ExitError struct{ Status syscall.WaitStatus }

func (e *ExitError) Error() string {
	if e.Status.Signaled() {
		return "signal: " + e.Status.Signal().String()
	}
	return fmt.Sprintf("exit status %d", e.Status.ExitStatus())
}

// ExitCode is the exit status, or -1 when the process was killed.
func (e *ExitError) ExitCode() int {
	if e.Status.Signaled() {
		return -1
	}
	return e.Status.ExitStatus()
}

// ErrUnavailable is wrapped by Start's error when no mechanism can confine
// tools: the tool is not run.
var ErrUnavailable = errors.New("tool sandbox unavailable")

// ErrWaitDelay is returned by Wait when the process exited cleanly but its
// output stayed open past WaitDelay (as exec.ErrWaitDelay).
var ErrWaitDelay = errors.New("sandbox: output still open after the process exited")

// envName is set in the helper's environment: the process is the helper,
// and its control socket is fd 3.
const envName = "FASTAGENT_SANDBOX_HELPER"

// FromEnv applies FASTAGENT_SANDBOX over the configured mode (cfgMode is
// tools.sandbox of fastagent.yaml).
func FromEnv(getenv func(string) string, cfgMode string) (Mode, error) {
	if v := getenv("FASTAGENT_SANDBOX"); v != "" {
		m, err := ParseMode(v)
		if err != nil {
			return "", fmt.Errorf("FASTAGENT_SANDBOX: %w", err)
		}
		return m, nil
	}
	return ParseMode(cfgMode)
}

// homeHidden returns DefaultHidden under home.
func homeHidden(home string) []string {
	if home == "" || !filepath.IsAbs(home) {
		return nil
	}
	out := make([]string, 0, len(DefaultHidden))
	for _, rel := range DefaultHidden {
		out = append(out, filepath.Join(home, rel))
	}
	return out
}

// absClean makes every path absolute and clean, resolving symlinks of the
// part that exists, so rules name what the kernel will see.
func absClean(paths []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range paths {
		if p == "" {
			continue
		}
		p = resolve(p)
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// resolve returns p absolute, with the symlinks of its longest existing
// prefix resolved.
func resolve(p string) string {
	if !filepath.IsAbs(p) {
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
	}
	p = filepath.Clean(p)
	if real, err := filepath.EvalSymlinks(p); err == nil {
		return real
	}
	dir, base := filepath.Split(p)
	if dir == "/" || dir == "" {
		return p
	}
	return filepath.Join(resolve(strings.TrimSuffix(dir, "/")), base)
}

// under reports whether p is root or inside it.
func under(p, root string) bool {
	return p == root || strings.HasPrefix(p, strings.TrimSuffix(root, "/")+"/")
}

// ensurePlaceholders creates each missing protected path that lies inside a
// writable tree: an empty directory or file, so that it exists to be kept
// read-only and no tool can create it.
func ensurePlaceholders(writable []string, rules []Rule) error {
	for _, r := range rules {
		p := resolve(r.Path)
		inside := false
		for _, w := range writable {
			inside = inside || (under(p, w) && p != w)
		}
		if !inside {
			continue
		}
		if _, err := os.Lstat(p); err == nil || !errors.Is(err, os.ErrNotExist) {
			continue
		}
		dirMode, fileMode := os.FileMode(0o755), os.FileMode(0o644)
		if r.Private {
			dirMode, fileMode = 0o700, 0o600
		}
		var err error
		if r.Dir {
			if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
				if err = os.Mkdir(p, dirMode); errors.Is(err, os.ErrExist) {
					err = nil
				}
			}
		} else {
			if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
				var f *os.File
				f, err = os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fileMode) //nolint:gosec // G302: a rules file the operator edits, or an owner-only one
				if err == nil {
					err = f.Close()
				} else if errors.Is(err, os.ErrExist) {
					err = nil
				}
			}
		}
		if err != nil {
			return fmt.Errorf("sandbox: create %s so that tools cannot: %w", p, err)
		}
	}
	return nil
}

// fixHint is the end of every "unavailable" message.
const fixHint = "tools are not run unconfined. Run the worker where unprivileged user namespaces are allowed, " +
	"or on Linux 6.2 or later with Landlock enabled (it is in Docker's default profile); " +
	"or set tools.sandbox: off in fastagent.yaml (or FASTAGENT_SANDBOX=off) to run tools without confinement"
