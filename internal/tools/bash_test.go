package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
)

func TestBash(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		command string
		want    string // exact content unless contains is set
		contain []string
		anyOf   []string // at least one
		isError bool
	}{
		{name: "stdout", command: "echo hello", want: "hello\n"},
		{name: "stdout and stderr combined in order", command: "echo out; echo err >&2; echo out2", want: "out\nerr\nout2\n"},
		{name: "no output", command: "true", want: "(no output)"},
		{name: "exit code", command: "echo failing; exit 3", contain: []string{"failing\n", "exit code 3"}, isError: true},
		{name: "exit code no output", command: "exit 7", contain: []string{"(no output)", "exit code 7"}, isError: true},
		// In the sandbox the shell is not the namespace's init, whose exit
		// status (128+signal) is what the worker sees.
		{name: "killed by signal", command: "kill -KILL $$", anyOf: []string{"signal 9", "exit code 137"}, isError: true},
		{name: "stdin is /dev/null", command: "cat; read x; echo rc=$?", want: "rc=1\n"},
		{name: "stdin device", command: "readlink /proc/self/fd/0", want: "/dev/null\n"},
		{name: "bash features", command: "a=(1 2 3); echo ${#a[@]} $((2**10))", want: "3 1024\n"},
	}
	bash := testTools(Options{})[NameBash]
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := run(t, bash, t.TempDir(), map[string]any{"command": c.command})
			if r.IsError != c.isError {
				t.Fatalf("IsError = %v: %q", r.IsError, r.Content)
			}
			if len(c.anyOf) > 0 && !slices.ContainsFunc(c.anyOf, func(w string) bool { return strings.Contains(r.Content, w) }) {
				t.Fatalf("content %q contains none of %q", r.Content, c.anyOf)
			}
			if c.contain == nil && c.anyOf == nil {
				if r.Content != c.want {
					t.Fatalf("content %q, want %q", r.Content, c.want)
				}
			}
			for _, w := range c.contain {
				if !strings.Contains(r.Content, w) {
					t.Fatalf("content %q does not contain %q", r.Content, w)
				}
			}
		})
	}
}

func TestBashOwnProcessGroup(t *testing.T) {
	t.Parallel()
	r := runUnsandboxed(t, testTools(Options{})[NameBash], t.TempDir(), map[string]any{"command": "echo $(ps -o pgid= -p $$) $$"})
	f := strings.Fields(r.Content)
	if r.IsError || len(f) != 2 || f[0] != f[1] {
		t.Fatalf("shell is not its own process group leader: %q", r.Content)
	}
	if f[0] == strconv.Itoa(syscall.Getpgrp()) {
		t.Fatal("shell shares the test's process group")
	}
}

func TestBashWorkingDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	r := run(t, testTools(Options{})[NameBash], dir, map[string]any{"command": "pwd -P; echo data > created.txt"})
	if r.IsError || r.Content != real+"\n" {
		t.Fatalf("got %+v, want %s", r, real)
	}
	readFile(t, filepath.Join(dir, "created.txt"))
}

func TestBashTruncatesKeepingTail(t *testing.T) {
	t.Parallel()
	bash := testTools(Options{})[NameBash]
	r := run(t, bash, t.TempDir(), map[string]any{"command": "seq 1 5000"})
	if r.IsError {
		t.Fatalf("got %+v", r)
	}
	note := "[Showing lines 3001-5000 of 5000 (output truncated to the last 2000 lines or 50.0KB)."
	if !strings.HasPrefix(r.Content, note) {
		t.Fatalf("content starts %q, want note %q", head(r.Content), note)
	}
	body := r.Content[strings.Index(r.Content, "\n\n")+2:]
	if !strings.HasPrefix(body, "3001\n") || !strings.HasSuffix(body, "\n5000\n") || CountLines(body) != 2000 {
		t.Fatalf("kept %d lines: %q…%q", CountLines(body), head(body), tail(body))
	}
	var want strings.Builder
	for i := 1; i <= 5000; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	if d := details(t, r); d.FullOutput != want.String() || d.FullOutputTruncated {
		t.Fatalf("details fullOutput has %d bytes, want %d", len(d.FullOutput), want.Len())
	}

	// A failing command keeps the tail and still reports the exit code.
	r = run(t, bash, t.TempDir(), map[string]any{"command": "seq 1 3000; exit 4"})
	if !r.IsError || !strings.HasSuffix(r.Content, "\n3000\n\nCommand failed with exit code 4") {
		t.Fatalf("content ends %q", tail(r.Content))
	}

	// One huge line: its end is kept.
	r = run(t, bash, t.TempDir(), map[string]any{"command": "head -c 200000 /dev/zero | tr '\\0' a; echo END"})
	if r.IsError || !strings.HasSuffix(r.Content, "aaaaEND\n") || len(r.Content) > DefaultMaxBytes+500 {
		t.Fatalf("content (%d bytes) ends %q", len(r.Content), tail(r.Content))
	}
	if d := details(t, r); len(d.FullOutput) != 200004 {
		t.Fatalf("details fullOutput has %d bytes", len(d.FullOutput))
	}
}

