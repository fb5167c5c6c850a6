package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// harden makes the process non-dumpable before it reads its key: a process
// of the same user (a tool of the agent, should one reach this PID) can
// then not read its /proc/<pid>/environ or mem, nor attach a debugger.
// execve made it dumpable again whatever its parent was.
func harden() {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "fastagent-devserver: stays dumpable:", err)
	}
}
