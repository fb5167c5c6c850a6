package feishu_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	larkcore "github.com/larksuite/oapi-sdk-go/v3/core"
	larkevent "github.com/larksuite/oapi-sdk-go/v3/event"
	"github.com/larksuite/oapi-sdk-go/v3/event/dispatcher"
	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/feishu"
	"github.com/fastagent/fastagent/internal/wire"
)

const (
	token  = "rvaYgkND1GOiu5MM0E1rncYC6PLtF7JV"
	encKey = "kU1xqMXmPa1bbDpgV4Md0cBEbFaB0cJt"
	bot    = "ou_bot0000000000000000000000000000"
)

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// encrypted wraps plain as the platform does with an Encrypt Key.
func encrypted(t *testing.T, key string, plain []byte) []byte {
	t.Helper()
	enc, err := feishu.Encrypt(key, plain)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]string{"encrypt": enc})
	return b
}

func req(h http.Header, body []byte) channels.Request {
	return channels.Request{Header: h, Body: body}
}

func door(key string) *feishu.Door {
	return &feishu.Door{Profile: feishu.Feishu(), Token: token, EncryptKey: key, Webhook: true, Bot: feishu.NewBot(bot, nil)}
}

func TestDoorVerifyEncrypted(t *testing.T) {
	t.Parallel()
	now := time.Now()
	event := fixture(t, "group_mention.json")
	body := encrypted(t, encKey, event)
	challenge := encrypted(t, encKey, fixture(t, "url_verification.json"))
	wrongTokenChallenge := encrypted(t, encKey, []byte(`{"challenge":"x","token":"nope","type":"url_verification"}`))
	// An ordinary event dressed as a challenge may not take the unsigned path.
	disguised := encrypted(t, encKey, []byte(`{"schema":"2.0","type":"url_verification","challenge":"x","token":"`+token+`","header":{"event_type":"im.message.receive_v1","token":"`+token+`"}}`))
	wrongToken := encrypted(t, encKey, []byte(strings.ReplaceAll(string(event), token, "another-token-of-the-same-length")))
	otherKey := encrypted(t, "another-encrypt-key", event)
	cases := []struct {
		name   string
		header http.Header
		body   []byte
		ok     bool
	}{
		{"signed now", feishu.Sign(encKey, now, "n1", body), body, true},
		{"signed 4 min ago", feishu.Sign(encKey, now.Add(-4*time.Minute), "n2", body), body, true},
		{"stale timestamp", feishu.Sign(encKey, now.Add(-6*time.Minute), "n3", body), body, false},
		{"future timestamp", feishu.Sign(encKey, now.Add(6*time.Minute), "n4", body), body, false},
		{"bad signature", feishu.Sign("wrong-key", now, "n5", body), body, false},
		{"body changed after signing", feishu.Sign(encKey, now, "n6", body), append([]byte(" "), body...), false},
		{"unsigned event", http.Header{}, body, false},
		{"plaintext when key set", feishu.Sign(encKey, now, "n7", event), event, false},
		{"encrypted with another key", feishu.Sign(encKey, now, "n8", otherKey), otherKey, false},
		{"wrong token inside", feishu.Sign(encKey, now, "n9", wrongToken), wrongToken, false},
		{"encrypted challenge, unsigned", http.Header{}, challenge, true},
		{"encrypted challenge, wrong token", http.Header{}, wrongTokenChallenge, false},
		{"event disguised as challenge", http.Header{}, disguised, false},
		{"not JSON", http.Header{}, []byte("encrypt=1"), false},
	}
	d := door(encKey)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := d.Verify(req(c.header, c.body))
			if (err == nil) != c.ok {
				t.Errorf("Verify = %v, want ok=%v", err, c.ok)
			}
		})
	}
}

func TestDoorVerifyPlaintext(t *testing.T) {
	t.Parallel()
	event := fixture(t, "p2p_text.json")
	cases := []struct {
		name string
		body []byte
		ok   bool
	}{
		{"right token", event, true},
		{"wrong token", []byte(strings.ReplaceAll(string(event), token, "rvaYgkND1GOiu5MM0E1rncYC6PLtF7JX")), false},
		{"no token", []byte(strings.ReplaceAll(string(event), `"token": "`+token+`",`, "")), false},
		{"challenge", fixture(t, "url_verification.json"), true},
		{"challenge, wrong token", []byte(`{"challenge":"x","token":"nope","type":"url_verification"}`), false},
		{"encrypted body but no key", encrypted(t, encKey, event), false},
	}
	d := door("")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := d.Verify(req(http.Header{}, c.body))
			if (err == nil) != c.ok {
				t.Errorf("Verify = %v, want ok=%v", err, c.ok)
			}
		})
	}
	// Under the long connection the door refuses everything.
	ws := door("")
	ws.Webhook = false
	if err := ws.Verify(req(http.Header{}, event)); err == nil || ws.Path() != "" {
		t.Errorf("websocket door: Verify = %v, Path %q; want refused, no route", err, ws.Path())
	}
}

