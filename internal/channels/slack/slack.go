// Package slack is the Slack channel (slack-go). Events arrive over HTTP
// (the Events API: the door verifies Slack's v0 signature over the raw
// body and answers url_verification) or over Socket Mode (a long
// connection opened with an app-level token: no public URL); either way
// app_mention and messages from users become chat messages. The replier
// (render.go) streams the answer natively in the message's thread, or posts
// one message and edits it; it also fetches messages' files and sends files
// back (files.go, sendfile.go).
package slack

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
)

// Kind is the channel kind and the name of its file, channels/slack.yaml.
const Kind = "slack"

// Path is the ingress route of the Events API Request URL.
const Path = "/slack"

// Default environment variable names; Config may override them.
const (
	DefaultSigningSecretEnv = "SLACK_SIGNING_SECRET" //nolint:gosec // G101: an environment variable name, not a secret
	DefaultBotTokenEnv      = "SLACK_BOT_TOKEN"      //nolint:gosec // G101: an environment variable name, not a secret
	DefaultAppTokenEnv      = "SLACK_APP_TOKEN"      //nolint:gosec // G101: an environment variable name, not a secret
	// APIURLEnv overrides the Web API base URL (tests, proxies).
	APIURLEnv = "SLACK_API_URL"
)

// Config is channels/slack.yaml. Secrets never live in the file: it names
// the environment variables that hold them.
type Config struct {
	// Transport is "http" (default: the Events API on POST /slack) or
	// "socket" (Socket Mode: no route, no public URL).
	Transport        string `yaml:"transport"`
	SigningSecretEnv string `yaml:"signingSecretEnv"`
	BotTokenEnv      string `yaml:"botTokenEnv"`
	// AppTokenEnv names the app-level token (xapp-…) Socket Mode connects
	// with (default SLACK_APP_TOKEN).
	AppTokenEnv string `yaml:"appTokenEnv"`
	// BotUserID is the bot's user ID; by default it is read from each
	// event's authorizations.
	BotUserID string `yaml:"botUserId"`
	// DirectMessageSession is "thread" (default: each top-level DM starts
	// a thread session) or "continuous" (one session per DM).
	DirectMessageSession string `yaml:"directMessageSession"`
	// GroupSession is "thread" (default) or "continuous".
	GroupSession string `yaml:"groupSession"`
	// GroupMode is "mentions" (default) or "context".
	GroupMode string `yaml:"groupMode"`
	// WhileBusy is what a message does while its session is busy: queue,
	// steer, interrupt or reject ("": fastagent.yaml's
	// conversation.whileBusy, else queue).
	WhileBusy string `yaml:"whileBusy"`
	// Admins are Slack user IDs (U…) who may stop anyone's turn with the
	// Stop button of its live reply; the person who started a turn may
	// always stop it.
	Admins []string `yaml:"admins"`
	// Assistant is what an AI app's assistant threads show: suggested
	// prompts when one starts.
	Assistant AssistantConfig `yaml:"assistant"`
	// MaxFileBytes caps one file a message brings in or the agent sends
	// (default DefaultMaxFileBytes, 20 MiB).
	MaxFileBytes int64 `yaml:"maxFileBytes"`
}

// policy checks the file's session and group options.
func (c Config) policy() (wire.ChatPolicy, error) {
	p, err := channels.PolicyWhileBusy(c.DirectMessageSession, "groupSession", c.GroupSession, c.GroupMode, c.WhileBusy)
	if err != nil {
		return p, err
	}
	if c.MaxFileBytes < 0 {
		return p, fmt.Errorf("maxFileBytes: %d is negative", c.MaxFileBytes)
	}
	for i, a := range c.Admins {
		if strings.TrimSpace(a) == "" || strings.ContainsAny(a, " <>@") {
			return p, fmt.Errorf("admins[%d]: %q is not a Slack user ID (U…)", i, a)
		}
	}
	return p, c.Assistant.check()
}

func init() { channels.Register(Kind, New) }

