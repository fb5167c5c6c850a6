package feishu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	larkevent "github.com/larksuite/oapi-sdk-go/v3/event"
	larkim "github.com/larksuite/oapi-sdk-go/v3/service/im/v1"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/wire"
)

// EventMessageReceive is the event type of a message sent to the bot.
const EventMessageReceive = "im.message.receive_v1"

// EventMessageRecalled is the event type of a message recalled in a chat
// the bot is in.
const EventMessageRecalled = "im.message.recalled_v1"

// Door is the webhook door of one profile. Verification is modal and fail
// closed: with EncryptKey set every ordinary event must be signed (within
// MaxSkew) and encrypted, and only the url_verification challenge may pass
// unsigned, by its token; without one, the body is plaintext and its
// verification token must match.
type Door struct {
	Profile Profile
	// Token is the app's Verification Token.
	Token string
	// EncryptKey is the app's Encrypt Key ("" = plaintext events).
	EncryptKey string
	Policy     wire.ChatPolicy
	// Webhook is false under the long connection: the door then refuses
	// every request and has no route.
	Webhook bool
	// Bot resolves the bot's open_id (summons fail closed until known).
	Bot *Bot
	// Now is the clock (tests); nil = time.Now.
	Now func() time.Time
	// Admins are the open_ids who may stop anyone's turn (Config.Admins).
	Admins []string
}

// DefaultWhileBusy implements channels.BusyDefaulter.
func (d *Door) DefaultWhileBusy(mode string) {
	if d.Policy.WhileBusy == "" {
		d.Policy.WhileBusy = mode
	}
}

// Kind implements channels.Door.
func (d *Door) Kind() string { return d.Profile.Kind }

// Path implements channels.Door; "" under the long connection.
func (d *Door) Path() string {
	if !d.Webhook {
		return ""
	}
	return d.Profile.Path
}

// Verify implements channels.Door.
func (d *Door) Verify(r channels.Request) error {
	_, err := d.open(r)
	return err
}

// envelope is the part of a (decrypted) body the door routes on.
type envelope struct {
	Encrypt   string `json:"encrypt"`
	Schema    string `json:"schema"`
	Type      string `json:"type"`
	Token     string `json:"token"`
	Challenge string `json:"challenge"`
	Header    *struct {
		EventID   string `json:"event_id"`
		EventType string `json:"event_type"`
		Token     string `json:"token"`
	} `json:"header"`
}

func (e envelope) token() string {
	if e.Header != nil {
		return e.Header.Token
	}
	return e.Token
}

const typeURLVerification = "url_verification"

// open verifies r and returns its plaintext event JSON.
func (d *Door) open(r channels.Request) ([]byte, error) {
	kind := d.Profile.Kind
	if !d.Webhook {
		return nil, fmt.Errorf("%s: the channel uses the long connection; webhook requests are refused", kind)
	}
	var env envelope
	if err := json.Unmarshal(r.Body, &env); err != nil {
		return nil, fmt.Errorf("%s: body: %w", kind, err)
	}
	if d.EncryptKey == "" {
		if env.Encrypt != "" {
			return nil, fmt.Errorf("%s: encrypted body, but no encrypt key is configured", kind)
		}
		if !tokenEqual(env.token(), d.Token) {
			return nil, fmt.Errorf("%s: verification token mismatch", kind)
		}
		return r.Body, nil
	}
	if env.Encrypt == "" {
		return nil, fmt.Errorf("%s: plaintext body refused: an encrypt key is set", kind)
	}
	now := time.Now()
	if d.Now != nil {
		now = d.Now()
	}
	sigErr := checkSignature(http.Header(r.Header), d.EncryptKey, r.Body, now)
	plain, err := Decrypt(d.EncryptKey, env.Encrypt)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", kind, err)
	}
	var inner envelope
	if err := json.Unmarshal(plain, &inner); err != nil {
		return nil, fmt.Errorf("%s: decrypted body: %w", kind, err)
	}
	if sigErr == nil {
		if d.Token != "" && !tokenEqual(inner.token(), d.Token) {
			return nil, fmt.Errorf("%s: verification token mismatch", kind)
		}
		return plain, nil
	}
	// The Request URL challenge is not signed: decrypt → exactly
	// url_verification → token. Nothing else passes unsigned.
	if inner.Type == typeURLVerification && inner.Header == nil && inner.Schema == "" && inner.Challenge != "" {
		if !tokenEqual(inner.Token, d.Token) {
			return nil, fmt.Errorf("%s: url_verification: verification token mismatch", kind)
		}
		return plain, nil
	}
	return nil, fmt.Errorf("%s: %w", kind, sigErr)
}

