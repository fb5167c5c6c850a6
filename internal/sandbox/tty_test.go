package sandbox_test

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fastagent/fastagent/internal/sandbox"
)

// ttyProbe opens a terminal of the worker's user (argv[1]), asks for
// SIGKILL instead of SIGIO (F_SETSIG) and sets O_ASYNC: on a terminal that
// makes the terminal's foreground process group the owner, whoever and
// wherever it is. It then waits until input arrives, when the kernel has
// sent the signal.
const ttyProbe = `
import os, sys, fcntl, signal, select
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
fcntl.fcntl(fd, 10, signal.SIGKILL)  # F_SETSIG
try:
    fcntl.fcntl(fd, fcntl.F_SETFL, os.O_ASYNC | os.O_NONBLOCK)
    print("async: ok", flush=True)
except OSError as e:
    print("async: refused", e.errno, flush=True)
select.select([fd], [], [], 10)
print("input: seen", flush=True)
`

// TestTerminalSignalStaysInCall: a terminal of the worker's user (the one
// fastagent dev runs in, or a docker -t) is open to a tool by its name,
// /dev/pts/N. With O_ASYNC on it, the kernel signals the terminal's
// foreground process group — the worker — on the next keystroke, past the
// PID namespace, and F_SETSIG makes that SIGKILL. Landlock's signal scoping
// (ABI 6) drops it; below, O_ASYNC is refused in both modes. Unconfined,
// the control, the process in the terminal dies.
func TestTerminalSignalStaysInCall(t *testing.T) {
	type setup struct {
		name string
		mode sandbox.Mode
		abi  int
	}
	setups := []setup{{"namespaces", sandbox.Namespaces, 0}, {"landlock", sandbox.Landlock, 0}}
	if k := sandbox.KernelLandlockABI(); k >= 6 {
		setups = append(setups, setup{"namespaces-abi5", sandbox.Namespaces, 5}, setup{"landlock-abi5", sandbox.Landlock, 5})
	}
	setups = append(setups, setup{"off (control)", sandbox.Off, 0})
	for _, s := range setups {
		t.Run(s.name, func(t *testing.T) {
			b := boxWithABI(t, s.mode, s.abi)
			master, pts := openPty(t)
			fg := foregroundIn(t, pts)
			ws := workspace(t)
			must(t, os.WriteFile(filepath.Join(ws, "src", "tty.py"), []byte(ttyProbe), 0o644))
			pr, pw, err := os.Pipe()
			must(t, err)
			defer pr.Close()
			c := &sandbox.Cmd{Path: "/bin/bash", Args: []string{"bash", "-c", `exec python3 src/tty.py "$0" 2>&1`, pts}, Dir: ws,
				Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C"}, Stdout: pw, Stderr: pw, Writable: []string{ws}}
			p, err := b.Start(context.Background(), c)
			_ = pw.Close()
			must(t, err)
			defer p.Kill()
			out := bufio.NewReader(pr)
			line, _ := out.ReadString('\n')
			t.Logf("%s", strings.TrimSpace(line))
			if !strings.HasPrefix(line, "async: ") {
				t.Fatalf("the probe did not run: %q", line)
			}
			_, _ = master.Write([]byte("x\n")) // the operator types
			if line, _ = out.ReadString('\n'); !strings.HasPrefix(line, "input: seen") {
				t.Fatalf("the probe did not see the input: %q", line)
			}
			if s.mode == sandbox.Off {
				select {
				case <-fg:
				case <-time.After(10 * time.Second):
					t.Fatal("control: unconfined, the terminal's foreground process survived, so this test proves nothing")
				}
				return
			}
			select {
			case <-fg:
				t.Errorf("a tool killed the process in the foreground of a terminal (%s)", strings.TrimSpace(line))
			case <-time.After(time.Second):
			}
		})
	}
}

// openPty opens a new pseudo-terminal: its master and its /dev/pts name.
func openPty(t *testing.T) (*os.File, string) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { _ = master.Close() })
	must(t, unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	must(t, err)
	go func() { _, _ = io.Copy(io.Discard, master) }()
	return master, "/dev/pts/" + strconv.Itoa(n)
}

// foregroundIn starts a process with pts as its controlling terminal, in
// its foreground (as fastagent dev in the operator's terminal); the channel
// closes when it exits. It is killed when the test ends.
func foregroundIn(t *testing.T, pts string) <-chan struct{} {
	t.Helper()
	slave, err := os.OpenFile(pts, os.O_RDWR|unix.O_NOCTTY, 0)
	must(t, err)
	defer slave.Close()
	cmd := exec.Command("/bin/sleep", "1000")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	must(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	return done
}
