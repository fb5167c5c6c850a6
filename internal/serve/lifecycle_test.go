package serve

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// goroutines returns the stacks of the running goroutines by ID.
func goroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if m := goroutineID.FindSubmatch(g); m != nil {
			out[string(m[1])] = string(g)
		}
	}
	return out
}

var goroutineID = regexp.MustCompile(`^goroutine (\d+) `)

// leakedSince waits until every goroutine not in before has ended (at
// most wait) and returns the stacks of those that have not.
func leakedSince(before map[string]string, wait time.Duration) []string {
	deadline := time.Now().Add(wait)
	for {
		var left []string
		for id, stack := range goroutines() {
			if _, ok := before[id]; !ok {
				left = append(left, stack)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond) // polling for the goroutines to end, not an assertion
	}
}

// unreachable is an http URL nothing listens on: every call to it fails
// at once (connection refused), leaving no connection behind.
func unreachable(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return "http://" + addr
}

// A runtime whose channels look their bot up on the platform (Feishu's
// open_id, Telegram's getMe) — here a platform that never answers, so the
// lookups are retried — leaves no goroutine behind once it is stopped and
// closed: the runtime's one resolver runs the lookups under its context
// and stops with it. Not parallel: it counts the process's goroutines.
func TestRuntimeLeavesNoGoroutine(t *testing.T) {
	dir := t.TempDir()
	for file, yaml := range map[string]string{"feishu.yaml": "transport: webhook\n", "telegram.yaml": "transport: webhook\n"} {
		if err := os.MkdirAll(filepath.Join(dir, "channels"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "channels", file), []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	down := unreachable(t)
	env := map[string]string{
		"FEISHU_APP_ID": "cli_x", "FEISHU_APP_SECRET": "s", "FEISHU_VERIFICATION_TOKEN": "v", "FEISHU_BASE_URL": down,
		"TELEGRAM_BOT_TOKEN": "123:abc", "TELEGRAM_WEBHOOK_SECRET": "secret", "TELEGRAM_API_URL": down,
	}
	before := goroutines()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	run, err := Start(context.Background(), Config{Dir: dir, Getenv: func(k string) string { return env[k] },
		Roles: Roles{Ingress: true}, Temporal: Temporal{Client: starterClient{st: &fakeStarter{}}}, Listener: ln}, Components{})
	if err != nil {
		t.Fatal(err)
	}
	if run.Ingress == nil || run.URL == "" {
		t.Fatalf("the ingress role did not start: %+v", run)
	}
	// Both doors are served (an unsigned request is refused, not 404).
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for _, path := range []string{"/feishu", "/telegram"} {
		resp, err := hc.Post(run.URL+path, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusNotFound {
			t.Fatalf("POST %s: 404, want the channel's door", path)
		}
	}
	run.Close()

	if left := leakedSince(before, 5*time.Second); len(left) > 0 {
		t.Fatalf("%d goroutines left after the runtime stopped and closed:\n\n%s", len(left), strings.Join(left, "\n\n"))
	}
}

// A runtime waits until its context ends, or until the embedded Temporal
// server exits under it — then with an error naming the server's log, as
// `fastagent dev` reports it; a server exiting while the runtime stops
// anyway (Ctrl-C reaches both) is no error.
func TestWaitEndsWhenTheEmbeddedServerExits(t *testing.T) {
	t.Parallel()
	exited := make(chan struct{})
	close(exited)
	emb := &EmbeddedServer{Exited: exited, Err: func() error { return errors.New("signal: killed") }}
	r := &Running{Embedded: emb, stateDir: "/state", stopped: make(chan struct{})}
	err := r.Wait(context.Background())
	if err == nil || !strings.Contains(err.Error(), "signal: killed") || !strings.Contains(err.Error(), "/state/temporal.log") {
		t.Errorf("Wait after the server exited: %v, want an error with its cause and log", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r = &Running{Embedded: emb, stateDir: "/state", stopped: make(chan struct{})}
	if err := r.Wait(ctx); err != nil {
		t.Errorf("Wait after ctx ended (the server exiting too): %v, want nil", err)
	}
}
