package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/webhook"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/workflows"
)

// Secrets of the webhook tests (Standard Webhooks whsec_ secrets).
const (
	hookSecret  = "whsec_ZTJlLXdlYmhvb2stc2lnbmluZy1zZWNyZXQ="
	replySecret = "whsec_ZTJlLWNhbGxiYWNrLXNpZ25pbmctc2VjcmV0"
)

// callbacks is a receiver of reply callbacks: it checks each one's
// Standard Webhooks signature and keeps it.
type callbacks struct {
	t   *testing.T
	srv *httptest.Server
	mu  sync.Mutex
	got []receivedCallback
}

type receivedCallback struct {
	ID   string
	Body webhook.Callback
}

func newCallbacks(t *testing.T) *callbacks {
	c := &callbacks{t: t}
	v, err := webhook.NewStandard([]string{replySecret}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		id, err := v.Verify(r.Header, b, time.Now())
		if err != nil {
			t.Errorf("callback signature: %v", err)
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var cb webhook.Callback
		if err := json.Unmarshal(b, &cb); err != nil {
			t.Errorf("callback body %s: %v", b, err)
		}
		c.mu.Lock()
		c.got = append(c.got, receivedCallback{ID: id, Body: cb})
		c.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *callbacks) list() []receivedCallback {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]receivedCallback(nil), c.got...)
}

// hookStack is one webhook endpoint on real HTTP.
type hookStack struct {
	e    *env
	name string
	yaml string
	env  map[string]string
	door *httptest.Server
	cb   *callbacks
}

// newHookStack serves endpoint of a unique name whose file is extra plus
// the standard scheme and a reply to a callback receiver.
func newHookStack(t *testing.T, e *env, extra string) *hookStack {
	s := &hookStack{e: e, name: fmt.Sprintf("e2e%d", time.Now().UnixNano()), cb: newCallbacks(t)}
	s.env = map[string]string{"HOOK_SECRET": hookSecret, "HOOK_REPLY_SECRET": replySecret}
	s.yaml = "scheme: standard\nsecretEnv: HOOK_SECRET\nreply:\n  url: " + s.cb.srv.URL + "\n  secretEnv: HOOK_REPLY_SECRET\n  allowPrivate: true\n" + extra
	ch, err := webhook.New(s.name, []byte(s.yaml), func(k string) string { return s.env[k] })
	if err != nil {
		t.Fatal(err)
	}
	s.door = httptest.NewServer(ch.Door.(channels.Served).Handler(e.client, e.queue, nil, e.agent))
	t.Cleanup(s.door.Close)
	t.Cleanup(func() { (&slackStack{e: e}).terminate(s.session()) })
	return s
}

func (s *hookStack) session() string { return "hook:" + s.name }

func (s *hookStack) startWorker() sdkworker.Worker {
	s.e.t.Helper()
	ch, err := webhook.New(s.name, []byte(s.yaml), func(k string) string { return s.env[k] })
	if err != nil {
		s.e.t.Fatal(err)
	}
	return s.e.startWorker(withRepliers(ch.Replier))
}