// Transports of Config.Transport.
const (
	TransportHTTP   = "http"
	TransportSocket = "socket"
)

// New builds the Slack channel from its file and the environment. With
// transport socket the door has no route and Conn is the Socket Mode
// connection; the signing secret is then not needed.
func New(file []byte, getenv func(string) string) (*channels.Channel, error) {
	var cfg Config
	if err := channels.Decode(file, &cfg); err != nil {
		return nil, fmt.Errorf("slack: %w", err)
	}
	policy, err := cfg.policy()
	if err != nil {
		return nil, fmt.Errorf("slack: %w", err)
	}
	if cfg.Transport == "" {
		cfg.Transport = TransportHTTP
	}
	if cfg.Transport != TransportHTTP && cfg.Transport != TransportSocket {
		return nil, fmt.Errorf("slack: transport: %q is not one of http, socket", cfg.Transport)
	}
	if cfg.SigningSecretEnv == "" {
		cfg.SigningSecretEnv = DefaultSigningSecretEnv
	}
	if cfg.BotTokenEnv == "" {
		cfg.BotTokenEnv = DefaultBotTokenEnv
	}
	if cfg.AppTokenEnv == "" {
		cfg.AppTokenEnv = DefaultAppTokenEnv
	}
	token := getenv(cfg.BotTokenEnv)
	if token == "" {
		return nil, fmt.Errorf("slack: botTokenEnv: environment variable %s is not set", cfg.BotTokenEnv)
	}
	apiURL := getenv(APIURLEnv)
	door := &Door{BotUserID: cfg.BotUserID, Policy: policy, APIURL: apiURL, Admins: NewAdmins(token, apiURL), TurnAdmins: cfg.Admins,
		Assistant: NewAssistant(token, apiURL, cfg.Assistant)}
	rp := NewReplier(token, apiURL)
	rp.Files.MaxFileBytes = cfg.MaxFileBytes
	ch := &channels.Channel{Door: door, Replier: rp, Tools: []agent.Tool{rp.SendFileTool()}}
	if cfg.Transport == TransportSocket {
		app := getenv(cfg.AppTokenEnv)
		if app == "" {
			return nil, fmt.Errorf("slack: appTokenEnv: environment variable %s is not set (Socket Mode needs an app-level token, xapp-…)", cfg.AppTokenEnv)
		}
		if !strings.HasPrefix(app, "xapp-") {
			return nil, fmt.Errorf("slack: appTokenEnv: %s does not hold an app-level token (want xapp-…)", cfg.AppTokenEnv)
		}
		door.Socket = true
		ch.Conn = &Socket{Door: door, AppToken: app, BotToken: token, APIURL: apiURL}
		return ch, nil
	}
	door.SigningSecret = getenv(cfg.SigningSecretEnv)
	if door.SigningSecret == "" {
		return nil, fmt.Errorf("slack: signingSecretEnv: environment variable %s is not set", cfg.SigningSecretEnv)
	}
	return ch, nil
}

// Door is the Slack Events API door.
type Door struct {
	SigningSecret string
	BotUserID     string
	Policy        wire.ChatPolicy
	// Socket is set with Socket Mode: the door serves no route.
	Socket bool
	// APIURL is the Slack API URL override (SLACK_API_URL), whose host an
	// interaction's response_url may also name.
	APIURL string
	// Admins looks up whether a clicker is a workspace admin or owner, for
	// calls whose approvers list AdminsRole; nil: no one is.
	Admins *Admins
	// TurnAdmins are the user IDs who may stop anyone's turn (Config.Admins).
	TurnAdmins []string
	// Assistant serves assistant threads (suggested prompts, titles); nil:
	// their events are dropped.
	Assistant *Assistant
}

// DefaultWhileBusy implements channels.BusyDefaulter.
func (d *Door) DefaultWhileBusy(mode string) {
	if d.Policy.WhileBusy == "" {
		d.Policy.WhileBusy = mode
	}
}

