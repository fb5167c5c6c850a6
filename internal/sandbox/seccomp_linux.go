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
	const (
		lAllow = "allow"
		lDeny  = "deny"
	)
	var prog []bpf.Instruction
	var fixups []struct {
		at        int
		onT, onF  string
		condition bpf.JumpIf
	}
	// jump emits a conditional jump to labels (or fall-through for "").
	jump := func(cond bpf.JumpTest, val uint32, onTrue, onFalse string) {
		fixups = append(fixups, struct {
			at        int
			onT, onF  string
			condition bpf.JumpIf
		}{len(prog), onTrue, onFalse, bpf.JumpIf{Cond: cond, Val: val}})
		prog = append(prog, nil)
	}
	ld := func(off uint32) { prog = append(prog, bpf.LoadAbsolute{Off: off, Size: 4}) }
	ret := func(v uint32) { prog = append(prog, bpf.RetConstant{Val: v}) }
	labels := map[string]int{}
	label := func(name string) { labels[name] = len(prog) }

	ld(offArch)
	jump(bpf.JumpEqual, arch, "", "kill")
	ld(offNr)
	if runtime.GOARCH == "amd64" {
		jump(bpf.JumpGreaterOrEqual, x32Bit, "enosys", "")
	}
	for _, nr := range deniedSyscalls {
		jump(bpf.JumpEqual, nr, lDeny, "")
	}
	jump(bpf.JumpEqual, unix.SYS_CLONE3, "enosys", "")
	jump(bpf.JumpEqual, unix.SYS_CLONE, "clone", "")
	jump(bpf.JumpEqual, unix.SYS_SOCKET, "socket", "")
	ret(retAllow)

	label("clone")
	ld(offArg0) // low half holds every CLONE_NEW* flag
	jump(bpf.JumpBitsSet, unix.CLONE_NEWUSER, lDeny, lAllow)

	label("socket")
	ld(offArg0 + 4)
	jump(bpf.JumpEqual, 0, "", lDeny)
	ld(offArg0)
	jump(bpf.JumpEqual, unix.AF_NETLINK, lAllow, "")
	if inet {
		jump(bpf.JumpEqual, unix.AF_INET, "stream", "")
		jump(bpf.JumpEqual, unix.AF_INET6, "stream", lDeny)
		label("stream")
		ld(offArg1 + 4)
		jump(bpf.JumpEqual, 0, "", lDeny)
		ld(offArg1)
		prog = append(prog, bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0xf})
		jump(bpf.JumpEqual, unix.SOCK_STREAM, lAllow, lDeny)
	}
	label(lDeny)
	ret(retEPERM)
	label(lAllow)
	ret(retAllow)
	label("enosys")
	ret(retENOSYS)
	label("kill")
	ret(retKill)

	for _, f := range fixups {
		skip := func(name string) (uint8, error) {
			if name == "" {
				return 0, nil
			}
			to, ok := labels[name]
			if !ok || to <= f.at || to-f.at-1 > 255 {
				return 0, fmt.Errorf("seccomp: bad jump to %s", name)
			}
			return uint8(to - f.at - 1), nil //nolint:gosec // G115: checked above
		}
		j := f.condition
		if j.SkipTrue, err = skip(f.onT); err != nil {
			return nil, err
		}
		if j.SkipFalse, err = skip(f.onF); err != nil {
			return nil, err
		}
		prog[f.at] = j
	}
	return bpf.Assemble(prog)
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
