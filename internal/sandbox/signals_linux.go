package sandbox

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Signals in Landlock mode below ABI 6. A Landlock domain keeps a tool from
// ptracing processes outside its call, but only from ABI 6 (Linux 6.12) from
// signalling them: on older kernels a tool could kill the worker, its
// helper, tini or another call's processes, all of the same user. There the
// filter hands every signal a tool sends to another process to the helper
// (seccomp user notification), which lets it through only when the target
// belongs to the call:
//
//   - the target descends from the call's first process (its parent, or
//     its parent's parent…, is that process), or is in the call's session
//     (the first process is a session leader), or in the caller's own
//     session. A session holds only processes that descend from its
//     leader, and no process can join one it did not start, so each is a
//     process of the call. What none of these finds is a job that left the
//     call's session with setsid and whose parent has exited (a daemon's
//     double fork): it can still signal itself and its children, but not be
//     signalled from the call's first session;
//   - kill(-1), every process the user may signal, is refused;
//   - a target that does not exist gets ESRCH, one outside the call EPERM.
//
// The check reads /proc and answers "continue" for the kernel to deliver
// the signal; a PID freed and reused by another process in the
// microseconds between the two would receive it (PIDs are handed out in
// sequence, so that needs the whole PID space to wrap meanwhile).

// seccompNotif is struct seccomp_notif.
type seccompNotif struct {
	ID    uint64
	Pid   uint32
	Flags uint32
	Nr    int32
	Arch  uint32
	IP    uint64
	Args  [6]uint64
}

// seccompNotifResp is struct seccomp_notif_resp.
type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// The ioctls of a seccomp listener; the sizes are in their numbers.
const (
	notifRecv    = unix.SECCOMP_IOCTL_NOTIF_RECV
	notifSend    = unix.SECCOMP_IOCTL_NOTIF_SEND
	notifIDValid = 0x40082102 // SECCOMP_IOCTL_NOTIF_ID_VALID, _IOW('!', 2, __u64)
)

var (
	_ [80 - unsafe.Sizeof(seccompNotif{})]byte
	_ [unsafe.Sizeof(seccompNotif{}) - 80]byte
	_ [24 - unsafe.Sizeof(seccompNotifResp{})]byte
	_ [unsafe.Sizeof(seccompNotifResp{}) - 24]byte
)

// supervisor answers the signals of one call's processes.
type supervisor struct {
	fd int
	// root is the call's first process, a session leader (0 until forked).
	root atomic.Int64
	// helperSID is the helper's session: the call thread's own, never a
	// tool's.
	helperSID int
	// helper is the helper's PID: the parent of every call's first process
	// and, as subreaper, of their orphans.
	helper int
}

// supervise answers notifications on listener fd until every process of
// the call is gone (the kernel then reports POLLHUP), and closes it.
func (s *supervisor) supervise() {
	defer func() { _ = unix.Close(s.fd) }()
	for {
		fds := []unix.PollFd{{Fd: int32(s.fd), Events: unix.POLLIN}} //nolint:gosec // G115: a descriptor
		if _, err := unix.Poll(fds, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		switch {
		case fds[0].Revents&unix.POLLIN != 0:
			if !s.answer() {
				// Closing the listener fails every signal the call still
				// sends (ENOSYS): closed, never open.
				return
			}
		case fds[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0:
			return
		}
	}
}

// answer receives one notification and answers it; false when the
// listener cannot be read.
func (s *supervisor) answer() bool {
	var n seccompNotif
	//nolint:gosec // G103: the kernel fills n
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(s.fd), notifRecv, uintptr(unsafe.Pointer(&n))); e != 0 {
		// ENOENT: the caller died meanwhile; EINTR: poll again.
		return e == unix.ENOENT || e == unix.EINTR
	}
	errno := s.verdict(&n)
	// The caller's session was read from /proc/<pid>: that PID must still
	// be the caller.
	//nolint:gosec // G103: the kernel reads the id
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(s.fd), notifIDValid, uintptr(unsafe.Pointer(&n.ID))); e != 0 {
		return true // the caller is gone: nothing to answer
	}
	resp := seccompNotifResp{ID: n.ID}
	if errno == 0 {
		resp.Flags = unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE
	} else {
		resp.Error = -int32(errno) //nolint:gosec // G115: an errno
	}
	//nolint:gosec // G103: the kernel reads resp
	_, _, _ = unix.Syscall(unix.SYS_IOCTL, uintptr(s.fd), notifSend, uintptr(unsafe.Pointer(&resp)))
	return true
}