// Parse implements channels.Door: url_verification is answered with its
// challenge; a user's im.message.receive_v1 becomes a chat message; a
// click on an approval card's button (card.action.trigger) becomes a
// decision, answered with a toast. Other events are acknowledged and
// dropped.
func (d *Door) Parse(r channels.Request) (channels.Parsed, error) {
	ok := channels.Parsed{Answer: channels.Answer{Status: http.StatusOK, ContentType: "application/json", Body: []byte(`{"msg":"success"}`)}}
	plain, err := d.open(r)
	if err != nil {
		return ok, err
	}
	var env envelope
	if err := json.Unmarshal(plain, &env); err != nil {
		return ok, fmt.Errorf("%s: event: %w", d.Profile.Kind, err)
	}
	if env.Type == typeURLVerification {
		body, err := json.Marshal(map[string]string{"challenge": env.Challenge})
		if err != nil {
			return ok, fmt.Errorf("%s: challenge: %w", d.Profile.Kind, err)
		}
		return channels.Parsed{Answer: channels.Answer{Status: http.StatusOK, ContentType: "application/json", Body: body}}, nil
	}
	if env.Schema == "2.0" && env.Header != nil && env.Header.EventType == EventCardAction {
		return d.parseCardAction(plain)
	}
	if env.Schema == "2.0" && env.Header != nil && env.Header.EventType == EventMessageRecalled {
		var ev larkim.P2MessageRecalledV1
		if err := json.Unmarshal(plain, &ev); err != nil {
			return ok, fmt.Errorf("%s: %s: %w", d.Profile.Kind, EventMessageRecalled, err)
		}
		m, err := d.Recall(&ev)
		if err != nil || m == nil {
			return ok, err
		}
		ok.Messages = []wire.ChatMessage{*m}
		return ok, nil
	}
	if env.Schema != "2.0" || env.Header == nil || env.Header.EventType != EventMessageReceive {
		return ok, nil
	}
	var ev larkim.P2MessageReceiveV1
	if err := json.Unmarshal(plain, &ev); err != nil {
		return ok, fmt.Errorf("%s: %s: %w", d.Profile.Kind, EventMessageReceive, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), botLookupTimeout)
	defer cancel()
	m, err := d.Message(ctx, &ev)
	if err != nil || m == nil {
		return ok, err
	}
	ok.Messages = []wire.ChatMessage{*m}
	return ok, nil
}