// Kind implements channels.Door.
func (d *Door) Kind() string { return Kind }

// Path implements channels.Door: "/slack", or "" with Socket Mode (no
// route: Verify is never called).
func (d *Door) Path() string {
	if d.Socket {
		return ""
	}
	return Path
}

// Verify implements channels.Door: Slack's v0 HMAC-SHA256 over
// "v0:<timestamp>:<body>" with a 5-minute timestamp window.
func (d *Door) Verify(r channels.Request) error {
	if d.SigningSecret == "" {
		// A Socket Mode door has no secret and no route: refuse anything.
		return errors.New("slack: verify: no signing secret")
	}
	sv, err := slack.NewSecretsVerifier(http.Header(r.Header), d.SigningSecret)
	if err != nil {
		return fmt.Errorf("slack: verify: %w", err)
	}
	if _, err := sv.Write(r.Body); err != nil {
		return fmt.Errorf("slack: verify: %w", err)
	}
	if err := sv.Ensure(); err != nil {
		return fmt.Errorf("slack: verify: %w", err)
	}
	return nil
}

// Parse implements channels.Door: url_verification is answered; a human
// message (app_mention, message.im, message.channels/groups/mpim) becomes a
// chat message for the conversation's chat workflow. In mentions mode an
// un-summoned group message is dropped here; in context mode it goes on to
// be buffered.
func (d *Door) Parse(r channels.Request) (channels.Parsed, error) {
	if isInteraction(r.Body) {
		return d.parseInteraction(r.Body)
	}
	return d.parsePayload(r.Body)
}

// parsePayload is Parse of an Events API payload: the HTTP body, or a
// Socket Mode envelope's payload.
func (d *Door) parsePayload(body []byte) (channels.Parsed, error) {
	ok := channels.Parsed{Answer: channels.Answer{Status: http.StatusOK}}
	m, challenge, err := d.parse(body)
	if challenge != "" {
		return channels.Parsed{Answer: channels.Answer{Status: http.StatusOK, ContentType: "text/plain", Body: []byte(challenge)}}, nil
	}
	if err != nil || m == nil {
		return ok, err
	}
	ok.Messages = []wire.ChatMessage{*m}
	return ok, nil
}

// parse turns an Events API payload (the HTTP body, or a Socket Mode
// envelope's payload) into a chat message; nil when it is not a turn or
// context. challenge is set for url_verification.
func (d *Door) parse(body []byte) (m *wire.ChatMessage, challenge string, err error) {
	ev, err := slackevents.ParseEvent(json.RawMessage(body), slackevents.OptionNoVerifyToken())
	if err != nil {
		// Acknowledge anyway, so Slack does not retry what we cannot read.
		return nil, "", fmt.Errorf("slack: parse: %w", err)
	}
	switch ev.Type {
	case slackevents.URLVerification:
		v, isV := ev.Data.(*slackevents.EventsAPIURLVerificationEvent)
		if !isV || v.Challenge == "" {
			return nil, "", errors.New("slack: url_verification without a challenge")
		}
		return nil, v.Challenge, nil
	case slackevents.CallbackEvent:
		m, err := d.callback(ev)
		return m, "", err
	}
	return nil, "", nil
}

