package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fastagent/fastagent/internal/egress"
	"github.com/fastagent/fastagent/internal/secretenv"
)

// helperStartTimeout bounds the helper's start and base setup.
const helperStartTimeout = 20 * time.Second

// Sandbox starts tool processes under the policy. Open one per worker
// process; it is safe for concurrent use.
type Sandbox struct {
	cfg    Config
	log    *slog.Logger
	hidden []string
	status Status
	nextID atomic.Uint64

	mu     sync.Mutex
	h      *helperConn
	closed bool
}

// helperConn is the worker's end of a running helper.
type helperConn struct {
	cmd  *exec.Cmd
	c    *conn
	mu   sync.Mutex
	wait map[uint64]*Process
	// acks are the deny requests waiting for the helper's "denied".
	acks map[uint64]chan struct{}
	dead chan struct{}
	err  error
}

// Open picks the mechanism (Config.Mode, or namespaces then Landlock),
// starts its helper and reports the result in Status. It does not fail:
// when nothing can confine tools, Status says why and Start refuses.
func Open(cfg Config) *Sandbox {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Sandbox{cfg: cfg, log: cfg.Logger}
	hidden := append([]string{}, cfg.Hidden...)
	hidden = append(hidden, secretenv.Files(os.Environ())...)
	hidden = append(hidden, homeHidden(os.Getenv("HOME"))...)
	s.hidden = absClean(hidden)
	modes := []Mode{Namespaces, Landlock}
	if cfg.Mode != "" {
		modes = []Mode{cfg.Mode}
	}
	var why []string
	for _, m := range modes {
		h, st, err := s.startHelper(m)
		if err == nil {
			s.h, s.status = h, st
			break
		}
		why = append(why, fmt.Sprintf("%s: %v", m, err))
	}
	if s.h == nil {
		s.status = Status{LandlockABI: landlockABI(),
			Error: fmt.Sprintf("%s (%s); %s", ErrUnavailable, strings.Join(why, "; "), fixHint)}
	}
	return s
}

// Status reports the mechanism in use and what it enforces.
func (s *Sandbox) Status() Status { return s.status }

// Hidden returns the paths no tool of this sandbox may read, whatever the
// call (Config.Hidden, secret files the environment names, credentials in
// the worker's home): absolute, resolved.
func (s *Sandbox) Hidden() []string { return append([]string(nil), s.hidden...) }

// ControlPlane returns the deployment's own services (Config.Egress.Deny
// and what Deny added): no tool and no remote MCP server is reached there.
func (s *Sandbox) ControlPlane() []egress.Dest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]egress.Dest(nil), s.cfg.Egress.Deny...)
}

// Deny adds ds to the control plane no tool reaches: an address learned
// after Open (the Temporal frontend of a client given later). The running
// helper's proxy refuses it once Deny returns — to the calls running
// already too (a networked stdio MCP server), and their open tunnels to it
// are closed; each network call also carries the whole list to the helper
// before it starts, and a restarted helper gets it with its configuration.
func (s *Sandbox) Deny(ds []egress.Dest) {
	s.mu.Lock()
	s.cfg.Egress = s.cfg.Egress.WithDeny(ds)
	deny := append([]egress.Dest(nil), s.cfg.Egress.Deny...)
	h := s.h
	s.mu.Unlock()
	if h == nil || !h.alive() || len(deny) == 0 {
		return
	}
	id := s.nextID.Add(1)
	ack := make(chan struct{})
	h.mu.Lock()
	h.acks[id] = ack
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.acks, id)
		h.mu.Unlock()
	}()
	if err := h.c.send(request{Op: "deny", ID: id, Deny: deny}); err != nil {
		s.log.Warn("tool sandbox: the deny list could not reach the helper; it goes with the next network call", "error", err)
		return
	}
	select {
	case <-ack:
	case <-h.dead: // a restarted helper gets the list with its configuration
	case <-time.After(10 * time.Second):
		s.log.Warn("tool sandbox: the helper did not confirm the deny list; it goes with the next network call")
	}
}

