package feishu

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/larksuite/oapi-sdk-go/v3/event/dispatcher/callback"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
)

// EventCardAction is the callback type of a click on a card's button
// (schema 2.0, delivered to the app's callback URL or over the long
// connection).
const EventCardAction = "card.action.trigger"

// Actions an approval button carries.
const (
	actionApprove = "approve"
	actionDeny    = "deny"
)

// buttonValue is what an approval button carries back in its callback
// behaviour: the action, the session, the call, the hashes the person was
// shown and the chat the card was posted in, so the decision is bound to
// them. The platform keeps a card's JSON as the bot sent it and signs
// every callback, so a person cannot alter it.
type buttonValue struct {
	Action         string `json:"fa"`
	Session        string `json:"s"`
	Call           string `json:"c"`
	ArgsHash       string `json:"a,omitempty"`
	DefinitionHash string `json:"d,omitempty"`
	Chat           string `json:"chat,omitempty"`
	// A Stop button's: the answered message (its turn), who started the
	// turn, and the thread its session lives in.
	Message string `json:"m,omitempty"`
	User    string `json:"u,omitempty"`
	Root    string `json:"r,omitempty"`
}

// Toast types of a callback's answer.
const (
	toastSuccess = "success"
	toastInfo    = "info"
	toastError   = "error"
)

// Toast is the note a card callback is answered with, shown only to the
// person who clicked. A decision's Notify replaces it with the reason
// the click was refused, once the session answered.
type Toast struct {
	mu   sync.Mutex
	kind string
	text string
}

func newToast(kind, text string) *Toast { return &Toast{kind: kind, text: text} }

func (t *Toast) set(kind, text string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.kind, t.text = kind, text
}

// Response is the callback's answer: the toast.
func (t *Toast) Response() *callback.CardActionTriggerResponse {
	t.mu.Lock()
	defer t.mu.Unlock()
	return &callback.CardActionTriggerResponse{Toast: &callback.Toast{Type: t.kind, Content: t.text}}
}

// answer is Response as a webhook answer.
func (t *Toast) answer() channels.Answer {
	b, _ := json.Marshal(t.Response()) // strings only: cannot fail
	return channels.Answer{Status: http.StatusOK, ContentType: "application/json", Body: b}
}

// Click turns a card.action.trigger callback (webhook or long connection)
// into a decision by the person who clicked, with the toast that answers
// the click. A click on a button that is not an approval's decides nothing
// (nil, nil, nil); a click on a copy of the card outside the chat it was
// posted in decides nothing and is answered with a note; an unreadable
// approval click is an error.
func (d *Door) Click(ev *callback.CardActionTriggerEvent) (*channels.Decision, *Toast, error) {
	kind := d.Profile.Kind
	if ev == nil || ev.Event == nil || ev.Event.Action == nil {
		return nil, nil, fmt.Errorf("%s: %s without an action", kind, EventCardAction)
	}
	raw, err := json.Marshal(ev.Event.Action.Value)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %s: %w", kind, EventCardAction, err)
	}
	var v buttonValue
	if err := json.Unmarshal(raw, &v); err != nil {
		v = buttonValue{} // another app's button, with values of other types
	}
	if v.Action != actionApprove && v.Action != actionDeny {
		return nil, nil, nil
	}
	if v.Session == "" || v.Call == "" {
		return nil, nil, fmt.Errorf("%s: approval button without a session and call: %s", kind, raw)
	}
	user := ""
	if ev.Event.Operator != nil {
		user = ev.Event.Operator.OpenID
	}
	id := eventIDOf(ev.EventV2Base)
	if user == "" || id == "" {
		return nil, nil, fmt.Errorf("%s: %s without the operator's open_id or an event_id", kind, EventCardAction)
	}
	if c := ev.Event.Context; v.Chat != "" && (c == nil || c.OpenChatID != v.Chat) {
		return nil, newToast(toastError, "This approval was asked in another chat: decide it there. Nothing was decided."), nil
	}
	req := workflows.ApproveRequest{Call: v.Call, Approve: v.Action == actionApprove, ArgsHash: v.ArgsHash,
		DefinitionHash: v.DefinitionHash, By: kind + ":" + user, Door: kind}
	toast := newToast(toastSuccess, "Approved.")
	if !req.Approve {
		req.Reason = "denied in " + d.Profile.name() + " by " + user
		toast = newToast(toastInfo, "Denied.")
	}
	dec := &channels.Decision{Session: v.Session, ID: kind + ":" + id, Request: req,
		Notify: func(_ context.Context, text string) error { toast.set(toastError, text); return nil }}
	return dec, toast, nil
}

