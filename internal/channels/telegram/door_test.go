package telegram

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/testsupport/faketelegram"
	"github.com/fastagent/fastagent/internal/wire"
)

var testBot = BotInfo{ID: faketelegram.BotID, Username: faketelegram.BotUsername}

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func testDoor(mode string) *Door {
	return &Door{Secret: "s3cr3t-token_1", Webhook: true,
		Policy: wire.ChatPolicy{DirectSession: wire.SessionContinuous, GroupSession: wire.SessionContinuous, GroupMode: mode},
		Bot:    &Bot{info: testBot}}
}

func TestVerifySecret(t *testing.T) {
	t.Parallel()
	body := fixture(t, "private.json")
	cases := []struct {
		name    string
		header  http.Header
		webhook bool
		ok      bool
	}{
		{"right secret", http.Header{SecretHeader: {"s3cr3t-token_1"}}, true, true},
		{"wrong secret", http.Header{SecretHeader: {"s3cr3t-token_2"}}, true, false},
		{"secret prefix", http.Header{SecretHeader: {"s3cr3t"}}, true, false},
		{"missing header", http.Header{}, true, false},
		{"empty header", http.Header{SecretHeader: {""}}, true, false},
		{"polling refuses webhooks", http.Header{SecretHeader: {"s3cr3t-token_1"}}, false, false},
	}
	for _, c := range cases {
		d := testDoor(wire.GroupContext)
		d.Webhook = c.webhook
		err := d.Verify(channels.Request{Header: c.header, Body: body})
		if (err == nil) != c.ok {
			t.Errorf("%s: Verify = %v, want ok=%v", c.name, err, c.ok)
		}
	}
	if (&Door{Webhook: true}).Verify(channels.Request{Header: http.Header{SecretHeader: {""}}}) == nil {
		t.Error("a door without a secret accepted a request")
	}
}

func TestParseFixtures(t *testing.T) {
	t.Parallel()
	cases := []struct {
		file, mode string
		want       *wire.ChatMessage // nil: no message
	}{
		{"private.json", wire.GroupMentions, &wire.ChatMessage{Chat: "424242", ID: "11", Event: "815000101", Direct: true,
			User: "424242", UserName: "@ada", Text: "what is the capital of France?"}},
		{"group_mention.json", wire.GroupMentions, &wire.ChatMessage{Chat: "-1001234567890", ID: "12", Event: "815000102",
			Summoned: true, User: "424242", UserName: "@ada", Text: "summarize the thread please"}},
		{"reply_to_bot.json", wire.GroupMentions, &wire.ChatMessage{Chat: "-1001234567890", ID: "14", Event: "815000103",
			Summoned: true, User: "434343", UserName: "@bob", Text: "and in French?"}},
		// A reply to the bot that @mentions only other people is their
		// discussion: context in context mode, nothing in mentions mode.
		{"reply_to_bot_mentions_other.json", wire.GroupContext, &wire.ChatMessage{Chat: "-1001234567890", ID: "19", Event: "815000108",
			MentionsOthers: true, User: "434343", UserName: "@bob", Text: "@ada can you check this against the plan?"}},
		{"reply_to_bot_mentions_other.json", wire.GroupMentions, nil},
		{"group_chatter.json", wire.GroupMentions, nil},
		{"group_chatter.json", wire.GroupContext, &wire.ChatMessage{Chat: "-1001234567890", ID: "16", Event: "815000105",
			User: "434343", UserName: "@bob", Text: "the launch moves to Friday"}},
		{"group_stop.json", wire.GroupMentions, &wire.ChatMessage{Chat: "-1001234567890", ID: "17", Event: "815000106",
			Summoned: true, Stop: true, Command: wire.CommandStop, User: "424242", UserName: "@ada"}},
		{"photo.json", wire.GroupMentions, &wire.ChatMessage{Chat: "424242", ID: "15", Event: "815000104", Direct: true,
			User: "424242", UserName: "@ada", Text: "what is in this picture?",
			Attachments: []wire.Attachment{{ID: "AgACAgQAAxkBAAIBs2_large", Name: "photo-AQADs2_l.jpg", Mime: MimePhoto, Size: 60000}}}},
		{"document.json", wire.GroupMentions, &wire.ChatMessage{Chat: "424242", ID: "18", Event: "815000107", Direct: true,
			User: "424242", UserName: "@ada", Text: "summarize this",
			Attachments: []wire.Attachment{{ID: "BQACAgQAAxkBAAIBtGdoc", Name: "notes.txt", Mime: "text/plain", Size: 27}}}},
	}
	for _, c := range cases {
		d := testDoor(c.mode)
		p, err := d.Parse(channels.Request{Header: http.Header{SecretHeader: {d.Secret}}, Body: fixture(t, c.file)})
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		if p.Answer.Status != http.StatusOK {
			t.Errorf("%s: answer %d", c.file, p.Answer.Status)
		}
		if c.want == nil {
			if len(p.Messages) != 0 {
				t.Errorf("%s (%s): messages %+v, want none", c.file, c.mode, p.Messages)
			}
			continue
		}
		if len(p.Messages) != 1 {
			t.Fatalf("%s (%s): %d messages, want 1", c.file, c.mode, len(p.Messages))
		}
		want := *c.want
		want.Kind, want.Policy = Kind, d.Policy
		got, _ := json.Marshal(p.Messages[0])
		exp, _ := json.Marshal(want)
		if string(got) != string(exp) {
			t.Errorf("%s (%s):\n got %s\nwant %s", c.file, c.mode, got, exp)
		}
	}
}