// send POSTs body signed as delivery id at ts.
func (s *hookStack) send(id string, ts time.Time, body []byte) (int, []byte) {
	s.e.t.Helper()
	h, err := webhook.SignStandard([]string{hookSecret}, id, ts, body)
	if err != nil {
		s.e.t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, s.door.URL, bytes.NewReader(body))
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.e.t.Fatalf("POST %s: %v", s.door.URL, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// Three redeliveries of one event (the third re-signed with a fresh
// timestamp, as senders retry) and a late one after the answer run one
// turn and send one callback, signed, whose webhook-id is the turn key
// and whose text is the stored answer.
func TestWebhookExactlyOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newHookStack(t, e, "")
	s.startWorker()
	body := []byte(`{"type":"ticket.created","text":"the printer is on fire"}`)
	const id = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"
	key := "hook:" + s.name + ":" + id
	now := time.Now()
	for i, ts := range []time.Time{now, now, now.Add(2 * time.Second)} {
		code, resp := s.send(id, ts, body)
		var acc webhook.Accepted
		if code != http.StatusAccepted || json.Unmarshal(resp, &acc) != nil || acc.Turn != key || acc.Session != s.session() {
			t.Fatalf("delivery %d: %d %s", i+1, code, resp)
		}
	}
	gh := &githubStack{e: e}
	want := gh.stored(s.session(), key)
	waitFor(t, time.Minute, "the callback", func() bool { return len(s.cb.list()) > 0 })
	if code, _ := s.send(id, time.Now(), body); code != http.StatusAccepted {
		t.Fatalf("late redelivery: %d", code)
	}
	time.Sleep(3 * time.Second) // deliberate: a second turn or callback would show itself now
	if n := e.kit.Model.Count(); n != 1 {
		t.Errorf("model calls = %d, want 1", n)
	}
	cbs := s.cb.list()
	if len(cbs) != 1 || cbs[0].ID != key || cbs[0].Body.Text != want || cbs[0].Body.Turn != key ||
		cbs[0].Body.Session != s.session() || want == "" {
		t.Fatalf("callbacks %+v, want one with webhook-id %s and the stored answer %q", cbs, key, want)
	}
}

// Forty signed events to one session, each answered 202, are forty turns:
// every one reaches the model and gets a callback with its answer, none a
// busy notice (an acknowledged event is a kept event).
func TestWebhookBurstAllKept(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newHookStack(t, e, "prompt: 'event {{.body.n}}'\n")
	s.startWorker()
	const n = 40
	for i := range n {
		body := []byte(fmt.Sprintf(`{"n":%d}`, i))
		if code, resp := s.send(fmt.Sprintf("msg_burst_%d", i), time.Now(), body); code != http.StatusAccepted {
			t.Fatalf("event %d: %d %s", i, code, resp)
		}
	}
	waitFor(t, 4*time.Minute, "a callback for every event", func() bool { return len(s.cb.list()) >= n })
	answered := 0
	for _, cb := range s.cb.list() {
		if cb.Body.Status == "completed" {
			answered++
		}
	}
	prompts := map[string]bool{}
	for _, r := range e.kit.Model.Requests() {
		prompts[r.LastUserText()] = true
	}
	if len(prompts) != n || answered != n {
		t.Fatalf("%d of %d events reached the model, %d callbacks answered (of %d)", len(prompts), n, answered, len(s.cb.list()))
	}
}

// respond: wait answers with the turn's final text.
func TestWebhookRespondWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newHookStack(t, e, "respond: wait\nwait: 50s\nprompt: 'Say {{.body.word}}'\n")
	s.startWorker()
	e.kit.Model.Enqueue(modelserver.Reply{Text: []string{"the answer", " is here"}})
	code, resp := s.send("msg_wait_1", time.Now(), []byte(`{"word":"hello"}`))
	var acc webhook.Accepted
	if code != http.StatusOK || json.Unmarshal(resp, &acc) != nil {
		t.Fatalf("%d %s, want 200 with the answer", code, resp)
	}
	key := "hook:" + s.name + ":msg_wait_1"
	if acc.Status != "completed" || acc.Text != "the answer is here" || acc.Turn != key {
		t.Errorf("answer %+v", acc)
	}
	if want := (&githubStack{e: e}).stored(s.session(), key); want != acc.Text {
		t.Errorf("answered %q, stored %q", acc.Text, want)
	}
}

// With no worker, the door still ACKs (the turn waits in Temporal), and
// respond: wait falls back to 202 past its bound.
func TestWebhookNoWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newHookStack(t, e, "respond: wait\nwait: 1s\n")
	code, resp := s.send("msg_nobody", time.Now(), []byte(`{}`))
	if code != http.StatusAccepted {
		t.Fatalf("%d %s, want 202", code, resp)
	}
	if !exists(t, e, s.session()) {
		t.Fatal("the session workflow was not started")
	}
}