// Message turns a decoded im.message.receive_v1 event (webhook or long
// connection) into a chat message; nil when it is neither a turn nor
// context: a non-user sender, the bot itself, an un-summoned group message
// in mentions mode, or a message without text or files.
func (d *Door) Message(ctx context.Context, ev *larkim.P2MessageReceiveV1) (*wire.ChatMessage, error) {
	if ev == nil || ev.Event == nil || ev.Event.Message == nil || ev.Event.Sender == nil {
		return nil, fmt.Errorf("%s: %s without a message or sender", d.Profile.Kind, EventMessageReceive)
	}
	s, msg := ev.Event.Sender, ev.Event.Message
	if str(s.SenderType) != "user" {
		return nil, nil
	}
	user := ""
	if s.SenderId != nil {
		user = str(s.SenderId.OpenId)
	}
	id, chat := str(msg.MessageId), str(msg.ChatId)
	if id == "" || chat == "" {
		return nil, fmt.Errorf("%s: %s without message_id or chat_id", d.Profile.Kind, EventMessageReceive)
	}
	direct := str(msg.ChatType) == "p2p"
	bot, err := d.botFor(ctx, id, direct)
	if err != nil {
		return nil, err
	}
	if bot != "" && user == bot {
		return nil, nil
	}
	summoned, mentioned := mentionsOf(msg.Mentions, bot)
	if !direct && !summoned && d.Policy.GroupMode != wire.GroupContext {
		return nil, nil
	}
	text, files := input(msg, bot, direct || summoned)
	if text == "" && len(files) == 0 {
		return nil, nil
	}
	return &wire.ChatMessage{
		Kind:      d.Profile.Kind,
		UniqueIDs: true,
		Chat:      chat,
		ID:        id,
		Event:     eventIDOf(ev.EventV2Base),
		Root:      rootOf(msg),
		Direct:    direct,
		Summoned:  summoned,
		// Mentions of people but not of the bot: their discussion.
		MentionsOthers: !summoned && channels.MentionsOthers(mentioned, bot),
		Command:        commandIf(direct || summoned || d.Policy.GroupMode == wire.GroupContext, text),
		User:           user,
		UserName:       user,
		Text:           text,
		Attachments:    files,
		Policy:         d.Policy,
	}, nil
}

// botFor is the bot's open_id for message id ("" when the door has no bot
// lookup). A group message is refused (channels.ErrRetryLater) while the
// bot is unknown: whether it summons the bot cannot be told yet, so the
// platform pushes it again later.
func (d *Door) botFor(ctx context.Context, id string, direct bool) (string, error) {
	if d.Bot == nil {
		return "", nil
	}
	bot := d.Bot.OpenID(ctx)
	if bot == "" && !direct {
		return "", fmt.Errorf("%s: group message %s refused until the bot's open_id is known: %w", d.Profile.Kind, id, channels.ErrRetryLater)
	}
	return bot, nil
}

// mentionsOf lists the open_ids a message mentions; summoned says the bot
// is among them.
func mentionsOf(mentions []*larkim.MentionEvent, bot string) (summoned bool, mentioned []string) {
	for _, mn := range mentions {
		if mn == nil || mn.Id == nil {
			continue
		}
		id := str(mn.Id.OpenId)
		mentioned = append(mentioned, id)
		if bot != "" && id == bot {
			summoned = true
		}
	}
	return summoned, mentioned
}

// input is a message's text and files. A reply-summon at the top level (a
// quoted reply: parent_id without thread_id) that addresses the bot loads
// its parent as primary input when the turn runs; thread continuations do
// not: their session history is authoritative.
func input(msg *larkim.EventMessage, bot string, addressed bool) (string, []wire.Attachment) {
	text, files := content(str(msg.MessageType), str(msg.Content), msg.Mentions, bot)
	if parent := str(msg.ParentId); parent != "" && str(msg.ThreadId) == "" && addressed {
		files = append([]wire.Attachment{{ID: parent, Name: "replied-to message", Mime: MimeParent}}, files...)
	}
	return text, files
}

// rootOf is the thread a message continues: a reply inside a thread
// continues the thread's root; a quoted reply at the top level (root_id
// without thread_id) is a new root ("").
func rootOf(msg *larkim.EventMessage) string {
	if str(msg.ThreadId) != "" {
		return str(msg.RootId)
	}
	return ""
}

// eventIDOf is the delivery's event ID ("" without a header).
func eventIDOf(base *larkevent.EventV2Base) string {
	if base == nil || base.Header == nil {
		return ""
	}
	return base.Header.EventID
}

