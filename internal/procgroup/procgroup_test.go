package procgroup

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helperEnv switches the test binary into the helper process of
// TestLeaderDiesWithParent: it starts `sleep`, writes its pid to the file
// named by the variable, and waits to be killed.
const helperEnv = "PROCGROUP_TEST_HELPER_PIDFILE"

func TestMain(m *testing.M) {
	if pidFile := os.Getenv(helperEnv); pidFile != "" {
		helperMain(pidFile)
	}
	os.Exit(m.Run())
}

func helperMain(pidFile string) {
	cmd := exec.Command("sleep", "300")
	g, err := Start(cmd, nil)
	if err != nil {
		os.Exit(3)
	}
	if err := os.WriteFile(pidFile+".tmp", []byte(strconv.Itoa(g.Pid())), 0o644); err != nil {
		os.Exit(4)
	}
	if err := os.Rename(pidFile+".tmp", pidFile); err != nil {
		os.Exit(5)
	}
	// Keep the runtime busy with threads that come and go, as a worker
	// does: a goroutine that exits locked ends its thread.
	for {
		done := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(done)
		}()
		<-done
		time.Sleep(10 * time.Millisecond)
	}
}

// alive reports whether pid is a running process (a zombie is not).
func alive(t *testing.T, pid int) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		if runtime.GOOS != "linux" {
			return syscall.Kill(pid, 0) == nil
		}
		return false
	}
	// pid (comm) state ...; comm may hold spaces and parentheses.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// waitGone waits (generously) until pid is no longer running.
func waitGone(t *testing.T, pid int) bool {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if !alive(t, pid) {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

func waitFile(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && len(bytes.TrimSpace(b)) > 0 {
			pid, err := strconv.Atoi(string(bytes.TrimSpace(b)))
			if err != nil {
				t.Fatalf("pid file %s: %v", path, err)
			}
			return pid
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s never written", path)
	return 0
}

// A tool process whose worker is SIGKILLed dies too (Pdeathsig), even when
// the worker's runtime ends threads meanwhile.
func TestLeaderDiesWithParent(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Pdeathsig is Linux only")
	}
	pidFile := filepath.Join(t.TempDir(), "pid")
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"="+pidFile)
	helper.Stdout, helper.Stderr = os.Stderr, os.Stderr
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = helper.Process.Kill(); _ = helper.Wait() })
	child := waitFile(t, pidFile)
	t.Cleanup(func() { _ = syscall.Kill(-child, syscall.SIGKILL) })
	// Let some helper threads come and go while the child runs.
	time.Sleep(300 * time.Millisecond)
	if !alive(t, child) {
		t.Fatalf("tool process %d died while its parent was still running", child)
	}
	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait()
	if !waitGone(t, child) {
		t.Fatalf("tool process %d outlived its SIGKILLed parent", child)
	}
}

// Every exit path of a call kills what the call left running in the group:
// a background job after a normal return, and after a panic.
func TestCloseKillsGroup(t *testing.T) {
	tests := []struct {
		name string
		run  func(g *Group, cmd *exec.Cmd)
	}{
		{"normal return", func(g *Group, cmd *exec.Cmd) {
			defer g.Close()
			_ = cmd.Wait()
		}},
		{"panic", func(g *Group, cmd *exec.Cmd) {
			defer func() { _ = recover() }()
			defer g.Close()
			_ = cmd.Wait()
			panic("tool crashed")
		}},
		{"leader still running", func(g *Group, cmd *exec.Cmd) {
			g.Close()
			_ = cmd.Wait()
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pidFile := filepath.Join(t.TempDir(), "pid")
			script := "sleep 300 & echo $! > " + pidFile + ".tmp && mv " + pidFile + ".tmp " + pidFile
			if tc.name == "leader still running" {
				script += "; sleep 300"
			}
			cmd := exec.Command("bash", "-c", script)
			g, err := Start(cmd, nil)
			if err != nil {
				t.Fatal(err)
			}
			bg := waitFile(t, pidFile)
			t.Cleanup(func() { _ = syscall.Kill(bg, syscall.SIGKILL) })
			tc.run(g, cmd)
			if !waitGone(t, bg) {
				t.Fatalf("background job %d survived the call", bg)
			}
		})
	}
}

// A failed start returns the error and leaves nothing running.
func TestStartError(t *testing.T) {
	cmd := exec.Command(filepath.Join(t.TempDir(), "no-such-program"))
	if _, err := Start(cmd, nil); err == nil {
		t.Fatal("want an error for a missing program")
	}
	if !cmd.SysProcAttr.Setpgid {
		t.Error("the command was not prepared for its own group")
	}
}
