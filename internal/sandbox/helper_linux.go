package sandbox

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fastagent/fastagent/internal/egress"
)

// init turns a process started as the sandbox helper into the helper before
// the program's main runs. Every program that links this package (the CLI,
// an embedding program, a test binary) can so serve as its own helper,
// without a second executable to install or to find through PATH.
func init() {
	if os.Getenv(envName) != "1" {
		return
	}
	// The main goroutine keeps the main thread: call threads, which end up
	// restricted, are never the thread /proc/<helper> reports.
	runtime.LockOSThread()
	os.Exit(helperMain())
}

// helper is the helper process's state.
type helper struct {
	cfg     helperConfig
	c       *conn
	log     *slog.Logger
	abi     int
	covered map[string]bool
	tmpBase string // Landlock/off mode: per-call temporary directories
	proxy   *egress.Proxy
	// proxyPort is the loopback port of the proxy in Landlock mode.
	proxyPort int
	// filter is the seccomp policy every call starts from (the network
	// is the call's own).
	filter filterPolicy
	// sid is the helper's session.
	sid int

	// forkMu is held (read) from a fork until its process is recorded, and
	// (write) by sweep while it lists and kills: a process is never seen
	// unrecorded between the two.
	forkMu   sync.RWMutex
	sweepMu  sync.Mutex
	mu       sync.Mutex
	calls    map[int]uint64 // pid → call
	pgids    map[uint64]int // call → process group
	cleanups map[uint64][]func()
	// unclaim holds exits reaped before start recorded the call.
	unclaim map[int]syscall.WaitStatus
}

func helperMain() int {
	_ = os.Unsetenv(envName)
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := newConn(os.NewFile(3, "sandbox-control"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fastagent sandbox helper:", err)
		return 2
	}
	if err := closeInheritedOnExec(); err != nil {
		fmt.Fprintln(os.Stderr, "fastagent sandbox helper:", err)
		return 2
	}
	h := &helper{c: c, log: log, calls: map[int]uint64{}, pgids: map[uint64]int{}, cleanups: map[uint64][]func(){},
		unclaim: map[int]syscall.WaitStatus{}}
	if _, err := c.recv(&h.cfg); err != nil {
		return 2
	}
	st, err := h.prepare()
	if err != nil {
		_ = c.send(event{Op: "ready", Err: err.Error()})
		return 1
	}
	if err := c.send(event{Op: "ready", Status: &st}); err != nil {
		return 1
	}
	go h.reap()
	h.serve()
	h.shutdown()
	return 0
}

// closeInheritedOnExec marks every descriptor but the standard streams
// close-on-exec. The helper inherits, beside its control socket, whatever
// the worker inherited without close-on-exec (from a shell, a supervisor,
// a terminal multiplexer: a pipe, a terminal, a socket); a tool must get
// its own stdin, stdout and stderr and nothing else.
func closeInheritedOnExec() error {
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err == nil {
		return nil
	}
	// Before Linux 5.11: one by one.
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("list inherited descriptors: %w", err)
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd) // the directory's own descriptor is gone by now: EBADF, ignored
		}
	}
	return nil
}