// TestCryptoMatchesSDK: bodies encrypted and signed by the SDK's own
// helpers pass our checks, and ours pass the SDK's signature check.
func TestCryptoMatchesSDK(t *testing.T) {
	t.Parallel()
	event := fixture(t, "p2p_text.json")
	enc, err := larkcore.EncryptedEventMsg(context.Background(), event, encKey)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := feishu.Decrypt(encKey, enc)
	if err != nil || string(plain) != string(event) {
		t.Fatalf("Decrypt(SDK ciphertext) = %q, %v", plain, err)
	}
	body := encrypted(t, encKey, event)
	h := feishu.Sign(encKey, time.Now(), "nonce-1", body)
	d := dispatcher.NewEventDispatcher(token, encKey)
	if err := d.VerifySign(context.Background(), &larkevent.EventReq{Header: h, Body: body}); err != nil {
		t.Errorf("the SDK refuses our signature: %v", err)
	}
	// A wrong key never yields the event (and is refused: the result is
	// checked to be JSON besides its padding). Many ciphertexts, since
	// garbage has valid padding about once in 256.
	for i := 0; i < 2000; i++ {
		enc, err := larkcore.EncryptedEventMsg(context.Background(), event, encKey)
		if err != nil {
			t.Fatal(err)
		}
		if plain, err := feishu.Decrypt("another-key", enc); err == nil {
			t.Fatalf("Decrypt with the wrong key succeeded: %q", plain)
		}
	}
}