// unverifiedClick is the toast of a click a webhook without an Encrypt
// Key cannot verify.
func (d *Door) unverifiedClick() string {
	return "Approval buttons are off: this app's webhook has no Encrypt Key, so a click cannot be verified. Nothing was decided. " +
		"The operator must set " + d.Profile.Env("ENCRYPT_KEY") + "; until then decide with fastagent session approve or deny."
}

// noButtons is what an approval card says instead of its buttons when the
// app's webhook has no Encrypt Key (the door refuses every click): how to
// decide, and what the operator must set.
func noButtons(p Profile, session string, ev agent.Event) string {
	return fmt.Sprintf("\nButtons are off until the operator sets the app's Encrypt Key (%s, Events & Callbacks → Encryption Strategy): "+
		"without it a click cannot be verified. Decide with `fastagent session approve %s %s` (or `deny`).", p.Env("ENCRYPT_KEY"), session, ev.ID)
}

// name is the platform's name as people know it.
func (p Profile) name() string {
	if p.Kind == KindLark {
		return "Lark"
	}
	return "Feishu"
}

// parseCardAction is Parse of a card.action.trigger callback: its
// decision, answered with a toast once the session took (or refused) it.
func (d *Door) parseCardAction(plain []byte) (channels.Parsed, error) {
	ok := channels.Parsed{Answer: channels.Answer{Status: http.StatusOK, ContentType: "application/json", Body: []byte(`{}`)}}
	var ev callback.CardActionTriggerEvent
	if err := json.Unmarshal(plain, &ev); err != nil {
		return ok, fmt.Errorf("%s: %s: %w", d.Profile.Kind, EventCardAction, err)
	}
	stop, toast, err := d.StopClick(&ev)
	if err != nil {
		return ok, err
	}
	var dec *channels.Decision
	if toast == nil {
		if dec, toast, err = d.Click(&ev); err != nil || toast == nil {
			return ok, err
		}
	}
	if d.EncryptKey == "" {
		// Only the Verification Token vouches for a plaintext request,
		// and every plaintext body carries it: a click could be anyone's.
		// Approvals need the signature an Encrypt Key brings.
		slog.Warn(d.Profile.Kind+": approval click refused: the webhook has no Encrypt Key, so clicks cannot be verified; set "+
			d.Profile.Env("ENCRYPT_KEY")+" (Events & Callbacks → Encryption Strategy) or use the long connection",
			"event", eventIDOf(ev.EventV2Base))
		ok.Answer = newToast(toastError, d.unverifiedClick()).answer()
		return ok, nil
	}
	if stop != nil {
		ok.Messages = []wire.ChatMessage{*stop}
		ok.Answer = toast.answer()
		return ok, nil
	}
	if dec == nil {
		ok.Answer = toast.answer()
		return ok, nil
	}
	ok.Decisions = []channels.Decision{*dec}
	ok.Answer.After = toast.answer
	return ok, nil
}

// Ask implements channels.Asker: an interactive card replying to the
// user's message (in its thread) that shows the waiting call — the tool,
// its full arguments, who may decide, the deadline — with Approve and
// Deny buttons. The post carries an idempotency uuid of the session and
// call, so a retried Ask is the same message.
func (r *Replier) Ask(ctx context.Context, t wire.Target, session string, ev agent.Event) (string, error) {
	rd, err := r.Render(ctx, t, "")
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(r.kind + "\x00approval\x00" + session + "\x00" + ev.ID))
	card := askCard(r.kind, t, session, ev)
	if r.NoButtons {
		card = askCardWithout(r.profile, t, session, ev)
	}
	id, err := rd.(*render).reply(ctx, card, hex.EncodeToString(sum[:])[:40])
	if err != nil {
		return "", fmt.Errorf("%s: ask approval for %s: %w", r.kind, ev.ID, err)
	}
	return id, nil
}