// prepare sets up what every call shares and reports what it enforces.
func (h *helper) prepare() (Status, error) {
	// Go's first process start probes clone(CLONE_PIDFD) with a child that
	// exits at once; done here, it does not become (and end) the first
	// process of a call's PID namespace.
	_, _ = os.FindProcess(os.Getpid())
	h.abi = landlockABI()
	if h.cfg.LandlockABI > 0 && h.cfg.LandlockABI < h.abi {
		h.abi = h.cfg.LandlockABI // a test standing in for an older kernel
	}
	h.sid, _ = unix.Getsid(0)
	st := Status{Mode: h.cfg.Mode, LandlockABI: h.abi}
	h.proxy = egress.New(h.cfg.Egress, h.log)
	switch h.cfg.Mode {
	case Namespaces:
		if h.cfg.Shell == "" {
			return st, errors.New("no shell to run as each call's init")
		}
		covered, err := setupBase(h.cfg.Hidden)
		if err != nil {
			return st, err
		}
		h.covered = map[string]bool{}
		for _, p := range covered {
			h.covered[p] = true
		}
		// A terminal's SIGIO reaches its foreground group in any PID
		// namespace; only Landlock's scoping (ABI 6) stops it.
		h.filter = filterPolicy{noAsync: h.abi < landlockScopedABI}
		st.Enforces = namespacesEnforces(h.abi)
	case Landlock:
		if h.abi < minLandlockABI {
			if h.abi == 0 {
				return st, errors.New("landlock: not enabled in this kernel (boot with lsm=…,landlock)")
			}
			return st, fmt.Errorf("landlock: ABI %d; read-only files need ABI %d (Linux 6.2)", h.abi, minLandlockABI)
		}
		if err := h.prepareTmp(); err != nil {
			return st, err
		}
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
		h.filter = filterPolicy{shared: true, superviseSignals: h.abi < landlockScopedABI, noAsync: h.abi < landlockScopedABI}
		if h.filter.superviseSignals {
			if err := probeListener(); err != nil {
				return st, fmt.Errorf("landlock ABI %d cannot keep a tool's signals in its call, and the helper cannot check them: %w", h.abi, err)
			}
		}
		st.Enforces = []string{
			fmt.Sprintf("Landlock ABI %d per call: file system read-only except the workspace and a private temporary directory; rules read-only; state, secrets, credentials and the host's terminals unreadable", h.abi),
			"no network (seccomp: no sockets); with network on, TCP only to the egress proxy (Landlock ABI 4+; seccomp: no MPTCP, SCTP, TCP Fast Open or listen)",
			seccompLine,
			"no ptrace, /proc/<pid>/environ or mem of other processes (Landlock domain); no limits, priority or CPU placement of other processes (seccomp)",
		}
		if h.abi >= landlockScopedABI {
			st.Enforces = append(st.Enforces, fmt.Sprintf("no signals to processes outside the call (Landlock ABI %d scoping)", h.abi))
		} else {
			st.Enforces = append(st.Enforces, fmt.Sprintf("no signals to processes outside the call: Landlock ABI %d cannot scope them (ABI 6, Linux 6.12, can), "+
				"so the helper checks each signal a tool sends (seccomp user notification); pidfd_send_signal, F_SETOWN_EX, FIOSETOWN and O_ASYNC are refused", h.abi))
		}
	case Off:
		if err := h.prepareTmp(); err != nil {
			return st, err
		}
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
		st.Warning = "tools run unconfined (tools.sandbox: off): they can read the worker's files and reach the network, including Temporal"
	default:
		return st, fmt.Errorf("unknown mode %q", h.cfg.Mode)
	}
	if h.cfg.Mode == Landlock {
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			return st, fmt.Errorf("egress proxy: %w", err)
		}
		h.proxyPort = l.Addr().(*net.TCPAddr).Port
		go func() { _ = h.proxy.Serve(l) }()
	}
	// The filter must assemble on this kernel and architecture.
	if _, err := filterProgram(filterPolicy{inet: true, shared: h.filter.shared, superviseSignals: h.filter.superviseSignals, noAsync: h.filter.noAsync}); err != nil {
		return st, err
	}
	return st, nil
}

// namespacesEnforces is what namespaces mode enforces with Landlock ABI
// abi (0: none).
func namespacesEnforces(abi int) []string {
	out := []string{
		"own user, PID, mount, IPC and network namespaces per call (no signals, ptrace or environment of the worker or of other calls)",
		"file system read-only except the workspace and a private /tmp; rules read-only; state, secrets, credentials and the host's terminals hidden",
		"no network; with network on, only the egress proxy (no loopback, link-local, private or control-plane address)",
		seccompLine,
	}
	if abi > 0 {
		out = append(out, fmt.Sprintf("Landlock ABI %d domain per call (no ptrace or /proc access across calls)", abi))
	}
	if abi < landlockScopedABI {
		out = append(out, "no O_ASYNC (seccomp): a terminal's SIGIO would reach processes outside the call")
	}
	return out
}

// seccompLine says what the seccomp filter refuses in every mode.
const seccompLine = "no capabilities, no_new_privs, seccomp (no unix sockets but stream socketpairs, no netlink but NETLINK_ROUTE, no UDP, raw or packet sockets; " +
	"no mounts, namespaces, io_uring, BPF, keyring, perf or userfaultfd)"

func (h *helper) prepareTmp() error {
	dir, err := os.MkdirTemp("", "fastagent-sandbox-")
	if err != nil {
		return fmt.Errorf("temporary directory: %w", err)
	}
	h.tmpBase = dir
	return nil
}

// serve handles requests until the worker goes away.
func (h *helper) serve() {
	for {
		var req request
		files, err := h.c.recv(&req)
		if err != nil {
			return // the worker closed the socket or died
		}
		switch req.Op {
		case "start":
			go h.start(&req, files)
		case "signal":
			closeAll(files)
			h.signal(req.ID, syscall.Signal(req.Signal))
		case "deny":
			// The control plane grew (an address the worker learned): the
			// proxy refuses it from now on, to the running calls too.
			closeAll(files)
			if h.proxy != nil {
				h.proxy.Deny(req.Deny)
			}
			_ = h.c.send(event{Op: "denied", ID: req.ID})
		default:
			closeAll(files)
		}
	}
}