// Close stops the helper; every running tool process is killed with it.
func (s *Sandbox) Close() error {
	s.mu.Lock()
	s.closed = true
	h := s.h
	s.h = nil
	s.mu.Unlock()
	if h != nil {
		h.close()
	}
	return nil
}

// startHelper re-executes this program as the helper of mode m and waits
// for it to be ready.
func (s *Sandbox) startHelper(m Mode) (*helperConn, Status, error) {
	if err := landlockUsable(m); err != nil {
		return nil, Status{}, err
	}
	exe := s.cfg.Executable
	if exe == "" {
		exe = "/proc/self/exe"
	}
	if err := checkHelper(exe, true); err != nil {
		return nil, Status{}, err
	}
	var shell string
	if m == Namespaces {
		var err error
		if shell, err = systemShell(); err != nil {
			return nil, Status{}, err
		}
	}
	cmd, mine, err := spawnHelper(exe, m)
	if err != nil {
		return nil, Status{}, err
	}
	c, err := newConn(mine)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, Status{}, err
	}
	h := &helperConn{cmd: cmd, c: c, wait: map[uint64]*Process{}, acks: map[uint64]chan struct{}{}, dead: make(chan struct{})}
	st, err := awaitHelper(c, helperConfig{Mode: m, Hidden: s.hidden, Egress: s.cfg.Egress, Shell: shell, UID: os.Getuid(), GID: os.Getgid(),
		LandlockABI: s.cfg.landlockABI})
	if err != nil {
		h.close()
		return nil, Status{}, err
	}
	go h.read(s.log)
	return h, st, nil
}

// landlockUsable refuses Landlock mode on a kernel whose Landlock is off
// or too old; other modes pass.
func landlockUsable(m Mode) error {
	if m != Landlock {
		return nil
	}
	abi := landlockABI()
	switch {
	case abi == 0:
		return errors.New("landlock is not enabled in this kernel")
	case abi < minLandlockABI:
		return fmt.Errorf("landlock ABI %d is too old (read-only files need ABI %d, Linux 6.2)", abi, minLandlockABI)
	}
	return nil
}

// spawnHelper starts exe as the helper of mode m (in new user, mount and
// PID namespaces for namespaces mode) with one end of a control socket;
// it returns the process and the worker's end.
func spawnHelper(exe string, m Mode) (*exec.Cmd, *os.File, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("control socket: %w", err)
	}
	mine, theirs := os.NewFile(uintptr(pair[0]), "sandbox-control"), os.NewFile(uintptr(pair[1]), "sandbox-control")
	cmd := &exec.Cmd{Path: exe, Args: []string{"fastagent-sandbox-helper"}, Env: []string{envName + "=1"},
		ExtraFiles: []*os.File{theirs}, Stderr: os.Stderr,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true}}
	if m == Namespaces {
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
		cmd.SysProcAttr.GidMappingsEnableSetgroups = false
	}
	err = cmd.Start()
	_ = theirs.Close()
	if err != nil {
		_ = mine.Close()
		if m == Namespaces {
			return nil, nil, fmt.Errorf("user namespaces are refused here (%w)", err)
		}
		return nil, nil, fmt.Errorf("start helper: %w", err)
	}
	return cmd, mine, nil
}

// awaitHelper sends the helper its configuration and waits (at most
// helperStartTimeout) for the status it reports once set up.
func awaitHelper(c *conn, cfg helperConfig) (Status, error) {
	if err := c.send(cfg); err != nil {
		return Status{}, fmt.Errorf("helper: %w", err)
	}
	type setup struct {
		st  Status
		err error
	}
	ready := make(chan setup, 1)
	go func() {
		var ev event
		_, err := c.recv(&ev)
		switch {
		case err != nil:
			ready <- setup{err: fmt.Errorf("helper exited during setup: %w", err)}
		case ev.Err != "":
			ready <- setup{err: errors.New(ev.Err)}
		case ev.Status == nil:
			ready <- setup{err: errors.New("helper: no status")}
		default:
			ready <- setup{st: *ev.Status}
		}
	}()
	select {
	case r := <-ready:
		return r.st, r.err
	case <-time.After(helperStartTimeout):
		return Status{}, fmt.Errorf("helper not ready after %s", helperStartTimeout)
	}
}

