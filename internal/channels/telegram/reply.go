package telegram

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf16"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/tools"
	"github.com/fastagent/fastagent/internal/wire"
)

// Replier renders turns' answers with the Bot API: one preview message
// (a reply to the user's message) edited in place while the turn streams,
// settled to the stored answer as Telegram HTML.
type Replier struct {
	api *API
	log *slog.Logger
	// Files bounds the files Fetch downloads (config maxFileBytes).
	Files channels.FileLimits
	// EditEvery is the least interval between two preview edits in one
	// chat; default 1 s.
	EditEvery time.Duration
	// MaxWait bounds how long Finish waits out one 429 retry_after;
	// default 30 s.
	MaxWait time.Duration

	// Refs keeps the message IDs of the parts after the first of a split
	// answer (the session store's replies table), so a retried reply
	// edits them instead of sending them again; nil keeps them in memory
	// only.
	Refs Refs

	mu sync.Mutex
	// next is, per chat, the earliest time of the next preview edit (the
	// rate limit, or a 429's retry_after).
	next map[string]time.Time
}

// Refs stores platform references (store.Store has these methods).
type Refs = channels.Refs

// NewReplier returns the replier on api.
func NewReplier(api *API, log *slog.Logger) *Replier {
	if log == nil {
		log = slog.Default()
	}
	return &Replier{api: api, log: log, EditEvery: time.Second, MaxWait: 30 * time.Second, next: map[string]time.Time{}}
}

// Kind implements channels.Replier.
func (r *Replier) Kind() string { return Kind }

// API returns the replier's Bot API client.
func (r *Replier) API() *API { return r.api }

// slot reports whether chat may be edited at now and, if so, books the
// next slot.
func (r *Replier) slot(chat string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Before(r.next[chat]) {
		return false
	}
	r.next[chat] = now.Add(r.EditEvery)
	return true
}

// backOff holds chat's edits until now+d (a 429's retry_after).
func (r *Replier) backOff(chat string, now time.Time, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t := now.Add(d); t.After(r.next[chat]) {
		r.next[chat] = t
	}
}

// Render implements channels.Replier. ref is what an earlier attempt
// stored: the preview message's message_id.
func (r *Replier) Render(_ context.Context, t wire.Target, ref string) (channels.Render, error) {
	if t.Chat == "" || t.Message == "" {
		return nil, fmt.Errorf("telegram: reply target needs chat and message, got %q / %q", t.Chat, t.Message)
	}
	chat, err := strconv.ParseInt(t.Chat, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("telegram: bad chat %q", t.Chat)
	}
	m := &render{r: r, chat: chat, chatKey: t.Chat}
	if m.replyTo, err = strconv.ParseInt(t.Message, 10, 64); err != nil {
		return nil, fmt.Errorf("telegram: bad message id %q", t.Message)
	}
	if t.Thread != "" {
		m.thread, _ = strconv.ParseInt(t.Thread, 10, 64)
	}
	if ref != "" {
		if m.msgID, err = strconv.ParseInt(ref, 10, 64); err != nil || m.msgID <= 0 {
			return nil, fmt.Errorf("telegram: bad reply reference %q", ref)
		}
	}
	return m, nil
}

// render is one turn's reply.
type render struct {
	r       *Replier
	chat    int64
	chatKey string
	thread  int64
	replyTo int64
	// msgID is the preview message (0 until posted).
	msgID   int64
	shown   string
	settled string
	// sent counts the parts after the first already sent by Finish.
	sent int
	// keyboard is the reply_markup the preview is posted or edited with:
	// the stop button while the turn runs, none once settled.
	keyboard any
}

// stopKeyboard is the preview's stop button for the turn of user message
// replyTo.
func stopKeyboard(replyTo int64) any {
	return map[string]any{"inline_keyboard": [][]map[string]string{{
		{"text": "⏹ Stop", "callback_data": dataStop + strconv.FormatInt(replyTo, 10)}}}}
}

// noKeyboard removes the preview's buttons.
var noKeyboard = map[string]any{"inline_keyboard": [][]map[string]string{}}

// Ref implements channels.Render.
func (m *render) Ref() string {
	if m.msgID == 0 {
		return ""
	}
	return strconv.FormatInt(m.msgID, 10)
}

// preview is the plain text the preview message shows while the turn runs.
func preview(v *channels.View) string {
	text := v.Text()
	var tools, progress []string
	for _, t := range v.Tools {
		if t.Status == channels.ToolRunning {
			tools = append(tools, t.Name)
			if p := t.ProgressLine(); p != "" {
				progress = append(progress, "\n↳ "+p)
			}
		}
	}
	switch {
	case len(tools) > 0 && text != "":
		text += "\n\n🔧 " + strings.Join(tools, ", ") + "…" + strings.Join(progress, "")
	case len(tools) > 0:
		text = "🔧 " + strings.Join(tools, ", ") + "…" + strings.Join(progress, "")
	case text == "" && v.Thinking:
		text = "💭 Thinking…"
	case text == "" && v.Queued:
		text = "⏳ Queued"
	}
	return clip(text, MaxText)
}

