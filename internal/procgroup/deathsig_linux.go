package procgroup

import "syscall"

// setDeathSignal asks the kernel to SIGKILL the child when the thread that
// started it exits (the worker dying, since Start keeps that thread).
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
