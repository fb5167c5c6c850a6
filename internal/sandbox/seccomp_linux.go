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
// rule after one would compare against an argument. Twenty instructions are
// easier to audit than to work around.

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
)

const (
	retAllow  = unix.SECCOMP_RET_ALLOW
	retEPERM  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retENOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	retKill   = unix.SECCOMP_RET_KILL_PROCESS
	x32Bit    = 0x40000000
)

// filterProgram is the filter. Sockets are an allow-list checked on all 64
// bits of each argument (the kernel reads ints, so a check on the low half
// alone could be dodged with the high half set): netlink always (it only
// reads local interface state), TCP over IPv4/IPv6 when inet is true,
// nothing else — in particular no AF_UNIX socket(), so a tool cannot
// connect to the worker's or the host's unix sockets (Docker, PostgreSQL);
// socketpair() stays allowed for local pipes. clone3 answers ENOSYS so the C
// library falls back to clone, whose flags can be read: no new user
// namespace.
func filterProgram(inet bool) ([]bpf.RawInstruction, error) {
	arch, err := auditArch()
	if err != nil {
		return nil, err
	}
	a := &assembler{labels: map[string]int{}}
	dispatch(a, arch)
	cloneRule(a)
	socketRule(a, inet)
	verdicts(a)
	return a.assemble()
}

// Labels of the filter's blocks.
const (
	lAllow  = "allow"
	lDeny   = "deny"
	lENOSYS = "enosys"
	lKill   = "kill"
	lClone  = "clone"
	lSocket = "socket"
	lStream = "stream"
)

// dispatch checks the ABI and routes on the syscall number: denied
// syscalls to EPERM, clone3 to ENOSYS, clone and socket to their argument
// checks; anything else is allowed.
func dispatch(a *assembler, arch uint32) {
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
	a.ret(retAllow)
}

// cloneRule refuses a clone that creates a user namespace.
func cloneRule(a *assembler) {
	a.label(lClone)
	a.ld(offArg0) // low half holds every CLONE_NEW* flag
	a.jump(bpf.JumpBitsSet, unix.CLONE_NEWUSER, lDeny, lAllow)
}

// socketRule allows netlink sockets and, with inet, TCP over IPv4/IPv6;
// each argument is checked on all 64 bits.
func socketRule(a *assembler, inet bool) {
	a.label(lSocket)
	a.ld(offArg0 + 4)
	a.jump(bpf.JumpEqual, 0, "", lDeny)
	a.ld(offArg0)
	a.jump(bpf.JumpEqual, unix.AF_NETLINK, lAllow, "")
	if !inet {
		return
	}
	a.jump(bpf.JumpEqual, unix.AF_INET, lStream, "")
	a.jump(bpf.JumpEqual, unix.AF_INET6, lStream, lDeny)
	a.label(lStream)
	a.ld(offArg1 + 4)
	a.jump(bpf.JumpEqual, 0, "", lDeny)
	a.ld(offArg1)
	a.emit(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0xf})
	a.jump(bpf.JumpEqual, unix.SOCK_STREAM, lAllow, lDeny)
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
func loadFilter(inet bool) error {
	raw, err := filterProgram(inet)
	if err != nil {
		return err
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		filter[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]} //nolint:gosec // G115: a few dozen instructions
	//nolint:gosec // G103: the kernel reads the filter program through this pointer
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&prog)), 0, 0); err != nil {
		if errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("seccomp: not supported by this kernel: %w", err)
		}
		return fmt.Errorf("seccomp: %w", err)
	}
	return nil
}