func TestSummon(t *testing.T) {
	t.Parallel()
	group := Chat{ID: -100, Type: "group"}
	cmd := func(text string) *Message {
		n := strings.IndexByte(text+" ", ' ')
		return &Message{Chat: group, Text: text, Entities: []Entity{{Type: "bot_command", Offset: 0, Length: n}}}
	}
	cases := []struct {
		name           string
		m              *Message
		bot            BotInfo
		summoned, stop bool
		direct         bool
		text           string
	}{
		{"private always", &Message{Chat: Chat{ID: 1, Type: "private"}, Text: "hi"}, testBot, false, false, true, "hi"},
		{"group chatter", &Message{Chat: group, Text: "hi all"}, testBot, false, false, false, "hi all"},
		{"mention", &Message{Chat: group, Text: "hey @FastAgent_E2E_Bot look", Entities: []Entity{{Type: "mention", Offset: 4, Length: 18}}}, testBot, true, false, false, "hey look"},
		{"mention after emoji (UTF-16 offsets)", &Message{Chat: group, Text: "🎉 @fastagent_e2e_bot yay", Entities: []Entity{{Type: "mention", Offset: 3, Length: 18}}}, testBot, true, false, false, "🎉 yay"},
		{"mention of another bot", &Message{Chat: group, Text: "@other_bot hi", Entities: []Entity{{Type: "mention", Offset: 0, Length: 10}}}, testBot, false, false, false, "@other_bot hi"},
		{"longer username kept", &Message{Chat: group, Text: "@fastagent_e2e_bot2 hi", Entities: []Entity{{Type: "mention", Offset: 0, Length: 19}}}, testBot, false, false, false, "@fastagent_e2e_bot2 hi"},
		{"text mention", &Message{Chat: group, Text: "E2E hi", Entities: []Entity{{Type: "text_mention", Offset: 0, Length: 3, User: &User{ID: testBot.ID}}}}, testBot, true, false, false, "E2E hi"},
		{"reply to the bot", &Message{Chat: group, Text: "more", ReplyToMessage: &Message{From: &User{ID: testBot.ID, IsBot: true}}}, testBot, true, false, false, "more"},
		{"reply to the bot mentioning only someone else", &Message{Chat: group, Text: "@ada see this", Entities: []Entity{{Type: "mention", Offset: 0, Length: 4}},
			ReplyToMessage: &Message{From: &User{ID: testBot.ID, IsBot: true}}}, testBot, false, false, false, "@ada see this"},
		{"reply to the bot text-mentioning someone else", &Message{Chat: group, Text: "Ada see this", Entities: []Entity{{Type: "text_mention", Offset: 0, Length: 3, User: &User{ID: 5}}},
			ReplyToMessage: &Message{From: &User{ID: testBot.ID, IsBot: true}}}, testBot, false, false, false, "Ada see this"},
		{"reply to the bot mentioning someone else and the bot", &Message{Chat: group, Text: "@ada @fastagent_e2e_bot compare",
			Entities:       []Entity{{Type: "mention", Offset: 0, Length: 4}, {Type: "mention", Offset: 5, Length: 18}},
			ReplyToMessage: &Message{From: &User{ID: testBot.ID, IsBot: true}}}, testBot, true, false, false, "@ada compare"},
		{"reply to someone else", &Message{Chat: group, Text: "more", ReplyToMessage: &Message{From: &User{ID: 5}}}, testBot, false, false, false, "more"},
		{"command", cmd("/ask what now"), testBot, true, false, false, "/ask what now"},
		{"command for this bot", cmd("/ask@fastagent_e2e_bot what now"), testBot, true, false, false, "/ask what now"},
		{"command for another bot", cmd("/ask@other_bot what now"), testBot, false, false, false, "/ask@other_bot what now"},
		{"stop", cmd("/stop"), testBot, true, true, false, "/stop"},
		{"stop for another bot", cmd("/stop@other_bot"), testBot, false, false, false, "/stop@other_bot"},
		{"mention while the bot is unknown", &Message{Chat: group, Text: "@fastagent_e2e_bot hi", Entities: []Entity{{Type: "mention", Offset: 0, Length: 18}}}, BotInfo{}, false, false, false, "@fastagent_e2e_bot hi"},
		{"reply while the bot is unknown", &Message{Chat: group, Text: "more", ReplyToMessage: &Message{From: &User{ID: testBot.ID}}}, BotInfo{}, false, false, false, "more"},
		{"caption mention", &Message{Chat: group, Caption: "@fastagent_e2e_bot what is this", CaptionEntities: []Entity{{Type: "mention", Offset: 0, Length: 18}}}, testBot, true, false, false, "what is this"},
	}
	for _, c := range cases {
		s := Summon(c.m, c.bot)
		if s.Summoned != c.summoned || s.Stop != c.stop || s.Direct != c.direct || s.Text != c.text {
			t.Errorf("%s: %+v, want summoned=%v stop=%v direct=%v text=%q", c.name, s, c.summoned, c.stop, c.direct, c.text)
		}
	}
}

