package slack_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/slack"
	"github.com/fastagent/fastagent/internal/wire"
)

const secret = "8f742231b10e8888abcd99yyyzzz85a5"

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDoorVerify(t *testing.T) {
	t.Parallel()
	body := fixture(t, "app_mention.json")
	now := time.Now()
	cases := []struct {
		name   string
		header http.Header
		body   []byte
		ok     bool
	}{
		{"signed now", slack.Sign(secret, now, body), body, true},
		{"signed 4 min ago", slack.Sign(secret, now.Add(-4*time.Minute), body), body, true},
		{"stale timestamp", slack.Sign(secret, now.Add(-6*time.Minute), body), body, false},
		{"future timestamp", slack.Sign(secret, now.Add(6*time.Minute), body), body, false},
		{"wrong secret", slack.Sign("other-secret", now, body), body, false},
		{"body changed", slack.Sign(secret, now, body), append([]byte(" "), body...), false},
		{"no headers", http.Header{}, body, false},
	}
	d := &slack.Door{SigningSecret: secret}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := d.Verify(channels.Request{Header: c.header, Body: c.body})
			if (err == nil) != c.ok {
				t.Errorf("Verify = %v, want ok=%v", err, c.ok)
			}
		})
	}
}

func TestDoorParse(t *testing.T) {
	t.Parallel()
	cases := []struct {
		fixture string
		// wantID is "" for no message, else the message's ts.
		wantChat, wantID, wantRoot, wantText string
		direct, summoned                     bool
		// context is the door in context group mode.
		context bool
		// others: the message mentions only other people.
		others bool
		// deleted, edited: the message tells of a deletion, an edit.
		deleted, edited bool
	}{
		{fixture: "app_mention.json", wantChat: "T061EG9R6:C0LAN2Q65", wantID: "1515449522.000016", wantText: "what is the capital of France?", summoned: true},
		// The same message as a message.channels event: the same ID.
		{fixture: "message_channels.json", wantChat: "T061EG9R6:C0LAN2Q65", wantID: "1515449522.000016", wantText: "what is the capital of France?", summoned: true},
		{fixture: "message_im.json", wantChat: "T061EG9R6:D0PNCRP9N", wantID: "1525215129.000001", wantText: "hello there", direct: true},
		// A mention inside a thread names its root.
		{fixture: "message_thread_reply.json", wantChat: "T061EG9R6:C0LAN2Q65", wantID: "1515449600.000200", wantRoot: "1515449522.000016", wantText: "and Germany?", summoned: true},
		{fixture: "bot_message.json"},
		{fixture: "own_message.json"},
		{fixture: "own_message_unknown_bot.json"},
		{fixture: "me_message.json"},
		// An edit in a DM is nothing; in a channel in context mode it tells
		// the chat workflow the message's new text (it replaces a buffered
		// line, never re-runs a turn).
		{fixture: "message_changed.json", context: true},
		{fixture: "message_changed_channel.json"},
		{fixture: "message_changed_channel.json", context: true, wantChat: "T061EG9R6:C0LAN2Q65", wantID: "1515449700.000300", wantText: "lunch at one?", edited: true},
		// A deleted user message: its ID, marked deleted (in either mode).
		{fixture: "message_deleted.json", wantChat: "T061EG9R6:D0PNCRP9N", wantID: "1525215129.000001", direct: true, deleted: true},
		// A deleted bot message (our reply) is nothing to us.
		{fixture: "message_deleted_bot.json", context: true},
		// Chatter is dropped in mentions mode, passed on in context mode.
		{fixture: "channel_chatter.json"},
		{fixture: "channel_chatter.json", context: true, wantChat: "T061EG9R6:C0LAN2Q65", wantID: "1515449700.000300", wantText: "lunch anyone?"},
		{fixture: "url_verification.json"},
		// A thread reply also sent to the channel is a reply in its thread.
		{fixture: "thread_broadcast.json", wantChat: "T061EG9R6:C0LAN2Q65", wantID: "1515449610.000210", wantRoot: "1515449522.000016", wantText: "and Spain?", summoned: true},
		// A reply that mentions only someone else is their discussion.
		{fixture: "thread_reply_mentions_other.json", context: true, wantChat: "T061EG9R6:C0LAN2Q65", wantID: "1515449620.000220", wantRoot: "1515449522.000016", wantText: "<@U0OTHER01> can you check this?", others: true},
	}
	for _, c := range cases {
		t.Run(c.fixture, func(t *testing.T) {
			d := &slack.Door{SigningSecret: secret}
			if c.context {
				d.Policy.GroupMode = wire.GroupContext
			}
			got, err := d.Parse(channels.Request{Body: fixture(t, c.fixture)})
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got.Answer.Status != http.StatusOK {
				t.Errorf("answer status %d, want 200", got.Answer.Status)
			}
			if len(got.Deliveries) != 0 {
				t.Errorf("direct deliveries %+v, want none (chat messages only)", got.Deliveries)
			}
			if c.wantID == "" {
				if len(got.Messages) != 0 {
					t.Fatalf("messages = %+v, want none", got.Messages)
				}
				return
			}
			if len(got.Messages) != 1 {
				t.Fatalf("messages = %+v, want one", got.Messages)
			}
			m := got.Messages[0]
			if m.Kind != "slack" || m.Chat != c.wantChat || m.ID != c.wantID || m.Root != c.wantRoot || m.Text != c.wantText ||
				m.Direct != c.direct || m.Summoned != c.summoned || m.MentionsOthers != c.others || m.Deleted != c.deleted || m.Edited != c.edited || m.User == "" || m.Event == "" {
				t.Errorf("message = %+v, want chat %q id %q root %q text %q direct %v summoned %v",
					m, c.wantChat, c.wantID, c.wantRoot, c.wantText, c.direct, c.summoned)
			}
		})
	}
}

