package sandbox

import (
	"encoding/binary"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// seccompData is struct seccomp_data as the filter reads it: 32-bit words
// at their offsets. x/net/bpf's VM loads words big-endian, so each word is
// stored big-endian to be read as the kernel reads it natively.
func seccompData(arch, nr uint32, args ...uint64) []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[offNr:], nr)
	binary.BigEndian.PutUint32(b[offArch:], arch)
	for i, a := range args {
		off := offArg0 + 8*i
		binary.BigEndian.PutUint32(b[off:], uint32(a))       // low half first (little-endian u64)
		binary.BigEndian.PutUint32(b[off+4:], uint32(a>>32)) // then the high half
	}
	return b
}

// TestFilterProgram runs the tool filter in a BPF interpreter: the verdict
// of each rule, independent of the kernel, under five policies: no network
// and network on (namespaces mode), Landlock mode with the network (shared
// namespaces), the same below Landlock ABI 6 (signals supervised, no
// O_ASYNC), and namespaces mode below ABI 6 (no O_ASYNC).
func TestFilterProgram(t *testing.T) {
	t.Parallel()
	arch, err := auditArch()
	if err != nil {
		t.Skip(err)
	}
	const (
		allow  = retAllow
		eperm  = retEPERM
		enosys = retENOSYS
		kill   = retKill
		notify = retNotify
	)
	policies := []filterPolicy{{}, {inet: true}, {inet: true, shared: true}, {inet: true, shared: true, superviseSignals: true, noAsync: true}, {noAsync: true}}
	type verdicts [5]uint32
	every := func(v uint32) verdicts { return verdicts{v, v, v, v, v} }
	inet := verdicts{eperm, allow, allow, allow, eperm}
	shared := verdicts{allow, allow, eperm, eperm, allow}
	supervised := verdicts{allow, allow, allow, notify, allow}
	onlySupervised := verdicts{allow, allow, allow, eperm, allow}
	noAsync := verdicts{allow, allow, allow, eperm, eperm}
	cases := []struct {
		name string
		data []byte
		want verdicts
	}{
		{"read", seccompData(arch, unix.SYS_READ), every(allow)},
		{"another ABI", seccompData(arch^1, unix.SYS_READ), every(kill)},
		{"mount", seccompData(arch, unix.SYS_MOUNT), every(eperm)},
		{"unshare", seccompData(arch, unix.SYS_UNSHARE), every(eperm)},
		{"io_uring_setup", seccompData(arch, unix.SYS_IO_URING_SETUP), every(eperm)},
		{"bpf", seccompData(arch, unix.SYS_BPF), every(eperm)},
		{"userfaultfd", seccompData(arch, unix.SYS_USERFAULTFD), every(eperm)},
		{"perf_event_open", seccompData(arch, unix.SYS_PERF_EVENT_OPEN), every(eperm)},
		{"keyctl", seccompData(arch, unix.SYS_KEYCTL), every(eperm)},
		{"clone3", seccompData(arch, unix.SYS_CLONE3), every(enosys)},
		{"clone of a thread", seccompData(arch, unix.SYS_CLONE, unix.CLONE_VM|unix.CLONE_THREAD), every(allow)},
		{"clone into a user namespace", seccompData(arch, unix.SYS_CLONE, unix.CLONE_NEWUSER), every(eperm)},

		{"netlink route socket", seccompData(arch, unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE), every(allow)},
		{"netlink sock_diag socket", seccompData(arch, unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_SOCK_DIAG), every(eperm)},
		{"netlink uevent socket", seccompData(arch, unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_DGRAM, unix.NETLINK_KOBJECT_UEVENT), every(eperm)},
		{"netlink generic socket", seccompData(arch, unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_GENERIC), every(eperm)},
		{"netlink protocol with the high half set", seccompData(arch, unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, 1<<32), every(eperm)},
		{"unix socket", seccompData(arch, unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM), every(eperm)},
		{"tcp over ipv4", seccompData(arch, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM), inet},
		{"tcp over ipv4, IPPROTO_TCP", seccompData(arch, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_TCP), inet},
		{"tcp over ipv6, cloexec", seccompData(arch, unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC), inet},
		{"mptcp", seccompData(arch, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP), every(eperm)},
		{"mptcp over ipv6", seccompData(arch, unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_NONBLOCK, unix.IPPROTO_MPTCP), every(eperm)},
		{"sctp", seccompData(arch, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_SCTP), every(eperm)},
		{"tcp protocol with the high half set", seccompData(arch, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, 1<<32|unix.IPPROTO_TCP), every(eperm)},
		{"udp", seccompData(arch, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_DGRAM), every(eperm)},
		{"icmp", seccompData(arch, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_DGRAM, unix.IPPROTO_ICMP), every(eperm)},
		{"raw ipv4", seccompData(arch, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_RAW), every(eperm)},
		{"packet", seccompData(arch, unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_RAW), every(eperm)},
		{"vsock", seccompData(arch, unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM), every(eperm)},
		{"family with the high half set", seccompData(arch, unix.SYS_SOCKET, 1<<32|unix.AF_NETLINK, unix.SOCK_RAW), every(eperm)},
		{"type with the high half set", seccompData(arch, unix.SYS_SOCKET, unix.AF_INET, 1<<32|unix.SOCK_STREAM), every(eperm)},

		{"stream socketpair", seccompData(arch, unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC), every(allow)},
		{"seqpacket socketpair", seccompData(arch, unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_SEQPACKET), every(allow)},
		{"datagram socketpair", seccompData(arch, unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_DGRAM), every(eperm)},
		{"inet socketpair", seccompData(arch, unix.SYS_SOCKETPAIR, unix.AF_INET, unix.SOCK_STREAM), every(eperm)},
		{"socketpair type with the high half set", seccompData(arch, unix.SYS_SOCKETPAIR, unix.AF_UNIX, 1<<32|unix.SOCK_STREAM), every(eperm)},

		{"sendto", seccompData(arch, unix.SYS_SENDTO, 3, 0, 10, unix.MSG_NOSIGNAL), every(allow)},
		{"sendto MSG_FASTOPEN", seccompData(arch, unix.SYS_SENDTO, 3, 0, 10, unix.MSG_FASTOPEN|unix.MSG_NOSIGNAL), every(eperm)},
		{"sendmsg", seccompData(arch, unix.SYS_SENDMSG, 3, 0, unix.MSG_DONTWAIT), every(allow)},
		{"sendmsg MSG_FASTOPEN", seccompData(arch, unix.SYS_SENDMSG, 3, 0, unix.MSG_FASTOPEN), every(eperm)},
		{"sendmmsg", seccompData(arch, unix.SYS_SENDMMSG, 3, 0, 1, 0), every(allow)},
		{"sendmmsg MSG_FASTOPEN", seccompData(arch, unix.SYS_SENDMMSG, 3, 0, 1, unix.MSG_FASTOPEN), every(eperm)},
		{"setsockopt TCP_NODELAY", seccompData(arch, unix.SYS_SETSOCKOPT, 3, unix.IPPROTO_TCP, unix.TCP_NODELAY), every(allow)},
		{"setsockopt TCP_FASTOPEN (a listener's)", seccompData(arch, unix.SYS_SETSOCKOPT, 3, unix.IPPROTO_TCP, unix.TCP_FASTOPEN), every(allow)},
		{"setsockopt TCP_FASTOPEN_CONNECT", seccompData(arch, unix.SYS_SETSOCKOPT, 3, unix.IPPROTO_TCP, unix.TCP_FASTOPEN_CONNECT), every(eperm)},
		{"setsockopt SO_REUSEADDR (same number at another level)", seccompData(arch, unix.SYS_SETSOCKOPT, 3, unix.SOL_SOCKET, unix.TCP_FASTOPEN_CONNECT), every(allow)},
		{"listen", seccompData(arch, unix.SYS_LISTEN, 3, 5), shared},

		{"prlimit64 of itself", seccompData(arch, unix.SYS_PRLIMIT64, 0, unix.RLIMIT_CPU, 0x1000, 0), every(allow)},
		{"prlimit64 of another process", seccompData(arch, unix.SYS_PRLIMIT64, 42, unix.RLIMIT_CPU, 0x1000, 0), shared},
		{"prlimit64 read of another process", seccompData(arch, unix.SYS_PRLIMIT64, 42, unix.RLIMIT_CPU, 0, 0x1000), every(allow)},
		{"prlimit64 new limit in the high half", seccompData(arch, unix.SYS_PRLIMIT64, 42, unix.RLIMIT_CPU, 1<<32, 0), shared},
		{"setpriority of itself", seccompData(arch, unix.SYS_SETPRIORITY, unix.PRIO_PROCESS, 0, 10), every(allow)},
		{"setpriority of its group", seccompData(arch, unix.SYS_SETPRIORITY, unix.PRIO_PGRP, 0, 10), every(allow)},
		{"setpriority of another process", seccompData(arch, unix.SYS_SETPRIORITY, unix.PRIO_PROCESS, 42, 19), shared},
		{"setpriority of its user", seccompData(arch, unix.SYS_SETPRIORITY, unix.PRIO_USER, 0, 19), shared},
		{"ioprio_set of itself", seccompData(arch, unix.SYS_IOPRIO_SET, ioprioWhoProcess, 0, 0), every(allow)},
		{"ioprio_set of another process", seccompData(arch, unix.SYS_IOPRIO_SET, ioprioWhoProcess, 42, 0), shared},
		{"sched_setscheduler of itself", seccompData(arch, unix.SYS_SCHED_SETSCHEDULER, 0, 5, 0), every(allow)},
		{"sched_setscheduler of another process", seccompData(arch, unix.SYS_SCHED_SETSCHEDULER, 42, 5, 0), shared},
		{"sched_setaffinity of another process", seccompData(arch, unix.SYS_SCHED_SETAFFINITY, 42, 8, 0), shared},
		{"sched_getaffinity of another process", seccompData(arch, unix.SYS_SCHED_GETAFFINITY, 42, 8, 0), every(allow)},

		{"kill", seccompData(arch, unix.SYS_KILL, 42, uint64(unix.SIGTERM)), supervised},
		{"kill, signal 0", seccompData(arch, unix.SYS_KILL, 42, 0), every(allow)},
		{"kill of its own group", seccompData(arch, unix.SYS_KILL, 0, uint64(unix.SIGTERM)), every(allow)},
		{"kill -1", seccompData(arch, unix.SYS_KILL, 0xffffffff, uint64(unix.SIGKILL)), supervised},
		{"tkill", seccompData(arch, unix.SYS_TKILL, 42, uint64(unix.SIGKILL)), supervised},
		{"tgkill", seccompData(arch, unix.SYS_TGKILL, 42, 43, uint64(unix.SIGKILL)), supervised},
		{"tgkill SIGURG (Go's preemption)", seccompData(arch, unix.SYS_TGKILL, 42, 43, uint64(unix.SIGURG)), every(allow)},
		{"rt_sigqueueinfo", seccompData(arch, unix.SYS_RT_SIGQUEUEINFO, 42, uint64(unix.SIGKILL), 0x1000), supervised},
		{"rt_tgsigqueueinfo", seccompData(arch, unix.SYS_RT_TGSIGQUEUEINFO, 42, 43, uint64(unix.SIGKILL), 0x1000), supervised},
		{"pidfd_send_signal", seccompData(arch, unix.SYS_PIDFD_SEND_SIGNAL, 3, uint64(unix.SIGKILL)), onlySupervised},
		{"fcntl F_GETFL", seccompData(arch, unix.SYS_FCNTL, 3, unix.F_GETFL), every(allow)},
		{"fcntl F_SETOWN 0", seccompData(arch, unix.SYS_FCNTL, 3, unix.F_SETOWN, 0), every(allow)},
		{"fcntl F_SETOWN", seccompData(arch, unix.SYS_FCNTL, 3, unix.F_SETOWN, 42), supervised},
		{"fcntl F_SETFL O_NONBLOCK", seccompData(arch, unix.SYS_FCNTL, 3, unix.F_SETFL, unix.O_NONBLOCK|unix.O_APPEND), every(allow)},
		{"fcntl F_SETFL O_ASYNC", seccompData(arch, unix.SYS_FCNTL, 3, unix.F_SETFL, unix.O_ASYNC|unix.O_NONBLOCK), noAsync},
		{"fcntl F_SETSIG", seccompData(arch, unix.SYS_FCNTL, 3, unix.F_SETSIG, uint64(unix.SIGKILL)), every(allow)},
		{"ioctl FIOASYNC", seccompData(arch, unix.SYS_IOCTL, 3, fioAsync, 0x1000), noAsync},
		{"fcntl F_SETOWN_EX", seccompData(arch, unix.SYS_FCNTL, 3, unix.F_SETOWN_EX, 0x1000), onlySupervised},
		{"ioctl TCGETS", seccompData(arch, unix.SYS_IOCTL, 3, unix.TCGETS), every(allow)},
		{"ioctl USERFAULTFD_IOC_NEW", seccompData(arch, unix.SYS_IOCTL, 3, userfaultfdIocNew, 0), every(eperm)},
		{"ioctl USERFAULTFD_IOC_NEW, high half set", seccompData(arch, unix.SYS_IOCTL, 3, 1<<32|userfaultfdIocNew, 0), every(eperm)},
		{"ioctl KVM_CREATE_VM", seccompData(arch, unix.SYS_IOCTL, 3, kvmCreateVM, 0), every(eperm)},
		{"ioctl FIOSETOWN", seccompData(arch, unix.SYS_IOCTL, 3, fioSetOwn, 0x1000), onlySupervised},
		{"ioctl SIOCSPGRP", seccompData(arch, unix.SYS_IOCTL, 3, unix.SIOCSPGRP, 0x1000), onlySupervised},
	}
	if runtime.GOARCH == "amd64" {
		cases = append(cases, struct {
			name string
			data []byte
			want verdicts
		}{"x32 syscall", seccompData(arch, x32Bit|unix.SYS_READ), every(enosys)})
	}
	var vms []*bpf.VM
	for _, p := range policies {
		raw, err := filterProgram(p)
		if err != nil {
			t.Fatalf("filterProgram(%+v): %v", p, err)
		}
		prog, ok := bpf.Disassemble(raw)
		if !ok {
			t.Fatalf("filterProgram(%+v): an instruction does not decode", p)
		}
		vm, err := bpf.NewVM(prog)
		if err != nil {
			t.Fatalf("filterProgram(%+v): %v", p, err)
		}
		vms = append(vms, vm)
	}
	for _, c := range cases {
		for i, vm := range vms {
			got, err := vm.Run(c.data)
			if err != nil {
				t.Fatalf("%s (%+v): %v", c.name, policies[i], err)
			}
			if uint32(got) != c.want[i] {
				t.Errorf("%s (%+v) = %#x, want %#x", c.name, policies[i], uint32(got), c.want[i])
			}
		}
	}
}