// systemShell returns the shell a namespaces-mode call runs as its init:
// /bin/sh or /usr/bin/sh, by absolute path (never through PATH), checked.
func systemShell() (string, error) {
	var errs []error
	for _, p := range []string{"/bin/sh", "/usr/bin/sh"} {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := checkHelper(real, false); err != nil {
			errs = append(errs, err)
			continue
		}
		return real, nil
	}
	return "", fmt.Errorf("no usable /bin/sh: %w", errors.Join(errs...))
}

// checkHelper refuses a program the sandbox executes when someone other
// than root could have changed it: it and its directories must be owned by
// root and writable by no one else. The worker's own executable (self) may
// also belong to the worker's user — whoever can change it owns the worker
// anyway — and it is executed as /proc/self/exe: the very file the worker
// runs, which cannot be written while it runs and is not looked up again.
func checkHelper(path string, self bool) error {
	if path == "/proc/self/exe" {
		real, err := os.Readlink(path)
		if err != nil {
			return fmt.Errorf("helper %s: %w", path, err)
		}
		path = strings.TrimSuffix(real, " (deleted)")
		self = true
	}
	for p := path; ; p = filepath.Dir(p) {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			if self && p == path {
				return fmt.Errorf("helper %s: %w", p, err)
			}
			if self {
				break // a deleted or moved binary still runs as /proc/self/exe
			}
			return fmt.Errorf("helper %s: %w", p, err)
		}
		owner := st.Uid == 0 || (self && int(st.Uid) == os.Getuid())
		if !owner {
			return fmt.Errorf("helper %s is owned by uid %d, not root: refusing to execute it", p, st.Uid)
		}
		if st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0 {
			return fmt.Errorf("helper %s is writable by group or others (mode %o): refusing to execute it", p, st.Mode&0o7777)
		}
		if p == "/" {
			break
		}
	}
	return nil
}

// read dispatches the helper's events until it goes away.
func (h *helperConn) read(log *slog.Logger) {
	var err error
	for {
		var ev event
		if _, err = h.c.recv(&ev); err != nil {
			break
		}
		h.mu.Lock()
		if ev.Op == "denied" {
			if ack := h.acks[ev.ID]; ack != nil {
				close(ack)
				delete(h.acks, ev.ID)
			}
			h.mu.Unlock()
			continue
		}
		p := h.wait[ev.ID]
		if ev.Op == "exited" {
			delete(h.wait, ev.ID)
		}
		h.mu.Unlock()
		if p != nil {
			p.event(ev)
		}
	}
	h.mu.Lock()
	h.err = fmt.Errorf("sandbox helper exited: %w", err)
	pending := h.wait
	h.wait = map[uint64]*Process{}
	h.mu.Unlock()
	close(h.dead)
	for _, p := range pending {
		p.fail(h.err)
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		log.Warn("tool sandbox helper stopped; it is restarted for the next tool call", "err", err)
	}
	_ = h.cmd.Wait()
}

func (h *helperConn) close() {
	_ = h.c.c.Close()
	select {
	case <-h.dead:
	case <-time.After(2 * time.Second):
		_ = h.cmd.Process.Kill()
	}
}

func (h *helperConn) alive() bool {
	select {
	case <-h.dead:
		return false
	default:
		return true
	}
}

// helper returns a running helper, restarting it after a crash.
func (s *Sandbox) helper() (*helperConn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("sandbox: closed")
	}
	if s.h != nil && s.h.alive() {
		return s.h, nil
	}
	h, _, err := s.startHelper(s.status.Mode)
	if err != nil {
		return nil, fmt.Errorf("sandbox: restart helper: %w", err)
	}
	s.h = h
	return h, nil
}