// Two worker processes serve a webhook endpoint with a callback. The one
// streaming the turn's model reply is SIGKILLed: the turn is retried on
// the other and the receiver gets exactly one callback, equal to the
// stored answer.
func TestWebhookWorkerKilled(t *testing.T) {
	t.Parallel() // it mostly waits out a worker's timeouts: shards.sh runs it beside the others
	e := newProcessEnv(t)
	s := newHookStack(t, e, "")
	dir := filepath.Join(e.kit.Dir, "channels", "webhooks")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, s.name+".yaml"), []byte(s.yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	for k, v := range s.env {
		e.extraEnv = append(e.extraEnv, k+"="+v)
	}
	slow := make([]string, 20)
	for i := range slow {
		slow[i] = fmt.Sprintf("w%d ", i)
	}
	e.kit.Model.Enqueue(
		modelserver.Reply{Text: slow, ChunkDelay: 250 * time.Millisecond},
		modelserver.Reply{Text: []string{"recovered", " answer"}},
	)
	workers := map[int]*proc{}
	for range 2 {
		p := e.startWorkerProcess(t)
		workers[p.cmd.Process.Pid] = p
	}
	streaming := make(chan struct{}, 1)
	e.kit.Model.OnFirstDelta(func(modelserver.Request, time.Time) {
		select {
		case streaming <- struct{}{}:
		default:
		}
	})
	if code, resp := s.send("msg_kill_1", time.Now(), []byte(`{"type":"incident"}`)); code != http.StatusAccepted {
		t.Fatalf("%d %s", code, resp)
	}
	select {
	case <-streaming:
	case <-time.After(2 * time.Minute):
		t.Fatal("the model stream never started")
	}
	pid := activityWorkerPID(t, e, s.session(), workflows.ActivityModelGenerate)
	p, ok := workers[pid]
	if !ok {
		t.Fatalf("the activity runs on pid %d, not one of our workers", pid)
	}
	p.kill(t)
	key := "hook:" + s.name + ":msg_kill_1"
	want := (&githubStack{e: e}).stored(s.session(), key)
	waitFor(t, 2*time.Minute, "the callback", func() bool { return len(s.cb.list()) > 0 })
	time.Sleep(2 * time.Second) // deliberate: a second callback would show itself now
	if cbs := s.cb.list(); len(cbs) != 1 || want != "recovered answer" || cbs[0].Body.Text != want || cbs[0].ID != key {
		t.Fatalf("callbacks %+v, want exactly one with the stored answer %q", cbs, want)
	}
}

// The session workflow's deliver signal, sent with a plain Temporal client
// and plain JSON (no fastagent types), as docs/webhooks.md documents it, runs
// one turn; sent again with the same key it runs none.
func TestDeliverSignalFromOutside(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker()
	raw, err := client.Dial(client.Options{HostPort: server.FrontendAddress(), Namespace: server.Namespace(),
		Credentials:       client.NewAPIKeyStaticCredentials(server.APIKey()),
		ConnectionOptions: client.ConnectionOptions{TLSDisabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(raw.Close)
	session := e.session("from-temporal")
	t.Cleanup(func() { (&slackStack{e: e}).terminate(session) })
	signal := map[string]any{"key": "billing:inv-42", "source": "billing", "prompt": map[string]any{"text": "Invoice 42 failed; tell me why"}}
	for range 2 {
		_, err = raw.SignalWithStartWorkflow(context.Background(), "session:"+session, "deliver", signal,
			client.StartWorkflowOptions{TaskQueue: e.queue}, "Session", map[string]any{"session": session})
		if err != nil {
			t.Fatal(err)
		}
	}
	want := (&githubStack{e: e}).stored(session, "billing:inv-42")
	time.Sleep(2 * time.Second) // deliberate: a second turn would show itself now
	if n := e.kit.Model.Count(); n != 1 || want == "" {
		t.Errorf("model calls = %d (answer %q), want 1", n, want)
	}
}
