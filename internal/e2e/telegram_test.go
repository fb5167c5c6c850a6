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
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/telegram"
	"github.com/fastagent/fastagent/internal/relay"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/testsupport/faketelegram"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// The bot's secrets in these tests.
const (
	telegramToken  = "7000000001:AAE2E-bot-token"
	telegramSecret = "e2e-webhook-secret_1"
)

// telegramStack is a Telegram webhook door on real HTTP and a replier on
// the fake Bot API; its chats are unique per test.
type telegramStack struct {
	e     *env
	fake  *faketelegram.Server
	ch    *channels.Channel
	door  *httptest.Server
	group int64
	user  int64
}

func telegramEnv(fake *faketelegram.Server, extra map[string]string) func(string) string {
	vars := map[string]string{telegram.EnvBotToken: telegramToken, telegram.EnvSecret: telegramSecret, telegram.EnvAPIURL: fake.URL}
	for k, v := range extra {
		vars[k] = v
	}
	return func(k string) string { return vars[k] }
}

func newTelegramStack(t *testing.T, e *env) *telegramStack {
	fake := faketelegram.New(telegramToken)
	t.Cleanup(fake.Close)
	ch, err := telegram.New(nil, telegramEnv(fake, nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	ch.Replier.(*telegram.Replier).Refs = e.kit.Store // as serve wires it
	// Until the bot's identity is known the door refuses group messages
	// (Telegram delivers them again); a deployment resolves it at start.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ch.Door.(*telegram.Door).Bot.Resolve(ctx); err != nil {
		t.Fatalf("resolve the bot: %v", err)
	}
	n := time.Now().UnixNano() % 1_000_000_000
	s := &telegramStack{e: e, fake: fake, ch: ch, group: -1_000_000_000_000 - n, user: 1_000_000 + n}
	s.door = httptest.NewServer(channels.Handler(ch.Door, e.client, e.queue, nil))
	t.Cleanup(s.door.Close)
	t.Cleanup(func() {
		for _, chat := range []int64{s.group, s.user} {
			c := strconv.FormatInt(chat, 10)
			_ = e.client.TerminateWorkflow(context.Background(), workflows.ChatWorkflowID(telegram.Kind, c), "", "test over")
			_ = e.client.TerminateWorkflow(context.Background(), workflows.WorkflowID(workflows.ChatSession(telegram.Kind, c, "")), "", "test over")
		}
	})
	return s
}

func (s *telegramStack) startWorker() {
	s.e.t.Helper()
	s.e.startWorker(withRepliers(s.ch.Replier))
}

// update loads a real update shape from the channel's testdata and moves
// it into chat (and, for a reply, onto the bot's message replyTo).
func telegramUpdate(t *testing.T, name string, chat, replyTo int64) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "channels", "telegram", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var u map[string]any
	if err := json.Unmarshal(b, &u); err != nil {
		t.Fatal(err)
	}
	msg := u["message"].(map[string]any)
	msg["chat"].(map[string]any)["id"] = chat
	if r, ok := msg["reply_to_message"].(map[string]any); ok {
		r["chat"].(map[string]any)["id"] = chat
		r["message_id"] = replyTo
	}
	out, _ := json.Marshal(u)
	return out
}

