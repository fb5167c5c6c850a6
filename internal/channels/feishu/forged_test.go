package feishu_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels/feishu"
	"github.com/fastagent/fastagent/internal/testsupport/fakefeishu"
)

// Without an Encrypt Key a webhook request is vouched for only by the
// Verification Token, which every plaintext body carries: whoever has seen
// one event can write a click with any session, call and clicker. So an
// app without one decides nothing by card: a click that carries the right
// token is still refused (200 with a toast saying what the operator must
// set, no update), while the same click signed and encrypted decides.
func TestPlaintextClickRefused(t *testing.T) {
	t.Parallel()
	forged := clickEvent(t, func(ev map[string]any) {
		valueOf(ev)["s"] = "slack:T1:C1"
		eventOf(ev)["operator"].(map[string]any)["open_id"] = "ou_the_asker_elsewhere"
	})
	for name, body := range map[string][]byte{"a forged click": forged, "a click as the platform sends it": clickEvent(t, nil)} {
		dc := &decider{}
		code, toast := serveClick(t, door(""), dc, http.Header{}, body)
		if code != http.StatusOK || dc.count() != 0 || toast.Type != "error" || !strings.Contains(toast.Content, "FEISHU_ENCRYPT_KEY") ||
			!strings.Contains(toast.Content, "Nothing was decided") {
			t.Errorf("%s without an Encrypt Key: status %d, %d updates, toast %+v; want 200, nothing decided, a toast naming FEISHU_ENCRYPT_KEY", name, code, dc.count(), toast)
		}
	}
	body := encrypted(t, encKey, clickEvent(t, nil))
	dc := &decider{}
	if code, toast := serveClick(t, door(encKey), dc, feishu.Sign(encKey, time.Now(), "n1", body), body); code != http.StatusOK || dc.count() != 1 || toast.Type != "success" {
		t.Errorf("a signed, encrypted click: status %d, %d updates, toast %+v; want it decided", code, dc.count(), toast)
	}
}

// An app whose webhook has no Encrypt Key asks for approvals with a card
// without buttons (they could not be told from forged clicks) that says
// how to decide instead and what the operator must set; with an Encrypt
// Key, or over the long connection, the card has its buttons.
func TestApprovalCardWithoutEncryptKey(t *testing.T) {
	t.Parallel()
	ev := agent.ApprovalRequested("call_1", "deploy", json.RawMessage(`{"env":"prod"}`), "sha256:a", "sha256:d", nil, time.Time{})
	for _, c := range []struct {
		name    string
		env     map[string]string
		buttons bool
	}{
		{"webhook without an Encrypt Key", map[string]string{"FEISHU_VERIFICATION_TOKEN": token}, false},
		{"webhook with an Encrypt Key", map[string]string{"FEISHU_VERIFICATION_TOKEN": token, "FEISHU_ENCRYPT_KEY": encKey}, true},
		{"long connection", map[string]string{}, true},
	} {
		fake := fakefeishu.New()
		t.Cleanup(fake.Close)
		c.env["FEISHU_APP_ID"], c.env["FEISHU_APP_SECRET"], c.env["FEISHU_BASE_URL"] = "cli_test", "app-secret", fake.URL
		file := "botOpenId: " + bot + "\n"
		if c.name == "long connection" {
			file += "transport: websocket\n"
		}
		ch, err := feishu.New(feishu.Feishu(), []byte(file), func(k string) string { return c.env[k] }, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ch.Replier.(*feishu.Replier).Ask(context.Background(), target("om_root"), "feishu:om_root", ev); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		msgs := fake.Messages()
		if len(msgs) != 1 {
			t.Fatalf("%s: messages %+v, want the approval card", c.name, msgs)
		}
		text := fake.CardText(msgs[0])
		if got := len(cardButtons(t, msgs[0].Content)) > 0; got != c.buttons {
			t.Errorf("%s: buttons %v, want %v (card %s)", c.name, got, c.buttons, msgs[0].Content)
		}
		if !c.buttons && (!strings.Contains(text, "fastagent session approve feishu:om_root call_1") || !strings.Contains(text, "FEISHU_ENCRYPT_KEY") ||
			!strings.Contains(text, "**deploy**")) {
			t.Errorf("%s: card text %q, want the call, how to decide it and what to set", c.name, text)
		}
	}
}