// TestAssemblerBadJump: a jump to a label never placed, or backwards,
// fails to assemble instead of jumping somewhere else.
func TestAssemblerBadJump(t *testing.T) {
	t.Parallel()
	for name, build := range map[string]func(a *assembler){
		"missing": func(a *assembler) { a.jump(bpf.JumpEqual, 0, "nowhere", ""); a.ret(retAllow) },
		"backwards": func(a *assembler) {
			a.label("back")
			a.ld(offNr)
			a.jump(bpf.JumpEqual, 0, "back", "")
			a.ret(retAllow)
		},
	} {
		a := &assembler{labels: map[string]int{}}
		build(a)
		if _, err := a.assemble(); err == nil {
			t.Errorf("%s: assemble succeeded, want an error", name)
		}
	}
}

// TestSignalVerdict: the helper's answer to a supervised signal, with this
// test process as the caller: its own session passes, another session is
// refused, a PID that does not exist fails with ESRCH, and kill(-1) (every
// process) is refused whoever asks.
func TestSignalVerdict(t *testing.T) {
	t.Parallel()
	// The caller is a child in a session of its own, not this test
	// process: a runner may start tests outside any session (session 0,
	// nobody's), which would refuse the caller's own signals.
	caller := exec.Command("/bin/sleep", "100")
	caller.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := caller.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = caller.Process.Kill(); _ = caller.Wait() }()
	self := caller.Process.Pid
	sid, pgid := self, self // setsid made it the leader of both
	other := exec.Command("/bin/sleep", "100")
	other.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	const missing = 1<<22 + 7 // above any pid_max
	s := &supervisor{helperSID: -1}
	notif := func(nr int32, args ...uint64) *seccompNotif {
		n := &seccompNotif{Pid: uint32(self), Nr: nr}
		copy(n.Args[:], args)
		return n
	}
	neg := func(pid int) uint64 { return uint64(uint32(int32(-pid))) }
	cases := []struct {
		name string
		n    *seccompNotif
		want unix.Errno
	}{
		{"kill itself", notif(unix.SYS_KILL, uint64(self), 15), 0},
		{"kill its group", notif(unix.SYS_KILL, neg(pgid), 15), 0},
		{"tgkill itself", notif(unix.SYS_TGKILL, uint64(self), uint64(self), 15), 0},
		{"kill another session", notif(unix.SYS_KILL, uint64(other.Process.Pid), 15), unix.EPERM},
		{"kill another session's group", notif(unix.SYS_KILL, neg(other.Process.Pid), 15), unix.EPERM},
		{"tkill another session", notif(unix.SYS_TKILL, uint64(other.Process.Pid), 15), unix.EPERM},
		{"rt_sigqueueinfo another session", notif(unix.SYS_RT_SIGQUEUEINFO, uint64(other.Process.Pid), 15, 0), unix.EPERM},
		{"F_SETOWN another session", notif(unix.SYS_FCNTL, 3, unix.F_SETOWN, uint64(other.Process.Pid)), unix.EPERM},
		{"F_SETOWN itself", notif(unix.SYS_FCNTL, 3, unix.F_SETOWN, uint64(self)), 0},
		{"kill a missing pid", notif(unix.SYS_KILL, missing, 15), unix.ESRCH},
		{"kill -1", notif(unix.SYS_KILL, 0xffffffff, 9), unix.EPERM},
		{"kill -1, high half set", notif(unix.SYS_KILL, 0xffffffffffffffff, 9), unix.EPERM},
		{"an unsupervised syscall", notif(unix.SYS_READ, 0), unix.EPERM},
	}
	for _, c := range cases {
		if got := s.verdict(c.n); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	// Before the call's first process is known, session 0 (kernel threads,
	// and here PID 1) is nobody's.
	if _, _, sid0, err := procStat(2); err == nil && sid0 == 0 {
		if got := s.verdict(notif(unix.SYS_KILL, 2, 9)); got != unix.EPERM {
			t.Errorf("kill of a process in session 0 before the call started: %v, want EPERM", got)
		}
	}
	// The call's own session, named by its first process, passes from a
	// caller in another session (a job that left with setsid).
	s.root.Store(int64(other.Process.Pid))
	if got := s.verdict(notif(unix.SYS_KILL, uint64(other.Process.Pid), 15)); got != 0 {
		t.Errorf("kill of the call's session: %v, want allowed", got)
	}
	// A descendant of the call's first process passes wherever its session
	// is (other left with setsid; its parent is this test process).
	s = &supervisor{helperSID: -1, helper: 1}
	s.root.Store(int64(os.Getpid()))
	if got := s.verdict(&seccompNotif{Pid: uint32(1<<22 + 9), Nr: unix.SYS_KILL, Args: [6]uint64{uint64(other.Process.Pid), 15}}); got != unix.EPERM {
		t.Errorf("a caller that is gone: %v, want EPERM", got)
	}
	if got := s.verdict(notif(unix.SYS_KILL, uint64(other.Process.Pid), 15)); got != 0 {
		t.Errorf("kill of a descendant in another session: %v, want allowed", got)
	}
	if got := s.verdict(notif(unix.SYS_KILL, neg(other.Process.Pid), 15)); got != 0 {
		t.Errorf("kill of a descendant's group: %v, want allowed", got)
	}
	// The helper's own session never counts as the caller's.
	s = &supervisor{helperSID: sid}
	if got := s.verdict(notif(unix.SYS_KILL, uint64(self), 15)); got != unix.EPERM {
		t.Errorf("a caller in the helper's session: %v, want EPERM", got)
	}
}