// clip cuts text to limit UTF-16 units, ending it with "…" when cut.
func clip(text string, limit int) string {
	if units(text) <= limit {
		return text
	}
	u := utf16.Encode([]rune(text))[:limit-1]
	if n := len(u); n > 0 && utf16.IsSurrogate(rune(u[n-1])) {
		u = u[:n-1]
	}
	return string(utf16.Decode(u)) + "…"
}

// Show implements channels.Render: the first call with something to show
// posts the preview, later ones edit it — at most once per EditEvery per
// chat, and never before a 429's retry_after has passed.
func (m *render) Show(ctx context.Context, v *channels.View) error {
	text := preview(v)
	if strings.TrimSpace(text) == "" || text == m.shown || m.settled != "" {
		return nil
	}
	now := time.Now()
	if !m.r.slot(m.chatKey, now) {
		return nil
	}
	var err error
	if m.replyTo != 0 {
		m.keyboard = stopKeyboard(m.replyTo)
	}
	if m.msgID == 0 {
		err = m.send(ctx, text, "")
	} else {
		err = m.edit(ctx, text, "")
	}
	if d := RetryAfter(err); d > 0 {
		m.r.backOff(m.chatKey, now, d)
	}
	if err == nil || notModified(err) {
		m.shown = text
		return nil
	}
	return err
}

// Finish implements channels.Render: the answer is rendered as HTML and
// split at MaxText; the preview is edited to the first part (or the first
// part is posted when there is no preview) and the other parts are sent
// after it. Repeated calls send nothing twice; a 429 is waited out.
func (m *render) Finish(ctx context.Context, text string) error {
	if m.settled == text && m.msgID != 0 {
		return nil
	}
	parts := Split(HTML(text), MaxText)
	m.keyboard = nil
	if m.msgID != 0 {
		m.keyboard = noKeyboard // the stop button goes with the answer
	}
	if m.msgID == 0 {
		if err := m.retry(ctx, func() error { return m.send(ctx, parts[0], "HTML") }); err != nil {
			return err
		}
	} else if err := m.retry(ctx, func() error { return m.edit(ctx, parts[0], "HTML") }); err != nil && !notModified(err) {
		if !gone(err) {
			return err
		}
		// The preview was deleted (or is too old to edit): post the answer.
		m.msgID = 0
		if err := m.retry(ctx, func() error { return m.send(ctx, parts[0], "HTML") }); err != nil {
			return err
		}
	}
	for ; m.sent < len(parts)-1; m.sent++ {
		if err := m.extra(ctx, m.sent+2, parts[m.sent+1]); err != nil {
			return err
		}
	}
	m.shown, m.settled = text, text
	return nil
}

// extra makes part n (2, 3, …) of the answer show p: it edits the part's
// message when a stored reference names one, else sends it and stores its
// reference.
func (m *render) extra(ctx context.Context, n int, p string) error {
	session, key := Kind+":"+m.chatKey, fmt.Sprintf("%d#part%d", m.replyTo, n)
	if m.r.Refs != nil {
		if ref, err := m.r.Refs.Reply(ctx, session, key); err == nil {
			id, perr := strconv.ParseInt(ref, 10, 64)
			if perr != nil {
				return fmt.Errorf("telegram: bad part reference %q", ref)
			}
			err := m.retry(ctx, func() error { return m.editID(ctx, id, p, "HTML") })
			if err == nil || notModified(err) {
				return nil
			}
			if !gone(err) {
				return err
			}
		}
	}
	var id int64
	if err := m.retry(ctx, func() error { var err error; id, err = m.post(ctx, p, "HTML", false); return err }); err != nil {
		return err
	}
	if m.r.Refs != nil {
		if err := m.r.Refs.SaveReply(ctx, session, key, strconv.FormatInt(id, 10)); err != nil {
			return fmt.Errorf("telegram: store part %d: %w", n, err)
		}
	}
	return nil
}

