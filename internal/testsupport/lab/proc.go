package lab

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fastagent/fastagent/internal/devserver"
)

// ModuleRoot returns the directory of the main module's go.mod.
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the fastagent module (go env GOMOD is empty); run from the repository")
	}
	return filepath.Dir(mod), nil
}

// Binaries builds cmd/fastagent at most once into a temporary directory,
// for worker processes and `fastagent dev` (which finds the dev server
// program beside it).
type Binaries struct {
	mu   sync.Mutex
	dir  string
	bin  string
	full bool
}

// Worker returns the path of the fastagent build, building it first.
func (b *Binaries) Worker() (string, error) {
	return b.build()
}

// Full returns the path of the fastagent build with the dev server program
// beside it, for `fastagent dev`.
func (b *Binaries) Full() (string, error) {
	bin, err := b.build()
	if err != nil {
		return "", err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.full {
		srv, err := devserver.Find(slog.Default())
		if err != nil {
			return "", err
		}
		if err := os.Symlink(srv, filepath.Join(b.dir, devserver.Program)); err != nil {
			return "", err
		}
		b.full = true
	}
	return bin, nil
}

func (b *Binaries) build() (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bin != "" {
		return b.bin, nil
	}
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	if b.dir == "" {
		if b.dir, err = os.MkdirTemp("", "fastagent-lab-bin-"); err != nil {
			return "", err
		}
	}
	out := filepath.Join(b.dir, "fastagent")
	args := []string{"build", "-o", out, "./cmd/fastagent"}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, msg)
	}
	b.bin = out
	return out, nil
}

// Close removes the built binaries.
func (b *Binaries) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
}

// Proc is a fastagent subprocess in its own process group (so that killing
// it also kills the shell commands its tools started, as when a container
// dies).
type Proc struct {
	Cmd     *exec.Cmd
	Started time.Time
	mu      sync.Mutex
	out     bytes.Buffer
	done    chan struct{}
	err     error
}

// StartProc starts bin with args and exactly the environment env.
func StartProc(bin string, args, env []string) (*Proc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	// Its own process group (killed as a whole); killed with this program
	// if it dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 2 * time.Second
	p := &Proc{Cmd: cmd, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = (*procWriter)(p), (*procWriter)(p)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", filepath.Base(bin), err)
	}
	p.Started = time.Now()
	live.Store(p, struct{}{})
	go func() {
		p.err = cmd.Wait()
		live.Delete(p)
		close(p.done)
	}()
	return p, nil
}

// live are the subprocesses still running.
var live sync.Map

// KillAll SIGKILLs every subprocess (and its process group) still running;
// call it when the program is interrupted.
func KillAll() {
	live.Range(func(k, _ any) bool {
		_ = syscall.Kill(-k.(*Proc).Pid(), syscall.SIGKILL)
		return true
	})
}

type procWriter Proc

// maxOutput bounds the output a Proc keeps (its tail).
const maxOutput = 1 << 20

func (w *procWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.out.Len()+len(b) > maxOutput {
		keep := w.out.Bytes()[w.out.Len()/2:]
		w.out = *bytes.NewBuffer(append([]byte(nil), keep...))
	}
	return w.out.Write(b)
}

// Pid is the process ID.
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Output returns what the process wrote to stdout and stderr so far.
func (p *Proc) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Kill sends SIGKILL to the process group and waits for the exit.
func (p *Proc) Kill() {
	_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM and waits up to grace for a clean exit, then kills.
func (p *Proc) Stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.Kill()
	}
}

// WaitOutput waits until the output contains s, the process exits or
// timeout passes.
func (p *Proc) WaitOutput(s string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if strings.Contains(p.Output(), s) {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("process %d exited (%w) before printing %q:\n%s", p.Pid(), p.err, s, tail(p.Output(), 2000))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d did not print %q within %s:\n%s", p.Pid(), s, timeout, tail(p.Output(), 2000))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// RSS returns the process's resident set size in bytes (VmRSS).
func (p *Proc) RSS() (int64, error) { return RSSOf(p.Pid()) }

// RSSOf reads VmRSS of pid from /proc.
func RSSOf(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			fields := strings.Fields(rest)
			if len(fields) < 1 {
				break
			}
			kb, err := strconv.ParseInt(fields[0], 10, 64)
			if err != nil {
				return 0, err
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// WorkerSpec says how to start a `fastagent worker` subprocess.
type WorkerSpec struct {
	Bin             string // the fastagent build
	Kit             *Kit   // workspace, store file and model server
	TemporalAddress string
	// TemporalAPIKey is the embedded server's key (Server.APIKey), sent in
	// plaintext.
	TemporalAPIKey string
	Namespace      string
	TaskQueue      string
	Feed           string // nats://… (or "inprocess")
	Store          string // session store DSN (default: Kit.StorePath)
}

// StartWorkerProc starts a worker subprocess and waits until its worker
// polls the task queue.
func StartWorkerProc(s WorkerSpec) (*Proc, error) {
	feedURL := s.Feed
	if feedURL == "" {
		feedURL = "inprocess"
	}
	storeDSN := s.Store
	if storeDSN == "" {
		storeDSN = s.Kit.StorePath
	}
	// The store DSN and the feed URL can hold a password or a token: they
	// go through the environment, as the Temporal key does, never the
	// command line (/proc/<pid>/cmdline is readable by every process).
	p, err := StartProc(s.Bin, []string{"worker",
		"--dir", s.Kit.Dir,
		"--temporal-address", s.TemporalAddress,
		"--namespace", s.Namespace,
		"--task-queue", s.TaskQueue,
		"--log-level", "info",
	}, append(s.Kit.ProcessEnv(), "TEMPORAL_API_KEY="+s.TemporalAPIKey, "TEMPORAL_TLS=false",
		"FASTAGENT_STORE="+storeDSN, "FASTAGENT_FEED="+feedURL))
	if err != nil {
		return nil, err
	}
	if err := p.WaitOutput("worker started", 60*time.Second); err != nil {
		p.Kill()
		return nil, err
	}
	return p, nil
}
