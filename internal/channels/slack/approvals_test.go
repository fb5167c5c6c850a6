package slack

import (
	"encoding/json"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/workflows"
)

func clickBody(t *testing.T, action, value, responseURL string) []byte {
	t.Helper()
	p, err := json.Marshal(map[string]any{
		"type": "block_actions", "team": map[string]any{"id": "T1"}, "user": map[string]any{"id": "U1"},
		"response_url": responseURL,
		"actions":      []map[string]any{{"action_id": action, "value": value, "action_ts": "1700.1", "type": "button", "block_id": "b"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return []byte("payload=" + url.QueryEscape(string(p)))
}

// An approval click becomes one decision bound to the button's session,
// call and hashes, by the clicking user; other interactions and bad
// buttons hand nothing off; the private note goes only to Slack's hooks
// host (or the configured API URL).
func TestDoorParsesApprovalClicks(t *testing.T) {
	t.Parallel()
	d := &Door{APIURL: "http://127.0.0.1:9/"}
	value := `{"s":"slack:T1:C1:1.0","c":"call_1","a":"sha256:a","d":"sha256:d"}`
	p, err := d.Parse(reqOf(clickBody(t, actionDeny, value, "https://hooks.slack.com/actions/T1/1/x")))
	if err != nil || len(p.Decisions) != 1 {
		t.Fatalf("deny click: %+v, %v", p, err)
	}
	dec := p.Decisions[0]
	want := workflows.ApproveRequest{Call: "call_1", ArgsHash: "sha256:a", DefinitionHash: "sha256:d", By: "slack:U1", Door: Kind,
		Reason: "denied in Slack by <@U1>"}
	if dec.Session != "slack:T1:C1:1.0" || dec.ID != "slack:T1:U1:1700.1" || !reflect.DeepEqual(dec.Request, want) || dec.Notify == nil {
		t.Errorf("decision %+v, want session, click ID, %+v and a note to hooks.slack.com", dec, want)
	}
	for name, tc := range map[string]struct {
		body   []byte
		notify bool
		err    bool
	}{
		"approve, note to the API URL": {clickBody(t, actionApprove, value, "http://127.0.0.1:9/response/1"), true, false},
		"approve, note host refused":   {clickBody(t, actionApprove, value, "http://169.254.169.254/latest"), false, false},
		"another button":               {clickBody(t, "other_action", value, ""), false, false},
		"a button without a call":      {clickBody(t, actionApprove, `{"s":"x"}`, ""), false, true},
		"not a form":                   {[]byte("payload=%zz"), false, true},
	} {
		p, err := d.Parse(reqOf(tc.body))
		if (err != nil) != tc.err {
			t.Errorf("%s: error %v, want error %v", name, err, tc.err)
		}
		if name == "another button" || tc.err {
			if len(p.Decisions) != 0 {
				t.Errorf("%s: decisions %+v, want none", name, p.Decisions)
			}
			continue
		}
		if len(p.Decisions) != 1 || (p.Decisions[0].Notify != nil) != tc.notify || !p.Decisions[0].Request.Approve {
			t.Errorf("%s: %+v, want one approval, note %v", name, p.Decisions, tc.notify)
		}
	}
}

// The approval message says what will run, who may decide and until when;
// once decided it says who decided, or that the deadline passed.
func TestApprovalTexts(t *testing.T) {
	t.Parallel()
	ev := agent.ApprovalRequested("c1", "deploy", json.RawMessage(`{"env":"prod"}`), "sha256:a", "sha256:d", []string{"slack:U9"}, time.Unix(1800000000, 0))
	ask := askText(ev)
	for _, part := range []string{"*deploy*", `"env": "prod"`, "slack:U9", "<!date^1800000000^"} {
		if !strings.Contains(ask, part) {
			t.Errorf("ask text %q lacks %q", ask, part)
		}
	}
	for ev, want := range map[*agent.Event]string{
		ptr(agent.ApprovalResolved("c1", true, "slack:U1", "", false)):       "Approved by <@U1>",
		ptr(agent.ApprovalResolved("c1", false, "alice", "no", false)):       "Denied by alice",
		ptr(agent.ApprovalResolved("c1", false, "", "no one decided", true)): "Denied: no one decided",
	} {
		if got := settledText(*ev); !strings.Contains(got, want) {
			t.Errorf("settled %+v = %q, want %q", ev, got, want)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func reqOf(body []byte) channels.Request { return channels.Request{Body: body} }
