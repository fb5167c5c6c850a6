//go:build !linux

package devserver

import "syscall"

// procAttr runs the child in its own process group (a Ctrl-C in the
// terminal stops the parent, which then stops the child in order). Without
// PR_SET_PDEATHSIG, the child stops when its stdin closes at the parent's
// exit.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
