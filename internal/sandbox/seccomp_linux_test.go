package sandbox

import (
	"encoding/binary"
	"runtime"
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
// of each rule, with and without the network, independent of the kernel.
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
	)
	cases := []struct {
		name string
		data []byte
		// offline, online are the verdicts without and with the network.
		offline, online uint32
	}{
		{"read", seccompData(arch, unix.SYS_READ), allow, allow},
		{"another ABI", seccompData(arch^1, unix.SYS_READ), kill, kill},
		{"mount", seccompData(arch, unix.SYS_MOUNT), eperm, eperm},
		{"unshare", seccompData(arch, unix.SYS_UNSHARE), eperm, eperm},
		{"io_uring_setup", seccompData(arch, unix.SYS_IO_URING_SETUP), eperm, eperm},
		{"bpf", seccompData(arch, unix.SYS_BPF), eperm, eperm},
		{"clone3", seccompData(arch, unix.SYS_CLONE3), enosys, enosys},
		{"clone of a thread", seccompData(arch, unix.SYS_CLONE, unix.CLONE_VM|unix.CLONE_THREAD), allow, allow},
		{"clone into a user namespace", seccompData(arch, unix.SYS_CLONE, unix.CLONE_NEWUSER), eperm, eperm},
		{"netlink socket", seccompData(arch, unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW), allow, allow},
		{"unix socket", seccompData(arch, unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM), eperm, eperm},
		{"tcp over ipv4", seccompData(arch, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM), eperm, allow},
		{"tcp over ipv6, cloexec", seccompData(arch, unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC), eperm, allow},
		{"udp", seccompData(arch, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_DGRAM), eperm, eperm},
		{"raw ipv4", seccompData(arch, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_RAW), eperm, eperm},
		{"family with the high half set", seccompData(arch, unix.SYS_SOCKET, 1<<32|unix.AF_NETLINK, unix.SOCK_RAW), eperm, eperm},
		{"type with the high half set", seccompData(arch, unix.SYS_SOCKET, unix.AF_INET, 1<<32|unix.SOCK_STREAM), eperm, eperm},
		{"socketpair", seccompData(arch, unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_STREAM), allow, allow},
	}
	if runtime.GOARCH == "amd64" {
		cases = append(cases, struct {
			name            string
			data            []byte
			offline, online uint32
		}{"x32 syscall", seccompData(arch, x32Bit|unix.SYS_READ), enosys, enosys})
	}
	vms := map[bool]*bpf.VM{}
	for _, inet := range []bool{false, true} {
		raw, err := filterProgram(inet)
		if err != nil {
			t.Fatalf("filterProgram(%v): %v", inet, err)
		}
		prog, ok := bpf.Disassemble(raw)
		if !ok {
			t.Fatalf("filterProgram(%v): an instruction does not decode", inet)
		}
		if vms[inet], err = bpf.NewVM(prog); err != nil {
			t.Fatalf("filterProgram(%v): %v", inet, err)
		}
	}
	for _, c := range cases {
		for inet, want := range map[bool]uint32{false: c.offline, true: c.online} {
			got, err := vms[inet].Run(c.data)
			if err != nil {
				t.Fatalf("%s (inet %v): %v", c.name, inet, err)
			}
			if uint32(got) != want {
				t.Errorf("%s (inet %v) = %#x, want %#x", c.name, inet, uint32(got), want)
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
