package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/feishu"
	"github.com/fastagent/fastagent/internal/relay"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/testsupport/fakefeishu"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// The Feishu app's secrets in these tests.
const (
	feishuAppID  = "cli_e2e0000000000000"
	feishuSecret = "e2e-app-secret"
	feishuToken  = "e2e-verification-token"
	feishuKey    = "e2e-encrypt-key"
	feishuUser   = "ou_e2e_user"
)

// feishuStack is a Feishu webhook door on real HTTP (Encrypt Key set) and
// a replier on the fake open platform; chat is unique per test.
type feishuStack struct {
	e       *env
	fake    *fakefeishu.Server
	profile feishu.Profile
	door    *httptest.Server
	reply   *feishu.Replier
	chat    string
	n       atomic.Int64
}

func newFeishuStack(t *testing.T, e *env) *feishuStack {
	fake := fakefeishu.New()
	t.Cleanup(fake.Close)
	p := feishu.Feishu()
	p.BaseURL = fake.URL
	s := &feishuStack{e: e, fake: fake, profile: p, chat: fmt.Sprintf("oc_e2e%d", time.Now().UnixNano())}
	d := &feishu.Door{Profile: p, Token: feishuToken, EncryptKey: feishuKey, Webhook: true, Bot: feishu.NewBot(fake.BotOpenID, nil)}
	s.door = httptest.NewServer(channels.Handler(d, e.client, e.queue, nil))
	t.Cleanup(s.door.Close)
	s.reply = feishu.NewReplier(p, feishuAppID, feishuSecret, nil)
	return s
}

func (s *feishuStack) startWorker() {
	s.e.t.Helper()
	s.e.startWorker(withRepliers(s.reply))
}

// msgID returns a message ID unique to this test run.
func (s *feishuStack) msgID() string {
	return fmt.Sprintf("om_%s_%d", strings.TrimPrefix(s.chat, "oc_"), s.n.Add(1))
}

// feishuEvent is an im.message.receive_v1 event (schema 2.0) from a user
// in chat: a p2p text message, in root's thread when root is set.
func feishuEvent(chat, id, root, text string) []byte {
	msg := map[string]any{"message_id": id, "chat_id": chat, "chat_type": "p2p", "message_type": "text",
		"create_time": strconv.FormatInt(time.Now().UnixMilli(), 10)}
	c, _ := json.Marshal(map[string]string{"text": text})
	msg["content"] = string(c)
	if root != "" {
		msg["root_id"], msg["parent_id"], msg["thread_id"] = root, root, "omt_"+root
	}
	b, _ := json.Marshal(map[string]any{
		"schema": "2.0",
		"header": map[string]any{"event_id": "ev_" + id, "event_type": feishu.EventMessageReceive, "token": feishuToken,
			"create_time": strconv.FormatInt(time.Now().UnixMilli(), 10), "app_id": feishuAppID, "tenant_key": "tk_e2e"},
		"event": map[string]any{
			"sender":  map[string]any{"sender_id": map[string]any{"open_id": feishuUser}, "sender_type": "user", "tenant_key": "tk_e2e"},
			"message": msg,
		},
	})
	return b
}

// sealed encrypts plain as the platform does with an Encrypt Key.
func sealed(t *testing.T, plain []byte) []byte {
	t.Helper()
	enc, err := feishu.Encrypt(feishuKey, plain)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]string{"encrypt": enc})
	return b
}

// post sends body to the door with headers h and returns the status.
func (s *feishuStack) post(body []byte, h http.Header) int {
	s.e.t.Helper()
	code, _ := s.postRaw(body, h)
	return code
}