func TestIgnoredUpdates(t *testing.T) {
	t.Parallel()
	d := testDoor(wire.GroupContext)
	for _, body := range []string{
		`{"update_id":2,"message":{"message_id":2,"chat":{"id":1,"type":"private"},"from":{"id":9,"is_bot":true},"text":"x"}}`,
		`{"update_id":3,"message":{"message_id":3,"chat":{"id":1,"type":"private"},"from":{"id":1},"sticker":{}}}`,
	} {
		m, err := d.Message(context.Background(), mustUpdate(t, body))
		if err != nil || m != nil {
			t.Errorf("%s: %+v, %v; want nothing", body, m, err)
		}
	}
	if _, err := d.Parse(channels.Request{Body: []byte("{not json")}); err == nil {
		t.Error("unreadable body parsed")
	}
}

// TestParseEdited: an edited message becomes the chat message telling of
// the edit (its ID, new text, marked Edited): the chat workflow replaces
// its buffered line and never re-runs a turn for it. An edit of a bot's
// message is nothing.
func TestParseEdited(t *testing.T) {
	t.Parallel()
	d := testDoor(wire.GroupContext)
	m, err := d.Message(context.Background(), mustUpdate(t,
		`{"update_id":21,"edited_message":{"message_id":16,"chat":{"id":-100,"type":"supergroup"},"from":{"id":434343,"username":"bob"},"text":"the launch moves to Monday"}}`))
	if err != nil || m == nil {
		t.Fatalf("edited_message: %+v, %v; want a message", m, err)
	}
	if !m.Edited || m.ID != "16" || m.Event != "21" || m.Chat != "-100" || m.Text != "the launch moves to Monday" || m.UserName != "@bob" {
		t.Errorf("edited message %+v", m)
	}
	m, err = d.Message(context.Background(), mustUpdate(t,
		`{"update_id":22,"edited_message":{"message_id":17,"chat":{"id":-100,"type":"supergroup"},"from":{"id":9,"is_bot":true},"text":"x"}}`))
	if err != nil || m != nil {
		t.Errorf("edited bot message: %+v, %v; want nothing", m, err)
	}
}

func mustUpdate(t *testing.T, s string) Update {
	t.Helper()
	var u Update
	if err := json.Unmarshal([]byte(s), &u); err != nil {
		t.Fatal(err)
	}
	return u
}

