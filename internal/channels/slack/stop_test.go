package slack

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/wire"
)

// stopClickBody is a block_actions click on a Stop button with value, by
// user, in channel.
func stopClickBody(t *testing.T, user, channel, actionTS, value, responseURL string) []byte {
	t.Helper()
	p, err := json.Marshal(map[string]any{
		"type": "block_actions", "team": map[string]any{"id": "T1"}, "user": map[string]any{"id": user},
		"channel": map[string]any{"id": channel}, "response_url": responseURL,
		"actions": []map[string]any{{"action_id": actionStop, "value": value, "action_ts": actionTS, "type": "button", "block_id": "fastagent_stop"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return []byte("payload=" + url.QueryEscape(string(p)))
}

// A Stop click by the person who started the turn, or by a listed admin,
// is the stop command for that turn, in its thread; anyone else's stops
// nothing and is told privately who may; a button without a turn is an
// error.
func TestDoorStopClick(t *testing.T) {
	t.Parallel()
	notes := make(chan map[string]any, 8)
	hooks := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		var m map[string]any
		_ = json.NewDecoder(r.Body).Decode(&m)
		notes <- m
	}))
	t.Cleanup(hooks.Close)
	d := &Door{APIURL: hooks.URL, TurnAdmins: []string{"UADMIN"}, Policy: wire.ChatPolicy{GroupMode: wire.GroupMentions}}
	value := `{"m":"1700.000100","r":"1700.000100","u":"USTARTER","t":"T1"}`
	for _, who := range []string{"USTARTER", "UADMIN"} {
		p, err := d.Parse(reqOf(stopClickBody(t, who, "C1", "1800.1", value, hooks.URL+"/r")))
		if err != nil || len(p.Messages) != 1 || len(p.Decisions) != 0 {
			t.Fatalf("%s's click: %+v, %v; want one stop command", who, p, err)
		}
		m := p.Messages[0]
		if m.Kind != Kind || m.Chat != "T1:C1" || m.ID != "stop-click:1800.1" || m.Root != "1700.000100" || m.Command != wire.CommandStop ||
			m.StopTurn != "1700.000100" || m.User != who || !m.Summoned || m.Direct || string(m.Data) != `{"team":"T1"}` {
			t.Errorf("%s's stop command %+v", who, m)
		}
	}
	p, err := d.Parse(reqOf(stopClickBody(t, "UOTHER", "D1", "1800.2", value, hooks.URL+"/r")))
	if err != nil || len(p.Messages) != 0 {
		t.Fatalf("another user's click: %+v, %v; want nothing", p, err)
	}
	select {
	case n := <-notes:
		if n["text"] != "Only <@USTARTER> (or an admin of this bot) can stop this." || n["response_type"] != "ephemeral" {
			t.Errorf("note %v, want an ephemeral one saying who may stop", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the refused clicker was not told")
	}
	if _, err := d.Parse(reqOf(stopClickBody(t, "USTARTER", "C1", "1800.3", `{"u":"USTARTER"}`, ""))); err == nil {
		t.Error("a Stop button without a turn parsed without an error")
	}
	// In a DM the stop command is direct (the session policy of DMs).
	p, _ = d.Parse(reqOf(stopClickBody(t, "USTARTER", "D1", "1800.4", value, "")))
	if len(p.Messages) != 1 || !p.Messages[0].Direct {
		t.Errorf("a click in a DM: %+v, want a direct stop command", p.Messages)
	}
}
