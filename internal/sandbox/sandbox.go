// Package sandbox confines tool processes (bash, workspace tools, MCP stdio
// servers) so that they cannot reach the worker's secrets or rewrite the
// agent's rules.
//
// On Linux, Wrap rewrites a command to start in new user, PID and mount
// namespaces (util-linux unshare): the tool sees a fresh /proc in which the
// worker does not exist, the agent's rules paths are bind-mounted read-only,
// the state dir and .env are hidden, and every capability is dropped (empty
// bounding set, no_new_privs) before the tool runs, so it cannot undo the
// mounts. A small shell is PID 1 of the namespace: it waits for the tool
// and exits with its status, and the kernel then kills every process left
// in the namespace, so detached jobs (setsid, nohup &) end with the call.
//
// Where namespaces are unavailable (other systems, a kernel or container
// that forbids them, util-linux missing) Wrap leaves the command as it is
// and logs a warning once; Harden still makes the worker non-dumpable.
package sandbox

import (
	"context"
	"os"
	"path/filepath"

	"github.com/fastagent/fastagent/internal/secretenv"
)

// readOnlyPaths are the workspace entries tools may read but not change:
// the agent's own rules.
var readOnlyPaths = []string{"fastagent.yaml", "tools", "channels", "schedules", ".git"}

// readOnlyDirs are created (empty) when missing, so that they can be
// mounted read-only and a tool cannot create them either.
var readOnlyDirs = []string{"tools", "channels", "schedules"}

// hiddenPaths are the workspace entries tools cannot read at all: the state
// dir (Temporal and session databases, logs) and the operator's .env.
var hiddenPaths = []string{".fastagent", ".env"}

// Policy says what a sandboxed tool may see of the file system. Paths are
// absolute; missing ones are skipped.
type Policy struct {
	// ReadOnly paths are bind-mounted read-only.
	ReadOnly []string
	// Hidden paths are covered: a directory by an empty, inaccessible
	// tmpfs, a file by /dev/null.
	Hidden []string
}

// ForWorkspace returns the policy for tools of the workspace in dir (the
// worker's current directory when dir is empty): the rules (fastagent.yaml,
// tools/, channels/, schedules/, .git) read-only, the state dir .fastagent/
// and .env hidden. It creates the missing rule directories (tools/,
// channels/, schedules/) so that a tool cannot create them either.
func ForWorkspace(dir string) Policy {
	if dir == "" {
		dir, _ = os.Getwd()
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	for _, d := range readOnlyDirs {
		_ = os.Mkdir(filepath.Join(dir, d), 0o755)
	}
	var p Policy
	for _, name := range readOnlyPaths {
		p.ReadOnly = append(p.ReadOnly, filepath.Join(dir, name))
	}
	for _, name := range hiddenPaths {
		p.Hidden = append(p.Hidden, filepath.Join(dir, name))
	}
	// Files the worker's secret variables name (a codec key file, a GitHub
	// App private key, a TLS key, a token file) are covered too, wherever
	// they live.
	p.Hidden = append(p.Hidden, secretenv.Files(os.Environ())...)
	return p
}

type offKey struct{}

// Off returns a context under which Wrap leaves commands unsandboxed. It
// exists for tests that follow tool processes by their host PIDs; the
// runtime never uses it.
func Off(ctx context.Context) context.Context {
	return context.WithValue(ctx, offKey{}, true)
}

func isOff(ctx context.Context) bool {
	off, _ := ctx.Value(offKey{}).(bool)
	return off
}