// Settle implements channels.Asker: the approval card shows the decision
// and who made it (or that the deadline passed), without its buttons.
// Patching a card to the same content again is harmless.
func (r *Replier) Settle(ctx context.Context, _ wire.Target, ref string, ev agent.Event) error {
	if ref == "" || strings.Contains(ref, ":") {
		return channels.Permanent(fmt.Errorf("%s: bad approval reference %q", r.kind, ref))
	}
	m := &render{r: r}
	if err := m.patchID(ctx, ref, settledCard(r.kind, ev)); err != nil {
		return fmt.Errorf("%s: settle approval %s: %w", r.kind, ev.ID, err)
	}
	return nil
}

// maxArgsText caps the arguments an approval card shows.
const maxArgsText = 3000

// askText is the approval card's text (card Markdown).
func askText(kind string, t wire.Target, ev agent.Event) string {
	var b strings.Builder
	args := channels.PrettyJSON(ev.Args)
	if len(args) > maxArgsText {
		args = channels.SplitText(args, maxArgsText)[0] + "\n…"
	}
	// A fence inside the arguments would end the code block early.
	args = strings.ReplaceAll(args, "```", "`\u200b`\u200b`")
	fmt.Fprintf(&b, "⏸️ **%s** wants to run with:\n```json\n%s\n```\n", ev.Name, args)
	who := make([]string, 0, len(ev.Approvers))
	for _, a := range ev.Approvers {
		who = append(who, person(kind, a))
	}
	switch {
	case len(who) > 0:
		fmt.Fprintf(&b, "Who may decide: %s.", strings.Join(who, ", "))
	case t.User != "":
		fmt.Fprintf(&b, "Who may decide: the person who asked, %s.", person(kind, kind+":"+t.User))
	default:
		b.WriteString("Who may decide: the person who asked.")
	}
	if !ev.Deadline.IsZero() {
		fmt.Fprintf(&b, "\nDenied at %s if no one decides.", ev.Deadline.UTC().Format(time.RFC1123))
	}
	return b.String()
}

// askCard is the approval card (JSON 2.0): the call, then the Approve and
// Deny buttons whose callbacks carry the session, the call, its hashes
// and the chat.
func askCard(kind string, t wire.Target, session string, ev agent.Event) string {
	button := func(action, label, style string) map[string]any {
		v := buttonValue{Action: action, Session: session, Call: ev.ID, ArgsHash: ev.ArgsHash, DefinitionHash: ev.DefinitionHash, Chat: t.Chat}
		return map[string]any{"tag": "column", "width": "auto", "elements": []any{map[string]any{
			"tag": "button", "element_id": action, "type": style,
			"text":      map[string]any{"tag": "plain_text", "content": label},
			"behaviors": []any{map[string]any{"type": "callback", "value": v}},
		}}}
	}
	card := map[string]any{
		"schema": "2.0",
		"config": map[string]any{"update_multi": true, "summary": map[string]any{"content": "Approval needed: " + ev.Name}},
		"header": map[string]any{"title": map[string]any{"tag": "plain_text", "content": "Approval needed"}, "template": "orange"},
		"body": map[string]any{"elements": []any{
			map[string]any{"tag": "markdown", "element_id": "ask", "content": askText(kind, t, ev)},
			map[string]any{"tag": "column_set", "flex_mode": "none", "columns": []any{
				button(actionApprove, "Approve", "primary"), button(actionDeny, "Deny", "danger")}},
		}},
	}
	b, _ := json.Marshal(card) // maps of strings: cannot fail
	return string(b)
}

