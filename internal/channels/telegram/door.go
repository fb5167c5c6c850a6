package telegram

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf16"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/wire"
)

// Door is the webhook door: the secret token header must equal Secret
// (compared in constant time). Under polling (Webhook false) it has no
// route and refuses every request.
type Door struct {
	Secret  string
	Webhook bool
	Policy  wire.ChatPolicy
	// Bot resolves the bot's username and ID (group summons by mention or
	// reply fail closed until known).
	Bot *Bot
}

// DefaultWhileBusy implements channels.BusyDefaulter.
func (d *Door) DefaultWhileBusy(mode string) {
	if d.Policy.WhileBusy == "" {
		d.Policy.WhileBusy = mode
	}
}

// Kind implements channels.Door.
func (d *Door) Kind() string { return Kind }

// Path implements channels.Door; "" under polling.
func (d *Door) Path() string {
	if !d.Webhook {
		return ""
	}
	return Path
}

// Verify implements channels.Door.
func (d *Door) Verify(r channels.Request) error {
	if !d.Webhook {
		return errors.New("telegram: the channel uses polling; webhook requests are refused")
	}
	got := http.Header(r.Header).Get(SecretHeader)
	if d.Secret == "" || subtle.ConstantTimeCompare([]byte(got), []byte(d.Secret)) != 1 {
		return errors.New("telegram: secret token mismatch")
	}
	return nil
}

// Parse implements channels.Door: a new message becomes a chat message, a
// press of an approval button a decision; other updates are acknowledged
// and dropped.
func (d *Door) Parse(r channels.Request) (channels.Parsed, error) {
	ok := channels.Parsed{Answer: channels.Answer{Status: http.StatusOK}}
	var u Update
	if err := json.Unmarshal(r.Body, &u); err != nil {
		return ok, fmt.Errorf("telegram: update: %w", err)
	}
	if u.CallbackQuery != nil {
		if m, ans := d.StopClick(u); m != nil {
			ok.Messages = []wire.ChatMessage{*m}
			ok.Answer = ans
			return ok, nil
		}
		dec, err := d.Decision(u)
		if err != nil || dec == nil {
			return ok, err
		}
		ok.Decisions = []channels.Decision{*dec}
		return ok, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), botLookupTimeout)
	defer cancel()
	m, err := d.Message(ctx, u)
	if err != nil || m == nil {
		return ok, err
	}
	ok.Messages = []wire.ChatMessage{*m}
	return ok, nil
}

