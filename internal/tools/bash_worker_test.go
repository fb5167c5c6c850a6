package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
)

// workerEnv switches the test binary into a stand-in worker: it runs the
// bash command in $FASTAGENT_TEST_BASH_WORKER in the directory named by
// $FASTAGENT_TEST_BASH_DIR and waits to be killed.
const workerEnv = "FASTAGENT_TEST_BASH_WORKER"

func TestMain(m *testing.M) {
	// Plant a unique secret in this process's own environment, as a
	// worker's API keys are: re-executed with it, /proc/<pid>/environ and
	// the process's memory show it (TestBashCannotReachWorkerSecrets).
	if os.Getenv(canaryEnv) == "" {
		env := append(os.Environ(), fmt.Sprintf("%s=canary-%d-%d", canaryEnv, os.Getpid(), time.Now().UnixNano()))
		if exe, err := os.Executable(); err == nil {
			err = syscall.Exec(exe, os.Args, env)
			fmt.Fprintln(os.Stderr, "re-exec with a canary secret:", err)
		}
	}
	if command := os.Getenv(workerEnv); command != "" {
		args, _ := json.Marshal(map[string]any{"command": command})
		// Unsandboxed: the test follows the shell by its host PID.
		bash := unconfined(testTools(Options{})[NameBash])
		_, _ = bash.Run(context.Background(), agent.ToolCall{ID: "c1", Name: NameBash, Args: args, Session: "s", Dir: os.Getenv("FASTAGENT_TEST_BASH_DIR")})
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A bash command whose worker is SIGKILLed mid-call dies with it, and so
// does a job it detached into a session of its own (setsid — out of reach
// of a parent-death signal or a process-group kill), even unconfined
// (tools.sandbox: off): the sandbox's helper sees the worker go and kills
// every process the calls left, as their subreaper. No orphan keeps
// running next to the retry on another worker.
func TestBashDiesWithWorker(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Pdeathsig is Linux only")
	}
	t.Parallel()
	dir := t.TempDir()
	worker := exec.Command(os.Args[0], "-test.run=^$")
	worker.Env = append(os.Environ(),
		workerEnv+"=setsid sleep 301 & echo $! > pids.tmp; echo $$ >> pids.tmp && mv pids.tmp pids && sleep 300",
		"FASTAGENT_TEST_BASH_DIR="+dir)
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = worker.Process.Kill(); _ = worker.Wait() })
	pidFile := filepath.Join(dir, "pids")
	wait.For(t, 30*time.Second, "the command to start", func() bool {
		b, err := os.ReadFile(pidFile)
		return err == nil && strings.TrimSpace(string(b)) != ""
	})
	pids := readPIDs(t, pidFile)
	t.Cleanup(func() {
		for _, pid := range pids {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	})
	if err := worker.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = worker.Wait()
	assertAllGone(t, pids)
}