// callback turns an event callback into a chat message: a deletion, an
// edit, or a human message the group mode wants; nil otherwise.
func (d *Door) callback(ev slackevents.EventsAPIEvent) (*wire.ChatMessage, error) {
	bot, eventID := d.botAndEvent(ev)
	var msg message
	switch e := ev.InnerEvent.Data.(type) {
	case *slackevents.AppMentionEvent:
		msg = message{user: e.User, bot: e.BotID, text: e.Text, ts: e.TimeStamp, thread: e.ThreadTimeStamp, channel: e.Channel, summoned: true}
		msg.files = attachments(e.Files)
	case *slackevents.AssistantThreadStartedEvent:
		if d.Assistant != nil {
			d.Assistant.started(e)
		}
		return nil, nil
	case *slackevents.MessageEvent:
		switch e.SubType {
		case "message_deleted":
			return d.deletion(ev.TeamID, eventID, bot, e), nil
		case "message_changed":
			return d.edit(ev.TeamID, eventID, bot, e), nil
		}
		msg = messageOf(e, bot)
	default:
		return nil, nil
	}
	if !msg.fromHuman(bot) || (!msg.direct && !msg.summoned && d.Policy.GroupMode != wire.GroupContext) {
		return nil, nil
	}
	if d.Assistant != nil && msg.direct && msg.thread != "" && msg.thread != msg.ts {
		// The first message of an assistant thread titles it.
		d.Assistant.message(msg.channel, msg.thread, stripMention(msg.text, bot))
	}
	return d.chatMessage(ev.TeamID, eventID, bot, msg)
}

// botAndEvent are the bot's user ID (configured, else the bot among the
// event's authorizations; "" when unknown) and the delivery's event ID.
func (d *Door) botAndEvent(ev slackevents.EventsAPIEvent) (bot, eventID string) {
	bot = d.BotUserID
	cb, _ := ev.Data.(*slackevents.EventsAPICallbackEvent)
	if cb == nil {
		return bot, ""
	}
	if bot == "" {
		for _, a := range cb.Authorizations {
			if a.IsBot && a.UserID != "" {
				bot = a.UserID
				break
			}
		}
	}
	return bot, cb.EventID
}

// messageOf reads a message event (message.im, message.channels…).
func messageOf(e *slackevents.MessageEvent, bot string) message {
	msg := message{user: e.User, bot: e.BotID, subtype: e.SubType, text: e.Text, ts: e.TimeStamp, thread: e.ThreadTimeStamp, channel: e.Channel}
	msg.direct = e.ChannelType == "im"
	// In a channel only a mention of us summons (the same message also
	// arrives as app_mention: same ID).
	msg.summoned = bot != "" && strings.Contains(e.Text, "<@"+bot+">")
	if e.Message != nil {
		msg.files = attachments(e.Message.Files)
	}
	return msg
}

// fromHuman reports whether msg is a complete message a person wrote:
// file_share is a human message with files, thread_broadcast a thread
// reply also sent to the channel (a reply in its thread); every other
// subtype (bot_message, me_message, joins…) is not a turn, nor is a
// message of a bot or of ours.
func (msg message) fromHuman(bot string) bool {
	if msg.subtype != "" && msg.subtype != "file_share" && msg.subtype != "thread_broadcast" {
		return false
	}
	return msg.user != "" && msg.bot == "" && (bot == "" || msg.user != bot) && msg.ts != "" && msg.channel != ""
}

// chatMessage is msg as the chat workflow receives it; nil when nothing
// is left of it once the bot's mention is removed.
func (d *Door) chatMessage(team, eventID, bot string, msg message) (*wire.ChatMessage, error) {
	text := stripMention(msg.text, bot)
	if text == "" && len(msg.files) == 0 {
		return nil, nil
	}
	root := msg.thread
	if root == msg.ts {
		root = ""
	}
	data, err := json.Marshal(targetData{Team: team})
	if err != nil {
		return nil, fmt.Errorf("slack: reply data: %w", err)
	}
	return &wire.ChatMessage{
		Kind:     Kind,
		Chat:     team + ":" + msg.channel,
		ID:       msg.ts,
		Event:    eventID,
		Root:     root,
		Direct:   msg.direct,
		Summoned: msg.summoned,
		// Mentions of people but not of the bot: their discussion.
		MentionsOthers: !msg.summoned && mentionsOthers(msg.text, bot),
		// A command addressed to the bot (a DM, or after its mention).
		Command:     commandIf(msg.direct || msg.summoned || d.Policy.GroupMode == wire.GroupContext, text),
		User:        msg.user,
		UserName:    "<@" + msg.user + ">",
		Text:        text,
		Attachments: msg.files,
		Data:        data,
		Policy:      d.Policy,
	}, nil
}

