package sandbox_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/fastagent/fastagent/internal/sandbox"
)

// noUsernsEnv makes the test binary, re-executed, refuse user namespaces
// to itself the way Docker's default seccomp profile does (clone and
// unshare with CLONE_NEWUSER fail with EPERM), then report which mechanism
// Open picks and whether a confined tool still cannot read a secret.
const noUsernsEnv = "FASTAGENT_SANDBOX_TEST_NO_USERNS"

func init() {
	if os.Getenv(noUsernsEnv) != "1" {
		return
	}
	if err := refuseUserNamespaces(); err != nil {
		fmt.Println("FILTER-ERROR", err)
		os.Exit(2)
	}
	b := sandbox.Open(sandbox.Config{})
	st := b.Status()
	fmt.Println("MODE", st.Mode)
	secret := os.Getenv("SECRET_FILE")
	var out bytes.Buffer
	p, err := b.Start(context.Background(), &sandbox.Cmd{Path: "/bin/cat", Args: []string{"cat", secret},
		Dir: os.TempDir(), Writable: []string{os.Getenv("WS")}, Hidden: []string{secret}, Stdout: &out, Stderr: &out})
	if err == nil {
		_ = p.Wait()
	}
	fmt.Printf("CAT %q %v\n", out.String(), err)
	_ = b.Close()
	os.Exit(0)
}

// refuseUserNamespaces installs, on every thread, a filter that fails
// clone(CLONE_NEWUSER) and unshare(CLONE_NEWUSER) with EPERM.
func refuseUserNamespaces() error {
	prog, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 0, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_CLONE, SkipTrue: 2},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_UNSHARE, SkipTrue: 1},
		bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW},
		bpf.LoadAbsolute{Off: 16, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: unix.CLONE_NEWUSER, SkipTrue: 1},
		bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW},
		bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
	})
	if err != nil {
		return err
	}
	filter := make([]unix.SockFilter, len(prog))
	for i, r := range prog {
		filter[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return err
	}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		return e
	}
	return nil
}

// Under a seccomp profile that refuses user namespaces (Docker's default),
// Open falls back to Landlock on its own, and tools are still confined.
func TestNoUserNamespacesFallsBackToLandlock(t *testing.T) {
	if !required() && landlockMissing() {
		t.Skip("no Landlock here")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	w := theWorld(t)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), noUsernsEnv+"=1", "SECRET_FILE="+w.secretFile, "WS="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Logf("%s", out)
	if !strings.Contains(string(out), "MODE landlock") {
		t.Errorf("without user namespaces the sandbox picked: %s", out)
	}
	if strings.Contains(string(out), canary) || !strings.Contains(string(out), "CAT ") {
		t.Errorf("the confined tool read the secret (or did not run): %s", out)
	}
}

func landlockMissing() bool {
	b := sandbox.Open(sandbox.Config{Mode: sandbox.Landlock})
	defer b.Close()
	return b.Status().Mode == ""
}
