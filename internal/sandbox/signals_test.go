package sandbox_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/fastagent/fastagent/internal/sandbox"
)

// outerListenerEnv makes the test binary, re-executed, run under an outer
// seccomp filter that has a listener (as under a supervisor that uses
// them), where no second listener can be installed, then report what a
// Landlock sandbox below ABI 6 says.
const outerListenerEnv = "FASTAGENT_SANDBOX_TEST_OUTER_LISTENER"

func init() {
	if os.Getenv(outerListenerEnv) != "1" {
		return
	}
	filter := []unix.SockFilter{{Code: 0x06, K: unix.SECCOMP_RET_ALLOW}}
	prog := unix.SockFprog{Len: 1, Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fmt.Println("FILTER-ERROR", err)
		os.Exit(2)
	}
	flags := unix.SECCOMP_FILTER_FLAG_TSYNC | unix.SECCOMP_FILTER_FLAG_NEW_LISTENER | unix.SECCOMP_FILTER_FLAG_TSYNC_ESRCH
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, uintptr(flags), uintptr(unsafe.Pointer(&prog))); e != 0 {
		fmt.Println("FILTER-ERROR", e)
		os.Exit(2)
	}
	b := sandbox.Open(sandbox.WithLandlockABI(sandbox.Config{Mode: sandbox.Landlock}, 5))
	st := b.Status()
	fmt.Printf("MODE %q\nERROR %s\n", st.Mode, st.Error)
	_ = b.Close()
	os.Exit(0)
}

// Below Landlock ABI 6, where the helper has to check signals itself, a
// process that cannot install a seccomp listener runs no tool (fail
// closed) and says why.
func TestSignalSupervisionFailsClosed(t *testing.T) {
	if k := sandbox.KernelLandlockABI(); k < 5 {
		t.Skipf("Landlock ABI %d here", k)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), outerListenerEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !strings.Contains(string(out), `MODE ""`) || !strings.Contains(string(out), "cannot keep a tool's signals in its call") {
		t.Errorf("with no seccomp listener possible, Landlock ABI 5 mode: %s", out)
	}
}

// victim is a process of the worker's user outside any call, as the
// worker, its helper or tini are, in a process group of its own.
type victim struct {
	pid  int
	done chan struct{}
}

func (v *victim) alive() bool {
	select {
	case <-v.done:
		return false
	default:
		return true
	}
}

// startVictim starts a victim; it is killed when the test ends.
func startVictim(t *testing.T) *victim {
	t.Helper()
	cmd := exec.Command("/bin/sleep", "1000")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	must(t, cmd.Start())
	v := &victim{pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(v.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-v.done
	})
	return v
}

// victimProcess is startVictim's PID, for probes that only need a target.
func victimProcess(t *testing.T) string {
	t.Helper()
	return strconv.Itoa(startVictim(t).pid)
}

