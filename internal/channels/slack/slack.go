// Package slack is the Slack channel (Events API over HTTP, slack-go): the
// door verifies Slack's v0 signature over the raw body, answers
// url_verification, and turns app_mention and direct messages from users
// into deliveries; the replier posts the answer in the message's thread and
// updates that message when a reply is retried.
package slack

import (
	"context"
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
)

// Kind is the channel kind and the name of its file, channels/slack.yaml.
const Kind = "slack"

// Path is the ingress route of the Events API Request URL.
const Path = "/slack"

// Default environment variable names; Config may override them.
const (
	DefaultSigningSecretEnv = "SLACK_SIGNING_SECRET" //nolint:gosec // G101: an environment variable name, not a secret
	DefaultBotTokenEnv      = "SLACK_BOT_TOKEN"      //nolint:gosec // G101: an environment variable name, not a secret
	// APIURLEnv overrides the Web API base URL (tests, proxies).
	APIURLEnv = "SLACK_API_URL"
)

// Config is channels/slack.yaml. Secrets never live in the file: it names
// the environment variables that hold them.
type Config struct {
	SigningSecretEnv string `yaml:"signingSecretEnv"`
	BotTokenEnv      string `yaml:"botTokenEnv"`
	// BotUserID is the bot's user ID; by default it is read from each
	// event's authorizations.
	BotUserID string `yaml:"botUserId"`
}

func init() { channels.Register(Kind, New) }

// New builds the Slack channel from its file and the environment.
func New(file []byte, getenv func(string) string) (*channels.Channel, error) {
	var cfg Config
	if err := channels.Decode(file, &cfg); err != nil {
		return nil, fmt.Errorf("slack: %w", err)
	}
	if cfg.SigningSecretEnv == "" {
		cfg.SigningSecretEnv = DefaultSigningSecretEnv
	}
	if cfg.BotTokenEnv == "" {
		cfg.BotTokenEnv = DefaultBotTokenEnv
	}
	secret := getenv(cfg.SigningSecretEnv)
	if secret == "" {
		return nil, fmt.Errorf("slack: signingSecretEnv: environment variable %s is not set", cfg.SigningSecretEnv)
	}
	token := getenv(cfg.BotTokenEnv)
	if token == "" {
		return nil, fmt.Errorf("slack: botTokenEnv: environment variable %s is not set", cfg.BotTokenEnv)
	}
	return &channels.Channel{
		Door:    &Door{SigningSecret: secret, BotUserID: cfg.BotUserID},
		Replier: NewReplier(token, getenv(APIURLEnv)),
	}, nil
}

// Door is the Slack Events API door.
type Door struct {
	SigningSecret string
	BotUserID     string
}

// Kind implements channels.Door.
func (d *Door) Kind() string { return Kind }

// Path implements channels.Door.
func (d *Door) Path() string { return Path }

