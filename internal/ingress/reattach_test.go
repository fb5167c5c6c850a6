package ingress_test

import (
	"context"
	"errors"
	"io"
	"iter"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/ingress"
)

// seqAgent streams numbered events after agent.ResumeAfter and records what
// it was asked, then blocks until its context ends (recording the cause).
type seqAgent struct {
	n      int
	block  bool
	key    atomic.Value
	after  atomic.Int64
	cause  atomic.Value
	cancel chan struct{}
}

func (a *seqAgent) Invoke(ctx context.Context, _ agent.Scope, _ agent.Prompt) iter.Seq[agent.Event] {
	return func(yield func(agent.Event) bool) {
		a.key.Store(agent.IdempotencyKey(ctx))
		a.after.Store(agent.ResumeAfter(ctx))
		for i := 1; i <= a.n; i++ {
			if int64(i) <= agent.ResumeAfter(ctx) {
				continue
			}
			if !yield(agent.Event{Type: agent.TypeText, Delta: "x", Step: 1, Seq: int64(i)}) {
				return
			}
		}
		if a.block {
			<-ctx.Done()
			a.cause.Store(context.Cause(ctx))
			close(a.cancel)
			return
		}
		yield(agent.Event{Type: agent.TypeCompleted, Seq: int64(a.n + 1)})
	}
}

func post(t *testing.T, url string, hdr map[string]string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/invoke", strings.NewReader(`{"session":"s","text":"t"}`))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// Every response names the turn's key — chosen by the server when the
// caller sent none — and every event carries the SSE id "<key>.<seq>".
func TestInvokeKeyChosenAndReturned(t *testing.T) {
	t.Parallel()
	a := &seqAgent{n: 2}
	hs := newServer(t, a)
	resp := post(t, hs.URL, nil)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	key := resp.Header.Get("Idempotency-Key")
	if key == "" || key != a.key.Load().(string) {
		t.Fatalf("response key %q, agent got %q", key, a.key.Load())
	}
	for _, want := range []string{"id: " + key + ".1\n", "id: " + key + ".2\n", "id: " + key + ".3\n"} {
		if !strings.Contains(string(body), want) {
			t.Fatalf("stream lacks %q:\n%s", want, body)
		}
	}
	resp = post(t, hs.URL, map[string]string{"Idempotency-Key": "mine"})
	resp.Body.Close()
	if resp.Header.Get("Idempotency-Key") != "mine" {
		t.Fatalf("the caller's key was not kept: %q", resp.Header.Get("Idempotency-Key"))
	}
}

// Last-Event-ID resumes after that event and names the key when the caller
// sent none; a malformed or foreign one is refused before anything runs.
func TestInvokeLastEventID(t *testing.T) {
	t.Parallel()
	a := &seqAgent{n: 5}
	hs := newServer(t, a)
	resp := post(t, hs.URL, map[string]string{"Last-Event-ID": "k.with.dots.3"})
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if a.key.Load() != "k.with.dots" || a.after.Load() != 3 {
		t.Fatalf("agent got key %q after %d, want k.with.dots after 3", a.key.Load(), a.after.Load())
	}
	if strings.Contains(string(body), ".3\n") || !strings.Contains(string(body), "id: k.with.dots.4\n") {
		t.Fatalf("resumed stream:\n%s", body)
	}
	for _, hdr := range []map[string]string{
		{"Last-Event-ID": "no-seq"},
		{"Last-Event-ID": "k.-1"},
		{"Last-Event-ID": "k.3", "Idempotency-Key": "other"},
	} {
		a.key.Store("untouched")
		resp := post(t, hs.URL, hdr)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%v: status %d, want 400", hdr, resp.StatusCode)
		}
		if a.key.Load() != "untouched" {
			t.Errorf("%v: the agent ran", hdr)
		}
	}
}