// signalProbe tries, each against its own victim (argv: name=pid …), every
// way to signal another process or change its limits and scheduling, then
// what a tool does to its own processes, which must keep working. One line
// per attempt: "<name>: ok", "refused" (EPERM) or "failed <ERRNO>".
const signalProbe = `
import os, sys, signal, errno, ctypes, platform, fcntl, struct, resource, time, threading, socket
v = dict(a.split("=") for a in sys.argv[1:])
v = {k: int(p) for k, p in v.items()}
libc = ctypes.CDLL(None, use_errno=True)
NR = {"x86_64": dict(tkill=200, tgkill=234, rt_sigqueueinfo=129, rt_tgsigqueueinfo=297),
      "aarch64": dict(tkill=130, tgkill=131, rt_sigqueueinfo=138, rt_tgsigqueueinfo=240)}[platform.machine()]
def syscall(name, *args):
    if libc.syscall(ctypes.c_long(NR[name]), *[ctypes.c_long(a) for a in args]) == -1:
        e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
def probe(name, f):
    try:
        f(); print(name + ": ok", flush=True)
    except OSError as e:
        print(name + ":", "refused" if e.errno == errno.EPERM else "failed " + errno.errorcode.get(e.errno, str(e.errno)), flush=True)
info = ctypes.create_string_buffer(128); struct.pack_into("=iii", info, 0, signal.SIGTERM, 0, -1)
def owner(name, setown):
    r, w = socket.socketpair()
    setown(r.fileno(), v[name])
    fcntl.fcntl(r.fileno(), 10, signal.SIGTERM)  # F_SETSIG
    fcntl.fcntl(r.fileno(), fcntl.F_SETFL, os.O_ASYNC | os.O_NONBLOCK)
    w.send(b"x")
    time.sleep(0.05)
attacks = [
  ("kill", lambda: os.kill(v["kill"], signal.SIGTERM)),
  ("kill-group", lambda: os.kill(-v["kill-group"], signal.SIGTERM)),
  ("tkill", lambda: syscall("tkill", v["tkill"], signal.SIGTERM)),
  ("tgkill", lambda: syscall("tgkill", v["tgkill"], v["tgkill"], signal.SIGTERM)),
  ("tgkill-sigurg-then-term", lambda: (syscall("tgkill", v["tgkill-sigurg-then-term"], v["tgkill-sigurg-then-term"], signal.SIGURG),
      syscall("tgkill", v["tgkill-sigurg-then-term"], v["tgkill-sigurg-then-term"], signal.SIGTERM))),
  ("rt_sigqueueinfo", lambda: syscall("rt_sigqueueinfo", v["rt_sigqueueinfo"], signal.SIGTERM, ctypes.addressof(info))),
  ("rt_tgsigqueueinfo", lambda: syscall("rt_tgsigqueueinfo", v["rt_tgsigqueueinfo"], v["rt_tgsigqueueinfo"], signal.SIGTERM, ctypes.addressof(info))),
  ("pidfd_send_signal", lambda: signal.pidfd_send_signal(os.pidfd_open(v["pidfd_send_signal"]), signal.SIGTERM)),
  ("proc-dir-pidfd", lambda: signal.pidfd_send_signal(os.open("/proc/%d" % v["proc-dir-pidfd"], os.O_DIRECTORY), signal.SIGTERM)),
  ("f_setown", lambda: owner("f_setown", lambda fd, pid: fcntl.fcntl(fd, fcntl.F_SETOWN, pid))),
  ("f_setown-group", lambda: owner("f_setown-group", lambda fd, pid: fcntl.fcntl(fd, fcntl.F_SETOWN, -pid))),
  ("f_setown_ex", lambda: owner("f_setown_ex", lambda fd, pid: fcntl.fcntl(fd, 15, struct.pack("=ii", 1, pid)))),
  ("fiosetown", lambda: owner("fiosetown", lambda fd, pid: fcntl.ioctl(fd, 0x8901, struct.pack("=i", pid)))),
  ("prlimit-cpu", lambda: resource.prlimit(v["prlimit-cpu"], resource.RLIMIT_CPU, (0, 0))),
  ("setpriority", lambda: os.setpriority(os.PRIO_PROCESS, v["setpriority"], 19)),
  ("sched_idle", lambda: os.sched_setscheduler(v["sched_idle"], os.SCHED_IDLE, os.sched_param(0))),
  ("sched_setaffinity", lambda: os.sched_setaffinity(v["sched_setaffinity"], {0})),
]
for n, f in attacks:
    if n in v:
        probe(n, f)

# What a tool does to its own processes.
got = []
signal.signal(signal.SIGUSR1, lambda *a: got.append("usr1"))
probe("own-kill", lambda: os.kill(os.getpid(), signal.SIGUSR1))
probe("own-group", lambda: os.kill(0, signal.SIGUSR1))
t = threading.Thread(target=lambda: signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)); t.start(); t.join()
probe("own-sigqueue", lambda: syscall("rt_sigqueueinfo", os.getpid(), signal.SIGUSR1, ctypes.addressof(info)))
deadline = time.time() + 5
while len(got) < 4 and time.time() < deadline:
    time.sleep(0.01)
print("own-handled:", len(got), flush=True)
probe("own-prlimit", lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (200, resource.getrlimit(resource.RLIMIT_NOFILE)[1])))
probe("own-nice", lambda: os.nice(1))
# A child that left the call's session (setsid, as start_new_session=True
# or a detached spawn do) signals its own child, and its parent signals it.
ready_r, ready_w = os.pipe()
pid = os.fork()
if pid == 0:
    os.setsid()
    c = os.fork()
    if c == 0:
        time.sleep(30); os._exit(0)
    os.kill(c, signal.SIGTERM); os.waitpid(c, 0)
    os.write(ready_w, b"x")
    time.sleep(30); os._exit(0)
os.read(ready_r, 1)
probe("own-child", lambda: os.kill(pid, signal.SIGTERM))
probe("own-child-group", lambda: os.kill(-pid, signal.SIGTERM))
os.waitpid(pid, 0)
print("probe: done", flush=True)
`

