package lab

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestWorkerProcKeepsSecretsOffTheCommandLine: a worker subprocess gets its
// store DSN, feed URL and Temporal key through its environment, never its
// command line, which /proc/<pid>/cmdline shows to every process of the
// machine (a tool's included). The worker is a stand-in script that prints
// the line StartWorkerProc waits for, then stays.
func TestWorkerProcKeepsSecretsOffTheCommandLine(t *testing.T) {
	k, err := NewKit()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	bin := filepath.Join(t.TempDir(), "fastagent")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho worker started\nsleep 30\n"), 0o755); err != nil { //nolint:gosec // G306: a test program
		t.Fatal(err)
	}
	const (
		storePassword = "store-pw-7f3a"
		feedToken     = "feed-token-91c2"
		temporalKey   = "temporal-key-5d0e"
	)
	p, err := StartWorkerProc(WorkerSpec{Bin: bin, Kit: k, TemporalAddress: "127.0.0.1:1", TemporalAPIKey: temporalKey,
		Namespace: "default", TaskQueue: "q",
		Store: "postgres://fastagent:" + storePassword + "@127.0.0.1:1/fastagent?sslmode=disable",
		Feed:  "nats://" + feedToken + "@127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(time.Second)
	pid := strconv.Itoa(p.Pid())
	cmdline, err := os.ReadFile("/proc/" + pid + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	environ, err := os.ReadFile("/proc/" + pid + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{storePassword, feedToken, temporalKey} {
		if strings.Contains(string(cmdline), secret) {
			t.Errorf("the worker's command line shows %q: %q", secret, strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
		if !strings.Contains(string(environ), secret) {
			t.Errorf("the worker's environment lacks %q: it does not get its settings", secret)
		}
	}
}