func TestBashDetailsCapKeepsTail(t *testing.T) {
	t.Parallel()
	bash := testTools(Options{MaxDetailsBytes: 64 * 1024})[NameBash]
	r := run(t, bash, t.TempDir(), map[string]any{"command": "seq 1 100000"})
	d := details(t, r)
	if !d.FullOutputTruncated || len(d.FullOutput) > 64*1024 || !strings.HasSuffix(d.FullOutput, "\n100000\n") {
		t.Fatalf("details: truncated=%v, %d bytes, ends %q", d.FullOutputTruncated, len(d.FullOutput), tail(d.FullOutput))
	}
	if !strings.Contains(r.Content, "of 100000") {
		t.Fatalf("note does not count all lines: %q", head(r.Content))
	}
}

// processGone reports whether pid has exited (a zombie counts as exited).
func processGone(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X')
}

func readPIDs(t *testing.T, path string) []int {
	t.Helper()
	var pids []int
	for _, f := range strings.Fields(readFile(t, path)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("bad pid %q", f)
		}
		pids = append(pids, pid)
	}
	return pids
}

func assertAllGone(t *testing.T, pids []int) {
	t.Helper()
	// Generous: the kill itself is prompt, but a loaded machine (the -race
	// unit run, packages in parallel) can delay the helper seeing its
	// worker go by seconds. A process that survives fails all the same.
	gone := func() bool {
		for _, pid := range pids {
			if !processGone(pid) {
				return false
			}
		}
		return true
	}
	if !wait.Until(20*time.Second, gone) {
		for _, pid := range pids {
			if !processGone(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				t.Errorf("process %d still running after the command was stopped", pid)
			}
		}
		t.FailNow()
	}
}

// groupCommand starts background children (one ignoring SIGTERM, so the
// SIGKILL escalation is needed) and records every PID in pids.
const groupCommand = `echo $$ > pids
sleep 300 & echo $! >> pids
(trap '' TERM; sleep 300) & echo $! >> pids
bash -c 'echo $$ >> pids; sleep 300' &
echo started
sleep 300`

func TestBashTimeoutKillsProcessGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bash := testTools(Options{Bash: BashOptions{KillGrace: 300 * time.Millisecond}})[NameBash]
	start := time.Now()
	r := runUnsandboxed(t, bash, dir, map[string]any{"command": groupCommand, "timeout": 1})
	elapsed := time.Since(start)
	if !r.IsError || !strings.Contains(r.Content, "timed out after 1s") || !strings.Contains(r.Content, "started") {
		t.Fatalf("got %+v", r)
	}
	if elapsed > 10*time.Second {
		t.Fatalf("took %s", elapsed)
	}
	pids := readPIDs(t, filepath.Join(dir, "pids"))
	if len(pids) != 4 {
		t.Fatalf("pids = %v", pids)
	}
	assertAllGone(t, pids)
}

func TestBashAbortKillsProcessGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bash := testTools(Options{Bash: BashOptions{KillGrace: 300 * time.Millisecond}})[NameBash]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// Cancel once all children have recorded their PIDs.
		if !wait.Until(20*time.Second, func() bool {
			b, err := os.ReadFile(filepath.Join(dir, "pids"))
			return err == nil && len(strings.Fields(string(b))) == 4
		}) {
			t.Error("the command's children never recorded their PIDs")
		}
		cancel()
	}()
	start := time.Now()
	r := runCtx(t, ctx, unconfined(bash), dir, map[string]any{"command": groupCommand})
	if !r.IsError || !strings.Contains(r.Content, "aborted") || !strings.Contains(r.Content, "started") {
		t.Fatalf("got %+v", r)
	}
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Fatalf("took %s", elapsed)
	}
	assertAllGone(t, readPIDs(t, filepath.Join(dir, "pids")))
}