// retry runs f, waiting out 429 answers (at most MaxWait each, five
// times); an HTML part the platform cannot parse is not retried.
func (m *render) retry(ctx context.Context, f func() error) error {
	for attempt := 0; ; attempt++ {
		err := f()
		d := RetryAfter(err)
		if d == 0 || attempt >= 4 {
			return err
		}
		if d > m.r.MaxWait {
			return err
		}
		m.r.backOff(m.chatKey, time.Now(), d)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// sent is a sendMessage or editMessageText answer.
type sentMessage struct {
	MessageID int64 `json:"message_id"`
}

// send posts the preview (or the first part) as a reply to the user's
// message.
func (m *render) send(ctx context.Context, text, mode string) error {
	id, err := m.post(ctx, text, mode, true)
	if err != nil {
		return err
	}
	m.msgID = id
	return nil
}

// post sends one message into the chat (its topic), replying to the
// user's message when reply is set. HTML the platform refuses is sent as
// its plain text.
func (m *render) post(ctx context.Context, text, mode string, reply bool) (int64, error) {
	params := map[string]any{"chat_id": m.chat, "text": text, "link_preview_options": map[string]any{"is_disabled": true}}
	if mode != "" {
		params["parse_mode"] = mode
	}
	if m.thread != 0 {
		params["message_thread_id"] = m.thread
	}
	if reply {
		params["reply_parameters"] = map[string]any{"message_id": m.replyTo, "allow_sending_without_reply": true}
		if m.keyboard != nil {
			params["reply_markup"] = m.keyboard
		}
	}
	var out sentMessage
	err := m.r.api.Call(ctx, "sendMessage", params, &out)
	if mode != "" && badEntities(err) {
		delete(params, "parse_mode")
		params["text"] = Plain(text)
		err = m.r.api.Call(ctx, "sendMessage", params, &out)
	}
	if err != nil {
		return 0, err
	}
	if out.MessageID == 0 {
		return 0, errors.New("telegram: sendMessage: no message_id")
	}
	return out.MessageID, nil
}

// edit replaces the preview message's text.
func (m *render) edit(ctx context.Context, text, mode string) error {
	return m.editID(ctx, m.msgID, text, mode)
}

// editID replaces message id's text.
func (m *render) editID(ctx context.Context, id int64, text, mode string) error {
	params := map[string]any{"chat_id": m.chat, "message_id": id, "text": text, "link_preview_options": map[string]any{"is_disabled": true}}
	if mode != "" {
		params["parse_mode"] = mode
	}
	if id == m.msgID && m.keyboard != nil {
		params["reply_markup"] = m.keyboard
	}
	err := m.r.api.Call(ctx, "editMessageText", params, nil)
	if mode != "" && badEntities(err) {
		delete(params, "parse_mode")
		params["text"] = Plain(text)
		err = m.r.api.Call(ctx, "editMessageText", params, nil)
	}
	return err
}

// inboxDir is where files of messages are saved, relative to the
// workspace.
const inboxDir = "inbox/telegram"

// Fetch implements channels.Fetcher: each attachment is resolved with
// getFile and downloaded from the file endpoint (size-capped, timed out),
// then given to the model by the shared channels.Intake policy — photos
// as vision input within their caps, documents saved under
// dir/inbox/telegram. Errors a retry cannot fix are channels.Permanent.
func (r *Replier) Fetch(ctx context.Context, t wire.Target, p agent.Prompt, dir string) (agent.Prompt, error) {
	lim := r.Files.WithDefaults()
	in := channels.Intake{Limits: lim, Dir: dir, Inbox: inboxDir}
	for _, a := range t.Attachments {
		if err := r.fetchOne(ctx, a, &in, lim); err != nil {
			return p, fmt.Errorf("telegram: file %q: %w", a.Name, err)
		}
	}
	return in.Prompt(p), nil
}

func (r *Replier) fetchOne(ctx context.Context, a wire.Attachment, in *channels.Intake, lim channels.FileLimits) error {
	tooBig := channels.Permanent(fmt.Errorf("it is over the %s limit (maxFileBytes)", tools.FormatSize(int(lim.MaxFileBytes))))
	if a.Size > lim.MaxFileBytes {
		return tooBig
	}
	ctx, cancel := context.WithTimeout(ctx, lim.Timeout)
	defer cancel()
	var f File
	if err := r.api.Call(ctx, "getFile", map[string]any{"file_id": a.ID}, &f); err != nil {
		if permanent(err) {
			return channels.Permanent(err)
		}
		return err
	}
	if f.FilePath == "" {
		return channels.Permanent(errors.New("getFile: no file_path (over the Bot API's download limit?)"))
	}
	if f.FileSize > lim.MaxFileBytes {
		return tooBig
	}
	data, err := r.api.Download(ctx, f.FilePath, lim.MaxFileBytes)
	switch {
	case errors.Is(err, errTooLarge):
		return tooBig
	case err != nil && ctx.Err() == context.DeadlineExceeded:
		return fmt.Errorf("download timed out after %s", lim.Timeout)
	case permanent(err):
		return channels.Permanent(err)
	case err != nil:
		return err
	}
	sum := sha256.Sum256([]byte(a.ID))
	return in.Add(hex.EncodeToString(sum[:6]), a.Name, data)
}

// Reactions of React: 👀 once a message is taken, 👌 once answered (a bot
// sets one reaction, so the second replaces the first; ✅ is not among the
// reactions Telegram allows).
const (
	ReactionTaken    = "👀"
	ReactionAnswered = "👌"
)

// React implements channels.Reactor with setMessageReaction (idempotent:
// it sets the message's reaction).
func (r *Replier) React(ctx context.Context, t wire.Target, stage string) error {
	id, err := strconv.ParseInt(t.Message, 10, 64)
	chat, cerr := strconv.ParseInt(t.Chat, 10, 64)
	if err != nil || cerr != nil {
		return fmt.Errorf("telegram: react: no message to react to (%q in %q)", t.Message, t.Chat)
	}
	emoji := ReactionTaken
	if stage == channels.ReactAnswered {
		emoji = ReactionAnswered
	}
	params := map[string]any{"chat_id": chat, "message_id": id, "reaction": []map[string]string{{"type": "emoji", "emoji": emoji}}}
	return r.api.Call(ctx, "setMessageReaction", params, nil)
}