func TestDoorURLVerification(t *testing.T) {
	t.Parallel()
	d := &slack.Door{SigningSecret: secret}
	got, err := d.Parse(channels.Request{Body: fixture(t, "url_verification.json")})
	if err != nil || len(got.Messages) != 0 {
		t.Fatalf("Parse = %v, %v", got, err)
	}
	if want := "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"; string(got.Answer.Body) != want {
		t.Errorf("answer body %q, want the challenge %q", got.Answer.Body, want)
	}
}

func TestNewFromFile(t *testing.T) {
	t.Parallel()
	env := map[string]string{"SLACK_SIGNING_SECRET": "s", "SLACK_BOT_TOKEN": "xoxb-1", "MY_SECRET": "s2", "MY_TOKEN": "xoxb-2"}
	getenv := func(k string) string { return env[k] }
	cases := []struct {
		name, file string
		env        func(string) string
		wantErr    string
	}{
		{"empty file, default env", "", getenv, ""},
		{"overridden env names", "signingSecretEnv: MY_SECRET\nbotTokenEnv: MY_TOKEN\n", getenv, ""},
		{"missing secret", "", func(k string) string {
			if k == "SLACK_SIGNING_SECRET" {
				return ""
			}
			return env[k]
		}, "SLACK_SIGNING_SECRET"},
		{"missing token", "botTokenEnv: NOPE\n", getenv, "NOPE"},
		{"unknown key", "signingSecret: inline\n", getenv, "signingSecret"},
		{"admins and assistant prompts", "admins: [U024BE7LH]\nassistant:\n  title: Try\n  prompts:\n    - {title: A, message: a}\n", getenv, ""},
		{"an admin that is no user ID", "admins: ['<@U1>']\n", getenv, "admins[0]"},
		{"a prompt without its message", "assistant:\n  prompts:\n    - {title: A}\n", getenv, "assistant.prompts[0]"},
		{"five prompts", "assistant:\n  prompts: [{title: A, message: a}, {title: B, message: b}, {title: C, message: c}, {title: D, message: d}, {title: E, message: e}]\n",
			getenv, "at most 4"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ch, err := slack.New([]byte(c.file), c.env)
			if c.wantErr == "" {
				if err != nil || ch.Door.Path() != "/slack" || ch.Replier.Kind() != "slack" {
					t.Fatalf("New = %+v, %v", ch, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("New error = %v, want one naming %q", err, c.wantErr)
			}
		})
	}
}

func TestNewTransport(t *testing.T) {
	t.Parallel()
	base := map[string]string{"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APP_TOKEN": "xapp-1-A-1-x", "BAD_APP": "xoxb-2"}
	cases := []struct {
		name, file string
		// without drops a variable from the environment.
		without  string
		wantPath string
		wantConn bool
		wantErr  string
	}{
		{name: "socket, no signing secret needed", file: "transport: socket\n", without: "SLACK_SIGNING_SECRET", wantConn: true},
		{name: "http needs the signing secret", file: "transport: http\n", without: "SLACK_SIGNING_SECRET", wantErr: "SLACK_SIGNING_SECRET"},
		{name: "socket without app token", file: "transport: socket\n", without: "SLACK_APP_TOKEN", wantErr: "SLACK_APP_TOKEN is not set"},
		{name: "socket with a bot token as app token", file: "transport: socket\nappTokenEnv: BAD_APP\n", wantErr: "want xapp-"},
		{name: "unknown transport", file: "transport: websocket\n", wantErr: `transport: "websocket"`},
		{name: "http by default", file: "", wantPath: "/slack"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := map[string]string{"SLACK_SIGNING_SECRET": "s"}
			for k, v := range base {
				env[k] = v
			}
			delete(env, c.without)
			ch, err := slack.New([]byte(c.file), func(k string) string { return env[k] })
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("New error = %v, want one with %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ch.Door.Path() != c.wantPath || (ch.Conn != nil) != c.wantConn {
				t.Errorf("path %q conn %v, want %q conn %v", ch.Door.Path(), ch.Conn != nil, c.wantPath, c.wantConn)
			}
			if c.wantConn {
				// A socket door serves no route and refuses any request.
				if err := ch.Door.Verify(channels.Request{Header: slack.Sign("", time.Now(), []byte("{}")), Body: []byte("{}")}); err == nil {
					t.Error("socket door verified a request")
				}
			}
		})
	}
}

