package sandbox

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The seccomp filter of every tool process, assembled here with x/net/bpf
// rather than a policy library: it checks syscall arguments, and the
// libraries at hand lose the syscall number after an argument check, so a
// rule after one would compare against an argument. A short program whose
// every rule TestFilterProgram runs in an interpreter is easier to audit
// than a library to work around.

// deniedSyscalls fail with EPERM in every tool process:
//   - mount topology and namespaces (a tool keeps the view it was given);
//   - io_uring, which performs socket and file operations that the socket
//     rule cannot see;
//   - the kernel keyring, BPF, perf and userfaultfd (kernel attack surface
//     and cross-process data no tool needs);
//   - module loading, kexec, reboot, swap, quotas, handles to arbitrary
//     inodes (need privileges anyway).
var deniedSyscalls = []uint32{
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_CHROOT, unix.SYS_UNSHARE, unix.SYS_SETNS,
	unix.SYS_OPEN_TREE, unix.SYS_MOVE_MOUNT, unix.SYS_FSOPEN, unix.SYS_FSCONFIG, unix.SYS_FSMOUNT, unix.SYS_FSPICK,
	unix.SYS_MOUNT_SETATTR,
	unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY, unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN, unix.SYS_USERFAULTFD,
	unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE, unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD,
	unix.SYS_REBOOT, unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_QUOTACTL, unix.SYS_ACCT,
	unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_NAME_TO_HANDLE_AT,
}

// auditArch is the AUDIT_ARCH of this build; a syscall made through
// another ABI (x32, 32-bit compat) is refused outright.
func auditArch() (uint32, error) {
	switch runtime.GOARCH {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64, nil
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64, nil
	}
	return 0, fmt.Errorf("seccomp: no filter for %s", runtime.GOARCH)
}

// offsets in struct seccomp_data (little-endian).
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16
	offArg1 = 24
	offArg2 = 32
	offArg3 = 40
)

const (
	retAllow  = unix.SECCOMP_RET_ALLOW
	retEPERM  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retENOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	retKill   = unix.SECCOMP_RET_KILL_PROCESS
	retNotify = unix.SECCOMP_RET_USER_NOTIF
	x32Bit    = 0x40000000
)

// Constants the kernel has and x/sys/unix does not name on every
// architecture.
const (
	fioSetOwn         = 0x8901 // FIOSETOWN
	fioAsync          = 0x5452 // FIOASYNC (asm-generic, x86 and arm64 alike)
	userfaultfdIocNew = 0xaa00 // USERFAULTFD_IOC_NEW, _IO(0xAA, 0x00)
	kvmCreateVM       = 0xae01 // KVM_CREATE_VM, _IO(0xAE, 0x01)
	sigURG            = uint32(unix.SIGURG)
)

// filterPolicy is what differs between the filters of two calls.
type filterPolicy struct {
	// inet allows TCP sockets: the call has the network.
	inet bool
	// shared: the call shares the worker's PID and network namespaces
	// (Landlock mode). listen(2) is refused — on a socket not yet bound it
	// binds a port itself, past the bind(2) Landlock checks — and so is
	// changing the limits, priority or CPU placement of another process
	// (a CPU limit below what the worker has used ends it with SIGXCPU).
	shared bool
	// superviseSignals hands every signal a tool sends to another process
	// to the helper, which lets it through only within the call (Landlock
	// below ABI 6, which cannot scope signals; see supervise).
	superviseSignals bool
	// noAsync refuses O_ASYNC (fcntl F_SETFL, ioctl FIOASYNC) where
	// Landlock cannot scope signals (below ABI 6), in both modes: on a
	// terminal it makes the terminal's foreground process group — the
	// worker's, in whatever PID namespace — the owner of its SIGIO, and
	// F_SETSIG turns that SIGIO into any signal, SIGKILL included.
	noAsync bool
}

