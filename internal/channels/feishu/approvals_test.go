package feishu_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/larksuite/oapi-sdk-go/v3/event/dispatcher/callback"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/feishu"
	"github.com/fastagent/fastagent/internal/testsupport/fakefeishu"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
)

const clicker = "ou_84aad35d084aa403a838cf73ee18467"

// clickEvent is the card_action.json fixture with edits applied to its
// decoded map.
func clickEvent(t *testing.T, edit func(ev map[string]any)) []byte {
	t.Helper()
	var ev map[string]any
	if err := json.Unmarshal(fixture(t, "card_action.json"), &ev); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(ev)
	}
	b, _ := json.Marshal(ev)
	return b
}

func eventOf(ev map[string]any) map[string]any { return ev["event"].(map[string]any) }

func valueOf(ev map[string]any) map[string]any {
	return eventOf(ev)["action"].(map[string]any)["value"].(map[string]any)
}

// decider is a Temporal client whose approve updates answer err.
type decider struct {
	mu      sync.Mutex
	updates []client.UpdateWorkflowOptions
	err     error
}

func (d *decider) SignalWithStartWorkflow(context.Context, string, string, any, client.StartWorkflowOptions, any, ...any) (client.WorkflowRun, error) {
	return nil, errors.New("a click is no message")
}

func (d *decider) UpdateWorkflow(_ context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.updates = append(d.updates, o)
	return doneHandle{d.err}, nil
}

func (d *decider) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.updates)
}

type doneHandle struct{ err error }

func (doneHandle) WorkflowID() string               { return "" }
func (doneHandle) RunID() string                    { return "" }
func (doneHandle) UpdateID() string                 { return "" }
func (h doneHandle) Get(context.Context, any) error { return h.err }

// serveClick posts body with headers h to the door's handler and returns
// the status and the answer's toast.
func serveClick(t *testing.T, d *feishu.Door, c channels.Starter, h http.Header, body []byte) (int, callback.Toast) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/feishu", bytes.NewReader(body))
	for k, v := range h {
		r.Header[k] = v
	}
	w := httptest.NewRecorder()
	channels.Handler(d, c, "q", nil).ServeHTTP(w, r)
	var ans callback.CardActionTriggerResponse
	if w.Code == http.StatusOK {
		if err := json.Unmarshal(w.Body.Bytes(), &ans); err != nil {
			t.Fatalf("answer %q: %v", w.Body, err)
		}
	}
	if ans.Toast == nil {
		return w.Code, callback.Toast{}
	}
	return w.Code, *ans.Toast
}

// A card callback is verified exactly as an event is: with an Encrypt Key
// it must be signed (within the window) and encrypted with the app's key
// and carry its token; without one its token must match (and even then
// it decides nothing: TestPlaintextClickRefused). Anything else is 401 and
// decides nothing; a verified click becomes one approve update keyed by
// its event_id and is answered with a toast.
func TestCardActionVerification(t *testing.T) {
	t.Parallel()
	now := time.Now()
	plain := clickEvent(t, nil)
	body := encrypted(t, encKey, plain)
	wrongToken := encrypted(t, encKey, clickEvent(t, func(ev map[string]any) { ev["header"].(map[string]any)["token"] = "not-the-token" }))
	otherKey := encrypted(t, "another-encrypt-key", plain)
	for _, c := range []struct {
		name string
		key  string
		h    http.Header
		body []byte
		ok   bool
	}{
		{"signed and encrypted", encKey, feishu.Sign(encKey, now, "n1", body), body, true},
		{"unsigned", encKey, http.Header{}, body, false},
		{"forged signature", encKey, feishu.Sign("not-the-key", now, "n2", body), body, false},
		{"stale", encKey, feishu.Sign(encKey, now.Add(-6*time.Minute), "n3", body), body, false},
		{"body changed after signing", encKey, feishu.Sign(encKey, now, "n4", body), append([]byte(" "), body...), false},
		{"plaintext when a key is set", encKey, feishu.Sign(encKey, now, "n5", plain), plain, false},
		{"wrong token inside", encKey, feishu.Sign(encKey, now, "n6", wrongToken), wrongToken, false},
		{"encrypted with another key", encKey, feishu.Sign(encKey, now, "n7", otherKey), otherKey, false},
		{"plaintext, wrong token", "", http.Header{}, clickEvent(t, func(ev map[string]any) { ev["header"].(map[string]any)["token"] = "x" }), false},
		{"plaintext, no token", "", http.Header{}, clickEvent(t, func(ev map[string]any) { delete(ev["header"].(map[string]any), "token") }), false},
	} {
		dc := &decider{}
		code, toast := serveClick(t, door(c.key), dc, c.h, c.body)
		switch {
		case c.ok && (code != http.StatusOK || dc.count() != 1 || toast.Type != "success" || toast.Content != "Approved."):
			t.Errorf("%s: status %d, %d updates, toast %+v; want 200, one update, a success toast", c.name, code, dc.count(), toast)
		case !c.ok && (code != http.StatusUnauthorized || dc.count() != 0):
			t.Errorf("%s: status %d, %d updates; want 401 and nothing decided", c.name, code, dc.count())
		}
		if c.ok {
			o := dc.updates[0]
			if o.WorkflowID != workflows.WorkflowID("feishu:om_p2p0000000000000000000000000001") || o.UpdateID != "decision:feishu:f7984f25108f8137722bb63cee927e66" ||
				o.UpdateName != workflows.UpdateApprove {
				t.Errorf("%s: update %+v, want an approve on the button's session keyed by the event", c.name, o)
			}
		}
	}
}