// Recall turns a decoded im.message.recalled_v1 event (webhook or long
// connection) into the chat message telling of it: the recalled message's
// ID, marked Deleted. The chat workflow drops the turn it started while
// that turn waits, and its buffered line.
func (d *Door) Recall(ev *larkim.P2MessageRecalledV1) (*wire.ChatMessage, error) {
	if ev == nil || ev.Event == nil {
		return nil, fmt.Errorf("%s: %s without an event", d.Profile.Kind, EventMessageRecalled)
	}
	id, chat := str(ev.Event.MessageId), str(ev.Event.ChatId)
	if id == "" || chat == "" {
		return nil, fmt.Errorf("%s: %s without message_id or chat_id", d.Profile.Kind, EventMessageRecalled)
	}
	return &wire.ChatMessage{Kind: d.Profile.Kind, UniqueIDs: true, Chat: chat, ID: id, Event: eventIDOf(ev.EventV2Base),
		Deleted: true, Policy: d.Policy}, nil
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// content decodes a message's content JSON into text and attachments:
// text (the bot's @_user_N keys removed, others shown as @Name), post
// (flattened; its images become attachments), image and file (by key).
func content(msgType, raw string, mentions []*larkim.MentionEvent, bot string) (string, []wire.Attachment) {
	names := map[string]string{} // mention key → replacement
	for _, m := range mentions {
		if m == nil || m.Key == nil {
			continue
		}
		if bot != "" && m.Id != nil && str(m.Id.OpenId) == bot {
			names[*m.Key] = ""
		} else {
			names[*m.Key] = "@" + str(m.Name)
		}
	}
	switch msgType {
	case "text":
		var c struct {
			Text string `json:"text"`
		}
		if json.Unmarshal([]byte(raw), &c) != nil {
			return "", nil
		}
		return strings.TrimSpace(replaceMentions(c.Text, names)), nil
	case "post":
		return flattenPost(raw, names)
	case "image":
		var c struct {
			ImageKey string `json:"image_key"`
		}
		if json.Unmarshal([]byte(raw), &c) != nil || c.ImageKey == "" {
			return "", nil
		}
		return "", []wire.Attachment{{ID: c.ImageKey, Name: c.ImageKey, Mime: MimeImage}}
	case "file", "media":
		var c struct {
			FileKey  string `json:"file_key"`
			FileName string `json:"file_name"`
		}
		if json.Unmarshal([]byte(raw), &c) != nil || c.FileKey == "" {
			return "", nil
		}
		name := c.FileName
		if name == "" {
			name = c.FileKey
		}
		return "", []wire.Attachment{{ID: c.FileKey, Name: name}}
	}
	return "", nil
}

// MimeImage marks an attachment that is an image (fetched with
// type=image from the message-resource API).
const MimeImage = "image/*"

// replaceMentions replaces mention keys, longest first (@_user_10 before
// @_user_1).
func replaceMentions(text string, names map[string]string) string {
	keys := make([]string, 0, len(names))
	for k := range names {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return len(keys[i]) > len(keys[j]) })
	for _, k := range keys {
		text = strings.ReplaceAll(text, k, names[k])
	}
	return text
}

// postElement is one element of a post paragraph.
type postElement struct {
	Tag      string `json:"tag"`
	Text     string `json:"text"`
	Href     string `json:"href"`
	UserID   string `json:"user_id"`
	UserName string `json:"user_name"`
	ImageKey string `json:"image_key"`
	FileKey  string `json:"file_key"`
	Language string `json:"language"`
}

type postBody struct {
	Title   string          `json:"title"`
	Content [][]postElement `json:"content"`
}