// start prepares the call on a thread of its own and forks the tool there.
func (h *helper) start(req *request, files []*os.File) {
	defer closeAll(files)
	if len(files) != 3 {
		_ = h.c.send(event{Op: "started", ID: req.ID, Err: "sandbox: a call needs stdin, stdout and stderr"})
		return
	}
	if len(req.Deny) > 0 && h.proxy != nil {
		// The control plane as the worker knows it now, before the tool
		// can send anything.
		h.proxy.Deny(req.Deny)
	}
	type result struct {
		pid     int
		cleanup []func()
		err     error
	}
	done := make(chan result, 1)
	h.forkMu.RLock()
	go func() {
		// Never unlocked: the thread ends with this goroutine, taking its
		// namespaces, Landlock domain, filter and dropped capabilities.
		runtime.LockOSThread()
		var cleanup []func()
		pid, err := h.fork(req, files, &cleanup)
		done <- result{pid, cleanup, err}
	}()
	r := <-done
	if r.err != nil {
		h.forkMu.RUnlock()
		for _, f := range r.cleanup {
			f()
		}
		_ = h.c.send(event{Op: "started", ID: req.ID, Err: r.err.Error()})
		return
	}
	reported := r.pid
	if h.cfg.Mode == Namespaces {
		reported = 0 // a PID in the helper's namespace means nothing to the worker
	}
	// Recorded and reported under h.mu, so that exited (which takes it)
	// cannot report the end before the start.
	h.mu.Lock()
	h.calls[r.pid] = req.ID
	h.pgids[req.ID] = r.pid
	h.cleanups[req.ID] = r.cleanup
	status, exited := h.unclaim[r.pid]
	delete(h.unclaim, r.pid)
	_ = h.c.send(event{Op: "started", ID: req.ID, Pid: reported})
	h.mu.Unlock()
	h.forkMu.RUnlock()
	if exited {
		h.exited(r.pid, status)
	}
}

// fork runs on the call thread: it sets up the call's confinement and
// starts the tool, which inherits it.
func (h *helper) fork(req *request, files []*os.File, cleanup *[]func()) (int, error) {
	cc, err := h.prepareCall(req, cleanup)
	if cc.ruleset >= 0 {
		defer func() { _ = unix.Close(cc.ruleset) }()
	}
	if err != nil {
		return 0, err
	}
	env := cc.env
	if getEnv(env, "XDG_CACHE_HOME") == "" {
		env = setEnv(env, "XDG_CACHE_HOME", filepath.Join(getEnv(env, "TMPDIR"), ".cache"))
	}
	var sup *supervisor
	if h.cfg.Mode != Off {
		listener, err := lockDown(cc.ruleset, cc.filter)
		if err != nil {
			return 0, err
		}
		if listener >= 0 {
			// Answering from now on: the tool may signal at once.
			sup = &supervisor{fd: listener, helperSID: h.sid, helper: os.Getpid()}
			go sup.supervise()
		}
	}
	cmd := h.command(req, files, env)
	if err := cmd.Start(); err != nil {
		return 0, err // the supervisor ends with this thread, the filter's last user
	}
	pid := cmd.Process.Pid
	if sup != nil {
		sup.root.Store(int64(pid))
	}
	_ = cmd.Process.Release() // reap() waits for it
	return pid, nil
}

// callConfinement is how a call is confined once prepared: the tool's
// environment, the Landlock ruleset the thread enforces (-1: none; fork
// closes it) and its seccomp filter.
type callConfinement struct {
	env     []string
	ruleset int
	filter  filterPolicy
}

// prepareCall sets up the call's confinement by mode, on the call thread.
func (h *helper) prepareCall(req *request, cleanup *[]func()) (callConfinement, error) {
	cc := callConfinement{env: append([]string{}, req.Env...), ruleset: -1, filter: h.filter}
	switch h.cfg.Mode {
	case Namespaces:
		return h.prepareNamespaces(req, cc, cleanup)
	case Landlock:
		return h.prepareLandlock(req, cc, cleanup)
	case Off:
		tmp, err := h.callTmp(req.ID, cleanup)
		if err != nil {
			return cc, err
		}
		cc.env = setEnv(cc.env, "TMPDIR", tmp)
	}
	return cc, nil
}

