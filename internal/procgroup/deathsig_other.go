//go:build !linux

package procgroup

import "syscall"

// setDeathSignal does nothing: only Linux has Pdeathsig. Elsewhere the
// group is killed on every exit path of a living worker, but a worker that
// is killed leaves its tool processes running.
func setDeathSignal(*syscall.SysProcAttr) {}