// verdict is 0 when the call may go on, else the errno it fails with.
func (s *supervisor) verdict(n *seccompNotif) unix.Errno {
	target, group, ok := signalTarget(n.Nr, n.Args)
	if !ok {
		return unix.EPERM
	}
	caller, err := sessionOf(int(n.Pid))
	if err != nil {
		return unix.EPERM
	}
	var member, sid int
	if group {
		member, sid, err = groupSession(target)
	} else {
		member = target
		sid, err = sessionOf(target)
	}
	if err != nil {
		return unix.ESRCH
	}
	root := int(s.root.Load())
	switch {
	case root > 0 && sid == root:
		return 0 // the call's session
	case sid == caller && caller != s.helperSID && sid > 0:
		return 0 // the caller's own session
	case root > 0 && s.descends(member, root):
		return 0 // a descendant of the call's first process (a group: one member)
	}
	return unix.EPERM
}

// descends reports whether pid's parent, or its parent's parent…, is
// root; the walk stops at the helper, PID 1 or a process gone meanwhile.
func (s *supervisor) descends(pid, root int) bool {
	for range 256 {
		ppid, _, _, err := procStat(pid)
		if err != nil || ppid <= 1 || ppid == s.helper {
			return false
		}
		if ppid == root {
			return true
		}
		pid = ppid
	}
	return false
}

// signalTarget returns whom a supervised syscall signals: a process (or a
// thread of it), or with group a process group. ok is false for kill(-1),
// every process, and for a syscall the filter does not hand over.
func signalTarget(nr int32, args [6]uint64) (target int, group, ok bool) {
	pid := int(int32(args[0])) //nolint:gosec // G115: the kernel reads a pid_t
	switch nr {
	case unix.SYS_KILL:
	case unix.SYS_FCNTL:
		pid = int(int32(args[2])) //nolint:gosec // G115: F_SETOWN's int
	case unix.SYS_TKILL, unix.SYS_TGKILL, unix.SYS_RT_SIGQUEUEINFO, unix.SYS_RT_TGSIGQUEUEINFO:
		if pid <= 0 {
			return 0, false, false // EINVAL anyway
		}
		return pid, false, true
	default:
		return 0, false, false
	}
	switch {
	case pid > 0:
		return pid, false, true
	case pid < -1:
		return -pid, true, true
	}
	return 0, false, false // -1: everyone (0 never reaches the helper)
}

// sessionOf reads the session of pid (a process or a thread) from /proc.
func sessionOf(pid int) (int, error) {
	_, _, sid, err := procStat(pid)
	return sid, err
}

// groupSession returns a member of process group pgid and the group's
// session: its leader, or, when the leader has exited, any member.
func groupSession(pgid int) (member, sid int, err error) {
	if _, pg, sid, err := procStat(pgid); err == nil && pg == pgid {
		return pgid, sid, nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, pg, sid, err := procStat(pid); err == nil && pg == pgid {
			return pid, sid, nil
		}
	}
	return 0, 0, fmt.Errorf("no process group %d", pgid)
}

// procStat reads the parent, process group and session of pid from
// /proc/<pid>/stat: "pid (comm) state ppid pgrp session …", where comm may
// hold spaces and parentheses.
func procStat(pid int) (ppid, pgrp, sid int, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, 0, fmt.Errorf("/proc/%d/stat: no command", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 4 {
		return 0, 0, 0, fmt.Errorf("/proc/%d/stat: too short", pid)
	}
	var n [3]int
	for j := range n {
		if n[j], err = strconv.Atoi(f[j+1]); err != nil {
			return 0, 0, 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
	}
	return n[0], n[1], n[2], nil
}

// probeListener checks that this process can install a seccomp filter with
// a listener (refused where an outer filter already has one): on a
// throwaway thread, which ends with the probe, an allow-all filter.
func probeListener() error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends, taking the filter
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			done <- fmt.Errorf("no_new_privs: %w", err)
			return
		}
		filter := []unix.SockFilter{{Code: 0x06, K: unix.SECCOMP_RET_ALLOW}} // ret ALLOW
		prog := unix.SockFprog{Len: 1, Filter: &filter[0]}
		//nolint:gosec // G103: the kernel reads the filter program through this pointer
		fd, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_NEW_LISTENER, uintptr(unsafe.Pointer(&prog)))
		runtime.KeepAlive(filter)
		if errno != 0 {
			done <- fmt.Errorf("seccomp user notification (Linux 5.5): %w", errno)
			return
		}
		_ = unix.Close(int(fd))
		done <- nil
	}()
	return <-done
}