// Message turns one update (webhook or polling) into a chat message; nil
// when it is none: neither a new nor an edited message, sent by a bot,
// without text or files, or un-summoned in a group in mentions mode. An
// edited group message in context mode becomes the chat message telling of
// the edit (Edited: it replaces its buffered line, never re-runs a turn);
// other edits are nothing.
func (d *Door) Message(ctx context.Context, u Update) (*wire.ChatMessage, error) {
	msg, edited := u.Message, false
	if msg == nil && u.EditedMessage != nil {
		msg, edited = u.EditedMessage, true
	}
	if msg == nil {
		return nil, nil
	}
	if msg.MessageID == 0 || msg.Chat.ID == 0 {
		return nil, errors.New("telegram: message without message_id or chat")
	}
	if msg.From == nil || msg.From.IsBot {
		return nil, nil
	}
	var bot BotInfo
	if d.Bot != nil {
		bot = d.Bot.Info(ctx)
		if bot.ID == 0 && msg.Chat.Type != "private" {
			// Whether it summons the bot cannot be told yet: refuse it,
			// so it is delivered again once the bot is known.
			return nil, fmt.Errorf("telegram: group message %d refused until the bot is known: %w", msg.MessageID, channels.ErrRetryLater)
		}
	}
	s := Summon(msg, bot)
	if edited && (s.Direct || d.Policy.GroupMode != wire.GroupContext) {
		return nil, nil
	}
	if s.Stop && !edited {
		return &wire.ChatMessage{
			Kind: Kind, Chat: chatID(msg), ID: strconv.FormatInt(msg.MessageID, 10), Event: strconv.FormatInt(u.UpdateID, 10),
			Direct: s.Direct, Summoned: true, Stop: true, Command: wire.CommandStop, UserName: displayName(msg.From), User: strconv.FormatInt(msg.From.ID, 10), Policy: d.Policy,
		}, nil
	}
	if !s.Direct && !s.Summoned && d.Policy.GroupMode != wire.GroupContext {
		return nil, nil
	}
	files := attachments(msg, channels.DefaultMaxImagesBytes)
	if strings.TrimSpace(s.Text) == "" && len(files) == 0 {
		return nil, nil
	}
	root := ""
	if msg.IsTopicMessage && msg.MessageThreadID != 0 {
		root = strconv.FormatInt(msg.MessageThreadID, 10)
	}
	return &wire.ChatMessage{
		Kind:     Kind,
		Chat:     chatID(msg),
		ID:       strconv.FormatInt(msg.MessageID, 10),
		Event:    strconv.FormatInt(u.UpdateID, 10),
		Root:     root,
		Direct:   s.Direct,
		Summoned: s.Summoned,
		// Mentions of people but not of the bot: their discussion.
		MentionsOthers: s.MentionsOthers,
		Edited:         edited,
		// /new, /status, /help (to this bot): commands, not turns.
		Command:     command(s, edited),
		User:        strconv.FormatInt(msg.From.ID, 10),
		UserName:    displayName(msg.From),
		Text:        s.Text,
		Attachments: files,
		Policy:      d.Policy,
	}, nil
}

func chatID(m *Message) string { return strconv.FormatInt(m.Chat.ID, 10) }

func displayName(u *User) string {
	if u.Username != "" {
		return "@" + u.Username
	}
	return strings.TrimSpace(u.FirstName + " " + u.LastName)
}

// BotInfo is the bot's identity; zero until known.
type BotInfo struct {
	ID       int64
	Username string
}

// Summons is what Summon decided about a message.
type Summons struct {
	// Direct: a private chat with the bot.
	Direct bool
	// Summoned: a mention of the bot, a reply to it, or a command for it.
	Summoned bool
	// Stop: the /stop command for this bot.
	Stop bool
	// MentionsOthers: the message @mentions people but not the bot (nor
	// is it a command for it). A reply to the bot that does is their
	// discussion, not a summons.
	MentionsOthers bool
	// Text is the message's text (or caption) without the bot's @username.
	Text string
}

// Summon applies the summon policy: private chats always; in groups an
// @mention of the bot (or a text mention of its ID), a reply to one of its
// messages, or a command (/cmd, or /cmd@<bot> — a command addressed to
// another bot is not a summons). A reply to the bot that @mentions only
// other people is not a summons: it is addressed to them. /stop (to this
// bot) asks to stop the running turn.
func Summon(m *Message, bot BotInfo) Summons {
	text, ents := m.Text, m.Entities
	if text == "" {
		text, ents = m.Caption, m.CaptionEntities
	}
	s := Summons{Direct: m.Chat.Type == "private", Text: text}
	units := utf16.Encode([]rune(text))
	part := func(e Entity) string {
		if e.Offset < 0 || e.Length <= 0 || e.Offset+e.Length > len(units) {
			return ""
		}
		return string(utf16.Decode(units[e.Offset : e.Offset+e.Length]))
	}
	isBot := func(name string) bool {
		return bot.Username != "" && strings.EqualFold(strings.TrimPrefix(name, "@"), bot.Username)
	}
	// mentioned holds who the message @mentions: "@<username>" (lower
	// case) or "#<user id>"; the bot is botKey.
	const botKey = "bot"
	var mentioned []string
	for _, e := range ents {
		switch e.Type {
		case "bot_command":
			if e.Offset != 0 {
				continue
			}
			cmd, target, addressed := strings.Cut(strings.TrimPrefix(part(e), "/"), "@")
			if addressed && !isBot(target) {
				continue // another bot's command
			}
			s.Summoned = true
			if strings.EqualFold(cmd, "stop") {
				s.Stop = true
			}
		case "mention":
			if isBot(part(e)) {
				s.Summoned = true
				mentioned = append(mentioned, botKey)
			} else {
				mentioned = append(mentioned, strings.ToLower(part(e)))
			}
		case "text_mention":
			switch {
			case e.User != nil && bot.ID != 0 && e.User.ID == bot.ID:
				s.Summoned = true
				mentioned = append(mentioned, botKey)
			case e.User != nil:
				mentioned = append(mentioned, "#"+strconv.FormatInt(e.User.ID, 10))
			}
		}
	}
	s.MentionsOthers = !s.Summoned && channels.MentionsOthers(mentioned, botKey)
	if r := m.ReplyToMessage; r != nil && r.From != nil && bot.ID != 0 && r.From.ID == bot.ID && !s.MentionsOthers {
		s.Summoned = true
	}
	if bot.Username != "" {
		s.Text = stripMention(s.Text, "@"+bot.Username)
	}
	s.Text = strings.TrimSpace(s.Text)
	return s
}