// deletion is the chat message telling of a deleted user message (its
// ID, marked Deleted); nil for a deleted bot message (our reply
// included).
func (d *Door) deletion(team, eventID, bot string, e *slackevents.MessageEvent) *wire.ChatMessage {
	user := ""
	if p := e.PreviousMessage; p != nil {
		if p.BotID != "" || p.SubType == "bot_message" || (bot != "" && p.User == bot) {
			return nil
		}
		user = p.User
	}
	if e.DeletedTimeStamp == "" || e.Channel == "" {
		return nil
	}
	return &wire.ChatMessage{Kind: Kind, Chat: team + ":" + e.Channel, ID: e.DeletedTimeStamp, Event: eventID,
		Direct: e.ChannelType == "im", User: user, Deleted: true, Policy: d.Policy}
}

// edit is the chat message telling of an edited user message in a
// channel in context mode (its ID and new text, marked Edited: it replaces
// a buffered line, never re-runs a turn); nil otherwise (our own streaming
// edits included).
func (d *Door) edit(team, eventID, bot string, e *slackevents.MessageEvent) *wire.ChatMessage {
	n := e.Message
	if n == nil || d.Policy.GroupMode != wire.GroupContext || e.ChannelType == "im" || e.Channel == "" ||
		n.BotID != "" || n.User == "" || (bot != "" && n.User == bot) || n.Timestamp == "" {
		return nil
	}
	root := n.ThreadTimestamp
	if root == n.Timestamp {
		root = ""
	}
	return &wire.ChatMessage{Kind: Kind, Chat: team + ":" + e.Channel, ID: n.Timestamp, Event: eventID, Root: root,
		User: n.User, UserName: "<@" + n.User + ">", Text: stripMention(n.Text, bot), Attachments: attachments(n.Files),
		Edited: true, Policy: d.Policy}
}

// targetData is the Slack part of a reply target.
type targetData struct {
	Team string `json:"team,omitempty"`
}

// attachments lists a message's files by reference; they are fetched when
// the turn runs.
func attachments(files []slack.File) []wire.Attachment {
	var out []wire.Attachment
	for _, f := range files {
		if f.ID == "" {
			continue
		}
		out = append(out, wire.Attachment{ID: f.ID, Name: f.Name, Mime: f.Mimetype, Size: int64(f.Size)})
	}
	return out
}

// SessionID names the session of a thread: slack:<team>:<channel>:<root ts>.
func SessionID(team, channel, rootTS string) string {
	return workflows.ChatSession(Kind, team+":"+channel, rootTS)
}

type message struct {
	user, bot, subtype, text, ts, thread, channel string
	summoned, direct                              bool
	files                                         []wire.Attachment
}

var anyMention = regexp.MustCompile(`^\s*<@[A-Z0-9]+(\|[^>]*)?>`)

var userMention = regexp.MustCompile(`<@([A-Z0-9]+)(\|[^>]*)?>`)

// mentionsOthers reports whether text @mentions someone and not bot.
func mentionsOthers(text, bot string) bool {
	var ids []string
	for _, m := range userMention.FindAllStringSubmatch(text, -1) {
		ids = append(ids, m[1])
	}
	return channels.MentionsOthers(ids, bot)
}

// stripMention removes mentions of the bot (or, with the bot unknown, the
// leading mention) and trims the text.
func stripMention(text, bot string) string {
	if bot != "" {
		re := regexp.MustCompile(`<@` + regexp.QuoteMeta(bot) + `(\|[^>]*)?>`)
		text = re.ReplaceAllString(text, "")
	} else {
		text = anyMention.ReplaceAllString(text, "")
	}
	return strings.TrimSpace(text)
}

// commandIf is the chat command text is when addressed to the bot ("" when
// it is not one, or not addressed).
func commandIf(addressed bool, text string) string {
	if !addressed {
		return ""
	}
	return channels.CommandOf(text)
}
