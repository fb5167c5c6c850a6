package slack_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/slack"
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
	const mentionID = "T061EG9R6:C0LAN2Q65:1515449522.000016"
	cases := []struct {
		fixture string
		// want is "" for no delivery, else the delivery's ID.
		wantID, wantSession, wantText, wantThread string
	}{
		{"app_mention.json", mentionID, "slack:T061EG9R6:C0LAN2Q65:1515449522.000016", "what is the capital of France?", "1515449522.000016"},
		// The same message as a message.channels event: the same ID.
		{"message_channels.json", mentionID, "slack:T061EG9R6:C0LAN2Q65:1515449522.000016", "what is the capital of France?", "1515449522.000016"},
		{"message_im.json", "T061EG9R6:D0PNCRP9N:1525215129.000001", "slack:T061EG9R6:D0PNCRP9N:1525215129.000001", "hello there", "1525215129.000001"},
		// A mention inside a thread continues the thread's session.
		{"message_thread_reply.json", "T061EG9R6:C0LAN2Q65:1515449600.000200", "slack:T061EG9R6:C0LAN2Q65:1515449522.000016", "and Germany?", "1515449522.000016"},
		{"bot_message.json", "", "", "", ""},
		{"own_message.json", "", "", "", ""},
		{"own_message_unknown_bot.json", "", "", "", ""},
		{"me_message.json", "", "", "", ""},
		{"message_changed.json", "", "", "", ""},
		{"message_deleted.json", "", "", "", ""},
		{"channel_chatter.json", "", "", "", ""},
		{"url_verification.json", "", "", "", ""},
	}
	d := &slack.Door{SigningSecret: secret}
	for _, c := range cases {
		t.Run(c.fixture, func(t *testing.T) {
			got, ans, err := d.Parse(channels.Request{Body: fixture(t, c.fixture)})
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if ans.Status != http.StatusOK {
				t.Errorf("answer status %d, want 200", ans.Status)
			}
			if c.wantID == "" {
				if len(got) != 0 {
					t.Fatalf("deliveries = %+v, want none", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("deliveries = %+v, want one", got)
			}
			dl := got[0]
			if dl.Kind != "slack" || dl.ID != c.wantID || dl.Session != c.wantSession || dl.Prompt.Text != c.wantText {
				t.Errorf("delivery = %+v, want id %q session %q text %q", dl, c.wantID, c.wantSession, c.wantText)
			}
			if dl.Key() != "slack:"+c.wantID {
				t.Errorf("key = %q", dl.Key())
			}
			var tgt slack.Target
			if err := json.Unmarshal(dl.Reply, &tgt); err != nil || tgt.ThreadTS != c.wantThread || tgt.Channel == "" {
				t.Errorf("reply target = %s (%v), want thread %q", dl.Reply, err, c.wantThread)
			}
		})
	}
}

func TestDoorURLVerification(t *testing.T) {
	t.Parallel()
	d := &slack.Door{SigningSecret: secret}
	got, ans, err := d.Parse(channels.Request{Body: fixture(t, "url_verification.json")})
	if err != nil || len(got) != 0 {
		t.Fatalf("Parse = %v, %v", got, err)
	}
	if want := "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"; string(ans.Body) != want {
		t.Errorf("answer body %q, want the challenge %q", ans.Body, want)
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