// Drain tells open streams to reconnect (SSE retry hint), hands their turns
// off (the engine sees agent.ErrHandOff, so it aborts nothing), and refuses
// new turns and health checks with 503.
func TestDrainHandsOffStreams(t *testing.T) {
	t.Parallel()
	a := &seqAgent{n: 1, block: true, cancel: make(chan struct{})}
	s := &ingress.Server{Agent: a, NoAuth: true, PingEvery: time.Hour}
	s.SetReady(true)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	resp := post(t, hs.URL, nil)
	defer resp.Body.Close()
	buf := make([]byte, 256)
	if _, err := resp.Body.Read(buf); err != nil { // the first event arrived
		t.Fatal(err)
	}
	s.Drain()
	rest, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(rest), "retry: 1000\n") || !strings.Contains(string(rest), "Last-Event-ID") {
		t.Fatalf("no reconnect hint after drain: %q", rest)
	}
	select {
	case <-a.cancel:
	case <-time.After(5 * time.Second):
		t.Fatal("the turn's context was never ended")
	}
	if cause, _ := a.cause.Load().(error); !errors.Is(cause, agent.ErrHandOff) {
		t.Fatalf("cause %v, want agent.ErrHandOff", cause)
	}
	resp2 := post(t, hs.URL, nil)
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusServiceUnavailable || resp2.Header.Get("Retry-After") == "" {
		t.Fatalf("new turn while draining: %d", resp2.StatusCode)
	}
	h, _ := http.Get(hs.URL + "/health")
	h.Body.Close()
	if h.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("health while draining: %d", h.StatusCode)
	}
}

// A client that goes away is not a hand-off: the engine's context ends
// with a plain cancellation, so it may detach the turn.
func TestDisconnectIsNotAHandOff(t *testing.T) {
	t.Parallel()
	a := &seqAgent{n: 1, block: true, cancel: make(chan struct{})}
	hs := newServer(t, a)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+"/invoke", strings.NewReader(`{"session":"s","text":"t"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	_, _ = resp.Body.Read(buf)
	cancel()
	resp.Body.Close()
	select {
	case <-a.cancel:
	case <-time.After(5 * time.Second):
		t.Fatal("the turn's context was never ended")
	}
	if cause, _ := a.cause.Load().(error); errors.Is(cause, agent.ErrHandOff) {
		t.Fatal("a client disconnect was reported as a hand-off")
	}
}

// The attach route needs an Attacher; a malformed Last-Event-ID is a 400.
func TestAttachRoute(t *testing.T) {
	t.Parallel()
	hs := newServer(t, &seqAgent{})
	resp, err := http.Get(hs.URL + "/sessions/s/turns/k/events")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotImplemented {
		t.Fatalf("without an attacher: %d, want 501", resp.StatusCode)
	}
	s := &ingress.Server{Agent: &seqAgent{}, Attacher: attacher{}, NoAuth: true}
	hs2 := httptest.NewServer(s.Handler())
	defer hs2.Close()
	req, _ := http.NewRequest(http.MethodGet, hs2.URL+"/sessions/s/turns/k/events", nil)
	req.Header.Set("Last-Event-ID", "other.4")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("foreign Last-Event-ID: %d, want 400", resp.StatusCode)
	}
	resp, _ = http.Get(hs2.URL + "/sessions/s/turns/k/events")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "id: k.7\n") {
		t.Fatalf("attached stream: %q", body)
	}
}

type attacher struct{}

func (attacher) Attach(context.Context, string, string) (iter.Seq[agent.Event], error) {
	return func(yield func(agent.Event) bool) { yield(agent.Event{Type: agent.TypeCompleted, Seq: 7}) }, nil
}

func TestParseResumeWithin(t *testing.T) {
	for in, want := range map[string]time.Duration{"": 0, "15s": 15 * time.Second, "15": 15 * time.Second, " 2m ": 2 * time.Minute, "100h": ingress.MaxResumeWithin} {
		got, err := ingress.ParseResumeWithin(in)
		if err != nil || got != want {
			t.Errorf("ParseResumeWithin(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"soon", "-1s", "-3"} {
		if _, err := ingress.ParseResumeWithin(in); err == nil {
			t.Errorf("ParseResumeWithin(%q) accepted", in)
		}
	}
}