// postRaw sends body to the door with headers h and returns the status and
// the response body.
func (s *feishuStack) postRaw(body []byte, h http.Header) (int, []byte) {
	s.e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.door.URL+"/feishu", bytes.NewReader(body))
	if err != nil {
		s.e.t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.e.t.Fatalf("POST /feishu: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// send pushes a user message encrypted and signed now, wanting 200.
func (s *feishuStack) send(id, root, text string) {
	s.e.t.Helper()
	body := sealed(s.e.t, feishuEvent(s.chat, id, root, text))
	if code := s.post(body, feishu.Sign(feishuKey, time.Now(), "nonce-"+id, body)); code != http.StatusOK {
		s.e.t.Fatalf("push %s: status %d", id, code)
	}
}

func (s *feishuStack) terminate(session string) {
	_ = s.e.client.TerminateWorkflow(context.Background(), workflows.WorkflowID(session), "", "test over")
	_ = s.e.client.TerminateWorkflow(context.Background(), workflows.ChatWorkflowID(feishu.KindFeishu, s.chat), "", "test over")
}

// feishuAnswer waits for the turn record of message id (session
// feishu:<root>) and returns its stored answer.
func feishuAnswer(t *testing.T, e *env, root, id string) string {
	t.Helper()
	session, key := feishu.KindFeishu+":"+root, feishu.KindFeishu+":"+id
	var rec agentloop.Outcome
	waitFor(t, time.Minute, "the turn record of "+id, func() bool {
		r, err := e.kit.Store.Turn(context.Background(), session, key)
		return err == nil && json.Unmarshal(r.Outcome, &rec) == nil
	})
	steps, err := relay.StoredSteps(context.Background(), e.kit.Store, session, rec)
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, st := range steps {
		if st = strings.TrimSpace(st); st != "" {
			parts = append(parts, st)
		}
	}
	return strings.Join(parts, "\n\n")
}

// cardOf returns the card entity a reply message shows.
func cardOf(fake *fakefeishu.Server, m fakefeishu.Message) (fakefeishu.Card, bool) {
	var ref struct {
		Type string `json:"type"`
		Data struct {
			CardID string `json:"card_id"`
		} `json:"data"`
	}
	if json.Unmarshal([]byte(m.Content), &ref) != nil || ref.Type != "card" {
		return fakefeishu.Card{}, false
	}
	return fake.Card(ref.Data.CardID)
}

// replyTo returns the bot's replies to message id.
func replyTo(fake *fakefeishu.Server, id string) []fakefeishu.Message {
	var out []fakefeishu.Message
	for _, m := range fake.Messages() {
		if m.ReplyTo == id {
			out = append(out, m)
		}
	}
	return out
}

// settledCard reports whether message id has one reply, a card no longer
// streaming that shows want.
func settledCard(fake *fakefeishu.Server, id, want string) bool {
	r := replyTo(fake, id)
	if len(r) != 1 {
		return false
	}
	c, ok := cardOf(fake, r[0])
	return ok && !c.Streaming && c.Text == want
}

func increasing(seqs []int) bool {
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] {
			return false
		}
	}
	return true
}

// TestFeishuDoorRefuses: unsigned, wrongly signed, plaintext (an Encrypt
// Key is set), stale and wrong-token requests are answered 401 and start
// nothing.
func TestFeishuDoorRefuses(t *testing.T) {
	t.Parallel()
	s := newFeishuStack(t, newEnv(t))
	id := s.msgID()
	plain := feishuEvent(s.chat, id, "", "hello")
	body := sealed(t, plain)
	var wrongToken map[string]any
	_ = json.Unmarshal(plain, &wrongToken)
	wrongToken["header"].(map[string]any)["token"] = "not-the-token"
	wt, _ := json.Marshal(wrongToken)
	wrongBody := sealed(t, wt)
	cases := []struct {
		name string
		body []byte
		h    http.Header
	}{
		{"unsigned", body, http.Header{}},
		{"wrong signature", body, feishu.Sign("not-the-key", time.Now(), "n1", body)},
		{"plaintext when encrypted", plain, feishu.Sign(feishuKey, time.Now(), "n2", plain)},
		{"stale", body, feishu.Sign(feishuKey, time.Now().Add(-6*time.Minute), "n3", body)},
		{"wrong token", wrongBody, feishu.Sign(feishuKey, time.Now(), "n4", wrongBody)},
	}
	for _, c := range cases {
		if code := s.post(c.body, c.h); code != http.StatusUnauthorized {
			t.Errorf("%s: status %d, want 401", c.name, code)
		}
	}
	if s.workflowExists(workflows.ChatWorkflowID(feishu.KindFeishu, s.chat)) || s.workflowExists(workflows.WorkflowID(feishu.KindFeishu+":"+id)) {
		t.Error("a refused request started a workflow")
	}
}

