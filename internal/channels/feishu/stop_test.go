package feishu_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/larksuite/oapi-sdk-go/v3/event/dispatcher/callback"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/feishu"
	"github.com/fastagent/fastagent/internal/testsupport/fakefeishu"
	"github.com/fastagent/fastagent/internal/wire"
)

// A Stop click by the person who started the turn, or by an admin, is the
// stop command for that turn; anyone else gets an error toast naming who
// may, as text (no mention tag); a copy in another chat stops nothing.
func TestStopClick(t *testing.T) {
	t.Parallel()
	d := door("")
	d.Admins = []string{"ou_admin"}
	stop := func(starter, operator, chat string) (*wire.ChatMessage, *feishu.Toast, error) {
		t.Helper()
		var ev callback.CardActionTriggerEvent
		body := clickEvent(t, func(ev map[string]any) {
			ctx := eventOf(ev)["context"].(map[string]any)
			eventOf(ev)["action"] = map[string]any{"tag": "button", "value": map[string]any{
				"fa": "stop", "m": "om_turn", "u": starter, "r": "om_root", "chat": ctx["open_chat_id"]}}
			eventOf(ev)["operator"] = map[string]any{"open_id": operator}
			if chat != "" {
				ctx["open_chat_id"] = chat
			}
		})
		if err := json.Unmarshal(body, &ev); err != nil {
			t.Fatal(err)
		}
		return d.StopClick(&ev)
	}
	for _, who := range []string{clicker, "ou_admin"} {
		m, toast, err := stop(clicker, who, "")
		if err != nil || m == nil || toast == nil || toast.Response().Toast.Type == "error" {
			t.Fatalf("%s's click: %+v, %v, %v", who, m, toast, err)
		}
		if m.Command != wire.CommandStop || m.StopTurn != "om_turn" || m.Root != "om_root" || !m.UniqueIDs || !m.Summoned ||
			m.User != who || !strings.HasPrefix(m.ID, "stop-click:") || m.Kind != feishu.KindFeishu {
			t.Errorf("%s's stop command %+v", who, m)
		}
	}
	m, toast, err := stop(`ou_x<at id="all"></at>`, "ou_stranger", "")
	if err != nil || m != nil || toast == nil {
		t.Fatalf("a stranger's click: %+v, %v, %v; want a toast only", m, toast, err)
	}
	if r := toast.Response().Toast; r.Type != "error" || strings.Contains(r.Content, "<at") || !strings.Contains(r.Content, "ou_x&lt;at") {
		t.Errorf("stranger's toast %+v, want an error naming the starter escaped", r)
	}
	if m, toast, _ := stop(clicker, clicker, "oc_elsewhere"); m != nil || toast == nil || toast.Response().Toast.Type != "error" {
		t.Errorf("a copy in another chat: %+v, toast %v; want an error toast only", m, toast)
	}
	// An approval click is not a stop.
	var ev callback.CardActionTriggerEvent
	_ = json.Unmarshal(clickEvent(t, nil), &ev)
	if m, toast, err := d.StopClick(&ev); m != nil || toast != nil || err != nil {
		t.Errorf("an approval click as a stop: %+v, %v, %v", m, toast, err)
	}
}

// The live card carries the Stop button, bound to the turn's message, its
// starter and chat; the settled card has none; an app whose clicks cannot
// be verified (webhook without an Encrypt Key) shows none at all. A card
// message (CardKit unavailable) carries it too while live.
func TestLiveCardStopButton(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name             string
		noButtons, cards bool
	}{{"streaming card", false, true}, {"card message", false, false}, {"no verified clicks", true, true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r, fake := newReplier(t)
			r.NoButtons = c.noButtons
			if !c.cards {
				fake.Fail("cardkit.create", 99991672)
			}
			rd := render(t, r, target(userMsg), "")
			var v channels.View
			stream(t, rd, &v, "Hello", " world")
			live := liveContent(t, fake)
			if has := strings.Contains(live, `"fa":"stop"`); has == c.noButtons {
				t.Fatalf("live card %s: Stop button %v, want %v", live, has, !c.noButtons)
			}
			if !c.noButtons && (!strings.Contains(live, `"u":"ou_user"`) || !strings.Contains(live, `"m":"`+userMsg+`"`)) {
				t.Errorf("live card %s, want the button bound to the message and its starter", live)
			}
			if err := rd.Finish(context.Background(), "Hello world"); err != nil {
				t.Fatal(err)
			}
			if settled := liveContent(t, fake); strings.Contains(settled, `"fa":"stop"`) {
				t.Errorf("settled card %s still has its Stop button", settled)
			}
		})
	}
}

// liveContent is the card JSON the one reply shows now: the CardKit card's,
// or the card message's.
func liveContent(t *testing.T, fake *fakefeishu.Server) string {
	t.Helper()
	msgs := fake.Messages()
	if len(msgs) != 1 {
		t.Fatalf("messages %+v, want one", msgs)
	}
	if strings.Contains(msgs[0].Content, `"card_id"`) {
		var ref struct {
			Data struct {
				CardID string `json:"card_id"`
			} `json:"data"`
		}
		_ = json.Unmarshal([]byte(msgs[0].Content), &ref)
		c, _ := fake.Card(ref.Data.CardID)
		return c.Data
	}
	return msgs[0].Content
}