// filterProgram is the filter. Sockets are an allow-list checked on all 64
// bits of each argument (the kernel reads ints, so a check on the low half
// alone could be dodged with the high half set):
//   - netlink for NETLINK_ROUTE only (interface addresses, what the C
//     library's getaddrinfo and getifaddrs read); no SOCK_DIAG (every
//     socket of a network namespace), uevent, audit or generic netlink;
//   - with inet, TCP over IPv4/IPv6: a stream socket whose protocol is 0
//     or IPPROTO_TCP. Landlock checks connect(2) on TCP sockets only, so
//     MPTCP and SCTP stream sockets would connect anywhere, and TCP Fast
//     Open connects without connect(2): MSG_FASTOPEN on sendto, sendmsg
//     and sendmmsg and the TCP_FASTOPEN_CONNECT option are refused;
//   - no AF_UNIX socket(), so a tool cannot connect to the worker's or the
//     host's unix sockets (Docker, PostgreSQL); socketpair() for local
//     pipes, stream or seqpacket only: a datagram socket can send to any
//     unix datagram socket by path (journald, syslog, systemd's notify
//     socket), connected or not.
//
// clone3 answers ENOSYS so the C library falls back to clone, whose flags
// can be read: no new user namespace.
func filterProgram(p filterPolicy) ([]bpf.RawInstruction, error) {
	arch, err := auditArch()
	if err != nil {
		return nil, err
	}
	a := &assembler{labels: map[string]int{}}
	dispatch(a, arch, p)
	cloneRule(a)
	socketRule(a, p.inet)
	socketpairRule(a)
	sendRules(a)
	setsockoptRule(a)
	ioctlRule(a, p)
	if p.shared {
		ownProcessRules(a)
	}
	if p.superviseSignals {
		signalRules(a)
	}
	if p.superviseSignals || p.noAsync {
		fcntlRule(a, p)
	}
	verdicts(a)
	return a.assemble()
}

// Labels of the filter's blocks.
const (
	lAllow      = "allow"
	lDeny       = "deny"
	lENOSYS     = "enosys"
	lKill       = "kill"
	lNotify     = "notify"
	lClone      = "clone"
	lSocket     = "socket"
	lNetlink    = "netlink"
	lStream     = "stream"
	lSocketpair = "socketpair"
	lFlags2     = "flags-in-arg2"
	lFlags3     = "flags-in-arg3"
	lSetsockopt = "setsockopt"
	lSelfPid    = "self-pid"
	lPrlimit    = "prlimit"
	lPriority   = "priority"
	lIoprio     = "ioprio"
	lKillSig    = "kill-signal"
	lTkill      = "tkill"
	lTgkill     = "tgkill"
	lFcntl      = "fcntl"
	lSetfl      = "setfl"
	lIoctl      = "ioctl"
)

// dispatch checks the ABI and routes on the syscall number: denied
// syscalls to EPERM, clone3 to ENOSYS, the others with a rule to their
// argument checks; anything else is allowed.
func dispatch(a *assembler, arch uint32, p filterPolicy) {
	a.ld(offArch)
	a.jump(bpf.JumpEqual, arch, "", lKill)
	a.ld(offNr)
	if runtime.GOARCH == "amd64" {
		a.jump(bpf.JumpGreaterOrEqual, x32Bit, lENOSYS, "")
	}
	for _, nr := range deniedSyscalls {
		a.jump(bpf.JumpEqual, nr, lDeny, "")
	}
	a.jump(bpf.JumpEqual, unix.SYS_CLONE3, lENOSYS, "")
	a.jump(bpf.JumpEqual, unix.SYS_CLONE, lClone, "")
	a.jump(bpf.JumpEqual, unix.SYS_SOCKET, lSocket, "")
	a.jump(bpf.JumpEqual, unix.SYS_SOCKETPAIR, lSocketpair, "")
	a.jump(bpf.JumpEqual, unix.SYS_SENDTO, lFlags3, "")
	a.jump(bpf.JumpEqual, unix.SYS_SENDMMSG, lFlags3, "")
	a.jump(bpf.JumpEqual, unix.SYS_SENDMSG, lFlags2, "")
	a.jump(bpf.JumpEqual, unix.SYS_SETSOCKOPT, lSetsockopt, "")
	a.jump(bpf.JumpEqual, unix.SYS_IOCTL, lIoctl, "")
	if p.shared {
		a.jump(bpf.JumpEqual, unix.SYS_LISTEN, lDeny, "")
		for _, nr := range []uint32{unix.SYS_SCHED_SETAFFINITY, unix.SYS_SCHED_SETSCHEDULER, unix.SYS_SCHED_SETPARAM, unix.SYS_SCHED_SETATTR} {
			a.jump(bpf.JumpEqual, nr, lSelfPid, "")
		}
		a.jump(bpf.JumpEqual, unix.SYS_PRLIMIT64, lPrlimit, "")
		a.jump(bpf.JumpEqual, unix.SYS_SETPRIORITY, lPriority, "")
		a.jump(bpf.JumpEqual, unix.SYS_IOPRIO_SET, lIoprio, "")
	}
	if p.superviseSignals {
		a.jump(bpf.JumpEqual, unix.SYS_PIDFD_SEND_SIGNAL, lDeny, "")
		a.jump(bpf.JumpEqual, unix.SYS_KILL, lKillSig, "")
		a.jump(bpf.JumpEqual, unix.SYS_TKILL, lTkill, "")
		a.jump(bpf.JumpEqual, unix.SYS_TGKILL, lTgkill, "")
		a.jump(bpf.JumpEqual, unix.SYS_RT_SIGQUEUEINFO, lNotify, "")
		a.jump(bpf.JumpEqual, unix.SYS_RT_TGSIGQUEUEINFO, lNotify, "")
	}
	if p.superviseSignals || p.noAsync {
		a.jump(bpf.JumpEqual, unix.SYS_FCNTL, lFcntl, "")
	}
	a.ret(retAllow)
}