// Process is a started tool process (with everything it starts).
type Process struct {
	h   *helperConn
	id  uint64
	pid int

	started chan error
	done    chan struct{}
	once    sync.Once
	ws      syscall.WaitStatus
	err     error

	copies    sync.WaitGroup
	closers   []io.Closer
	waitDelay time.Duration
}

func (p *Process) event(ev event) {
	switch ev.Op {
	case "started":
		if ev.Err != "" {
			p.started <- errors.New(ev.Err)
			return
		}
		p.pid = ev.Pid
		p.started <- nil
	case "exited":
		select {
		case p.started <- nil: // the helper reports a start first; be safe anyway
		default:
		}
		p.once.Do(func() {
			p.ws = syscall.WaitStatus(ev.Wait) //nolint:gosec // G115: a wait status
			close(p.done)
		})
	}
}

func (p *Process) fail(err error) {
	select {
	case p.started <- err:
	default:
	}
	p.once.Do(func() {
		p.err = err
		close(p.done)
	})
}

// Pid is the process's PID as the worker sees it; 0 in namespaces mode,
// where it lives in a PID namespace of its own.
func (p *Process) Pid() int { return p.pid }

// Start starts c under the policy. When no mechanism is available it
// returns an error wrapping ErrUnavailable that says what to do, and
// nothing runs.
func (s *Sandbox) Start(ctx context.Context, c *Cmd) (*Process, error) {
	if s.status.Mode == "" {
		return nil, errors.New(s.status.Error)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	req, err := s.request(c)
	if err != nil {
		return nil, err
	}
	h, err := s.helper()
	if err != nil {
		return nil, err
	}
	p := &Process{h: h, id: req.ID, started: make(chan error, 1), done: make(chan struct{}), waitDelay: c.WaitDelay}
	child, err := p.stdio(c)
	if err != nil {
		return nil, err
	}
	fds := []int{int(child[0].Fd()), int(child[1].Fd()), int(child[2].Fd())}
	h.mu.Lock()
	h.wait[p.id] = p
	h.mu.Unlock()
	err = h.c.send(req, fds...)
	closeAll(child)
	if err != nil {
		p.abandon()
		return nil, fmt.Errorf("sandbox: send call: %w", err)
	}
	select {
	case err = <-p.started:
	case <-h.dead:
		err = h.err
	}
	if err != nil {
		p.abandon()
		h.mu.Lock()
		delete(h.wait, p.id)
		h.mu.Unlock()
		return nil, fmt.Errorf("sandbox: start %s: %w", c.Path, err)
	}
	return p, nil
}

// request builds the helper's request, creating missing protected paths.
func (s *Sandbox) request(c *Cmd) (*request, error) {
	if len(c.Args) == 0 {
		c.Args = []string{c.Path}
	}
	path := c.Path
	if !strings.Contains(path, "/") {
		lp, err := lookPath(path, getEnv(c.Env, "PATH"))
		if err != nil {
			return nil, err
		}
		path = lp
	} else if !filepath.IsAbs(path) {
		path = filepath.Join(c.Dir, path)
	}
	// As exec would: a program that cannot be executed fails to start,
	// rather than as the exit status of the call's init.
	if err := unix.Access(path, unix.X_OK); err != nil {
		return nil, &os.PathError{Op: "fork/exec", Path: path, Err: err}
	}
	writable := absClean(c.Writable)
	var protected []string
	for _, r := range c.Protected {
		protected = append(protected, resolve(r.Path))
	}
	if s.status.Mode != Off {
		if err := ensurePlaceholders(writable, c.Protected); err != nil {
			return nil, err
		}
	}
	visible := absClean([]string{filepath.Dir(path), c.Dir})
	// Secret files named by the environment now (a variable set after Open).
	hidden := absClean(append(append([]string{}, c.Hidden...), secretenv.Files(os.Environ())...))
	// What the helper hides from every call already needs no second cover.
	hidden = slices.DeleteFunc(hidden, func(h string) bool { return slices.Contains(s.hidden, h) })
	req := &request{Op: "start", ID: s.nextID.Add(1), Path: path, Args: c.Args, Env: c.Env, Dir: c.Dir,
		Writable: writable, Protected: protected, Hidden: hidden, Visible: visible, Network: c.Network}
	if c.Network {
		req.Deny = s.ControlPlane()
	}
	return req, nil
}

// lookPath finds name in the PATH the tool will have (not the worker's).
func lookPath(name, path string) (string, error) {
	if path == "" {
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", &exec.Error{Name: name, Err: exec.ErrNotFound}
}

// stdio returns the child's stdin, stdout and stderr, starting copy
// goroutines for readers and writers that are not files.
func (p *Process) stdio(c *Cmd) ([]*os.File, error) {
	child := make([]*os.File, 3)
	fail := func(err error) ([]*os.File, error) {
		closeAll(child)
		p.abandon()
		return nil, err
	}
	if f, ok := c.Stdin.(*os.File); ok {
		child[0] = dupFile(f)
	} else if c.Stdin == nil {
		f, err := os.Open(os.DevNull)
		if err != nil {
			return fail(err)
		}
		child[0] = f
	} else {
		r, w, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		child[0] = r
		go func() {
			_, _ = io.Copy(w, c.Stdin)
			_ = w.Close()
		}()
	}
	outs := []io.Writer{c.Stdout, c.Stderr}
	for i, out := range outs {
		if i == 1 && c.Stderr != nil && c.Stderr == c.Stdout {
			child[2] = dupFile(child[1])
			break
		}
		if f, ok := out.(*os.File); ok {
			child[i+1] = dupFile(f)
			continue
		}
		if out == nil {
			f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
			if err != nil {
				return fail(err)
			}
			child[i+1] = f
			continue
		}
		r, w, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		child[i+1] = w
		p.closers = append(p.closers, r)
		p.copies.Add(1)
		go func(out io.Writer) {
			defer p.copies.Done()
			_, _ = io.Copy(out, r)
		}(out)
	}
	return child, nil
}

// dupFile duplicates f so that closing the copy sent to the helper leaves
// the caller's file open.
func dupFile(f *os.File) *os.File {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return f
	}
	return os.NewFile(uintptr(fd), f.Name())
}

// abandon releases the parent's ends when the process never started.
func (p *Process) abandon() {
	for _, c := range p.closers {
		_ = c.Close()
	}
}

// Wait waits for the process to exit and its output to be copied (at most
// WaitDelay after the exit). A non-zero exit is an *ExitError.
func (p *Process) Wait() error {
	<-p.done
	if p.err != nil {
		p.abandon()
		return p.err
	}
	copied := make(chan struct{})
	go func() {
		p.copies.Wait()
		close(copied)
	}()
	var late bool
	if p.waitDelay > 0 {
		select {
		case <-copied:
		case <-time.After(p.waitDelay):
			late = true
			p.abandon()
			<-copied
		}
	} else {
		<-copied
	}
	p.abandon()
	if p.ws != 0 {
		return &ExitError{Status: p.ws}
	}
	if late {
		return ErrWaitDelay
	}
	return nil
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Signal sends sig to every process of the call that is still in its
// process group (in namespaces mode SIGKILL ends the whole call).
func (p *Process) Signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	return p.h.c.send(request{Op: "signal", ID: p.id, Signal: int(sig)})
}

// Kill ends the call's processes.
func (p *Process) Kill() { _ = p.Signal(syscall.SIGKILL) }

// Harden makes the worker process non-dumpable: a process of the same user
// without CAP_SYS_PTRACE over it can then no longer read its
// /proc/<pid>/environ or mem, nor attach a debugger — a second wall behind
// the sandbox's own. Its cmdline stays readable by every process, which is
// why no secret is ever a flag (the serving commands refuse one).
func Harden() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("sandbox: set non-dumpable: %w", err)
	}
	return nil
}
