// Package feishu is the Feishu channel and its Lark profile (oapi-sdk-go/v3):
// one engine, two kinds. The webhook door verifies every request itself —
// signature, ±5 min timestamp window and AES-256-CBC decryption when an
// Encrypt Key is set, a constant-time verification-token match when not —
// because the SDK's dispatcher does not; it turns im.message.receive_v1
// events from users into chat messages for workflows.ChatWorkflow. The
// long connection (transport: websocket) receives the same events through
// the SDK's larkws client. The replier answers in the message's thread
// with a CardKit streaming card that settles into the stored answer, and
// asks for approvals with an interactive card whose button clicks
// (card.action.trigger callbacks, verified like events) become decisions.
package feishu

import (
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/wire"
)

// Profile is what distinguishes Feishu from Lark: the kind, its webhook
// route, its environment prefix and its open-platform base URL. The wire
// formats (events, crypto, cards) are the same.
type Profile struct {
	// Kind is the channel kind and its file name (channels/<kind>.yaml).
	Kind string
	// Path is the webhook route.
	Path string
	// EnvPrefix prefixes the default environment variable names.
	EnvPrefix string
	// BaseURL is the open platform's base URL.
	BaseURL string
}

// Kinds of the two profiles.
const (
	KindFeishu = "feishu"
	KindLark   = "lark"
)

// Feishu is the canonical profile (open.feishu.cn).
func Feishu() Profile {
	return Profile{Kind: KindFeishu, Path: "/feishu", EnvPrefix: "FEISHU_", BaseURL: "https://open.feishu.cn"}
}

// Lark is the international profile (open.larksuite.com).
func Lark() Profile {
	return Profile{Kind: KindLark, Path: "/lark", EnvPrefix: "LARK_", BaseURL: "https://open.larksuite.com"}
}

// Env returns the profile's default environment variable name for suffix
// ("APP_ID" → "FEISHU_APP_ID").
func (p Profile) Env(suffix string) string { return p.EnvPrefix + suffix }

// Transports.
const (
	TransportWebhook   = "webhook"
	TransportWebsocket = "websocket"
)

// Config is channels/feishu.yaml (or lark.yaml). Secrets never live in the
// file: it names the environment variables that hold them.
type Config struct {
	AppIDEnv             string `yaml:"appIdEnv"`
	AppSecretEnv         string `yaml:"appSecretEnv"`
	VerificationTokenEnv string `yaml:"verificationTokenEnv"`
	EncryptKeyEnv        string `yaml:"encryptKeyEnv"`
	// Transport is "webhook" (default: POST <route>) or "websocket" (the
	// long connection: no public URL, only App ID and Secret).
	Transport string `yaml:"transport"`
	// BotOpenID is the bot's open_id; by default it is fetched from
	// /open-apis/bot/v3/info. Group summons fail closed until it is known.
	BotOpenID string `yaml:"botOpenId"`
	// DirectMessageSession is "thread" (default) or "continuous".
	DirectMessageSession string `yaml:"directMessageSession"`
	// GroupMessageSession is "thread" (default) or "continuous".
	GroupMessageSession string `yaml:"groupMessageSession"`
	// GroupMode is "mentions" (default) or "context".
	GroupMode string `yaml:"groupMode"`
	// MaxFileBytes caps one file a message brings in (default 20 MB).
	MaxFileBytes int64 `yaml:"maxFileBytes"`
	// WhileBusy is what a message does while its session is busy: queue,
	// steer, interrupt or reject ("": fastagent.yaml's
	// conversation.whileBusy, else queue).
	WhileBusy string `yaml:"whileBusy"`
	// Admins are open_ids (ou_…) who may stop anyone's turn with the Stop
	// button of its live reply; the person who started a turn may always
	// stop it.
	Admins []string `yaml:"admins"`
}

