package tools

import (
	"errors"
	"os"
	"syscall"
	"time"

	"github.com/fastagent/fastagent/internal/sandbox"
)

// Helpers for command-backed tools defined outside this package (workspace
// tools, MCP stdio servers), so they run commands by the same rules as the
// bash tool.

// CommandEnv returns the environment for a command: the worker's allowlisted
// variables (PATH, HOME, USER, LANG, LC_*, TERM, TZ, TMPDIR) plus the extra
// names, and nothing else of the worker's environment.
func CommandEnv(extra []string) []string {
	return (&bashTool{opts: Options{Bash: BashOptions{ExtraEnv: extra}}}).env()
}

// Confine fills in c's policy: dir (the workspace) writable, the protected
// paths read-only (created first when missing, unless IfExists), the secret
// ones hidden (created first, owner-only, when missing, unless IfExists),
// and the network as asked. Every process a tool starts gets this one
// policy.
func Confine(c *sandbox.Cmd, dir string, protected []Protected, network bool) {
	c.Writable = append(c.Writable, dir)
	for _, p := range protected {
		switch {
		case p.Secret:
			c.Hidden = append(c.Hidden, p.Path)
			if !p.IfExists {
				c.Protected = append(c.Protected, sandbox.Rule{Path: p.Path, Dir: p.Dir, Private: true})
			}
		case p.IfExists:
			if exists(p.Path) {
				c.Protected = append(c.Protected, sandbox.Rule{Path: p.Path, Dir: p.Dir})
			}
		default:
			c.Protected = append(c.Protected, sandbox.Rule{Path: p.Path, Dir: p.Dir})
		}
	}
	c.Network = network
}

// ConfineRead fills in the policy of a process that only reads and
// answers (GitHub's executable policy): no writable tree (only its private
// temporary directory), the secret paths of protected hidden, no network.
func ConfineRead(c *sandbox.Cmd, protected []Protected) {
	for _, p := range protected {
		if p.Secret {
			c.Hidden = append(c.Hidden, p.Path)
		}
	}
	c.Network = false
}

// ErrNoSandbox is returned by command tools built without a sandbox.
var ErrNoSandbox = errors.New("no tool sandbox is configured for this tool; tools do not run unconfined")

// Stop ends a tool process as the bash tool does on a timeout or abort:
// SIGTERM to its process group, then SIGKILL to whatever is left after
// grace. waitDone delivers p.Wait's result, which is returned.
func Stop(p *sandbox.Process, waitDone <-chan error, grace time.Duration) error {
	_ = p.Signal(syscall.SIGTERM)
	select {
	case err := <-waitDone:
		p.Kill() // whatever it left behind
		return err
	case <-time.After(grace):
	}
	p.Kill()
	return <-waitDone
}

// WorkDir checks a call's working directory (absolute, existing, a
// directory) and returns its real path.
func WorkDir(dir string) (string, error) { return workDir(dir) }

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