// callback wraps an inner event as an Events API callback of team
// T061EG9R6; auth adds the bot's authorization (user U0LAN0Z89).
func callback(event string, auth bool) []byte {
	authz := ""
	if auth {
		authz = `,"authorizations":[{"team_id":"T061EG9R6","user_id":"U0LAN0Z89","is_bot":true}]`
	}
	return []byte(`{"token":"x","team_id":"T061EG9R6","api_app_id":"A0MDYCDME","type":"event_callback","event_id":"Ev1","event_time":1515449522` +
		authz + `,"event":` + event + `}`)
}

// TestDoorParseEdges pins the door's decisions the fixtures do not reach:
// unreadable payloads, outer and inner event types that are not messages,
// a mention with nothing else in it, subtypes that are not a person's
// message, and the bot known from the file rather than the event.
func TestDoorParseEdges(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		body []byte
		// bot is Config.BotUserID.
		bot string
		// wantErr: Parse fails (the payload is still acknowledged).
		wantErr bool
		// wantText is "" for no message.
		wantText string
		summoned bool
	}{
		{name: "not JSON", body: []byte(`{"type":`), wantErr: true},
		{name: "url_verification without a challenge", body: []byte(`{"token":"x","type":"url_verification"}`), wantErr: true},
		{name: "app_rate_limited", body: []byte(`{"token":"x","type":"app_rate_limited","team_id":"T061EG9R6","minute_rate_limited":1518467820,"api_app_id":"A0MDYCDME"}`)},
		{name: "reaction_added", body: callback(`{"type":"reaction_added","user":"U061F7AUR","reaction":"thumbsup","item":{"type":"message","channel":"C0LAN2Q65","ts":"1515449522.000016"},"event_ts":"1515449530.000100"}`, true)},
		{name: "mention and nothing else", body: callback(`{"type":"app_mention","user":"U061F7AUR","text":"<@U0LAN0Z89>  ","ts":"1515449522.000016","channel":"C0LAN2Q65"}`, true)},
		{name: "channel_join", body: callback(`{"type":"message","subtype":"channel_join","user":"U061F7AUR","text":"<@U061F7AUR> has joined <@U0LAN0Z89>","ts":"1515449522.000016","channel":"C0LAN2Q65","channel_type":"channel"}`, true)},
		{name: "message without a channel", body: callback(`{"type":"message","user":"U061F7AUR","text":"hello <@U0LAN0Z89>","ts":"1515449522.000016","channel_type":"channel"}`, true)},
		{name: "mention of the bot from the file", bot: "U0LAN0Z89", summoned: true, wantText: "hello",
			body: callback(`{"type":"message","user":"U061F7AUR","text":"<@U0LAN0Z89> hello","ts":"1515449522.000016","channel":"C0LAN2Q65","channel_type":"channel"}`, false)},
		{name: "own message, bot from the file", bot: "U0LAN0Z89",
			body: callback(`{"type":"message","user":"U0LAN0Z89","text":"hello","ts":"1515449522.000016","channel":"D0PNCRP9N","channel_type":"im"}`, false)},
		// With the bot unknown, no channel message summons it (in mentions
		// mode it is dropped) and the leading mention is stripped.
		{name: "channel message, bot unknown", body: callback(`{"type":"message","user":"U061F7AUR","text":"<@U0LAN0Z89> hello","ts":"1515449522.000016","channel":"C0LAN2Q65","channel_type":"channel"}`, false)},
		{name: "mention, bot unknown", summoned: true, wantText: "hello",
			body: callback(`{"type":"app_mention","user":"U061F7AUR","text":"<@U0LAN0Z89> hello","ts":"1515449522.000016","channel":"C0LAN2Q65"}`, false)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := &slack.Door{SigningSecret: secret, BotUserID: c.bot}
			got, err := d.Parse(channels.Request{Body: c.body})
			if (err != nil) != c.wantErr {
				t.Fatalf("Parse error = %v, want error %v", err, c.wantErr)
			}
			if got.Answer.Status != http.StatusOK {
				t.Errorf("answer status %d, want 200 (acknowledged)", got.Answer.Status)
			}
			if c.wantText == "" {
				if len(got.Messages) != 0 {
					t.Fatalf("messages = %+v, want none", got.Messages)
				}
				return
			}
			if len(got.Messages) != 1 {
				t.Fatalf("messages = %+v, want one", got.Messages)
			}
			if m := got.Messages[0]; m.Text != c.wantText || m.Summoned != c.summoned || m.Chat != "T061EG9R6:C0LAN2Q65" || m.Event != "Ev1" {
				t.Errorf("message = %+v, want text %q summoned %v in T061EG9R6:C0LAN2Q65, event Ev1", m, c.wantText, c.summoned)
			}
		})
	}
}