// A click the session refuses (not an approver, nothing waiting any more)
// is answered with an error toast saying why; a failed hand-off is 503 so
// the platform may deliver it again.
func TestCardActionRefused(t *testing.T) {
	t.Parallel()
	body := encrypted(t, encKey, clickEvent(t, nil))
	signed := func() http.Header { return feishu.Sign(encKey, time.Now(), "n", body) }
	notApprover := temporal.NewApplicationError(`"feishu:ou_x" may not decide tool call "call_1"`, agent.CodeNotApprover)
	code, toast := serveClick(t, door(encKey), &decider{err: notApprover}, signed(), body)
	if code != http.StatusOK || toast.Type != "error" || !strings.Contains(toast.Content, "may not decide") {
		t.Errorf("refused click: status %d, toast %+v; want 200 and an error toast saying they may not decide", code, toast)
	}
	gone := temporal.NewApplicationError(`no tool call "call_1" is waiting for approval`, agent.CodeNotFound)
	if _, toast := serveClick(t, door(encKey), &decider{err: gone}, signed(), body); toast.Type != "error" || !strings.Contains(toast.Content, "not applied") {
		t.Errorf("late click: toast %+v, want that it was not applied", toast)
	}
	if code, _ := serveClick(t, door(encKey), &decider{err: errors.New("deadline exceeded")}, signed(), body); code != http.StatusServiceUnavailable {
		t.Errorf("failed hand-off: status %d, want 503", code)
	}
}

// A click parses to a decision bound to the button's session, call and
// hashes, by the operator; a deny carries a reason; other buttons decide
// nothing; a click on a copy of the card in another chat is answered
// with a note and decides nothing; an approval button without its call,
// or a click without an operator, is an error.
func TestClickParse(t *testing.T) {
	t.Parallel()
	d := door("")
	parse := func(edit func(map[string]any)) (*channels.Decision, *feishu.Toast, error) {
		var ev callback.CardActionTriggerEvent
		if err := json.Unmarshal(clickEvent(t, edit), &ev); err != nil {
			t.Fatal(err)
		}
		return d.Click(&ev)
	}
	dec, toast, err := parse(func(ev map[string]any) { valueOf(ev)["fa"] = "deny" })
	want := workflows.ApproveRequest{Call: "call_1", ArgsHash: "sha256:a", DefinitionHash: "sha256:d", By: "feishu:" + clicker, Door: feishu.KindFeishu,
		Reason: "denied in Feishu by " + clicker}
	if err != nil || dec == nil || dec.Session != "feishu:om_p2p0000000000000000000000000001" || dec.ID != "feishu:f7984f25108f8137722bb63cee927e66" ||
		!reflect.DeepEqual(dec.Request, want) || dec.Notify == nil || toast == nil {
		t.Fatalf("deny click: %+v, %v; want %+v", dec, err, want)
	}
	if r := toast.Response(); r.Toast.Content != "Denied." {
		t.Errorf("deny toast %+v", r.Toast)
	}
	_ = dec.Notify(context.Background(), "Your decision was not applied: no.")
	if r := toast.Response(); r.Toast.Type != "error" || r.Toast.Content != "Your decision was not applied: no." {
		t.Errorf("toast after a refusal %+v, want the refusal", r.Toast)
	}
	lark := &feishu.Door{Profile: feishu.Lark(), Webhook: true}
	var ev callback.CardActionTriggerEvent
	_ = json.Unmarshal(clickEvent(t, nil), &ev)
	if dec, _, err := lark.Click(&ev); err != nil || dec.Request.By != "lark:"+clicker || dec.Request.Door != feishu.KindLark || dec.ID != "lark:f7984f25108f8137722bb63cee927e66" {
		t.Errorf("a Lark click: %+v, %v; want it by lark:%s", dec, err, clicker)
	}
	for name, c := range map[string]struct {
		edit  func(map[string]any)
		note  bool
		isErr bool
	}{
		"another button": {edit: func(ev map[string]any) {
			eventOf(ev)["action"] = map[string]any{"value": map[string]any{"x": "y"}, "tag": "button"}
		}},
		"a copy in another chat": {edit: func(ev map[string]any) { eventOf(ev)["context"].(map[string]any)["open_chat_id"] = "oc_elsewhere" }, note: true},
		"no context":             {edit: func(ev map[string]any) { delete(eventOf(ev), "context") }, note: true},
		"no call":                {edit: func(ev map[string]any) { delete(valueOf(ev), "c") }, isErr: true},
		"no operator":            {edit: func(ev map[string]any) { delete(eventOf(ev), "operator") }, isErr: true},
		"no event_id":            {edit: func(ev map[string]any) { delete(ev["header"].(map[string]any), "event_id") }, isErr: true},
		"no action":              {edit: func(ev map[string]any) { delete(eventOf(ev), "action") }, isErr: true},
	} {
		dec, toast, err := parse(c.edit)
		if dec != nil || (err != nil) != c.isErr || (toast != nil) != c.note {
			t.Errorf("%s: %+v, toast %v, %v; want no decision, a note %v, an error %v", name, dec, toast != nil, err, c.note, c.isErr)
		}
	}
}