// cloneRule refuses a clone that creates a user namespace.
func cloneRule(a *assembler) {
	a.label(lClone)
	a.ld(offArg0) // low half holds every CLONE_NEW* flag
	a.jump(bpf.JumpBitsSet, unix.CLONE_NEWUSER, lDeny, lAllow)
}

// socketRule allows NETLINK_ROUTE sockets and, with inet, TCP over
// IPv4/IPv6; each argument is checked on all 64 bits.
func socketRule(a *assembler, inet bool) {
	a.label(lSocket)
	a.ld(offArg0 + 4)
	a.jump(bpf.JumpEqual, 0, "", lDeny)
	a.ld(offArg2 + 4)
	a.jump(bpf.JumpEqual, 0, "", lDeny)
	a.ld(offArg0)
	if inet {
		a.jump(bpf.JumpEqual, unix.AF_NETLINK, lNetlink, "")
		a.jump(bpf.JumpEqual, unix.AF_INET, lStream, "")
		a.jump(bpf.JumpEqual, unix.AF_INET6, lStream, lDeny)
	} else {
		a.jump(bpf.JumpEqual, unix.AF_NETLINK, lNetlink, lDeny)
	}
	a.label(lNetlink)
	a.ld(offArg2)
	a.jump(bpf.JumpEqual, unix.NETLINK_ROUTE, lAllow, lDeny)
	if !inet {
		return
	}
	a.label(lStream)
	a.ld(offArg1 + 4)
	a.jump(bpf.JumpEqual, 0, "", lDeny)
	a.ld(offArg1)
	a.emit(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0xf})
	a.jump(bpf.JumpEqual, unix.SOCK_STREAM, "", lDeny)
	a.ld(offArg2)
	a.jump(bpf.JumpEqual, 0, lAllow, "")
	a.jump(bpf.JumpEqual, unix.IPPROTO_TCP, lAllow, lDeny)
}

// socketpairRule allows unix stream and seqpacket pairs: connected for
// good, they reach nothing but each other.
func socketpairRule(a *assembler) {
	a.label(lSocketpair)
	a.ld(offArg0 + 4)
	a.jump(bpf.JumpEqual, 0, "", lDeny)
	a.ld(offArg0)
	a.jump(bpf.JumpEqual, unix.AF_UNIX, "", lDeny)
	a.ld(offArg1 + 4)
	a.jump(bpf.JumpEqual, 0, "", lDeny)
	a.ld(offArg1)
	a.emit(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0xf})
	a.jump(bpf.JumpEqual, unix.SOCK_STREAM, lAllow, "")
	a.jump(bpf.JumpEqual, unix.SOCK_SEQPACKET, lAllow, lDeny)
}

// sendRules refuse MSG_FASTOPEN, which connects a TCP socket without
// connect(2). The flags are an unsigned int: the low half is what the
// kernel reads.
func sendRules(a *assembler) {
	a.label(lFlags3) // sendto, sendmmsg
	a.ld(offArg3)
	a.jump(bpf.JumpBitsSet, unix.MSG_FASTOPEN, lDeny, lAllow)
	a.label(lFlags2) // sendmsg
	a.ld(offArg2)
	a.jump(bpf.JumpBitsSet, unix.MSG_FASTOPEN, lDeny, lAllow)
}

// setsockoptRule refuses TCP_FASTOPEN_CONNECT (the next write connects);
// TCP_FASTOPEN, a listener's option, stays.
func setsockoptRule(a *assembler) {
	a.label(lSetsockopt)
	a.ld(offArg1)
	a.jump(bpf.JumpEqual, unix.IPPROTO_TCP, "", lAllow)
	a.ld(offArg2)
	a.jump(bpf.JumpEqual, unix.TCP_FASTOPEN_CONNECT, lDeny, lAllow)
}