// stripMention removes every case-insensitive occurrence of name (an
// @username) that is not part of a longer username.
func stripMention(text, name string) string {
	lower, ln := strings.ToLower(text), strings.ToLower(name)
	var b strings.Builder
	for i := 0; i < len(text); {
		j := strings.Index(lower[i:], ln)
		if j < 0 {
			b.WriteString(text[i:])
			break
		}
		end := i + j + len(ln)
		if end < len(text) && isNameByte(text[end]) {
			b.WriteString(text[i:end])
			i = end
			continue
		}
		b.WriteString(text[i : i+j])
		i = end
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

func isNameByte(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

// Mime types of attachments.
const (
	// MimePhoto marks a photo (fetched as an image).
	MimePhoto = "image/jpeg"
)

// attachments are a message's photo and document, by file_id. Of a
// photo's sizes it takes the largest whose file_size fits photoCap (the
// per-prompt image budget, so the photo reaches the model as vision
// input), else the smallest.
func attachments(m *Message, photoCap int64) []wire.Attachment {
	var out []wire.Attachment
	if len(m.Photo) > 0 {
		var best *PhotoSize
		smallest := &m.Photo[0]
		for i := range m.Photo {
			p := &m.Photo[i]
			if p.Width*p.Height < smallest.Width*smallest.Height {
				smallest = p
			}
			if p.FileSize <= photoCap && (best == nil || p.Width*p.Height > best.Width*best.Height) {
				best = p
			}
		}
		if best == nil {
			best = smallest
		}
		out = append(out, wire.Attachment{ID: best.FileID, Name: "photo-" + best.FileUniqueID + ".jpg", Mime: MimePhoto, Size: best.FileSize})
	}
	if d := m.Document; d != nil && d.FileID != "" {
		name := d.FileName
		if name == "" {
			name = d.FileUniqueID
		}
		out = append(out, wire.Attachment{ID: d.FileID, Name: name, Mime: d.MimeType, Size: d.FileSize})
	}
	return out
}

// botLookupTimeout bounds one getMe.
const botLookupTimeout = 5 * time.Second

// Bot is the bot's identity, fetched with getMe and kept. It is a
// channels.Identity: the runtime's channels.Resolver fetches it from
// startup, retried until known, and the polling connector waits for it
// (Resolve); until then group messages are refused with
// channels.ErrRetryLater (the webhook answers 503, polling reads them
// again), so none is dropped.
type Bot struct {
	mu   sync.Mutex
	info BotInfo
	api  *API
	done chan struct{}
	// lookup lets one getMe run at a time: a second caller finds the
	// first one's answer.
	lookup sync.Mutex
}

// NewBot returns a Bot that knows username (may be "") and fetches the
// rest with api's getMe.
func NewBot(username string, api *API) *Bot {
	return &Bot{info: BotInfo{Username: username}, api: api}
}

// Lookup implements channels.Identity: one getMe (bounded by
// botLookupTimeout) unless the bot's ID is known.
func (b *Bot) Lookup(ctx context.Context) error {
	b.lookup.Lock()
	defer b.lookup.Unlock()
	b.mu.Lock()
	known := b.info.ID != 0
	b.mu.Unlock()
	if known {
		return nil
	}
	if b.api == nil {
		return errors.New("telegram: bot identity unknown and no API to ask")
	}
	ctx, cancel := context.WithTimeout(ctx, botLookupTimeout)
	var me User
	err := b.api.Call(ctx, "getMe", struct{}{}, &me)
	cancel()
	if err == nil && (me.ID == 0 || me.Username == "") {
		err = errors.New("telegram: getMe without id or username")
	}
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.info = BotInfo{ID: me.ID, Username: me.Username}
	if b.done != nil {
		close(b.done)
	}
	return nil
}

// Resolved is closed once the bot's ID is known.
func (b *Bot) Resolved() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done == nil {
		b.done = make(chan struct{})
		if b.info.ID != 0 {
			close(b.done)
		}
	}
	return b.done
}

// Info returns what is known of the bot (while its ID is unknown, the
// runtime's resolver is looking it up).
func (b *Bot) Info(_ context.Context) BotInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.info
}

// Resolve looks the bot up until it is known or ctx ends (pausing
// channels.ResolveFirst between failed getMe calls, or returning when
// another caller's lookup — the runtime's resolver — found it); the
// polling connector calls it at startup so the first group message does
// not wait.
func (b *Bot) Resolve(ctx context.Context) error {
	for {
		err := b.Lookup(ctx)
		if err == nil {
			return nil
		}
		t := time.NewTimer(channels.ResolveFirst)
		select {
		case <-b.Resolved():
			t.Stop()
			return nil
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// command is the chat command a message is ("" for none): one addressed
// to this bot (in a private chat, or summoned), never an edit.
func command(s Summons, edited bool) string {
	if edited || (!s.Direct && !s.Summoned) {
		return ""
	}
	return channels.CommandOf(s.Text)
}

// dataStop prefixes the callback data of a live reply's stop button; the
// user message whose turn it stops follows.
const dataStop = "fa:stop:"

// StopClick turns a press of a live reply's stop button into the stop
// command for that message's turn (nil when u is no such press). The
// answer acknowledges the press in the webhook's response (Telegram runs
// the method it names); under polling the button's spinner times out by
// itself. Pressed twice, the second press finds the turn stopped and the
// chat says nothing is running.
func (d *Door) StopClick(u Update) (*wire.ChatMessage, channels.Answer) {
	q := u.CallbackQuery
	ans := channels.Answer{Status: http.StatusOK}
	if q == nil || !strings.HasPrefix(q.Data, dataStop) || q.From == nil || q.Message == nil || q.ID == "" || q.Message.Chat.ID == 0 {
		return nil, ans
	}
	turn := strings.TrimPrefix(q.Data, dataStop)
	if _, err := strconv.ParseInt(turn, 10, 64); err != nil {
		return nil, ans
	}
	root := ""
	if q.Message.IsTopicMessage && q.Message.MessageThreadID != 0 {
		root = strconv.FormatInt(q.Message.MessageThreadID, 10)
	}
	m := &wire.ChatMessage{
		Kind: Kind, Chat: chatID(q.Message), ID: "stop-click:" + q.ID, Event: strconv.FormatInt(u.UpdateID, 10), Root: root,
		Direct: q.Message.Chat.Type == "private", Summoned: true, Command: wire.CommandStop, StopTurn: turn,
		User: strconv.FormatInt(q.From.ID, 10), UserName: displayName(q.From), Policy: d.Policy,
	}
	body, _ := json.Marshal(map[string]any{"method": "answerCallbackQuery", "callback_query_id": q.ID, "text": "Stopping…"})
	ans.ContentType, ans.Body = "application/json", body
	return m, ans
}