func (s *feishuStack) workflowExists(id string) bool {
	_, err := s.e.client.DescribeWorkflowExecution(context.Background(), id, "")
	return err == nil
}

// TestFeishuExactlyOnce: one encrypted, signed message pushed three times
// (the platform re-pushes even after an ACK), and once more after the
// answer, runs one turn and makes one reply: one CardKit card, replied in
// the message's thread, settled to the stored answer with increasing
// sequence numbers.
func TestFeishuExactlyOnce(t *testing.T) {
	t.Parallel()
	s := newFeishuStack(t, newEnv(t))
	s.startWorker()
	id := s.msgID()
	t.Cleanup(func() { s.terminate(feishu.KindFeishu + ":" + id) })
	s.e.kit.Model.EnqueueFor("capital of France", modelserver.Reply{Text: []string{"The capital ", "of France ", "is Paris."}, ChunkDelay: 100 * time.Millisecond})
	for i := 0; i < 3; i++ {
		s.send(id, "", "what is the capital of France?")
	}
	want := feishuAnswer(t, s.e, id, id)
	waitFor(t, 30*time.Second, "the card settled to the stored answer", func() bool { return settledCard(s.fake, id, want) })
	s.send(id, "", "what is the capital of France?") // a late re-push
	time.Sleep(2 * time.Second)                      // deliberate: a second turn or reply would show itself now

	if n := s.e.kit.Model.Count(); n != 1 {
		t.Errorf("model calls = %d, want 1", n)
	}
	if want != "The capital of France is Paris." {
		t.Errorf("stored answer %q", want)
	}
	msgs := s.fake.Messages()
	if len(msgs) != 1 || s.fake.Cards() != 1 {
		t.Fatalf("messages %+v, %d cards: want one card replied once", msgs, s.fake.Cards())
	}
	// A reply call may be repeated (the live render and the settle), but
	// always with the turn's idempotency uuid: the platform keeps one.
	for _, c := range s.fake.Calls("im.reply") {
		var b struct {
			UUID string `json:"uuid"`
		}
		if json.Unmarshal(c.Body, &b) != nil || b.UUID != msgs[0].UUID {
			t.Errorf("reply call %s without the turn's uuid %s", c.Body, msgs[0].UUID)
		}
	}
	m := msgs[0]
	c, _ := cardOf(s.fake, m)
	if m.ReplyTo != id || !m.InThread || m.MsgType != "interactive" || c.Text != want || c.Streaming || !increasing(c.Seqs) {
		t.Errorf("reply %+v, card %+v: want a settled card with %q in %s's thread, sequences increasing", m, c, want, id)
	}
}