func TestDoorParse(t *testing.T) {
	t.Parallel()
	const group, p2p = "oc_5ce6d572455d361153b7xx51da133945", "oc_84983ff6516d731e5b5f68d4ea2e1da5"
	img := wire.Attachment{ID: "img_v2_041b28e3-5680-48c2-9af2-497ace79333g", Name: "img_v2_041b28e3-5680-48c2-9af2-497ace79333g", Mime: feishu.MimeImage}
	cases := []struct {
		name, fixture string
		context       bool
		// botUnknown: the bot's open_id cannot be resolved.
		botUnknown bool
		// want is nil for no message.
		want *wire.ChatMessage
	}{
		{name: "p2p", fixture: "p2p_text.json", want: &wire.ChatMessage{Chat: p2p, ID: "om_p2p0000000000000000000000000001",
			Event: "5e3702a84e847582be8db7fb73283c02", Direct: true, Text: "hello there"}},
		{name: "group mention", fixture: "group_mention.json", want: &wire.ChatMessage{Chat: group, ID: "om_grp0000000000000000000000000001",
			Event: "5e3702a84e847582be8db7fb73283c03", Summoned: true, Text: "what is the capital of France?"}},
		{name: "group mention, bot unknown: refused for a re-push", fixture: "group_mention.json", botUnknown: true},
		{name: "group no mention", fixture: "group_no_mention.json"},
		{name: "group no mention, context mode", fixture: "group_no_mention.json", context: true, want: &wire.ChatMessage{Chat: group,
			ID: "om_grp0000000000000000000000000002", Event: "5e3702a84e847582be8db7fb73283c04", Text: "lunch anyone?"}},
		{name: "group mention of someone else", fixture: "group_mention_other.json"},
		{name: "group mention of someone else, context mode", fixture: "group_mention_other.json", context: true, want: &wire.ChatMessage{
			Chat: group, ID: "om_grp0000000000000000000000000003", Event: "5e3702a84e847582be8db7fb73283c05", Text: "@Alice can you look at this?",
			MentionsOthers: true}},
		// A bare reply in a thread the bot may own that @mentions only
		// other people is their discussion: the chat workflow buffers it.
		{name: "thread reply mentioning only others, context mode", fixture: "thread_reply_other.json", context: true, want: &wire.ChatMessage{
			Chat: group, ID: "om_grp0000000000000000000000000007", Event: "5e3702a84e847582be8db7fb73283c0c", Root: "om_grp0000000000000000000000000001",
			Text: "@Alice can you book the bus?", MentionsOthers: true}},
		{name: "thread reply mentioning only others, mentions mode", fixture: "thread_reply_other.json"},
		{name: "thread reply", fixture: "thread_reply.json", want: &wire.ChatMessage{Chat: group, ID: "om_grp0000000000000000000000000004",
			Event: "5e3702a84e847582be8db7fb73283c06", Root: "om_grp0000000000000000000000000001", Summoned: true, Text: "and Germany? cc @Alice"}},
		{name: "quoted reply at top level is a new root", fixture: "quoted_reply.json", want: &wire.ChatMessage{Chat: p2p,
			ID: "om_p2p0000000000000000000000000002", Event: "5e3702a84e847582be8db7fb73283c07", Direct: true, Text: "about this one",
			// Its parent is loaded as primary input when the turn runs.
			Attachments: []wire.Attachment{{ID: "om_p2p0000000000000000000000000001", Name: "replied-to message", Mime: feishu.MimeParent}}}},
		{name: "bot sender", fixture: "bot_sender.json"},
		{name: "post", fixture: "post_message.json", want: &wire.ChatMessage{Chat: group, ID: "om_grp0000000000000000000000000006",
			Event: "5e3702a84e847582be8db7fb73283c09", Summoned: true, Text: "Report\nsummarise this (https://example.com/r)",
			Attachments: []wire.Attachment{img}}},
		{name: "image", fixture: "image_message.json", want: &wire.ChatMessage{Chat: p2p, ID: "om_p2p0000000000000000000000000003",
			Event: "5e3702a84e847582be8db7fb73283c0a", Direct: true, Attachments: []wire.Attachment{img}}},
		{name: "file", fixture: "file_message.json", want: &wire.ChatMessage{Chat: p2p, ID: "om_p2p0000000000000000000000000004",
			Event: "5e3702a84e847582be8db7fb73283c0b", Direct: true,
			Attachments: []wire.Attachment{{ID: "file_v2_7c2a6f0e-3b1e-4c5a-9b1b-2f3f5c1d0e9g", Name: "report.pdf"}}}},
		{name: "other event", fixture: "bot_added.json"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := door(encKey)
			if c.context {
				d.Policy.GroupMode = wire.GroupContext
			}
			if c.botUnknown {
				d.Bot = feishu.NewBot("", func(context.Context) (string, error) { return "", errors.New("bot info unavailable") })
			}
			body := encrypted(t, encKey, fixture(t, c.fixture))
			p, err := d.Parse(req(feishu.Sign(encKey, time.Now(), "n", body), body))
			if c.botUnknown {
				if !errors.Is(err, channels.ErrRetryLater) || len(p.Messages) != 0 {
					t.Fatalf("Parse with the bot unknown: %v, %d messages; want ErrRetryLater and none", err, len(p.Messages))
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if p.Answer.Status != http.StatusOK {
				t.Errorf("answer status %d, want 200", p.Answer.Status)
			}
			if c.want == nil {
				if len(p.Messages) != 0 {
					t.Fatalf("messages = %+v, want none", p.Messages)
				}
				return
			}
			if len(p.Messages) != 1 {
				t.Fatalf("messages = %+v, want one", p.Messages)
			}
			w := *c.want
			w.Kind, w.User, w.UserName, w.Policy, w.UniqueIDs = feishu.KindFeishu, "ou_84aad35d084aa403a838cf73ee18467", "ou_84aad35d084aa403a838cf73ee18467", d.Policy, true
			if got := p.Messages[0]; !reflect.DeepEqual(got, w) {
				t.Errorf("message\n got %+v\nwant %+v", got, w)
			}
		})
	}
}

// TestDoorParseRecall: a recalled message (webhook) becomes the chat
// message telling of it: its ID, marked Deleted, in either group mode.
func TestDoorParseRecall(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{wire.GroupMentions, wire.GroupContext} {
		d := door(encKey)
		d.Policy.GroupMode = mode
		body := encrypted(t, encKey, fixture(t, "message_recalled.json"))
		p, err := d.Parse(req(feishu.Sign(encKey, time.Now(), "n", body), body))
		if err != nil {
			t.Fatalf("%s: Parse: %v", mode, err)
		}
		want := wire.ChatMessage{Kind: feishu.KindFeishu, UniqueIDs: true, Chat: "oc_5ce6d572455d361153b7xx51da133945",
			ID: "om_grp0000000000000000000000000004", Event: "5e3702a84e847582be8db7fb73283c0d", Deleted: true, Policy: d.Policy}
		if len(p.Messages) != 1 || !reflect.DeepEqual(p.Messages[0], want) {
			t.Errorf("%s: messages %+v, want %+v", mode, p.Messages, want)
		}
	}
}

func TestDoorParseChallenge(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"", encKey} {
		body := fixture(t, "url_verification.json")
		if key != "" {
			body = encrypted(t, key, body)
		}
		p, err := door(key).Parse(req(http.Header{}, body))
		if err != nil {
			t.Fatalf("key %q: Parse: %v", key, err)
		}
		if string(p.Answer.Body) != `{"challenge":"ajls384kdjx98XX"}` || len(p.Messages) != 0 {
			t.Errorf("key %q: answer %s, %d messages", key, p.Answer.Body, len(p.Messages))
		}
	}
}

