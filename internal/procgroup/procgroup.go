// Package procgroup starts tool processes (bash, workspace tools, MCP stdio
// servers) so that they die with their call and with their worker: each
// runs as the leader of its own process group, which the caller kills on
// every exit path, and on Linux the leader is also sent SIGKILL by the
// kernel when the worker dies (Pdeathsig).
package procgroup

import (
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// Group is a started process group. Close it on every exit path (defer), so
// that nothing the call started outlives it.
type Group struct {
	cmd     *exec.Cmd
	release chan struct{}
	once    sync.Once
}

// Start prepares cmd (see Prepare) and runs start, which must start cmd
// (cmd.Start when nil; an MCP transport's Connect, for example). It runs on
// a goroutine locked to its OS thread, and that thread stays locked until
// the Group is closed: the kernel sends Pdeathsig when the *thread* that
// forked the child exits, and the Go runtime ends a thread when a goroutine
// locked to it exits, so an unlocked fork could kill the child while the
// worker lives on. The cost is one parked OS thread per running process.
//
// When start fails, whatever it started is killed and the error returned.
func Start(cmd *exec.Cmd, start func() error) (*Group, error) {
	Prepare(cmd)
	if start == nil {
		start = cmd.Start
	}
	g := &Group{cmd: cmd, release: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err := start()
		started <- err
		if err == nil {
			<-g.release
		}
		runtime.UnlockOSThread()
	}()
	if err := <-started; err != nil {
		g.Kill()
		return nil, err
	}
	return g, nil
}

// Prepare makes cmd start as the leader of a new process group and, on
// Linux, to be killed when the worker dies. Start calls it; use it directly
// only for a command that is killed by other means.
func Prepare(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pgid = 0
	setDeathSignal(cmd.SysProcAttr)
}

// Pid returns the group's ID (its leader's process ID), or 0 if the
// command never started a process.
func (g *Group) Pid() int {
	if g == nil || g.cmd.Process == nil {
		return 0
	}
	return g.cmd.Process.Pid
}

// Kill sends SIGKILL to every process of the group. A group that is gone
// already is not an error.
func (g *Group) Kill() {
	if pid := g.Pid(); pid > 0 {
		_ = Kill(pid)
	}
}

// Close kills the group (background jobs included) and releases the OS
// thread the leader was started from. It may be called more than once.
func (g *Group) Close() {
	if g == nil {
		return
	}
	g.Kill()
	g.once.Do(func() { close(g.release) })
}

// Kill sends SIGKILL to process group pgid; a group that is gone is not an
// error.
func Kill(pgid int) error {
	if pgid <= 0 {
		return fmt.Errorf("procgroup: bad group id %d", pgid)
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("procgroup: kill group %d: %w", pgid, err)
	}
	return nil
}