// TestFeishuQueuedTurn: a second message in a root's thread while the
// first turn streams slowly gets its card at once showing "⏳ Queued";
// that card then streams the second answer and settles to it.
func TestFeishuQueuedTurn(t *testing.T) {
	t.Parallel()
	s := newFeishuStack(t, newEnv(t))
	s.startWorker()
	root, second := s.msgID(), s.msgID()
	t.Cleanup(func() { s.terminate(feishu.KindFeishu + ":" + root) })
	slow := make([]string, 12)
	for i := range slow {
		slow[i] = fmt.Sprintf("step%d ", i)
	}
	s.e.kit.Model.EnqueueFor("plan a trip", modelserver.Reply{Text: slow, ChunkDelay: 300 * time.Millisecond})
	s.e.kit.Model.EnqueueFor("and the budget", modelserver.Reply{Text: []string{"About ", "two ", "thousand ", "euros."}, ChunkDelay: 300 * time.Millisecond})
	streaming := make(chan struct{}, 1)
	s.e.kit.Model.OnFirstDelta(func(modelserver.Request, time.Time) {
		select {
		case streaming <- struct{}{}:
		default:
		}
	})
	s.send(root, "", "plan a trip")
	select {
	case <-streaming:
	case <-time.After(time.Minute):
		t.Fatal("the first turn never streamed")
	}
	s.send(second, root, "and the budget?")

	// The second card is mounted while the first turn still streams.
	waitFor(t, 30*time.Second, "the queued card", func() bool { return len(replyTo(s.fake, second)) == 1 })
	first := replyTo(s.fake, root)
	if len(first) != 1 {
		t.Fatalf("first reply %+v", first)
	}
	if c, _ := cardOf(s.fake, first[0]); !c.Streaming {
		t.Error("the queued card was mounted only after the first turn settled")
	}
	q, _ := cardOf(s.fake, replyTo(s.fake, second)[0])
	var created []string
	for _, c := range s.fake.Calls("cardkit.create") {
		created = append(created, string(c.Body))
	}
	if len(created) != 2 || !strings.Contains(created[1], "⏳ Queued") {
		t.Errorf("card creations %q: want the second created showing ⏳ Queued", created)
	}

	want1, want2 := feishuAnswer(t, s.e, root, root), feishuAnswer(t, s.e, root, second)
	waitFor(t, 30*time.Second, "both cards settled", func() bool {
		return settledCard(s.fake, root, want1) && settledCard(s.fake, second, want2)
	})
	c2, _ := s.fake.Card(q.ID)
	if want2 != "About two thousand euros." || c2.Updates < 2 || !increasing(c2.Seqs) {
		t.Errorf("second card %+v: want it streamed (content updates, then the settle) to %q", c2, want2)
	}
	if m := replyTo(s.fake, second)[0]; !m.InThread {
		t.Errorf("second reply %+v not in the thread", m)
	}
	if n := s.e.kit.Model.Count(); n != 2 || len(s.fake.Messages()) != 2 {
		t.Errorf("model calls %d, messages %d: want 2 and 2", n, len(s.fake.Messages()))
	}
}