func TestBashTimeoutCappedByMax(t *testing.T) {
	t.Parallel()
	bash := testTools(Options{Bash: BashOptions{MaxTimeout: 500 * time.Millisecond, KillGrace: 100 * time.Millisecond}})[NameBash]
	r := run(t, bash, t.TempDir(), map[string]any{"command": "sleep 30", "timeout": 1000})
	if !r.IsError || !strings.Contains(r.Content, "timed out after 0.5s") {
		t.Fatalf("got %+v", r)
	}
}

// A background job does not hold the call up, and is gone when it returns.
func TestBashBackgroundJobGoneAfterCall(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	start := time.Now()
	r := runUnsandboxed(t, testTools(Options{})[NameBash], dir, map[string]any{"command": "sleep 100 & echo $! > bg.pid; echo done"})
	if r.IsError || r.Content != "done\n" {
		t.Fatalf("got %+v", r)
	}
	if elapsed := time.Since(start); elapsed > 30*time.Second {
		t.Fatalf("waited %s for a background process", elapsed)
	}
	assertAllGone(t, readPIDs(t, filepath.Join(dir, "bg.pid")))
}

func TestBashEnvAllowlist(t *testing.T) {
	// Not parallel: t.Setenv.
	t.Setenv("FASTAGENT_TEST_SECRET", "s3cr3t")
	t.Setenv("ANTHROPIC_API_KEY", "sk-test-key")
	t.Setenv("FASTAGENT_TEST_EXTRA", "extra-value")
	t.Setenv("LC_FASTAGENT_TEST", "lc-value")
	bash := testTools(Options{Bash: BashOptions{ExtraEnv: []string{"FASTAGENT_TEST_EXTRA"}}})[NameBash]
	r := run(t, bash, t.TempDir(), map[string]any{"command": "env"})
	if r.IsError {
		t.Fatalf("got %+v", r)
	}
	env := "\n" + r.Content
	for _, absent := range []string{"s3cr3t", "FASTAGENT_TEST_SECRET", "sk-test-key", "ANTHROPIC_API_KEY"} {
		if strings.Contains(env, absent) {
			t.Errorf("%s leaked into the command environment:\n%s", absent, r.Content)
		}
	}
	for _, present := range []string{"\nPATH=", "\nFASTAGENT_TEST_EXTRA=extra-value\n", "\nLC_FASTAGENT_TEST=lc-value\n"} {
		if !strings.Contains(env, present) {
			t.Errorf("%q missing from the command environment:\n%s", present, r.Content)
		}
	}
	if home := os.Getenv("HOME"); home != "" && !strings.Contains(env, "\nHOME="+home+"\n") {
		t.Errorf("HOME missing:\n%s", r.Content)
	}
}

// TestBashReportsLastLine: while the command runs, the last line of its
// output so far is reported as the call's progress — each one before the
// command has printed the next (it waits for a file the test writes).
func TestBashReportsLastLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var mu sync.Mutex
	var got []string
	ctx := agent.WithProgress(context.Background(), func(p agent.Progress) {
		mu.Lock()
		defer mu.Unlock()
		if len(got) == 0 || got[len(got)-1] != p.Message {
			got = append(got, p.Message)
		}
	})
	last := func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(got) == 0 {
			return ""
		}
		return got[len(got)-1]
	}
	// Each step waits for the test to release it, so a report of
	// "step N" can only come from output read while the command runs.
	cmd := `for i in 1 2 3; do echo "step $i"; while [ ! -e go$i ]; do sleep 0.02; done; done; printf '10%%\r50%%\r'; while [ ! -e go4 ]; do sleep 0.02; done`
	done := make(chan agent.ToolResult, 1)
	go func() { done <- runCtx(t, ctx, testTools(Options{})[NameBash], dir, map[string]any{"command": cmd}) }()
	for i, want := range []string{"step 1", "step 2", "step 3", "50%"} {
		wait.For(t, 10*time.Second, "progress "+want, func() bool { return last() == want })
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("go%d", i+1)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if r := <-done; r.IsError {
		t.Fatalf("command failed: %s", r.Content)
	}
	mu.Lock()
	defer mu.Unlock()
	got = slices.DeleteFunc(got, func(s string) bool { return s == "10%" }) // when read apart from 50%
	if !slices.Equal(got, []string{"step 1", "step 2", "step 3", "50%"}) {
		t.Fatalf("reported %q", got)
	}
}
