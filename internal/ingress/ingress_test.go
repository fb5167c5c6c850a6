package ingress_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"iter"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/ingress"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
)

// fakeAgent streams a fixed list of events, then optionally blocks.
type fakeAgent struct {
	events    []agent.Event
	block     bool
	cancelled atomic.Bool
	gotKey    atomic.Value
	gotScope  atomic.Value
}

func (f *fakeAgent) Invoke(ctx context.Context, scope agent.Scope, p agent.Prompt) iter.Seq[agent.Event] {
	return func(yield func(agent.Event) bool) {
		f.gotKey.Store(agent.IdempotencyKey(ctx))
		f.gotScope.Store(scope)
		for _, ev := range f.events {
			if !yield(ev) {
				return
			}
		}
		if f.block {
			<-ctx.Done()
			f.cancelled.Store(true)
		}
	}
}

func newServer(t *testing.T, a agent.Agent) *httptest.Server {
	s := &ingress.Server{Agent: a, NoAuth: true, PingEvery: 50 * time.Millisecond}
	s.SetReady(true)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return hs
}

func TestInvokeValidation(t *testing.T) {
	t.Parallel()
	hs := newServer(t, &fakeAgent{})
	cases := []struct {
		name, method, body string
		status             int
		msg                string
	}{
		{"get", http.MethodGet, "", 405, ""},
		{"put", http.MethodPut, `{"session":"s","text":"t"}`, 405, ""},
		{"bad json", http.MethodPost, `{"session":`, 400, "invalid json"},
		{"trailing garbage", http.MethodPost, `{"session":"s","text":"t"} x`, 400, "invalid json"},
		{"missing text", http.MethodPost, `{"session":"s"}`, 400, `need { "session": string, "text": string }`},
		{"missing session", http.MethodPost, `{"text":"t"}`, 400, `need { "session": string, "text": string }`},
		{"wrong types", http.MethodPost, `{"session":1,"text":"t"}`, 400, "invalid json"},
		{"too big", http.MethodPost, `{"session":"s","text":"` + strings.Repeat("a", ingress.MaxBody) + `"}`, 413, ""},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, hs.URL+"/invoke", strings.NewReader(c.body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s: status %d, want %d", c.name, resp.StatusCode, c.status)
		}
		if c.msg != "" {
			var body struct{ Error, Code string }
			if err := json.Unmarshal([]byte(b.String()), &body); err != nil || body.Error != c.msg || body.Code != agent.CodeInvalidCommand {
				t.Errorf("%s: body %q, want {error: %q, code: %q}", c.name, b.String(), c.msg, agent.CodeInvalidCommand)
			}
		}
	}
}

func TestInvokeStreamsSSE(t *testing.T) {
	t.Parallel()
	fa := &fakeAgent{events: []agent.Event{agent.Text("he"), agent.Text("llo"), agent.Completed(nil)}}
	hs := newServer(t, fa)
	req, _ := http.NewRequest(http.MethodPost, hs.URL+"/invoke", strings.NewReader(`{"session":"s1","text":"hi","parentSession":"p"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "k-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("status %d, headers %v", resp.StatusCode, resp.Header)
	}
	var b strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
	want := "data: {\"type\":\"text\",\"delta\":\"he\"}\n\n" +
		"data: {\"type\":\"text\",\"delta\":\"llo\"}\n\n" +
		"data: {\"type\":\"completed\"}\n\n"
	if b.String() != want {
		t.Errorf("body:\n%q\nwant\n%q", b.String(), want)
	}
	if fa.gotKey.Load() != "k-1" {
		t.Errorf("idempotency key = %v", fa.gotKey.Load())
	}
	if sc := fa.gotScope.Load().(agent.Scope); sc.Session != "s1" || sc.ParentSession != "p" {
		t.Errorf("scope = %+v", sc)
	}
}

func TestInvokePingsAndCancelsOnDisconnect(t *testing.T) {
	t.Parallel()
	fa := &fakeAgent{events: []agent.Event{agent.Text("x")}, block: true}
	hs := newServer(t, fa)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+"/invoke", strings.NewReader(`{"session":"s","text":"t"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(resp.Body)
	sawPing := false
	deadline := time.Now().Add(5 * time.Second)
	for !sawPing && time.Now().Before(deadline) {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		sawPing = line == ": ping\n"
	}
	if !sawPing {
		t.Fatal("no ': ping' comment on an idle stream")
	}
	cancel()
	resp.Body.Close()
	if !wait.Until(5*time.Second, fa.cancelled.Load) {
		t.Error("client disconnect did not cancel the turn")
	}
}

func TestHealth(t *testing.T) {
	t.Parallel()
	s := &ingress.Server{Agent: &fakeAgent{}, NoAuth: true}
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	get := func() (int, string) {
		resp, err := http.Get(hs.URL + "/health")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
		return resp.StatusCode, b.String()
	}
	if code, body := get(); code != 503 || body != "starting" {
		t.Errorf("before ready: %d %q", code, body)
	}
	s.SetReady(true)
	if code, body := get(); code != 200 || body != "ok" {
		t.Errorf("ready: %d %q", code, body)
	}
}

// GET /health stays 503 "connecting", naming them, while long connections
// are not connected.
func TestHealthWaitsForConnections(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	waiting := []string{"slack"}
	s := &ingress.Server{Agent: &fakeAgent{}, NoAuth: true, Waiting: func() []string {
		mu.Lock()
		defer mu.Unlock()
		return waiting
	}}
	s.SetReady(true)
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	get := func() (int, string) {
		resp, err := http.Get(hs.URL + "/health")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(); code != 503 || body != `{"status":"connecting","waiting":["slack"]}` {
		t.Errorf("connecting: %d %s", code, body)
	}
	mu.Lock()
	waiting = nil
	mu.Unlock()
	if code, body := get(); code != 200 || body != "ok" {
		t.Errorf("connected: %d %q", code, body)
	}
	s.Drain()
	if code, body := get(); code != 503 || body != "draining" {
		t.Errorf("draining: %d %q", code, body)
	}
}

func FuzzParseInvoke(f *testing.F) {
	f.Add([]byte(`{"session":"s","text":"t"}`))
	f.Add([]byte(`{"session":"s","text":"t","images":[{"mimeType":"image/png","data":"AA=="}]}`))
	f.Add([]byte(`{"session":""}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		scope, prompt, err := ingress.ParseInvoke(body)
		switch {
		case err == nil:
			if scope.Session == "" {
				t.Fatalf("accepted a body without a session: %q", body)
			}
			_ = prompt
		case agent.CodeOf(err) != agent.CodeInvalidCommand || err.Error() == "":
			t.Fatalf("a bad body must be invalid_command with a message: %v (%q)", err, body)
		}
	})
}

func FuzzWriteEvent(f *testing.F) {
	f.Add("text", "hello\nworld", "")
	f.Add("failed", "x\r\n\ndata: y", "code")
	f.Fuzz(func(t *testing.T, typ, s1, s2 string) {
		if typ == "" {
			return
		}
		ev := agent.Event{Type: typ, Delta: s1, Details: s1, Content: s1, Code: s2, ID: s2}
		var b strings.Builder
		if err := ingress.WriteEvent(&b, ev); err != nil {
			return
		}
		out := b.String()
		if !strings.HasPrefix(out, "data: ") || !strings.HasSuffix(out, "\n\n") || strings.Count(out, "\n") != 2 {
			t.Fatalf("not one SSE frame: %q", out)
		}
	})
}
