package devserver

import "syscall"

// procAttr runs the child in its own process group (a Ctrl-C in the
// terminal stops the parent, which then stops the child in order) and has
// the kernel kill it when the parent dies (the thread that started it: see
// Server.run).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