// The approval card replies to the user's message in its thread and shows
// the tool, its full arguments, who may decide and the deadline, with
// Approve and Deny buttons whose callbacks carry the session, the call,
// its hashes and the chat; a retried Ask is the same message. Settled, it
// shows who decided (as a mention) or that the deadline passed, without
// buttons.
func TestApprovalCard(t *testing.T) {
	t.Parallel()
	r, fake := newReplier(t)
	tg := target("om_root")
	deadline := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	ev := agent.ApprovalRequested("call_1", "deploy", json.RawMessage("{\"env\":\"prod\",\"note\":\"```x\"}"), "sha256:a", "sha256:d", nil, deadline)
	ref, err := r.Ask(context.Background(), tg, "feishu:om_root", ev)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := r.Ask(context.Background(), tg, "feishu:om_root", ev); err != nil || again != ref {
		t.Errorf("a retried Ask: %q, %v; want the same message %q", again, err, ref)
	}
	msgs := fake.Messages()
	if len(msgs) != 1 || msgs[0].ID != ref || msgs[0].ReplyTo != userMsg || !msgs[0].InThread || msgs[0].MsgType != "interactive" {
		t.Fatalf("messages %+v, want one interactive card replying to %s in its thread", msgs, userMsg)
	}
	text := fake.CardText(msgs[0])
	for _, part := range []string{"**deploy**", `"env": "prod"`, "the person who asked, <at id=ou_user></at>", "Wed, 02 Jan 2030 03:04:05 UTC"} {
		if !strings.Contains(text, part) {
			t.Errorf("card text %q lacks %q", text, part)
		}
	}
	if strings.Count(text, "```") != 2 {
		t.Errorf("card text %q: a fence in the arguments ends the code block", text)
	}
	buttons := cardButtons(t, msgs[0].Content)
	wantValue := map[string]any{"s": "feishu:om_root", "c": "call_1", "a": "sha256:a", "d": "sha256:d", "chat": tg.Chat}
	if len(buttons) != 2 || buttons[0]["fa"] != "approve" || buttons[1]["fa"] != "deny" {
		t.Fatalf("buttons %+v, want Approve then Deny", buttons)
	}
	for _, b := range buttons {
		for k, v := range wantValue {
			if b[k] != v {
				t.Errorf("button %+v: %s = %v, want %v", b, k, b[k], v)
			}
		}
	}
	listed := agent.ApprovalRequested("call_2", "deploy", json.RawMessage(`{}`), "", "", []string{"feishu:ou_boss", "alice"}, time.Time{})
	if got := fake.CardText(askedCard(t, r, fake, tg, listed)); !strings.Contains(got, "Who may decide: <at id=ou_boss></at>, alice.") || strings.Contains(got, "Denied at") {
		t.Errorf("card with approvers and no deadline: %q", got)
	}

	for _, c := range []struct {
		ev   agent.Event
		want string
	}{
		{agent.ApprovalResolved("call_1", true, "feishu:ou_boss", "", false), "✅ Approved by <at id=ou_boss></at>."},
		{agent.ApprovalResolved("call_1", false, "alice", "no", false), "⛔ Denied by alice."},
		{agent.ApprovalResolved("call_1", false, "", "no one decided in time", true), "⌛ Denied: no one decided in time."},
	} {
		if err := r.Settle(context.Background(), tg, ref, c.ev); err != nil {
			t.Fatal(err)
		}
		m := messageByID(fake.Messages(), ref)
		if got := fake.CardText(m); got != c.want || len(cardButtons(t, m.Content)) != 0 {
			t.Errorf("settled card %q (buttons %v), want %q without buttons", got, cardButtons(t, m.Content), c.want)
		}
	}
	if err := r.Settle(context.Background(), tg, "card:x:1", agent.ApprovalResolved("call_1", true, "", "", false)); err == nil || !channels.IsPermanent(err) {
		t.Errorf("settling a bad reference: %v, want a permanent error", err)
	}
}

