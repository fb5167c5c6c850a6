package telegram

import (
	"context"
	"errors"
	"fmt"
	"html"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
)

// CallbackQuery is a press of an inline keyboard button.
type CallbackQuery struct {
	ID      string   `json:"id"`
	From    *User    `json:"from"`
	Message *Message `json:"message,omitempty"`
	Data    string   `json:"data,omitempty"`
}

// Callback data of the approval buttons (at most 64 bytes: the call and
// its session travel in the message the buttons belong to).
const (
	dataApprove = "fa:approve"
	dataDeny    = "fa:deny"
)

// approvalLineRE reads the last line of an approval message, which names
// the session and the call ("session <id> · call <id>"). Only the bot
// writes its messages, so the line is what the bot posted.
var approvalLineRE = regexp.MustCompile(`(?m)^session (\S+) · call (\S+)$`)

// Decision turns a callback_query on an approval message into a decision
// by the user who pressed the button; nil (and no error) for other
// callbacks. The press is answered (answerCallbackQuery) once decided, or
// with the reason when refused.
func (d *Door) Decision(u Update) (*channels.Decision, error) {
	q := u.CallbackQuery
	if q == nil || (q.Data != dataApprove && q.Data != dataDeny) {
		return nil, nil
	}
	if q.From == nil || q.Message == nil || q.ID == "" {
		return nil, errors.New("telegram: callback_query without its user, message or ID")
	}
	m := approvalLineRE.FindStringSubmatch(q.Message.Text)
	if m == nil {
		return nil, fmt.Errorf("telegram: callback_query %s is not on an approval message", q.ID)
	}
	user := strconv.FormatInt(q.From.ID, 10)
	req := workflows.ApproveRequest{Call: m[2], Approve: q.Data == dataApprove, By: Kind + ":" + user, Door: Kind}
	if !req.Approve {
		req.Reason = "denied in Telegram by " + displayName(q.From)
	}
	dec := &channels.Decision{Session: m[1], ID: Kind + ":" + q.ID, Request: req}
	if d.Bot != nil && d.Bot.api != nil {
		api := d.Bot.api
		dec.Notify = func(ctx context.Context, text string) error {
			return api.Call(ctx, "answerCallbackQuery", map[string]any{"callback_query_id": q.ID, "text": clip(text, 190), "show_alert": true}, nil)
		}
	}
	return dec, nil
}

// Ask implements channels.Asker: a message replying to the user's, showing
// the waiting call, with Approve and Deny buttons.
func (r *Replier) Ask(ctx context.Context, t wire.Target, session string, ev agent.Event) (string, error) {
	rd, err := r.Render(ctx, t, "")
	if err != nil {
		return "", err
	}
	m := rd.(*render)
	var b strings.Builder
	fmt.Fprintf(&b, "⏸ <b>%s</b> wants to run with:\n<pre>%s</pre>\n", html.EscapeString(ev.Name), html.EscapeString(clip(channels.PrettyJSON(ev.Args), 3000)))
	if len(ev.Approvers) > 0 {
		fmt.Fprintf(&b, "Who may decide: %s.\n", html.EscapeString(strings.Join(ev.Approvers, ", ")))
	}
	if !ev.Deadline.IsZero() {
		fmt.Fprintf(&b, "Denied at %s if no one decides.\n", ev.Deadline.UTC().Format(time.RFC1123))
	}
	fmt.Fprintf(&b, "session %s · call %s", session, ev.ID)
	params := map[string]any{"chat_id": m.chat, "text": b.String(), "parse_mode": "HTML",
		"reply_parameters": map[string]any{"message_id": m.replyTo, "allow_sending_without_reply": true},
		"reply_markup": map[string]any{"inline_keyboard": [][]map[string]string{{
			{"text": "✅ Approve", "callback_data": dataApprove}, {"text": "⛔ Deny", "callback_data": dataDeny}}}}}
	if m.thread != 0 {
		params["message_thread_id"] = m.thread
	}
	var out sentMessage
	if err := r.api.Call(ctx, "sendMessage", params, &out); err != nil {
		return "", fmt.Errorf("telegram: ask approval for %s: %w", ev.ID, err)
	}
	return t.Chat + "/" + strconv.FormatInt(out.MessageID, 10), nil
}

// Settle implements channels.Asker: the approval message shows the
// decision, without its buttons.
func (r *Replier) Settle(ctx context.Context, _ wire.Target, ref string, ev agent.Event) error {
	chat, id, ok := strings.Cut(ref, "/")
	msg, err := strconv.ParseInt(id, 10, 64)
	if !ok || err != nil {
		return fmt.Errorf("telegram: bad approval reference %q", ref)
	}
	var text string
	switch {
	case ev.TimedOut:
		text = "⌛ Denied: " + ev.Reason + "."
	case ev.Approved:
		text = "✅ Approved" + byUser(ev.By) + "."
	default:
		text = "⛔ Denied" + byUser(ev.By) + "."
	}
	err = r.api.Call(ctx, "editMessageText", map[string]any{"chat_id": chat, "message_id": msg, "text": text,
		"reply_markup": map[string]any{"inline_keyboard": [][]map[string]string{}}}, nil)
	if notModified(err) {
		return nil
	}
	return err
}

func byUser(by string) string {
	if u, ok := strings.CutPrefix(by, Kind+":"); ok {
		return " by user " + u
	}
	if by != "" {
		return " by " + by
	}
	return ""
}

// Question implements channels.Questioner: the agent's question as a reply
// to the user's message, saying how to answer. The asker's next message in
// the chat (in a group: a reply to this message, or a mention of the bot,
// as any message to the bot) is the answer.
func (r *Replier) Question(ctx context.Context, t wire.Target, ev agent.Event) (string, error) {
	rd, err := r.Render(ctx, t, "")
	if err != nil {
		return "", err
	}
	m := rd.(*render)
	how := "Reply to this message to answer"
	if m.chat > 0 {
		how = "Reply here to answer" // a private chat: every message reaches the bot
	}
	if !ev.Deadline.IsZero() {
		how += " (until " + ev.Deadline.UTC().Format("15:04 MST, Jan 2") + ")"
	}
	params := map[string]any{"chat_id": m.chat, "text": "❓ " + html.EscapeString(clip(ev.Question, 3500)) + "\n<i>" + how + ".</i>", "parse_mode": "HTML",
		"reply_parameters": map[string]any{"message_id": m.replyTo, "allow_sending_without_reply": true}}
	if m.thread != 0 {
		params["message_thread_id"] = m.thread
	}
	var out sentMessage
	if err := r.api.Call(ctx, "sendMessage", params, &out); err != nil {
		return "", fmt.Errorf("telegram: ask question %s: %w", ev.ID, err)
	}
	return t.Chat + "/" + strconv.FormatInt(out.MessageID, 10), nil
}