// ownProcessRules (shared namespaces) let a tool change the limits,
// priority and CPU placement of its own process only (pid 0), so it
// cannot lower the worker's CPU limit (SIGXCPU ends it), its open-file
// limit, or starve it with SCHED_IDLE or nice 19. Reading them stays.
func ownProcessRules(a *assembler) {
	a.label(lSelfPid) // sched_set*(pid, …)
	a.ld(offArg0)
	a.jump(bpf.JumpEqual, 0, lAllow, lDeny)
	a.label(lPrlimit) // prlimit64(pid, resource, new, old)
	a.ld(offArg0)
	a.jump(bpf.JumpEqual, 0, lAllow, "")
	a.ld(offArg2)
	a.jump(bpf.JumpEqual, 0, "", lDeny)
	a.ld(offArg2 + 4)
	a.jump(bpf.JumpEqual, 0, lAllow, lDeny)
	a.label(lPriority) // setpriority(which, who, prio)
	a.ld(offArg1)
	a.jump(bpf.JumpEqual, 0, "", lDeny)
	a.ld(offArg0)
	a.jump(bpf.JumpEqual, unix.PRIO_PROCESS, lAllow, "")
	a.jump(bpf.JumpEqual, unix.PRIO_PGRP, lAllow, lDeny)
	a.label(lIoprio) // ioprio_set(which, who, prio)
	a.ld(offArg1)
	a.jump(bpf.JumpEqual, 0, "", lDeny)
	a.ld(offArg0)
	a.jump(bpf.JumpEqual, ioprioWhoProcess, lAllow, "")
	a.jump(bpf.JumpEqual, ioprioWhoPgrp, lAllow, lDeny)
}

// ioprio_set's "which".
const (
	ioprioWhoProcess = 1
	ioprioWhoPgrp    = 2
)

// signalRules hand the helper every syscall that signals another process
// (see supervise): kill, tkill, tgkill, rt_sigqueueinfo,
// rt_tgsigqueueinfo and fcntl(F_SETOWN), whose owner gets SIGIO (or any
// signal F_SETSIG names). Let through without asking: signal 0 (a probe),
// kill(0, …) (the caller's own process group), F_SETOWN 0, and SIGURG by
// tgkill, which the Go runtime sends its own threads to preempt them and
// which is ignored by default. F_SETOWN_EX, FIOSETOWN and SIOCSPGRP name
// the owner through a pointer the filter cannot read: refused, as is
// pidfd_send_signal (a pidfd can be any /proc/<pid> directory).
func signalRules(a *assembler) {
	a.label(lKillSig) // kill(pid, sig)
	a.ld(offArg1)
	a.jump(bpf.JumpEqual, 0, lAllow, "")
	a.ld(offArg0)
	a.jump(bpf.JumpEqual, 0, lAllow, lNotify)
	a.label(lTkill) // tkill(tid, sig)
	a.ld(offArg1)
	a.jump(bpf.JumpEqual, 0, lAllow, lNotify)
	a.label(lTgkill) // tgkill(tgid, tid, sig)
	a.ld(offArg2)
	a.jump(bpf.JumpEqual, 0, lAllow, "")
	a.jump(bpf.JumpEqual, sigURG, lAllow, lNotify)
}

// fcntlRule: with supervised signals, F_SETOWN goes to the helper and
// F_SETOWN_EX is refused (see signalRules); with noAsync, F_SETFL may not
// set O_ASYNC. The command is an unsigned int, F_SETFL's flags an int: the
// low halves.
func fcntlRule(a *assembler, p filterPolicy) {
	a.label(lFcntl) // fcntl(fd, cmd, arg)
	a.ld(offArg1)
	if p.noAsync {
		a.jump(bpf.JumpEqual, unix.F_SETFL, lSetfl, "")
	}
	if !p.superviseSignals {
		a.ret(retAllow)
	} else {
		a.jump(bpf.JumpEqual, unix.F_SETOWN_EX, lDeny, "")
		a.jump(bpf.JumpEqual, unix.F_SETOWN, "", lAllow)
		a.ld(offArg2)
		a.jump(bpf.JumpEqual, 0, lAllow, lNotify)
	}
	if p.noAsync {
		a.label(lSetfl)
		a.ld(offArg2)
		a.jump(bpf.JumpBitsSet, unix.O_ASYNC, lDeny, lAllow)
	}
}