// TestFeishuWorkerKilledMidStream: two `fastagent worker` processes
// (channels/feishu.yaml, FEISHU_* from the environment) serve a turn; the
// one rendering its card (Channel.Stream) is SIGKILLed mid-stream. The
// same card settles to the stored answer, with sequence numbers strictly
// increasing across the kill, and nothing is replied twice.
func TestFeishuWorkerKilledMidStream(t *testing.T) {
	t.Parallel() // it mostly waits out a worker's timeouts: shards.sh runs it beside the others
	e := newProcessEnv(t)
	s := newFeishuStack(t, e)
	if err := os.MkdirAll(filepath.Join(e.kit.Dir, "channels"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.kit.Dir, "channels", "feishu.yaml"), []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.extraEnv = []string{"FEISHU_APP_ID=" + feishuAppID, "FEISHU_APP_SECRET=" + feishuSecret,
		"FEISHU_VERIFICATION_TOKEN=" + feishuToken, "FEISHU_ENCRYPT_KEY=" + feishuKey, "FEISHU_BASE_URL=" + s.fake.URL}
	slow := make([]string, 16)
	for i := range slow {
		slow[i] = fmt.Sprintf("w%d ", i)
	}
	e.kit.Model.Enqueue(modelserver.Reply{Text: slow, ChunkDelay: 200 * time.Millisecond},
		modelserver.Reply{Text: []string{"recovered", " answer"}})
	workers := map[int]*proc{}
	for i := 0; i < 2; i++ {
		p := e.startWorkerProcess(t)
		workers[p.cmd.Process.Pid] = p
	}
	id := s.msgID()
	session := feishu.KindFeishu + ":" + id
	t.Cleanup(func() { s.terminate(session) })
	s.send(id, "", "stream slowly")

	// Mid-stream: the card is posted and has been updated.
	var card string
	waitFor(t, 2*time.Minute, "the card streaming", func() bool {
		r := replyTo(s.fake, id)
		if len(r) != 1 {
			return false
		}
		c, ok := cardOf(s.fake, r[0])
		card = c.ID
		return ok && len(c.Seqs) >= 2
	})
	pid := activityWorkerPID(t, e, session, workflows.ActivityChannelStream)
	p, ok := workers[pid]
	if !ok {
		t.Fatalf("Channel.Stream runs on pid %d, not one of our workers", pid)
	}
	before, _ := s.fake.Card(card)
	p.kill(t)

	want := feishuAnswer(t, e, id, id)
	waitFor(t, time.Minute, "the card settled to the stored answer", func() bool { return settledCard(s.fake, id, want) })
	time.Sleep(2 * time.Second) // deliberate: a second reply would show itself now
	after, _ := s.fake.Card(card)
	t.Logf("killed worker %d; sequences before the kill %v, after %v", pid, before.Seqs, after.Seqs)
	if len(s.fake.Messages()) != 1 || s.fake.Cards() != 1 {
		t.Fatalf("messages %+v, %d cards: want one card replied once", s.fake.Messages(), s.fake.Cards())
	}
	if !increasing(after.Seqs) || len(after.Seqs) <= len(before.Seqs) {
		t.Errorf("sequences %v (before the kill %v): want strictly increasing, with updates after the kill", after.Seqs, before.Seqs)
	}
	if after.Text != want || after.Streaming {
		t.Errorf("card %+v, want it settled to %q", after, want)
	}
}

// activityWorkerPID asks Temporal which worker process runs the session's
// pending activity of type name.
func activityWorkerPID(t *testing.T, e *env, session, name string) int {
	t.Helper()
	var pid int
	waitFor(t, 30*time.Second, "a running "+name+" in "+session, func() bool {
		d, err := e.client.DescribeWorkflowExecution(context.Background(), workflows.WorkflowID(session), "")
		if err != nil {
			return false
		}
		for _, pa := range d.GetPendingActivities() {
			if pa.GetActivityType().GetName() != name {
				continue
			}
			if id := pa.GetLastWorkerIdentity(); id != "" {
				if p, err := strconv.Atoi(strings.SplitN(id, "@", 2)[0]); err == nil {
					pid = p
					return true
				}
			}
		}
		return false
	})
	return pid
}

// TestFeishuWebsocket: the long connection (transport: websocket, only App
// ID and Secret) through serve.RunConnectors: /health is 503 until it has
// connected, then 200; a pushed event is ACKed and becomes a turn answered
// with a card; after the fake drops the connection the client reconnects
// and the next event is answered too.
func TestFeishuWebsocket(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fake := fakefeishu.New()
	t.Cleanup(fake.Close)
	fake.Delay("ws.endpoint", time.Second) // keeps /health at 503 for a moment
	vars := map[string]string{"FEISHU_APP_ID": feishuAppID, "FEISHU_APP_SECRET": feishuSecret, "FEISHU_BASE_URL": fake.URL}
	ch, err := feishu.New(feishu.Feishu(), []byte("transport: websocket\n"), func(k string) string { return vars[k] }, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.startWorker(withRepliers(ch.Replier))
	srv := e.server(e.agent)
	srv.NoAuth = true
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	health := func() int {
		resp, err := http.Get(hs.URL + "/health")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var starter client.Client = e.client
	errc := serve.RunConnectors(ctx, []*channels.Channel{ch}, starter, e.queue, func() { srv.SetReady(true) },
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if code := health(); code != http.StatusServiceUnavailable {
		t.Errorf("/health before the connection = %d, want 503", code)
	}
	waitFor(t, 15*time.Second, "/health 200", func() bool { return health() == http.StatusOK })

	chat := fmt.Sprintf("oc_ws%d", time.Now().UnixNano())
	t.Cleanup(func() {
		_ = e.client.TerminateWorkflow(context.Background(), workflows.ChatWorkflowID(feishu.KindFeishu, chat), "", "test over")
	})
	for i, text := range []string{"first over the socket", "second after a reconnect"} {
		if i == 1 {
			fake.Drop()
			waitFor(t, 15*time.Second, "the reconnect", func() bool { return len(fake.Calls("ws.connect")) == 2 && fake.Connected() == 1 })
		}
		id := fmt.Sprintf("om_%s_%d", strings.TrimPrefix(chat, "oc_"), i)
		t.Cleanup(func() {
			_ = e.client.TerminateWorkflow(context.Background(), workflows.WorkflowID(feishu.KindFeishu+":"+id), "", "test over")
		})
		start := time.Now()
		code, err := fake.Push(feishuEvent(chat, id, "", text), 5*time.Second)
		if err != nil || code != http.StatusOK {
			t.Fatalf("push %d: ACK %d, %v; want 200", i, code, err)
		}
		t.Logf("event %d ACKed in %s", i, time.Since(start))
		want := feishuAnswer(t, e, id, id)
		waitFor(t, 30*time.Second, "the card of "+id, func() bool { return settledCard(fake, id, want) })
		if want != text {
			t.Errorf("answer %q, want the echo %q", want, text)
		}
	}
	if n := len(fake.Messages()); n != 2 {
		t.Errorf("%d replies, want 2", n)
	}
	select {
	case err := <-errc:
		t.Errorf("the long connection stopped: %v", err)
	default:
	}
}

// TestFeishuFilesAndParent: a top-level quoted reply carrying an image,
// sent through the door, reaches the model with the replied-to message's
// text as primary input and the image as vision input, both fetched by
// the worker when the turn runs.
func TestFeishuFilesAndParent(t *testing.T) {
	t.Parallel()
	s := newFeishuStack(t, newEnv(t))
	s.startWorker()
	parent, id := s.msgID(), s.msgID()
	t.Cleanup(func() { s.terminate(feishu.KindFeishu + ":" + id) })
	var img bytes.Buffer
	if err := png.Encode(&img, image.NewRGBA(image.Rect(0, 0, 4, 4))); err != nil {
		t.Fatal(err)
	}
	s.fake.AddUserMessage(fakefeishu.UserMessage{ID: parent, MsgType: "text", Content: `{"text":"the launch moves to Friday"}`})
	s.fake.AddResource(id, "img_e2e", fakefeishu.Resource{Type: "image", Data: img.Bytes()})

	var ev map[string]any
	_ = json.Unmarshal(feishuEvent(s.chat, id, "", ""), &ev)
	msg := ev["event"].(map[string]any)["message"].(map[string]any)
	msg["parent_id"], msg["root_id"], msg["message_type"] = parent, parent, "post"
	msg["content"] = `{"title":"","content":[[{"tag":"text","text":"is that realistic?"}],[{"tag":"img","image_key":"img_e2e"}]]}`
	plain, _ := json.Marshal(ev)
	body := sealed(t, plain)
	if code := s.post(body, feishu.Sign(feishuKey, time.Now(), "n-files", body)); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	want := feishuAnswer(t, s.e, id, id)
	waitFor(t, 30*time.Second, "the card", func() bool { return settledCard(s.fake, id, want) })
	reqs := s.e.kit.Model.Requests()
	if len(reqs) != 1 {
		t.Fatalf("model requests = %d, want 1", len(reqs))
	}
	var user *modelserver.Message
	for i := range reqs[0].Messages {
		if reqs[0].Messages[i].Role == "user" {
			user = &reqs[0].Messages[i]
		}
	}
	if user == nil {
		t.Fatal("no user message")
	}
	wantImage := "data:image/png;base64," + base64.StdEncoding.EncodeToString(img.Bytes())
	gotImage := false
	for _, p := range user.Parts {
		gotImage = gotImage || (p.Type == "image_url" && p.ImageURL == wantImage)
	}
	if !gotImage || !strings.Contains(user.Content, "The message this replies to (primary input):\nthe launch moves to Friday") ||
		!strings.Contains(user.Content, "is that realistic?") {
		t.Errorf("user message %q (image %v): want the parent's text first, the reply, and the image", user.Content, gotImage)
	}
}