// TestDoorParseDuplicate: a re-pushed event parses to the same message
// and event IDs, which the chat workflow deduplicates (see
// TestDuplicatePushesOneTurn).
func TestDoorParseDuplicate(t *testing.T) {
	t.Parallel()
	d := door("")
	body := fixture(t, "group_mention.json")
	a, errA := d.Parse(req(http.Header{}, body))
	b, errB := d.Parse(req(http.Header{}, body))
	if errA != nil || errB != nil || len(a.Messages) != 1 || !reflect.DeepEqual(a.Messages, b.Messages) {
		t.Fatalf("two parses of one push differ: %+v %v / %+v %v", a.Messages, errA, b.Messages, errB)
	}
}

func TestBotResolvedOnce(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	calls := 0
	b := feishu.NewBot("", func(context.Context) (string, error) { mu.Lock(); calls++; mu.Unlock(); return bot, nil })
	if err := b.Resolve(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if got := b.OpenID(context.Background()); got != bot {
			t.Fatalf("OpenID = %q", got)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 1 {
		t.Errorf("bot info fetched %d times, want 1", calls)
	}
	failing := feishu.NewBot("", func(context.Context) (string, error) { return "", errors.New("down") })
	if got := failing.OpenID(context.Background()); got != "" {
		t.Fatalf("OpenID = %q, want empty", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := failing.Resolve(ctx); err == nil {
		t.Error("Resolve of an unknown bot succeeded")
	}
}

// TestGroupMentionWhileBotUnknown: while the bot's open_id cannot be
// resolved (the bot info API fails at startup), a group @mention is not
// acknowledged and dropped: it is refused (503) so Feishu pushes it again,
// the runtime's resolver retries the lookup, and the re-push is a summons.
func TestGroupMentionWhileBotUnknown(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	lookups := 0
	d := door("")
	d.Bot = feishu.NewBot("", func(context.Context) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		lookups++
		if lookups == 1 {
			return "", errors.New("bot info: 503 from the open platform")
		}
		return bot, nil
	})
	// The runtime's resolver looks the bot up from startup.
	var ids channels.Resolver
	ids.Add(d.Bot)
	ids.Start(context.Background())
	t.Cleanup(ids.Close)
	st := &handStarter{}
	h := channels.Handler(d, st, "q", nil)
	body := fixture(t, "group_mention.json")
	push := func() int {
		r := httptest.NewRequest(http.MethodPost, "/feishu", bytes.NewReader(body))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	if code := push(); code != http.StatusServiceUnavailable {
		t.Fatalf("first push while the bot is unknown: status %d, want 503 (pushed again)", code)
	}
	if len(st.msgs) != 0 {
		t.Fatalf("handed off %+v before the bot was known", st.msgs)
	}
	select {
	case <-d.Bot.Resolved():
	case <-time.After(30 * time.Second): // a guard only: the background retry comes after about a second
		t.Fatal("the bot was never resolved in the background")
	}
	if code := push(); code != http.StatusOK {
		t.Fatalf("re-push: status %d, want 200", code)
	}
	if len(st.msgs) != 1 || !st.msgs[0].Summoned {
		t.Fatalf("handed off %+v, want the mention as a summons", st.msgs)
	}
}

// handStarter records the chat messages handed to it.
type handStarter struct {
	mu   sync.Mutex
	msgs []wire.ChatMessage
}

func (s *handStarter) SignalWithStartWorkflow(_ context.Context, _, _ string, arg interface{},
	_ client.StartWorkflowOptions, _ interface{}, _ ...interface{}) (client.WorkflowRun, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m, ok := arg.(wire.ChatMessage); ok {
		s.msgs = append(s.msgs, m)
	}
	return nil, nil
}