// ioctlRule refuses USERFAULTFD_IOC_NEW, which makes a userfaultfd from
// /dev/userfaultfd (the syscall is refused; the device is open to its
// owner), KVM_CREATE_VM (/dev/kvm is open to a worker running as root or in
// group kvm: kernel attack surface no tool needs), with supervised signals
// FIOSETOWN and SIOCSPGRP (see signalRules), and with noAsync FIOASYNC (see
// filterPolicy). The command is an unsigned int: the low half.
func ioctlRule(a *assembler, p filterPolicy) {
	a.label(lIoctl) // ioctl(fd, cmd, arg)
	a.ld(offArg1)
	denied := []uint32{userfaultfdIocNew, kvmCreateVM}
	if p.superviseSignals {
		denied = append(denied, fioSetOwn, unix.SIOCSPGRP)
	}
	if p.noAsync {
		denied = append(denied, fioAsync)
	}
	for _, cmd := range denied {
		a.jump(bpf.JumpEqual, cmd, lDeny, "")
	}
	a.ret(retAllow)
}

// verdicts are the blocks the checks jump to.
func verdicts(a *assembler) {
	a.label(lDeny)
	a.ret(retEPERM)
	a.label(lAllow)
	a.ret(retAllow)
	a.label(lENOSYS)
	a.ret(retENOSYS)
	a.label(lKill)
	a.ret(retKill)
	a.label(lNotify)
	a.ret(retNotify)
}

// assembler builds a BPF program whose conditional jumps name labels;
// assemble turns them into skips once every label is placed.
type assembler struct {
	prog   []bpf.Instruction
	fixups []jumpFixup
	labels map[string]int
}

// jumpFixup is a conditional jump waiting for its labels.
type jumpFixup struct {
	at        int
	onT, onF  string
	condition bpf.JumpIf
}

func (a *assembler) emit(i bpf.Instruction) { a.prog = append(a.prog, i) }

// ld loads the 32-bit word at off of struct seccomp_data.
func (a *assembler) ld(off uint32) { a.emit(bpf.LoadAbsolute{Off: off, Size: 4}) }

func (a *assembler) ret(v uint32) { a.emit(bpf.RetConstant{Val: v}) }

// label places name at the next instruction.
func (a *assembler) label(name string) { a.labels[name] = len(a.prog) }

// jump emits a conditional jump to labels (or fall-through for "").
func (a *assembler) jump(cond bpf.JumpTest, val uint32, onTrue, onFalse string) {
	a.fixups = append(a.fixups, jumpFixup{len(a.prog), onTrue, onFalse, bpf.JumpIf{Cond: cond, Val: val}})
	a.emit(nil)
}

// assemble resolves the jumps (forward only, at most 255 instructions)
// and assembles the program.
func (a *assembler) assemble() ([]bpf.RawInstruction, error) {
	for _, f := range a.fixups {
		j := f.condition
		var err error
		if j.SkipTrue, err = a.skip(f.at, f.onT); err != nil {
			return nil, err
		}
		if j.SkipFalse, err = a.skip(f.at, f.onF); err != nil {
			return nil, err
		}
		a.prog[f.at] = j
	}
	return bpf.Assemble(a.prog)
}

// skip is how many instructions a jump at at skips to reach label name
// (0 for "": fall through).
func (a *assembler) skip(at int, name string) (uint8, error) {
	if name == "" {
		return 0, nil
	}
	to, ok := a.labels[name]
	if !ok || to <= at || to-at-1 > 255 {
		return 0, fmt.Errorf("seccomp: bad jump to %s", name)
	}
	return uint8(to - at - 1), nil //nolint:gosec // G115: checked above
}

// loadFilter installs the tool filter on the calling thread only (no
// TSYNC): the thread forks the tool and then dies. no_new_privs must be set.
// With superviseSignals it returns the filter's listener (close-on-exec),
// on which the helper answers the signals the filter hands it; else -1.
func loadFilter(p filterPolicy) (int, error) {
	raw, err := filterProgram(p)
	if err != nil {
		return -1, err
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		filter[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]} //nolint:gosec // G115: a few dozen instructions
	if p.superviseSignals {
		//nolint:gosec // G103: the kernel reads the filter program through this pointer
		fd, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_NEW_LISTENER, uintptr(unsafe.Pointer(&prog)))
		runtime.KeepAlive(filter)
		if errno != 0 {
			return -1, fmt.Errorf("seccomp: filter with a listener (Linux 5.5): %w", errno)
		}
		return int(fd), nil
	}
	//nolint:gosec // G103: the kernel reads the filter program through this pointer
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&prog)), 0, 0); err != nil {
		if errors.Is(err, unix.EINVAL) {
			return -1, fmt.Errorf("seccomp: not supported by this kernel: %w", err)
		}
		return -1, fmt.Errorf("seccomp: %w", err)
	}
	return -1, nil
}