// TestSignalsStayInCall: a tool cannot signal a process outside its call
// (the worker, the helper, tini, another call) by any route — kill, tkill,
// tgkill, sigqueue, a pidfd, a file's owner (SIGIO) — nor change its
// limits (a CPU limit ends it with SIGXCPU) or its scheduling, in both
// modes and in Landlock mode below ABI 6, whose kernels cannot scope
// signals (forced here on a newer kernel). Signals among the call's own
// processes still work, as does changing its own limits.
func TestSignalsStayInCall(t *testing.T) {
	type setup struct {
		name string
		mode sandbox.Mode
		abi  int
	}
	setups := []setup{{"namespaces", sandbox.Namespaces, 0}, {"landlock", sandbox.Landlock, 0}}
	if k := sandbox.KernelLandlockABI(); k >= 6 {
		setups = append(setups, setup{"landlock-abi5", sandbox.Landlock, 5})
	}
	attacks := []string{"kill", "kill-group", "tkill", "tgkill", "tgkill-sigurg-then-term", "rt_sigqueueinfo", "rt_tgsigqueueinfo",
		"pidfd_send_signal", "proc-dir-pidfd", "f_setown", "f_setown-group", "f_setown_ex", "fiosetown",
		"prlimit-cpu", "setpriority", "sched_idle", "sched_setaffinity"}
	// Refused outright, or, for a file's owner, allowed to be set but never
	// signalled (Landlock ABI 6 drops the SIGIO): the victim's survival
	// says which.
	mayBeSet := map[string]bool{"f_setown": true, "f_setown-group": true, "f_setown_ex": true, "fiosetown": true}
	for _, s := range setups {
		t.Run(s.name, func(t *testing.T) {
			b := boxWithABI(t, s.mode, s.abi)
			if s.abi > 0 {
				// fastagent info shows Status.Enforces: it says how signals are kept in.
				st := b.Status()
				if st.LandlockABI != s.abi || !strings.Contains(strings.Join(st.Enforces, "\n"), "the helper checks each signal a tool sends") {
					t.Errorf("status (ABI %d) does not say that the helper checks signals:\n%s", st.LandlockABI, strings.Join(st.Enforces, "\n"))
				}
			}
			ws := workspace(t)
			victims := map[string]*victim{}
			args := []string{}
			for _, a := range attacks {
				victims[a] = startVictim(t)
				args = append(args, a+"="+strconv.Itoa(victims[a].pid))
			}
			must(t, os.WriteFile(filepath.Join(ws, "src", "signals.py"), []byte(signalProbe), 0o644))
			r := run(t, b, ws, `exec python3 src/signals.py `+strings.Join(args, " ")+` 2>&1`)
			t.Logf("%s", r.out)
			v := verdicts(r.out)
			if r.err != nil || v["probe"] != "done" {
				t.Fatalf("the probe did not run to its end (err %v, code %d):\n%s", r.err, r.code, r.out)
			}
			for _, a := range attacks {
				if !victims[a].alive() {
					t.Errorf("%s: the process outside the call was killed (%s)", a, v[a])
				}
				if v[a] == "ok" && !mayBeSet[a] {
					t.Errorf("%s: ok, want refused", a)
				}
			}
			if lim := limitLine(victims["prlimit-cpu"].pid, "Max cpu time"); !strings.Contains(lim, "unlimited") {
				t.Errorf("prlimit-cpu: the victim's CPU limit changed: %s", lim)
			}
			for _, own := range []string{"own-kill", "own-group", "own-sigqueue", "own-prlimit", "own-nice", "own-child", "own-child-group"} {
				if v[own] != "ok" {
					t.Errorf("%s: %s, want ok (a tool's own processes)", own, v[own])
				}
			}
			if v["own-handled"] != "4" {
				t.Errorf("the tool handled %s of its 4 own signals:\n%s", v["own-handled"], r.out)
			}
			// Nor read its environment (a worker's holds its keys; the
			// victim's holds the canary), below ABI 6 as well.
			r = run(t, b, ws, `tr '\0' '\n' </proc/`+strconv.Itoa(victims["kill"].pid)+`/environ; echo read=$?`)
			if strings.Contains(r.out, canary) || strings.Contains(r.out, "read=0") {
				t.Errorf("a tool read the environment of a process outside its call:\n%s", r.out)
			}
			// A shell's everyday signals.
			r = run(t, b, ws, `sleep 30 & kill $!; wait $!; echo "kill=$?"; timeout 0.2 sleep 30; echo "timeout=$?"`)
			if !strings.Contains(r.out, "kill=143") || !strings.Contains(r.out, "timeout=124") {
				t.Errorf("kill and timeout of a tool's own job:\n%s", r.out)
			}
		})
	}
}

// limitLine is pid's line for limit in /proc/<pid>/limits.
func limitLine(pid int, limit string) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/limits")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, limit) {
			return l
		}
	}
	return ""
}

// TestHelperKeepsSecretsOffProc: the process the sandbox starts besides the
// tools — its helper — shows no secret of the worker in /proc/<pid>/cmdline
// (readable by every process) or /proc/<pid>/environ: it is started with a
// fixed name and an empty environment, and gets its configuration over its
// control socket.
func TestHelperKeepsSecretsOffProc(t *testing.T) {
	for _, m := range append(modes, sandbox.Off) {
		t.Run(string(m), func(t *testing.T) {
			_ = box(t, m)
			helpers := 0
			for _, pid := range childrenOf(os.Getpid()) {
				cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
				if err != nil || !strings.HasPrefix(string(cmdline), "fastagent-sandbox-helper") {
					continue
				}
				helpers++
				environ, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
				if err != nil {
					t.Fatal(err)
				}
				if strings.Contains(string(cmdline), canary) || strings.Contains(string(environ), canary) {
					t.Errorf("helper %d shows the worker's secret: cmdline %q environ %q", pid, cmdline, environ)
				}
				if string(environ) != "FASTAGENT_SANDBOX_HELPER=1\x00" {
					t.Errorf("helper %d has more than its marker in its environment: %q", pid, environ)
				}
			}
			if helpers == 0 {
				t.Fatal("no helper process found")
			}
		})
	}
}

// childrenOf lists the processes whose parent is ppid.
func childrenOf(ppid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(ppid) {
			out = append(out, pid)
		}
	}
	return out
}
