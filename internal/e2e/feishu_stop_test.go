package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/larksuite/oapi-sdk-go/v3/event/dispatcher/callback"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/channels/feishu"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// TestFeishuStopButton: the live card of a running turn has a Stop
// button.
//   - an unsigned click, and a signed one carrying a wrong verification
//     token, are refused (401) and change nothing;
//   - a verified click by someone who neither started the turn nor is an
//     admin gets an error toast naming who may (escaped) and changes
//     nothing;
//   - the starter clicks twice: the turn is aborted exactly once, ends
//     aborted, the second click is told nothing is running;
//   - the settled card has no button.
func TestFeishuStopButton(t *testing.T) {
	e := newEnv(t)
	s := newFeishuStack(t, e)
	s.startWorker()
	id := s.msgID()
	session := feishu.KindFeishu + ":" + id
	t.Cleanup(func() { s.terminate(session) })
	slow := make([]string, 300)
	for i := range slow {
		slow[i] = fmt.Sprintf("w%d ", i)
	}
	e.kit.Model.Enqueue(modelserver.Reply{Text: slow, ChunkDelay: 100 * time.Millisecond})
	s.send(id, "", "write a long essay")

	var value map[string]any
	var cardID, msg string
	waitFor(t, time.Minute, "the live card's Stop button", func() bool {
		for _, m := range replyTo(s.fake, id) {
			if c, ok := cardOf(s.fake, m); ok && c.Streaming && strings.Contains(c.Data, `"fa":"stop"`) {
				value, cardID, msg = stopButtonValue(t, c.Data), c.ID, m.ID
				return true
			}
		}
		return false
	})
	if value["u"] != feishuUser || value["m"] != id || value["chat"] != s.chat {
		t.Fatalf("Stop button value %+v, want the starter, the message and the chat", value)
	}
	click := func(event, user string, h http.Header, plain []byte) (int, callback.Toast) {
		t.Helper()
		if plain == nil {
			plain = cardClick(s.chat, msg, event, user, value)
		}
		body := sealed(t, plain)
		if h == nil {
			h = feishu.Sign(feishuKey, time.Now(), "nonce-"+event, body)
		}
		start := time.Now()
		code, toast := s.postClick(body, h)
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("click %s answered after %v, beyond the platform's 3 s", event, took)
		}
		return code, toast
	}
	running := func() bool {
		st, err := e.agent.State(context.Background(), session)
		return err == nil && st.Running != ""
	}

	if code, _ := click("ev_stop_unsigned", feishuUser, http.Header{}, nil); code != http.StatusUnauthorized {
		t.Fatalf("an unsigned click: %d, want 401", code)
	}
	forged := []byte(strings.ReplaceAll(string(cardClick(s.chat, msg, "ev_stop_forged", feishuUser, value)), feishuToken, "not-the-token"))
	if code, _ := click("ev_stop_forged", feishuUser, nil, forged); code != http.StatusUnauthorized {
		t.Fatalf("a click with a wrong verification token: %d, want 401", code)
	}
	code, toast := click("ev_stop_stranger", "ou_e2e_stranger", nil, nil)
	if code != http.StatusOK || toast.Type != "error" || !strings.Contains(toast.Content, "Only "+feishuUser) || strings.Contains(toast.Content, "<at") {
		t.Fatalf("the stranger's click: %d, toast %+v; want an error toast naming who may stop, no mention tag", code, toast)
	}
	if !running() {
		t.Fatalf("the turn stopped after refused clicks")
	}
	if n := acceptedAborts(t, e, session); n != 0 {
		t.Fatalf("%d aborts after refused clicks", n)
	}

	for _, ev := range []string{"ev_stop_1", "ev_stop_2"} {
		if code, toast := click(ev, feishuUser, nil, nil); code != http.StatusOK || toast.Type == "error" {
			t.Fatalf("the starter's click %s: %d, toast %+v", ev, code, toast)
		}
	}
	waitFor(t, time.Minute, "the turn aborted", func() bool {
		r, err := e.kit.Store.Turn(context.Background(), session, feishu.KindFeishu+":"+id)
		var o agentloop.Outcome
		return err == nil && json.Unmarshal(r.Outcome, &o) == nil && o.Code == agent.CodeAborted
	})
	waitFor(t, time.Minute, "the second click's answer", func() bool {
		n := 0
		for _, m := range replyTo(s.fake, id) {
			if strings.Contains(s.fake.CardText(m), activities.NothingRunningText) {
				n++
			}
		}
		return n == 1
	})
	waitFor(t, time.Minute, "the card settled without its button", func() bool {
		c, ok := s.fake.Card(cardID)
		return ok && !c.Streaming && !strings.Contains(c.Data, `"fa":"stop"`) && strings.Contains(c.Text, "stopped by")
	})
	if n := acceptedAborts(t, e, session); n != 1 {
		t.Errorf("accepted aborts = %d, want exactly 1", n)
	}
	if n := e.kit.Model.Count(); n != 1 {
		t.Errorf("model calls = %d, want 1: clicks are never turns", n)
	}
}

// stopButtonValue is the callback value of a card's Stop button.
func stopButtonValue(t *testing.T, data string) map[string]any {
	t.Helper()
	var card struct {
		Body struct {
			Elements []struct {
				Behaviors []struct {
					Value map[string]any `json:"value"`
				} `json:"behaviors"`
			} `json:"elements"`
		} `json:"body"`
	}
	if err := json.Unmarshal([]byte(data), &card); err != nil {
		t.Fatalf("card %s: %v", data, err)
	}
	for _, e := range card.Body.Elements {
		for _, b := range e.Behaviors {
			if b.Value["fa"] == "stop" {
				return b.Value
			}
		}
	}
	t.Fatalf("no Stop button in %s", data)
	return nil
}