// Verify implements channels.Door: Slack's v0 HMAC-SHA256 over
// "v0:<timestamp>:<body>" with a 5-minute timestamp window.
func (d *Door) Verify(r channels.Request) error {
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

// Target is the reply target of a Slack delivery.
type Target struct {
	Channel  string `json:"channel"`
	ThreadTS string `json:"thread_ts"`
}

// Parse implements channels.Door.
func (d *Door) Parse(r channels.Request) ([]channels.Delivery, channels.Answer, error) {
	ok := channels.Answer{Status: http.StatusOK}
	ev, err := slackevents.ParseEvent(json.RawMessage(r.Body), slackevents.OptionNoVerifyToken())
	if err != nil {
		// Acknowledge anyway, so Slack does not retry what we cannot read.
		return nil, ok, fmt.Errorf("slack: parse: %w", err)
	}
	switch ev.Type {
	case slackevents.URLVerification:
		v, isV := ev.Data.(*slackevents.EventsAPIURLVerificationEvent)
		if !isV {
			return nil, ok, errors.New("slack: url_verification without a challenge")
		}
		return nil, channels.Answer{Status: http.StatusOK, ContentType: "text/plain", Body: []byte(v.Challenge)}, nil
	case slackevents.CallbackEvent:
	default:
		return nil, ok, nil
	}
	cb, _ := ev.Data.(*slackevents.EventsAPICallbackEvent)
	bot := d.BotUserID
	if bot == "" && cb != nil {
		for _, a := range cb.Authorizations {
			if a.IsBot && a.UserID != "" {
				bot = a.UserID
				break
			}
		}
	}
	var m message
	switch e := ev.InnerEvent.Data.(type) {
	case *slackevents.AppMentionEvent:
		m = message{user: e.User, bot: e.BotID, text: e.Text, ts: e.TimeStamp, thread: e.ThreadTimeStamp, channel: e.Channel, summoned: true}
	case *slackevents.MessageEvent:
		m = message{user: e.User, bot: e.BotID, subtype: e.SubType, text: e.Text, ts: e.TimeStamp, thread: e.ThreadTimeStamp, channel: e.Channel}
		// A direct message is a summons; in a channel only a mention of us
		// is (the same message also arrives as app_mention: same key).
		m.summoned = e.ChannelType == "im" || (bot != "" && strings.Contains(e.Text, "<@"+bot+">"))
	default:
		return nil, ok, nil
	}
	if !m.summoned || m.user == "" || m.bot != "" || m.subtype != "" || (bot != "" && m.user == bot) || m.ts == "" || m.channel == "" {
		return nil, ok, nil
	}
	team := ev.TeamID
	root := m.thread
	if root == "" {
		root = m.ts
	}
	text := stripMention(m.text, bot)
	if text == "" {
		return nil, ok, nil
	}
	reply, err := json.Marshal(Target{Channel: m.channel, ThreadTS: root})
	if err != nil {
		return nil, ok, fmt.Errorf("slack: reply target: %w", err)
	}
	return []channels.Delivery{{
		Kind:    Kind,
		ID:      team + ":" + m.channel + ":" + m.ts,
		Session: SessionID(team, m.channel, root),
		Prompt:  agent.Prompt{Text: text},
		Reply:   reply,
	}}, ok, nil
}

// SessionID names the session of a thread: slack:<team>:<channel>:<root ts>.
func SessionID(team, channel, rootTS string) string {
	return "slack:" + team + ":" + channel + ":" + rootTS
}

type message struct {
	user, bot, subtype, text, ts, thread, channel string
	summoned                                      bool
}

var anyMention = regexp.MustCompile(`^\s*<@[A-Z0-9]+(\|[^>]*)?>`)

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

// Replier posts answers with the Web API.
type Replier struct {
	api *slack.Client
}

// NewReplier returns a replier with token; apiURL ("" = Slack's) overrides
// the Web API base URL.
func NewReplier(token, apiURL string) *Replier {
	var opts []slack.Option
	if apiURL != "" {
		opts = append(opts, slack.OptionAPIURL(strings.TrimSuffix(apiURL, "/")+"/"))
	}
	return &Replier{api: slack.New(token, opts...)}
}

// Kind implements channels.Replier.
func (r *Replier) Kind() string { return Kind }

// Post implements channels.Replier: chat.postMessage in the thread; the
// reference is the new message's ts.
func (r *Replier) Post(ctx context.Context, target json.RawMessage, text string) (string, error) {
	t, err := decodeTarget(target)
	if err != nil {
		return "", err
	}
	_, ts, err := r.api.PostMessageContext(ctx, t.Channel, slack.MsgOptionText(text, false), slack.MsgOptionTS(t.ThreadTS))
	if err != nil {
		return "", fmt.Errorf("slack: chat.postMessage: %w", err)
	}
	return ts, nil
}

// Update implements channels.Replier: chat.update of the posted message.
func (r *Replier) Update(ctx context.Context, target json.RawMessage, ref, text string) error {
	t, err := decodeTarget(target)
	if err != nil {
		return err
	}
	if _, _, _, err := r.api.UpdateMessageContext(ctx, t.Channel, ref, slack.MsgOptionText(text, false)); err != nil {
		return fmt.Errorf("slack: chat.update: %w", err)
	}
	return nil
}

func decodeTarget(raw json.RawMessage) (Target, error) {
	var t Target
	if err := json.Unmarshal(raw, &t); err != nil {
		return Target{}, fmt.Errorf("slack: reply target: %w", err)
	}
	if t.Channel == "" || t.ThreadTS == "" {
		return Target{}, fmt.Errorf("slack: reply target %s: needs channel and thread_ts", raw)
	}
	return t, nil
}
