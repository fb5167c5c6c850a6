// Package telegram is the Telegram channel (kind "telegram", POST
// /telegram or long polling). The webhook door checks the
// X-Telegram-Bot-Api-Secret-Token header in constant time and turns new
// messages into chat messages for workflows.ChatWorkflow (deduplicated on
// update_id and message_id); the polling Connector reads the same updates
// with getUpdates. The replier edits one preview message in place while a
// turn streams and settles it to the stored answer rendered as Telegram
// HTML, split at 4,096 characters without breaking a tag.
package telegram

import (
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strings"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/wire"
)

// Kind is the channel kind and its file name (channels/telegram.yaml).
const Kind = "telegram"

// Path is the webhook route.
const Path = "/telegram"

// Transports.
const (
	TransportWebhook = "webhook"
	TransportPolling = "polling"
)

// Environment variables read by default.
const (
	EnvBotToken = "TELEGRAM_BOT_TOKEN" //nolint:gosec // G101: an environment variable name, not a secret
	EnvSecret   = "TELEGRAM_WEBHOOK_SECRET"
	EnvAPIURL   = "TELEGRAM_API_URL"
)

// SecretHeader carries the webhook's secret token.
const SecretHeader = "X-Telegram-Bot-Api-Secret-Token" //nolint:gosec // G101: a header name, not a secret

// Config is channels/telegram.yaml. Secrets never live in the file: it
// names the environment variables that hold them.
type Config struct {
	// Transport is "webhook" (default: POST /telegram) or "polling"
	// (getUpdates from the ingress process: no public URL).
	Transport string `yaml:"transport"`
	// BotTokenEnv names the bot token's variable (TELEGRAM_BOT_TOKEN).
	BotTokenEnv string `yaml:"botTokenEnv"`
	// SecretTokenEnv names the webhook secret's variable
	// (TELEGRAM_WEBHOOK_SECRET); webhook only.
	SecretTokenEnv string `yaml:"secretTokenEnv"`
	// BotUsername is the bot's @username without the @; by default it is
	// fetched with getMe. Group summons fail closed until it is known.
	BotUsername string `yaml:"botUsername"`
	// GroupMode is "context" (default: un-summoned group messages are
	// folded into the next answered turn) or "mentions" (they are dropped).
	GroupMode string `yaml:"groupMode"`
	// MaxFileBytes caps one file a message brings in (default 20 MB, the
	// Bot API's own download limit).
	MaxFileBytes int64 `yaml:"maxFileBytes"`
	// WhileBusy is what a message does while its session is busy: queue,
	// steer, interrupt or reject ("": fastagent.yaml's
	// conversation.whileBusy, else queue).
	WhileBusy string `yaml:"whileBusy"`
}

// secretRe is the Bot API's alphabet of a webhook secret token.
var secretRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,256}$`)

func init() {
	channels.Register(Kind, func(file []byte, getenv func(string) string) (*channels.Channel, error) {
		return New(file, getenv, nil)
	})
}

// New builds the channel from its file and the environment: the door
// (refusing every request under polling), the replier, and the polling
// Connector when transport is polling.
func New(file []byte, getenv func(string) string, log *slog.Logger) (*channels.Channel, error) {
	if log == nil {
		log = slog.Default()
	}
	var cfg Config
	if err := channels.Decode(file, &cfg); err != nil {
		return nil, fmt.Errorf("telegram: %w", err)
	}
	switch cfg.Transport {
	case "":
		cfg.Transport = TransportWebhook
	case TransportWebhook, TransportPolling:
	default:
		return nil, fmt.Errorf("telegram: transport: %q is not one of webhook, polling", cfg.Transport)
	}
	if cfg.GroupMode == "" {
		cfg.GroupMode = wire.GroupContext
	}
	// A Telegram chat has no threads: one session per chat.
	policy, err := channels.PolicyWhileBusy(wire.SessionContinuous, "groupSession", wire.SessionContinuous, cfg.GroupMode, cfg.WhileBusy)
	if err != nil {
		return nil, fmt.Errorf("telegram: %w", err)
	}
	if cfg.MaxFileBytes < 0 {
		return nil, fmt.Errorf("telegram: maxFileBytes: %d is negative", cfg.MaxFileBytes)
	}
	cfg.BotUsername = strings.TrimPrefix(cfg.BotUsername, "@")
	base := DefaultAPIURL
	if v := getenv(EnvAPIURL); v != "" {
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("telegram: %s: %q is not an http(s) URL", EnvAPIURL, v)
		}
		base = strings.TrimSuffix(v, "/")
	}
	tokenVar := cfg.BotTokenEnv
	if tokenVar == "" {
		tokenVar = EnvBotToken
	}
	token := getenv(tokenVar)
	if token == "" {
		return nil, fmt.Errorf("telegram: botTokenEnv: environment variable %s is not set", tokenVar)
	}
	webhook := cfg.Transport == TransportWebhook
	secret := ""
	if webhook {
		secretVar := cfg.SecretTokenEnv
		if secretVar == "" {
			secretVar = EnvSecret
		}
		secret = getenv(secretVar)
		if secret == "" {
			return nil, fmt.Errorf("telegram: secretTokenEnv: environment variable %s is not set (the webhook needs a secret token)", secretVar)
		}
		if !secretRe.MatchString(secret) {
			return nil, fmt.Errorf("telegram: %s: a secret token is 1-256 characters of A-Z, a-z, 0-9, _ and -", secretVar)
		}
	}
	api := NewAPI(base, token)
	rp := NewReplier(api, log)
	rp.Files.MaxFileBytes = cfg.MaxFileBytes
	door := &Door{Secret: secret, Webhook: webhook, Policy: policy, Bot: NewBot(cfg.BotUsername, api)}
	// The runtime serving the door resolves the bot from startup, retried
	// until known: group messages are refused (delivered again) until then.
	ch := &channels.Channel{Door: door, Replier: rp, Identity: door.Bot}
	if !webhook {
		ch.Conn = &Conn{Door: door, API: api, Log: log}
	}
	return ch, nil
}