// post sends body to the door with secret ("" = no header) and returns the
// status.
func (s *telegramStack) post(body []byte, secret string) int {
	s.e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.door.URL+telegram.Path, bytes.NewReader(body))
	if err != nil {
		s.e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if secret != "" {
		req.Header.Set(telegram.SecretHeader, secret)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.e.t.Fatalf("POST /telegram: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

func (s *telegramStack) send(body []byte) {
	s.e.t.Helper()
	if code := s.post(body, telegramSecret); code != http.StatusOK {
		s.e.t.Fatalf("update: status %d", code)
	}
}

func (s *telegramStack) exists(id string) bool {
	_, err := s.e.client.DescribeWorkflowExecution(context.Background(), id, "")
	return err == nil
}

// telegramAnswer waits for the turn record of message id in chat and
// returns its stored answer.
func telegramAnswer(t *testing.T, e *env, chat int64, id string) string {
	t.Helper()
	c := strconv.FormatInt(chat, 10)
	session, key := workflows.ChatSession(telegram.Kind, c, ""), workflows.ChatTurnKey(telegram.Kind, c, id)
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

// settled reports whether the bot's only reply to message replyTo in chat
// shows want rendered as HTML.
func settledTelegram(fake *faketelegram.Server, chat, replyTo int64, want string) bool {
	var got []faketelegram.Message
	for _, m := range fake.Messages(chat) {
		if m.ReplyTo == replyTo {
			got = append(got, m)
		}
	}
	return len(got) == 1 && got[0].ParseMode == "HTML" && got[0].Text == telegram.HTML(want)
}

// TestTelegramDoorRefuses: a wrong or missing secret token is answered 401
// and starts nothing.
func TestTelegramDoorRefuses(t *testing.T) {
	t.Parallel()
	s := newTelegramStack(t, newEnv(t))
	body := telegramUpdate(t, "private.json", s.user, 0)
	for _, secret := range []string{"", "wrong-secret", telegramSecret + "x"} {
		if code := s.post(body, secret); code != http.StatusUnauthorized {
			t.Errorf("secret %q: status %d, want 401", secret, code)
		}
	}
	if s.exists(workflows.ChatWorkflowID(telegram.Kind, strconv.FormatInt(s.user, 10))) {
		t.Error("a refused request started a workflow")
	}
}

// TestTelegramExactlyOnce: one private message delivered three times (and
// once more after the answer) runs one turn and leaves one message: the
// preview, edited to the stored answer as HTML.
func TestTelegramExactlyOnce(t *testing.T) {
	t.Parallel()
	s := newTelegramStack(t, newEnv(t))
	s.startWorker()
	s.e.kit.Model.EnqueueFor("capital of France", modelserver.Reply{Text: []string{"The capital ", "of France ", "is **Paris**."}, ChunkDelay: 300 * time.Millisecond})
	body := telegramUpdate(t, "private.json", s.user, 0)
	for i := 0; i < 3; i++ {
		s.send(body)
	}
	want := telegramAnswer(t, s.e, s.user, "11")
	waitFor(t, 30*time.Second, "the final message", func() bool { return settledTelegram(s.fake, s.user, 11, want) })
	s.send(body)                // a late redelivery
	time.Sleep(2 * time.Second) // deliberate: a second turn or message would show itself now
	if n := s.e.kit.Model.Count(); n != 1 {
		t.Errorf("model calls = %d, want 1", n)
	}
	msgs := s.fake.Messages(s.user)
	if len(msgs) != 1 || msgs[0].Text != "The capital of France is <b>Paris</b>." {
		t.Fatalf("messages %+v: want one, the HTML answer", msgs)
	}
	if len(s.fake.Calls("sendMessage")) != 1 {
		t.Errorf("%d sendMessage calls, want 1", len(s.fake.Calls("sendMessage")))
	}
}

// TestTelegramGroup: in a group, chatter is buffered and folded into the
// next summons (an @mention); a reply to the bot's message is a summons
// too; a photo in a private chat reaches the model as vision input.
func TestTelegramGroup(t *testing.T) {
	t.Parallel()
	s := newTelegramStack(t, newEnv(t))
	s.startWorker()
	s.e.kit.Model.EnqueueFor("summarize the thread", modelserver.Reply{Text: []string{"Summary: launch on Friday."}})
	s.e.kit.Model.EnqueueFor("and in French", modelserver.Reply{Text: []string{"Lancement vendredi."}})
	s.e.kit.Model.EnqueueFor("in this picture", modelserver.Reply{Text: []string{"A black square."}})

	s.send(telegramUpdate(t, "group_chatter.json", s.group, 0))
	s.send(telegramUpdate(t, "group_mention.json", s.group, 0))
	want := telegramAnswer(t, s.e, s.group, "12")
	waitFor(t, 30*time.Second, "the mention's answer", func() bool { return settledTelegram(s.fake, s.group, 12, want) })
	bot := s.fake.Messages(s.group)[0].MessageID

	s.send(telegramUpdate(t, "reply_to_bot.json", s.group, bot))
	want2 := telegramAnswer(t, s.e, s.group, "14")
	waitFor(t, 30*time.Second, "the reply's answer", func() bool { return settledTelegram(s.fake, s.group, 14, want2) })

	var img bytes.Buffer
	if err := png.Encode(&img, image.NewRGBA(image.Rect(0, 0, 4, 4))); err != nil {
		t.Fatal(err)
	}
	s.fake.AddFile("AgACAgQAAxkBAAIBs2_large", faketelegram.File{Path: "photos/file_9.jpg", Data: img.Bytes()})
	s.send(telegramUpdate(t, "photo.json", s.user, 0))
	want3 := telegramAnswer(t, s.e, s.user, "15")
	waitFor(t, 30*time.Second, "the photo's answer", func() bool { return settledTelegram(s.fake, s.user, 15, want3) })

	reqs := s.e.kit.Model.Requests()
	if len(reqs) != 3 || want != "Summary: launch on Friday." || want2 != "Lancement vendredi." || want3 != "A black square." {
		t.Fatalf("%d model requests; answers %q %q %q", len(reqs), want, want2, want3)
	}
	last := func(r modelserver.Request) modelserver.Message {
		var u modelserver.Message
		for _, m := range r.Messages {
			if m.Role == "user" {
				u = m
			}
		}
		return u
	}
	if u := last(reqs[0]); !strings.Contains(u.Content, "@bob: the launch moves to Friday") || !strings.Contains(u.Content, "summarize the thread please") ||
		strings.Contains(u.Content, "@fastagent_e2e_bot") {
		t.Errorf("mention prompt %q: want the buffered chatter folded in and the bot's @username removed", u.Content)
	}
	if u := last(reqs[1]); strings.Contains(u.Content, "the launch moves to Friday") || !strings.Contains(u.Content, "and in French?") {
		t.Errorf("reply prompt %q: want the chatter folded only once", u.Content)
	}
	wantImage := "data:image/png;base64," + base64.StdEncoding.EncodeToString(img.Bytes())
	gotImage := false
	for _, p := range last(reqs[2]).Parts {
		gotImage = gotImage || (p.Type == "image_url" && p.ImageURL == wantImage)
	}
	if !gotImage {
		t.Errorf("photo prompt %+v: want the largest size as vision input", last(reqs[2]))
	}
	if gf := s.fake.Calls("getFile"); len(gf) != 1 || gf[0].Params["file_id"] != "AgACAgQAAxkBAAIBs2_large" {
		t.Errorf("getFile calls %+v: want one for the largest size", gf)
	}
}

// TestTelegramStop: /stop@<bot> in a group aborts the running turn of the
// chat's session; the preview settles to the failed turn's note.
func TestTelegramStop(t *testing.T) {
	t.Parallel()
	s := newTelegramStack(t, newEnv(t))
	s.startWorker()
	slow := make([]string, 60)
	for i := range slow {
		slow[i] = fmt.Sprintf("w%d ", i)
	}
	s.e.kit.Model.EnqueueFor("summarize the thread", modelserver.Reply{Text: slow, ChunkDelay: 200 * time.Millisecond})
	s.send(telegramUpdate(t, "group_mention.json", s.group, 0))
	waitFor(t, time.Minute, "the preview", func() bool { return len(s.fake.Messages(s.group)) == 1 })
	s.send(telegramUpdate(t, "group_stop.json", s.group, 0))
	waitFor(t, time.Minute, "the stopped turn's note", func() bool {
		m := s.fake.Messages(s.group)
		return len(m) == 1 && m[0].ParseMode == "HTML" && strings.Contains(m[0].Text, "stopped by @ada")
	})
	if n := s.e.kit.Model.Count(); n != 1 {
		t.Errorf("model calls = %d: /stop must not be a turn", n)
	}
}

// TestTelegramWorkerKilledMidStream: two `fastagent worker` processes
// (channels/telegram.yaml, TELEGRAM_* from the environment) serve a turn;
// the one rendering its preview (Channel.Stream) is SIGKILLed mid-stream.
// The same message settles to the stored answer; nothing is sent twice.
func TestTelegramWorkerKilledMidStream(t *testing.T) {
	t.Parallel() // it mostly waits out a worker's timeouts: shards.sh runs it beside the others
	e := newProcessEnv(t)
	s := newTelegramStack(t, e)
	if err := os.MkdirAll(filepath.Join(e.kit.Dir, "channels"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.kit.Dir, "channels", "telegram.yaml"), []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.extraEnv = []string{telegram.EnvBotToken + "=" + telegramToken, telegram.EnvSecret + "=" + telegramSecret, telegram.EnvAPIURL + "=" + s.fake.URL}
	slow := make([]string, 20)
	for i := range slow {
		slow[i] = fmt.Sprintf("w%d ", i)
	}
	e.kit.Model.Enqueue(modelserver.Reply{Text: slow, ChunkDelay: 250 * time.Millisecond},
		modelserver.Reply{Text: []string{"recovered", " answer"}})
	workers := map[int]*proc{}
	for i := 0; i < 2; i++ {
		p := e.startWorkerProcess(t)
		workers[p.cmd.Process.Pid] = p
	}
	s.send(telegramUpdate(t, "private.json", s.user, 0))
	session := workflows.ChatSession(telegram.Kind, strconv.FormatInt(s.user, 10), "")
	waitFor(t, 2*time.Minute, "the preview streaming", func() bool {
		m := s.fake.Messages(s.user)
		return len(m) == 1 && m[0].Edits >= 1
	})
	pid := activityWorkerPID(t, e, session, workflows.ActivityChannelStream)
	p, ok := workers[pid]
	if !ok {
		t.Fatalf("Channel.Stream runs on pid %d, not one of our workers", pid)
	}
	before := s.fake.Messages(s.user)[0]
	p.kill(t)

	want := telegramAnswer(t, e, s.user, "11")
	waitFor(t, time.Minute, "the message settled to the stored answer", func() bool { return settledTelegram(s.fake, s.user, 11, want) })
	time.Sleep(2 * time.Second) // deliberate: a second message would show itself now
	msgs := s.fake.Messages(s.user)
	t.Logf("killed worker %d; edits before the kill %d, after %d; answer %q", pid, before.Edits, msgs[0].Edits, want)
	if len(msgs) != 1 || msgs[0].MessageID != before.MessageID {
		t.Fatalf("messages %+v: want the one preview, settled", msgs)
	}
	if msgs[0].Text != telegram.HTML(want) {
		t.Errorf("final text %q, want the stored answer %q", msgs[0].Text, want)
	}
}

// TestTelegramPolling: transport polling through serve.RunConnectors:
// /health is 503 until the first getUpdates succeeds, then 200; a queued
// update becomes a turn answered in the chat; cancelling stops polling.
func TestTelegramPolling(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fake := faketelegram.New(telegramToken)
	t.Cleanup(fake.Close)
	fake.Fail("getUpdates", 2) // keeps /health at 503 for a moment
	ch, err := telegram.New([]byte("transport: polling\n"), telegramEnv(fake, map[string]string{telegram.EnvSecret: ""}), nil)
	if err != nil {
		t.Fatal(err)
	}
	ch.Conn.(*telegram.Conn).Backoff = 500 * time.Millisecond
	ch.Conn.(*telegram.Conn).PollTimeout = 2 * time.Second
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
		t.Errorf("/health before the first poll = %d, want 503", code)
	}
	waitFor(t, 15*time.Second, "/health 200", func() bool { return health() == http.StatusOK })

	chat := 2_000_000 + time.Now().UnixNano()%1_000_000_000
	t.Cleanup(func() {
		c := strconv.FormatInt(chat, 10)
		_ = e.client.TerminateWorkflow(context.Background(), workflows.ChatWorkflowID(telegram.Kind, c), "", "test over")
		_ = e.client.TerminateWorkflow(context.Background(), workflows.WorkflowID(workflows.ChatSession(telegram.Kind, c, "")), "", "test over")
	})
	fake.Push(telegramUpdate(t, "private.json", chat, 0))
	want := telegramAnswer(t, e, chat, "11")
	waitFor(t, 30*time.Second, "the answer", func() bool { return settledTelegram(fake, chat, 11, want) })
	if want != "what is the capital of France?" {
		t.Errorf("answer %q, want the echo", want)
	}
	if len(fake.Calls("deleteWebhook")) != 1 {
		t.Errorf("deleteWebhook calls %d, want 1", len(fake.Calls("deleteWebhook")))
	}
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Errorf("polling stopped with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("polling did not stop after cancel")
	}
}