// askCardWithout is the approval card of an app whose clicks cannot be
// verified: the call and how to decide it, without buttons.
func askCardWithout(p Profile, t wire.Target, session string, ev agent.Event) string {
	card := map[string]any{
		"schema": "2.0",
		"config": map[string]any{"update_multi": true, "summary": map[string]any{"content": "Approval needed: " + ev.Name}},
		"header": map[string]any{"title": map[string]any{"tag": "plain_text", "content": "Approval needed"}, "template": "orange"},
		"body": map[string]any{"elements": []any{
			map[string]any{"tag": "markdown", "element_id": "ask", "content": askText(p.Kind, t, ev) + "\n" + noButtons(p, session, ev)},
		}},
	}
	b, _ := json.Marshal(card) // maps of strings: cannot fail
	return string(b)
}

// settledText is the approval card's text once decided.
func settledText(kind string, ev agent.Event) string {
	switch {
	case ev.TimedOut:
		return "⌛ Denied: " + ev.Reason + "."
	case ev.Approved:
		return "✅ Approved" + byPerson(kind, ev.By) + "."
	default:
		return "⛔ Denied" + byPerson(kind, ev.By) + "."
	}
}

// settledCard is the approval card once decided: its text, no buttons.
func settledCard(kind string, ev agent.Event) string {
	card := map[string]any{
		"schema": "2.0",
		"config": map[string]any{"update_multi": true, "summary": map[string]any{"content": settledText(kind, ev)}},
		"body":   map[string]any{"elements": []any{map[string]any{"tag": "markdown", "element_id": "ask", "content": settledText(kind, ev)}}},
	}
	b, _ := json.Marshal(card) // maps of strings: cannot fail
	return string(b)
}

// byPerson names a decider: " by " and the person.
func byPerson(kind, by string) string {
	if by == "" {
		return ""
	}
	return " by " + person(kind, by)
}

// person shows a principal: a user of this platform ("<kind>:<open_id>")
// as a mention, anyone else by name.
func person(kind, p string) string {
	if id, ok := strings.CutPrefix(p, kind+":"); ok && isOpenID(id) {
		return "<at id=" + id + "></at>"
	}
	return p
}

// isOpenID reports whether s looks like an open_id (ou_ and letters,
// digits): only such an ID goes inside a mention tag.
func isOpenID(s string) bool {
	if !strings.HasPrefix(s, "ou_") || len(s) > 64 {
		return false
	}
	return strings.IndexFunc(s[3:], func(c rune) bool {
		return (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '_'
	}) < 0
}

// maxQuestionText caps the question a card shows.
const maxQuestionText = 3500

// markdownEscaper keeps the agent's question as text in card Markdown: no
// tags (a mention of everyone, a font or a link), no entities.
var markdownEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// questionText is the question card's text (card Markdown): the question
// and how to answer, until when.
func questionText(ev agent.Event) string {
	q := ev.Question
	if len(q) > maxQuestionText {
		q = channels.SplitText(q, maxQuestionText)[0] + "…"
	}
	how := "Reply in this thread to answer (in a group, @mention me)"
	if !ev.Deadline.IsZero() {
		how += ", until " + ev.Deadline.UTC().Format("15:04 MST, Jan 2")
	}
	return "❓ " + markdownEscaper.Replace(q) + "\n*" + how + ".*"
}

// Question implements channels.Questioner: the agent's question as a card
// replying to the user's message (in its thread), saying how to answer.
// The asker's next message there is the answer. The post carries an
// idempotency uuid of the turn and call, so a retried Question is the same
// message.
func (r *Replier) Question(ctx context.Context, t wire.Target, ev agent.Event) (string, error) {
	rd, err := r.Render(ctx, t, "")
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(r.kind + "\x00question\x00" + t.Chat + "\x00" + t.Turn + "\x00" + t.Message + "\x00" + ev.ID))
	id, err := rd.(*render).reply(ctx, cardJSON(questionText(ev), false), hex.EncodeToString(sum[:])[:40])
	if err != nil {
		return "", fmt.Errorf("%s: ask question %s: %w", r.kind, ev.ID, err)
	}
	return id, nil
}