// policy checks the file's session and group options.
func (c Config) policy() (wire.ChatPolicy, error) {
	p, err := channels.PolicyWhileBusy(c.DirectMessageSession, "groupMessageSession", c.GroupMessageSession, c.GroupMode, c.WhileBusy)
	if err != nil {
		return p, err
	}
	if c.MaxFileBytes < 0 {
		return p, fmt.Errorf("maxFileBytes: %d is negative", c.MaxFileBytes)
	}
	for i, a := range c.Admins {
		if !isOpenID(a) {
			return p, fmt.Errorf("admins[%d]: %q is not an open_id (ou_…)", i, a)
		}
	}
	return p, nil
}

func init() {
	for _, p := range []Profile{Feishu(), Lark()} {
		channels.Register(p.Kind, Factory(p))
	}
}

// Factory returns the channels.Factory of profile p.
func Factory(p Profile) channels.Factory {
	return func(file []byte, getenv func(string) string) (*channels.Channel, error) {
		return New(p, file, getenv, nil)
	}
}

// New builds the channel of profile p from its file and the environment:
// a door (webhook, or refusing every request under the long connection),
// the replier, and the Connector when transport is websocket.
func New(p Profile, file []byte, getenv func(string) string, log *slog.Logger) (*channels.Channel, error) {
	if log == nil {
		log = slog.Default()
	}
	var cfg Config
	if err := channels.Decode(file, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", p.Kind, err)
	}
	policy, err := cfg.policy()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.Kind, err)
	}
	switch cfg.Transport {
	case "":
		cfg.Transport = TransportWebhook
	case TransportWebhook, TransportWebsocket:
	default:
		return nil, fmt.Errorf("%s: transport: %q is not one of webhook, websocket", p.Kind, cfg.Transport)
	}
	if base := getenv(p.Env("BASE_URL")); base != "" {
		u, err := url.Parse(base)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%s: %s: %q is not an http(s) URL", p.Kind, p.Env("BASE_URL"), base)
		}
		p.BaseURL = strings.TrimSuffix(base, "/")
	}
	secret := func(key, name, def string, required bool) (string, error) {
		explicit := name != ""
		if !explicit {
			name = def
		}
		v := getenv(name)
		if v == "" && (required || explicit) {
			return "", fmt.Errorf("%s: %s: environment variable %s is not set", p.Kind, key, name)
		}
		return v, nil
	}
	appID, err := secret("appIdEnv", cfg.AppIDEnv, p.Env("APP_ID"), true)
	if err != nil {
		return nil, err
	}
	appSecret, err := secret("appSecretEnv", cfg.AppSecretEnv, p.Env("APP_SECRET"), true)
	if err != nil {
		return nil, err
	}
	webhook := cfg.Transport == TransportWebhook
	token, err := secret("verificationTokenEnv", cfg.VerificationTokenEnv, p.Env("VERIFICATION_TOKEN"), webhook)
	if err != nil {
		return nil, err
	}
	key, err := secret("encryptKeyEnv", cfg.EncryptKeyEnv, p.Env("ENCRYPT_KEY"), false)
	if err != nil {
		return nil, err
	}
	rp := NewReplier(p, appID, appSecret, log)
	rp.Files.MaxFileBytes = cfg.MaxFileBytes
	if webhook && key == "" {
		// Without an Encrypt Key a request is vouched for only by the
		// Verification Token every plaintext body carries: approvals by
		// card are off (the door refuses clicks; cards have no buttons).
		rp.NoButtons = true
		log.Warn(p.Kind+": the webhook has no Encrypt Key: approval cards have no buttons and card clicks are refused (decide with fastagent session approve); "+
			"set "+p.Env("ENCRYPT_KEY")+" (Events & Callbacks → Encryption Strategy) to decide in the chat", "file", p.Kind+".yaml")
	}
	door := &Door{Profile: p, Token: token, EncryptKey: key, Policy: policy, Webhook: webhook, Bot: NewBot(cfg.BotOpenID, rp.BotOpenID),
		Admins: cfg.Admins}
	// The runtime serving the door resolves the bot's open_id from
	// startup, retried until known: group messages are refused (pushed
	// again) until then.
	ch := &channels.Channel{Door: door, Replier: rp, Identity: door.Bot}
	if !webhook {
		ch.Conn = &Conn{Door: door, AppID: appID, AppSecret: appSecret, Log: log}
	}
	return ch, nil
}
