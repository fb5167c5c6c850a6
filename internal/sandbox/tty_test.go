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

// ttyProbe takes a terminal of the worker's user (its stdin), asks for
// SIGKILL instead of SIGIO (F_SETSIG) and sets O_ASYNC: on a terminal that
// makes the terminal's foreground process group the owner, whoever and
// wherever it is. It then waits until input arrives, when the kernel has
// sent the signal.
const ttyProbe = `
import os, sys, fcntl, signal, select
fd = 0
fcntl.fcntl(fd, 10, signal.SIGKILL)  # F_SETSIG
try:
    fcntl.fcntl(fd, fcntl.F_SETFL, os.O_ASYNC | os.O_NONBLOCK)
    print("async: ok", flush=True)
except OSError as e:
    print("async: refused", e.errno, flush=True)
select.select([fd], [], [], 10)
print("input: seen", flush=True)
`

// TestTerminalSignalStaysInCall: a tool that holds a terminal of the
// worker's user (the one fastagent dev runs in, or a docker -t; by its name
// /dev/pts/N until TestHostTerminalsHidden, here as its stdin) sets O_ASYNC
// on it: the kernel then signals the terminal's foreground process group —
// the worker — on the next keystroke, past the PID namespace, and F_SETSIG
// makes that SIGKILL. Landlock's signal scoping (ABI 6) drops it; below,
// O_ASYNC is refused in both modes. Unconfined, the control, the process in
// the terminal dies.
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
			tty, err := os.OpenFile(pts, os.O_RDONLY|unix.O_NOCTTY|unix.O_NONBLOCK, 0)
			must(t, err)
			c := &sandbox.Cmd{Path: "/bin/bash", Args: []string{"bash", "-c", `exec python3 src/tty.py 2>&1`}, Dir: ws,
				Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C"}, Stdin: tty, Stdout: pw, Stderr: pw, Writable: []string{ws}}
			p, err := b.Start(context.Background(), c)
			_ = pw.Close()
			_ = tty.Close()
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

// ttyReadProbe reads and writes a terminal of the worker's user by its
// name (argv[1]), then makes a terminal of its own, which still works.
const ttyReadProbe = `
import os, sys, select, pty
for name, flags in (("write", os.O_WRONLY), ("read", os.O_RDONLY)):
    try:
        fd = os.open(sys.argv[1], flags | os.O_NOCTTY | os.O_NONBLOCK)
        if name == "write":
            os.write(fd, b"INJECTED")
        else:
            print("ready", flush=True)
            select.select([fd], [], [], 5)
            print("typed:", os.read(fd, 100), flush=True)
        print(name + ": ok", flush=True)
    except OSError as e:
        print(name + ": refused", e.errno, flush=True)
try:
    m, s = pty.openpty()
    os.write(s, b"own\n")
    print("own-pty:", os.read(m, 100), flush=True)
except OSError as e:
    print("own-pty: failed", e, flush=True)
print("probe: done", flush=True)
`

// TestHostTerminalsHidden: the terminals of the worker's user
// (/dev/pts/N: the one fastagent dev or fastagent chat runs in, any other
// the operator has open) are neither readable — what the operator types,
// a password at a prompt — nor writable — text and escape sequences shown
// as if from the operator's own programs — by a tool, in both modes. A
// tool's own pseudo-terminal (script, expect, pty.openpty) still works in
// namespaces mode, where each call gets its own /dev/pts.
func TestHostTerminalsHidden(t *testing.T) {
	for _, m := range append(modes, sandbox.Off) {
		t.Run(string(m), func(t *testing.T) {
			b := box(t, m)
			master, pts := openPty(t)
			ws := workspace(t)
			must(t, os.WriteFile(filepath.Join(ws, "src", "ttyread.py"), []byte(ttyReadProbe), 0o644))
			var out strings.Builder
			pr, pw, err := os.Pipe()
			must(t, err)
			defer pr.Close()
			c := &sandbox.Cmd{Path: "/bin/bash", Args: []string{"bash", "-c", `exec python3 src/ttyread.py "$0" 2>&1`, pts}, Dir: ws,
				Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C"}, Stdout: pw, Stderr: pw, Writable: []string{ws}}
			p, err := b.Start(context.Background(), c)
			_ = pw.Close()
			must(t, err)
			defer p.Kill()
			lines := bufio.NewScanner(pr)
			for lines.Scan() {
				out.WriteString(lines.Text() + "\n")
				if lines.Text() == "ready" {
					_, _ = master.Write([]byte("typed-secret\n")) // the operator types
				}
			}
			v := verdicts(out.String())
			t.Logf("%s", out.String())
			if v["probe"] != "done" {
				t.Fatalf("the probe did not run to its end:\n%s", out.String())
			}
			if m == sandbox.Off {
				if v["read"] != "ok" || !strings.Contains(out.String(), "typed-secret") {
					t.Errorf("control: unconfined, the terminal is not readable, so this test proves nothing")
				}
				return
			}
			for _, a := range []string{"read", "write"} {
				if v[a] == "ok" {
					t.Errorf("a tool can %s a terminal of the worker's user", a)
				}
			}
			if strings.Contains(out.String(), "typed-secret") {
				t.Errorf("a tool read what was typed in a terminal of the worker's user")
			}
			if m == sandbox.Namespaces && !strings.Contains(v["own-pty"], "own") {
				t.Errorf("a tool's own pseudo-terminal does not work: %q", v["own-pty"])
			}
		})
	}
}