func TestNew(t *testing.T) {
	t.Parallel()
	env := map[string]string{EnvBotToken: "123:abc", EnvSecret: "good_secret-1"}
	get := func(extra map[string]string) func(string) string {
		return func(k string) string {
			if v, ok := extra[k]; ok {
				return v
			}
			return env[k]
		}
	}
	cases := []struct {
		name, file string
		extra      map[string]string
		err        string
		polling    bool
	}{
		{"webhook default", "", nil, "", false},
		{"polling", "transport: polling\n", map[string]string{EnvSecret: ""}, "", true},
		{"no token", "", map[string]string{EnvBotToken: ""}, "TELEGRAM_BOT_TOKEN is not set", false},
		{"webhook without secret", "", map[string]string{EnvSecret: ""}, "TELEGRAM_WEBHOOK_SECRET is not set", false},
		{"bad secret", "", map[string]string{EnvSecret: "has space"}, "secret token is 1-256", false},
		{"bad transport", "transport: carrier-pigeon\n", nil, "transport", false},
		{"bad group mode", "groupMode: all\n", nil, "groupMode", false},
		{"unknown key", "botToken: 123:abc\n", nil, "botToken", false},
		{"bad API URL", "", map[string]string{EnvAPIURL: "ftp://x"}, "TELEGRAM_API_URL", false},
		{"custom env names", "botTokenEnv: MY_TOKEN\nsecretTokenEnv: MY_SECRET\n", map[string]string{"MY_TOKEN": "1:x", "MY_SECRET": "abc", EnvBotToken: "", EnvSecret: ""}, "", false},
	}
	for _, c := range cases {
		ch, err := New([]byte(c.file), get(c.extra), nil)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want one containing %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if (ch.Conn != nil) != c.polling || (ch.Door.Path() == "") != c.polling {
			t.Errorf("%s: conn %v path %q", c.name, ch.Conn, ch.Door.Path())
		}
		if strings.Contains(ch.Door.(*Door).Secret, "123:abc") {
			t.Errorf("%s: token in the door", c.name)
		}
	}
}

func TestPhotoSizeChoice(t *testing.T) {
	t.Parallel()
	sizes := []PhotoSize{{FileID: "s", Width: 90, Height: 60, FileSize: 1000}, {FileID: "m", Width: 800, Height: 600, FileSize: 90_000},
		{FileID: "l", Width: 2560, Height: 1920, FileSize: 2_000_000}}
	cases := []struct {
		cap  int64
		want string
	}{{1 << 20, "m"}, {10 << 20, "l"}, {500, "s"}}
	for _, c := range cases {
		got := attachments(&Message{Photo: sizes}, c.cap)
		if len(got) != 1 || got[0].ID != c.want {
			t.Errorf("cap %d: %+v, want size %s", c.cap, got, c.want)
		}
	}
}

// A press of a live reply's stop button is the stop command for that
// message's turn, acknowledged in the webhook's answer; commands to the
// bot are commands; a stop button's data naming no message is nothing.
func TestParseStopClickAndCommands(t *testing.T) {
	t.Parallel()
	d := testDoor(wire.GroupMentions)
	click := []byte(`{"update_id": 9, "callback_query": {"id": "q1", "from": {"id": 424242, "is_bot": false, "first_name": "Ada", "username": "ada"},
		"message": {"message_id": 99, "chat": {"id": 424242, "type": "private"}, "date": 1, "text": "Once"}, "data": "fa:stop:11"}}`)
	p, err := d.Parse(channels.Request{Body: click})
	if err != nil || len(p.Messages) != 1 {
		t.Fatalf("click: %v %+v", err, p)
	}
	m := p.Messages[0]
	if m.Command != wire.CommandStop || m.StopTurn != "11" || m.Chat != "424242" || !m.Direct || m.ID != "stop-click:q1" {
		t.Errorf("click message %+v", m)
	}
	if !strings.Contains(string(p.Answer.Body), `"answerCallbackQuery"`) || !strings.Contains(string(p.Answer.Body), `"q1"`) {
		t.Errorf("click answer %s", p.Answer.Body)
	}
	bad := []byte(strings.Replace(string(click), "fa:stop:11", "fa:stop:eleven", 1))
	if p, _ := d.Parse(channels.Request{Body: bad}); len(p.Messages)+len(p.Decisions) != 0 {
		t.Errorf("a stop naming no message: %+v", p)
	}
	for text, want := range map[string]string{"/new": wire.CommandNew, "/status": wire.CommandStatus, "/help": wire.CommandHelp, "/new please": ""} {
		body := []byte(`{"update_id": 10, "message": {"message_id": 12, "from": {"id": 424242, "is_bot": false, "first_name": "Ada"},
			"chat": {"id": 424242, "type": "private"}, "date": 1, "text": "` + text + `",
			"entities": [{"offset": 0, "length": 4, "type": "bot_command"}]}}`)
		p, err := d.Parse(channels.Request{Body: body})
		if err != nil || len(p.Messages) != 1 || p.Messages[0].Command != want {
			t.Errorf("%q: %v %+v, want command %q", text, err, p.Messages, want)
		}
	}
}