func askedCard(t *testing.T, r *feishu.Replier, fake *fakefeishu.Server, tg wire.Target, ev agent.Event) fakefeishu.Message {
	t.Helper()
	ref, err := r.Ask(context.Background(), tg, "feishu:om_root", ev)
	if err != nil {
		t.Fatal(err)
	}
	return messageByID(fake.Messages(), ref)
}

func messageByID(msgs []fakefeishu.Message, id string) fakefeishu.Message {
	for _, m := range msgs {
		if m.ID == id {
			return m
		}
	}
	return fakefeishu.Message{}
}

// cardButtons returns the callback values of a card's buttons, in order.
func cardButtons(t *testing.T, content string) []map[string]any {
	t.Helper()
	var card struct {
		Body struct {
			Elements []struct {
				Tag     string `json:"tag"`
				Columns []struct {
					Elements []struct {
						Tag       string `json:"tag"`
						Behaviors []struct {
							Type  string         `json:"type"`
							Value map[string]any `json:"value"`
						} `json:"behaviors"`
					} `json:"elements"`
				} `json:"columns"`
			} `json:"elements"`
		} `json:"body"`
	}
	if err := json.Unmarshal([]byte(content), &card); err != nil {
		t.Fatalf("card %s: %v", content, err)
	}
	var out []map[string]any
	for _, e := range card.Body.Elements {
		for _, c := range e.Columns {
			for _, b := range c.Elements {
				for _, bh := range b.Behaviors {
					if b.Tag == "button" && bh.Type == "callback" {
						out = append(out, bh.Value)
					}
				}
			}
		}
	}
	return out
}

// The agent's question is a card replying to the user's message in its
// thread, its Markdown escaped, saying how to answer and until when; a
// retried Question is the same message; an API error is an error.
func TestQuestionCard(t *testing.T) {
	t.Parallel()
	r, fake := newReplier(t)
	tg := target("om_root")
	tg.Turn = "feishu:" + userMsg
	deadline := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	ev := agent.QuestionAsked("call_q", "Which <city>? <at id=all></at> & when", deadline)
	ref, err := r.Question(context.Background(), tg, ev)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := r.Question(context.Background(), tg, ev); err != nil || again != ref {
		t.Errorf("a retried Question: %q, %v; want the same message %q", again, err, ref)
	}
	msgs := fake.Messages()
	if len(msgs) != 1 || msgs[0].ID != ref || msgs[0].ReplyTo != userMsg || !msgs[0].InThread || msgs[0].MsgType != "interactive" {
		t.Fatalf("messages %+v, want one interactive card replying to %s in its thread", msgs, userMsg)
	}
	want := "❓ Which &lt;city&gt;? &lt;at id=all&gt;&lt;/at&gt; &amp; when\n*Reply in this thread to answer (in a group, @mention me), until 03:04 UTC, Jan 2.*"
	if got := fake.CardText(msgs[0]); got != want {
		t.Errorf("question card text %q, want %q", got, want)
	}

	// No deadline: no "until".
	tg2 := target("")
	tg2.Message = "om_other"
	ref2, err := r.Question(context.Background(), tg2, agent.QuestionAsked("call_q2", "Sure?", time.Time{}))
	if err != nil {
		t.Fatal(err)
	}
	m := messageByID(fake.Messages(), ref2)
	if got := fake.CardText(m); got != "❓ Sure?\n*Reply in this thread to answer (in a group, @mention me).*" || m.ReplyTo != "om_other" || m.InThread {
		t.Errorf("question without a deadline or thread: %+v, text %q", m, got)
	}

	fake.Fail("im.reply", 230002)
	if ref, err := r.Question(context.Background(), tg, agent.QuestionAsked("call_q3", "Again?", deadline)); err == nil || ref != "" {
		t.Errorf("Question with the API failing: %q, %v; want an error", ref, err)
	}
	if _, err := r.Question(context.Background(), wire.Target{Chat: tg.Chat}, ev); err == nil {
		t.Error("Question without the user's message: no error")
	}
}