// flattenPost turns a post (rich text) into plain lines. Events carry the
// body directly; a locale-keyed body ({"zh_cn": {...}}) is read too.
func flattenPost(raw string, names map[string]string) (string, []wire.Attachment) {
	var p postBody
	if json.Unmarshal([]byte(raw), &p) != nil {
		return "", nil
	}
	if p.Title == "" && len(p.Content) == 0 {
		var byLocale map[string]postBody
		if json.Unmarshal([]byte(raw), &byLocale) != nil {
			return "", nil
		}
		locales := make([]string, 0, len(byLocale))
		for l := range byLocale {
			locales = append(locales, l)
		}
		sort.Strings(locales)
		if len(locales) > 0 {
			p = byLocale[locales[0]]
		}
	}
	var lines []string
	var files []wire.Attachment
	if t := strings.TrimSpace(p.Title); t != "" {
		lines = append(lines, t)
	}
	for _, para := range p.Content {
		var b strings.Builder
		for _, e := range para {
			switch e.Tag {
			case "text", "md":
				b.WriteString(replaceMentions(e.Text, names))
			case "a":
				if e.Text != "" && e.Href != "" && e.Text != e.Href {
					fmt.Fprintf(&b, "%s (%s)", e.Text, e.Href)
				} else {
					b.WriteString(e.Text + e.Href)
				}
			case "at":
				if n, ok := names[e.UserID]; ok {
					b.WriteString(n)
				} else if e.UserName != "" {
					b.WriteString("@" + e.UserName)
				}
			case "code_block":
				fmt.Fprintf(&b, "```%s\n%s\n```", e.Language, e.Text)
			case "img":
				if e.ImageKey != "" {
					files = append(files, wire.Attachment{ID: e.ImageKey, Name: e.ImageKey, Mime: MimeImage})
				}
			case "media":
				if e.FileKey != "" {
					files = append(files, wire.Attachment{ID: e.FileKey, Name: e.FileKey})
				}
			}
		}
		if line := strings.TrimSpace(b.String()); line != "" {
			lines = append(lines, line)
		}
	}
	return strings.Join(lines, "\n"), files
}

// botLookupTimeout bounds one bot info lookup.
const botLookupTimeout = 5 * time.Second

// Bot is the bot's open_id, configured or fetched (bot info API) and kept.
// It is a channels.Identity: the runtime's channels.Resolver fetches it
// from startup, retried until known, and a connector waits for it
// (Resolve); until then group messages are refused with
// channels.ErrRetryLater, so the platform pushes them again instead of
// them being dropped.
type Bot struct {
	mu       sync.Mutex
	openID   string
	fetch    func(context.Context) (string, error)
	resolved chan struct{}
	// lookup lets one lookup run at a time: a second caller finds the
	// first one's answer.
	lookup sync.Mutex
}

// NewBot returns a Bot with a known openID, or one that fetches it.
func NewBot(openID string, fetch func(context.Context) (string, error)) *Bot {
	b := &Bot{openID: openID, fetch: fetch, resolved: make(chan struct{})}
	if openID != "" {
		close(b.resolved)
	}
	return b
}

// Lookup implements channels.Identity: it fetches the open_id once
// (bounded by botLookupTimeout) unless it is known.
func (b *Bot) Lookup(ctx context.Context) error {
	b.lookup.Lock()
	defer b.lookup.Unlock()
	b.mu.Lock()
	known, fetch := b.openID != "", b.fetch
	b.mu.Unlock()
	if known {
		return nil
	}
	if fetch == nil {
		return errors.New("feishu: bot open_id unknown and not fetched (botOpenId)")
	}
	ctx, cancel := context.WithTimeout(ctx, botLookupTimeout)
	id, err := fetch(ctx)
	cancel()
	if err == nil && id == "" {
		err = errors.New("feishu: bot info without an open_id")
	}
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.openID = id
	close(b.resolved)
	return nil
}

// Resolved is closed once the open_id is known.
func (b *Bot) Resolved() <-chan struct{} { return b.resolved }

// Resolve looks the open_id up until it is known or ctx ends (pausing
// channels.ResolveFirst between failed lookups, or returning when another
// caller's lookup — the runtime's resolver — found it); connectors call it
// at startup so the first group message does not wait.
func (b *Bot) Resolve(ctx context.Context) error {
	for {
		err := b.Lookup(ctx)
		if err == nil {
			return nil
		}
		t := time.NewTimer(channels.ResolveFirst)
		select {
		case <-b.resolved:
			t.Stop()
			return nil
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// OpenID returns the bot's open_id, "" while it is unknown (the runtime's
// resolver is looking it up).
func (b *Bot) OpenID(_ context.Context) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.openID
}

// commandIf is the chat command text is when addressed to the bot ("" when
// it is not one, or not addressed).
func commandIf(addressed bool, text string) string {
	if !addressed {
		return ""
	}
	return channels.CommandOf(text)
}