// prepareNamespaces gives the call thread its own mount view (the call's
// /tmp, hidden paths), the egress proxy inside its network namespace when
// the call may use the network, and Landlock's scoping where available.
func (h *helper) prepareNamespaces(req *request, cc callConfinement, cleanup *[]func()) (callConfinement, error) {
	if err := (nsCall{req: req, baseCovered: h.covered, hidden: h.cfg.Hidden}).setup(); err != nil {
		return cc, err
	}
	cc.env = setEnv(cc.env, "TMPDIR", "/tmp")
	if req.Network {
		l, err := listenInNS()
		if err != nil {
			return cc, err
		}
		go func() { _ = h.proxy.Serve(l) }()
		*cleanup = append(*cleanup, func() { _ = l.Close() })
		cc.env = proxyEnv(cc.env, proxyPortInNS)
		cc.filter.inet = true
	}
	if h.abi > 0 {
		fd, err := scopingRuleset(h.abi)
		if err != nil {
			return cc, err
		}
		cc.ruleset = fd
	}
	return cc, nil
}

// prepareLandlock gives the call its private temporary directory and the
// Landlock ruleset of its file policy (and of the egress proxy's port when
// the call may use the network).
func (h *helper) prepareLandlock(req *request, cc callConfinement, cleanup *[]func()) (callConfinement, error) {
	tmp, err := h.callTmp(req.ID, cleanup)
	if err != nil {
		return cc, err
	}
	cc.env = setEnv(cc.env, "TMPDIR", tmp)
	port := 0
	if req.Network {
		port = h.proxyPort
		cc.env = proxyEnv(cc.env, port)
		cc.filter.inet = true
	}
	fd, err := fullRuleset(h.abi, fsPolicy{writable: req.Writable, protected: req.Protected,
		hidden: append(append([]string{}, h.cfg.Hidden...), req.Hidden...), visible: req.Visible, tmp: tmp}, port)
	if err != nil {
		return cc, err
	}
	cc.ruleset = fd
	return cc, nil
}

// command is the call's process: the tool itself, or in namespaces mode
// the init of the call's PID namespace running it.
func (h *helper) command(req *request, files []*os.File, env []string) *exec.Cmd {
	cmd := &exec.Cmd{Path: req.Path, Args: req.Args, Env: env, Dir: req.Dir,
		Stdin: files[0], Stdout: files[1], Stderr: files[2],
		SysProcAttr: &syscall.SysProcAttr{Setsid: true}}
	if h.cfg.Mode == Namespaces {
		// The first process of the call's PID namespace is its init: a
		// small shell that runs the tool as its child and exits with its
		// status, so the tool keeps ordinary signal semantics (an init
		// ignores signals it has no handler for) and, when the init exits,
		// the kernel ends everything left in the namespace.
		cmd.Path = h.cfg.Shell
		cmd.Args = append([]string{"sh", "-c", initScript, "sh", req.Path}, req.Args[1:]...)
	}
	return cmd
}

// initScript is the call namespace's init (see fork). It hands the tool
// its stdin, then lets go of its own standard streams so that they close
// when the tool's do.
const initScript = `exec 3<&0
"$@" <&3 3<&- &
exec 3<&- </dev/null >/dev/null 2>&1
wait $!
exit $?`

// callTmp creates the call's private temporary directory (Landlock and off
// modes), removed when the call ends.
func (h *helper) callTmp(id uint64, cleanup *[]func()) (string, error) {
	dir := filepath.Join(h.tmpBase, strconv.FormatUint(id, 10))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", fmt.Errorf("temporary directory: %w", err)
	}
	*cleanup = append(*cleanup, func() { _ = os.RemoveAll(dir) })
	return dir, nil
}

// reap waits for every child: a call's process (reported to the worker)
// or, in Landlock and off modes, an orphan adopted as subreaper.
func (h *helper) reap() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGCHLD)
	for {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err != nil || pid <= 0 {
				break
			}
			h.exited(pid, ws)
		}
		<-sig
	}
}

