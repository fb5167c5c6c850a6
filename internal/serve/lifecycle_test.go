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
	"slices"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fastagent/fastagent/internal/testsupport/wait"
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
// most limit) and returns the stacks of those that have not.
func leakedSince(before map[string]string, limit time.Duration) []string {
	var left []string
	wait.Until(limit, func() bool { // checked on this goroutine: it adds none
		left = left[:0]
		for id, stack := range goroutines() {
			if _, ok := before[id]; !ok {
				left = append(left, stack)
			}
		}
		return len(left) == 0
	})
	return left
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

// What differs between the serving commands, the library and the public
// packages is configuration: the worker role checks the definition (a
// broken one stops the start, naming its file; a missing model is a
// warning to Config.Warn) and the ingress role alone does not; a
// TracerProvider traces the ingress's requests, and TracingEnv without the
// OTEL_* variables traces nothing.
func TestRolesAndTracingAreConfiguration(t *testing.T) {
	t.Parallel()
	broken := t.TempDir()
	if err := os.WriteFile(filepath.Join(broken, "fastagent.yaml"), []byte("modle: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(context.Background(), Config{Dir: broken, Roles: Roles{Worker: true}}); err == nil || !strings.Contains(err.Error(), "fastagent.yaml") {
		t.Errorf("worker role on a broken definition: %v, want an error naming fastagent.yaml", err)
	}
	p, err := Open(context.Background(), Config{Dir: broken, Roles: Roles{Ingress: true}})
	if err != nil {
		t.Fatalf("ingress role on a broken definition: %v (the ingress reports it when serving)", err)
	}
	p.Close()

	var warned []string
	noModel := func(string) string { return "" }
	p, err = Open(context.Background(), Config{Dir: t.TempDir(), Roles: Roles{Worker: true}, Getenv: noModel,
		Warn: func(w string) { warned = append(warned, w) }, TracingEnv: noModel})
	if err != nil {
		t.Fatal(err)
	}
	if p.tracing != nil {
		t.Error("TracingEnv without OTEL_EXPORTER_OTLP_* traces")
	}
	p.Close()
	if len(warned) == 0 || !strings.Contains(strings.Join(warned, "\n"), "no model configured") {
		t.Errorf("warnings %q, want the missing model", warned)
	}

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	run, err := Start(context.Background(), Config{Dir: t.TempDir(), Roles: Roles{Ingress: true}, TracerProvider: tp,
		Temporal: Temporal{Client: starterClient{st: &fakeStarter{}}}, Listener: ln}, Components{})
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	resp, err := http.Get(run.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	run.Close() // the span ends with the request
	var names []string
	for _, s := range rec.Ended() {
		names = append(names, s.Name())
	}
	if !slices.Contains(names, "GET /health") {
		t.Errorf("spans %q, want GET /health", names)
	}
}
