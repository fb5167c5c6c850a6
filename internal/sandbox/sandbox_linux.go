package sandbox

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// initScript runs as PID 1 of the tool's namespaces, still holding the
// capabilities of the new user namespace. Its arguments are pairs of a kind
// (ro, dir, file) and a path, then "--", then the tool's argv. It mounts,
// starts the tool with every capability dropped, lets go of the standard
// streams (so they close when the tool's do), waits for it and exits with
// its status; the kernel then kills what is left in the namespace.
// Any failed mount aborts before the tool runs.
const initScript = `set -e
while [ "$1" != -- ]; do
	case "$1" in
	ro) mount --bind -o ro "$2" "$2" ;;
	dir) mount -t tmpfs -o ro,mode=000,size=0 fastagent-hidden "$2" ;;
	file) mount --bind -o ro /dev/null "$2" ;;
	esac
	shift 2
done
shift
set +e
exec 3<&0
setpriv --no-new-privs --bounding-set=-all --inh-caps=-all --ambient-caps=-all -- "$@" <&3 3<&- &
exec 3<&- </dev/null >/dev/null 2>&1
wait $!
exit $?`

// unshareArgs are the namespace flags: a new user namespace mapping the
// worker's user to root (so the script may mount), a PID namespace with its
// own /proc, a private mount namespace, and the namespace's init killed
// when unshare dies.
var unshareArgs = []string{"--user", "--map-root-user", "--pid", "--fork", "--kill-child",
	"--mount", "--mount-proc", "--propagation", "private"}

// tools holds the resolved helper programs, or why the sandbox is off.
type tools struct {
	unshare, sh, setpriv string
	err                  error
}

// probe finds the helpers and checks once that namespaces can be created.
var probe = sync.OnceValue(func() tools {
	var t tools
	for _, p := range []struct {
		name string
		dst  *string
	}{{"unshare", &t.unshare}, {"sh", &t.sh}, {"setpriv", &t.setpriv}, {"mount", new(string)}} {
		path, err := exec.LookPath(p.name)
		if err != nil {
			t.err = fmt.Errorf("sandbox: %s not found: %w", p.name, err)
			return t
		}
		*p.dst = path
	}
	args := append(append([]string{}, unshareArgs...), "--", t.sh, "-c", initScript, "sh", "--", "true")
	if out, err := exec.Command(t.unshare, args...).CombinedOutput(); err != nil {
		t.err = fmt.Errorf("sandbox: namespaces unavailable: %w: %s", err, out)
	}
	if t.err != nil {
		slog.Warn("tool sandbox unavailable; tools run unconfined and can read the worker's secrets", "err", t.err)
	}
	return t
})

// Available reports whether tool processes are sandboxed on this machine,
// and if not, why.
func Available() error { return probe().err }

// Wrap rewrites cmd (made by exec.Command, not started) to run inside the
// sandbox with policy p. It does nothing when the sandbox is unavailable
// (logged once) or ctx is Off. cmd.Dir, Env and the standard streams are
// kept. A program that cannot be executed is reported here, as exec would.
func Wrap(ctx context.Context, cmd *exec.Cmd, p Policy) error {
	if cmd.Err != nil || isOff(ctx) {
		return nil //nolint:nilerr // exec reports cmd.Err itself when the command starts
	}
	t := probe()
	if t.err != nil {
		return nil //nolint:nilerr // no sandbox here: the tool runs unconfined (warned once by probe)
	}
	prog := cmd.Path
	if !filepath.IsAbs(prog) && cmd.Dir != "" {
		prog = filepath.Join(cmd.Dir, prog)
	}
	if err := unix.Access(prog, unix.X_OK); err != nil {
		return &os.PathError{Op: "fork/exec", Path: cmd.Path, Err: err}
	}
	args := append([]string{t.unshare}, unshareArgs...)
	args = append(args, "--", t.sh, "-c", initScript, "sh")
	for _, path := range p.ReadOnly {
		if _, err := os.Stat(path); err == nil {
			args = append(args, "ro", path)
		}
	}
	for _, path := range p.Hidden {
		fi, err := os.Stat(path)
		switch {
		case err != nil:
		case fi.IsDir():
			args = append(args, "dir", path)
		default:
			args = append(args, "file", path)
		}
	}
	args = append(args, "--", cmd.Path)
	args = append(args, cmd.Args[1:]...)
	cmd.Path = t.unshare
	cmd.Args = args
	return nil
}

// Harden makes the worker process non-dumpable: a process of the same user
// without CAP_SYS_PTRACE over it can then no longer read its
// /proc/<pid>/environ, mem or cmdline, nor attach a debugger.
func Harden() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("sandbox: set non-dumpable: %w", err)
	}
	return nil
}