// exited reports a call's end and, outside namespaces mode (where the
// kernel ends the call's PID namespace with it), kills what it left.
func (h *helper) exited(pid int, ws syscall.WaitStatus) {
	h.mu.Lock()
	id, ok := h.calls[pid]
	if !ok {
		// A call whose start is not recorded yet, or an adopted orphan.
		if len(h.unclaim) > 4096 {
			clear(h.unclaim)
		}
		h.unclaim[pid] = ws
		h.mu.Unlock()
		return
	}
	delete(h.calls, pid)
	delete(h.pgids, id)
	cleanup := h.cleanups[id]
	delete(h.cleanups, id)
	h.mu.Unlock()
	if h.cfg.Mode != Namespaces {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	_ = h.c.send(event{Op: "exited", ID: id, Wait: int(ws)})
	// After the report: what the call left behind (outside namespaces
	// mode) is found and killed, then its temporary directory removed.
	go func() {
		if h.cfg.Mode != Namespaces {
			h.sweep()
		}
		for _, f := range cleanup {
			f()
		}
	}()
}

// signal sends sig to the call's process group (in namespaces mode the
// group's leader is the init of the call's PID namespace: SIGKILL ends the
// whole namespace).
func (h *helper) signal(id uint64, sig syscall.Signal) {
	h.mu.Lock()
	pgid, ok := h.pgids[id]
	h.mu.Unlock()
	if ok {
		_ = syscall.Kill(-pgid, sig)
		if sig == syscall.SIGKILL {
			_ = syscall.Kill(pgid, sig)
		}
	}
}

// sweep kills the helper's children that belong to no running call, and
// every process below them: processes that left their call's process group
// (setsid, a double fork) and were adopted by the helper when their parent
// exited. A job may be a chain of any depth whose every process has a group
// of its own, so each orphan's whole tree goes at once, not one level per
// pass; passes go on until no orphan is left (a process that forked while
// its parent was killed is adopted and found by the next), for at most
// sweepFor.
func (h *helper) sweep() {
	h.sweepMu.Lock()
	defer h.sweepMu.Unlock()
	deadline := time.Now().Add(sweepFor)
	for {
		h.forkMu.Lock()
		h.mu.Lock()
		live := map[int]bool{}
		for pid := range h.calls {
			live[pid] = true
		}
		h.mu.Unlock()
		var orphans []int
		for _, pid := range children(os.Getpid()) {
			if !live[pid] {
				orphans = append(orphans, pid)
				_ = syscall.Kill(-pid, syscall.SIGKILL)
			}
		}
		for _, pid := range descendants(orphans) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		h.forkMu.Unlock()
		if len(orphans) == 0 {
			return
		}
		if time.Now().After(deadline) {
			h.log.Warn("processes of a finished tool call kept forking while they were killed; some may be left", "pids", orphans)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sweepFor bounds one sweep.
const sweepFor = 5 * time.Second

// descendants returns roots and every process below them, from one read of
// every /proc/<pid>/stat.
func descendants(roots []int) []int {
	if len(roots) == 0 {
		return nil
	}
	kids := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _, _, err := procStat(pid); err == nil {
			kids[ppid] = append(kids[ppid], pid)
		}
	}
	// Seen once each: the reads are not one snapshot, and a PID reused
	// meanwhile could close a loop.
	seen := map[int]bool{}
	var out []int
	next := append([]int{}, roots...)
	for len(next) > 0 {
		pid := next[len(next)-1]
		next = next[:len(next)-1]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		out = append(out, pid)
		next = append(next, kids[pid]...)
	}
	return out
}

// children lists the PIDs whose parent is ppid: from
// /proc/<ppid>/task/*/children where the kernel has it, else by reading
// every /proc/<pid>/stat.
func children(ppid int) []int {
	if tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", ppid)); err == nil {
		var out []int
		ok := true
		for _, t := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", ppid, t.Name()))
			if err != nil {
				ok = false
				break
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					out = append(out, pid)
				}
			}
		}
		if ok {
			return out
		}
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
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
		// pid (comm) state ppid …; comm may contain spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) >= 2 && f[1] == strconv.Itoa(ppid) {
			out = append(out, pid)
		}
	}
	return out
}

// shutdown kills every call (the worker is gone) and removes temporary
// directories. In namespaces mode the helper's exit ends them all anyway.
func (h *helper) shutdown() {
	h.mu.Lock()
	for pid := range h.calls {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	h.mu.Unlock()
	if h.cfg.Mode != Namespaces {
		h.mu.Lock()
		h.calls = map[int]uint64{}
		h.mu.Unlock()
		h.sweep()
	}
	if h.tmpBase != "" {
		_ = os.RemoveAll(h.tmpBase)
	}
	if h.proxy != nil {
		_ = h.proxy.Close()
	}
}

// proxyEnv points every common proxy variable at the egress proxy.
func proxyEnv(env []string, port int) []string {
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"} {
		env = setEnv(env, k, url)
	}
	env = setEnv(env, "NO_PROXY", "")
	return setEnv(env, "no_proxy", "")
}

func setEnv(env []string, k, v string) []string {
	for i, kv := range env {
		if strings.HasPrefix(kv, k+"=") {
			env[i] = k + "=" + v
			return env
		}
	}
	return append(env, k+"="+v)
}

func getEnv(env []string, k string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, k+"="); ok {
			return v
		}
	}
	return ""
}
