// Package webhook is the general webhook door: any signed HTTP event
// signals a session. Each endpoint is one file of the agent dir,
// channels/webhooks/<name>.yaml, served as POST /hooks/<name> with the
// channel kind "hook:<name>". A request is verified on its capped raw body
// (the Standard Webhooks scheme, a configurable HMAC, or a shared token —
// there is no unsigned endpoint), filtered by an optional CEL expression
// (when:), mapped to a turn by text/template (session, prompt, key) and
// handed to its session workflow with Signal-With-Start; the session
// deduplicates the turn by its key. The door answers 202 at once (respond:
// async), or holds the request for the answer up to a bound (respond:
// wait). With reply: the worker POSTs the stored answer to a callback URL,
// signed with Standard Webhooks, webhook-id being the turn key.
package webhook

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/workspace"
)

// Dir is the folder of the agent's channels/ that holds the endpoints.
const Dir = "webhooks"

// KindPrefix starts every endpoint's channel kind, its default session and
// its turn keys: "hook:<name>".
const KindPrefix = "hook:"

// PathPrefix starts every endpoint's route: POST /hooks/<name>.
const PathPrefix = "/hooks/"

// Schemes.
const (
	SchemeStandard = "standard"
	SchemeHMAC     = "hmac"
	SchemeToken    = "token"
)

// Respond modes.
const (
	RespondAsync = "async"
	RespondWait  = "wait"
)

// Defaults and bounds.
const (
	// DefaultTolerance is how far a signed timestamp may be from now.
	DefaultTolerance = 5 * time.Minute
	// DefaultWait is how long respond: wait holds a request by default.
	DefaultWait = 25 * time.Second
	// MaxWait bounds respond: wait (most senders time out within a minute).
	MaxWait = 55 * time.Second
)

// nameRE is an endpoint name: it is a path segment, part of a session ID
// and of turn keys.
var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// Config is one channels/webhooks/<name>.yaml. Secrets never live in the
// file: it names the environment variables that hold them.
type Config struct {
	// Scheme is how requests are verified: standard, hmac or token.
	Scheme string `yaml:"scheme"`
	// SecretEnv names the variable holding the secret; several secrets
	// separated by spaces are all accepted (rotation).
	SecretEnv string `yaml:"secretEnv"`
	// Tolerance bounds a signed timestamp's distance from now (standard,
	// and hmac with a timestamp; default 5m).
	Tolerance string `yaml:"tolerance"`
	// HMAC configures the hmac scheme.
	HMAC *HMACConfig `yaml:"hmac"`
	// Token configures the token scheme.
	Token *TokenConfig `yaml:"token"`
	// MaxBodyBytes caps a request body (default and at most 1 MiB).
	MaxBodyBytes int64 `yaml:"maxBodyBytes"`
	// When is a CEL expression over body, headers, id and name: an event
	// for which it is false is answered 204 and starts nothing.
	When string `yaml:"when"`
	// Session, Prompt and Key are text/templates over .body, .headers,
	// .raw, .id and .name (defaults: hook:<name>, the event as JSON, .id).
	Session string `yaml:"session"`
	Prompt  string `yaml:"prompt"`
	Key     string `yaml:"key"`
	// Respond is async (default: 202 at once) or wait (hold the request
	// for the answer up to Wait, then 202).
	Respond string `yaml:"respond"`
	Wait    string `yaml:"wait"`
	// Reply POSTs each answer to a callback URL, signed.
	Reply *ReplyConfig `yaml:"reply"`
}

// HMACConfig is the hmac scheme: an HMAC of the body (and optionally a
// timestamp) in a header.
type HMACConfig struct {
	// Header carries the signature ("X-Signature", "Stripe-Signature").
	Header string `yaml:"header"`
	// Algorithm is sha256 (default), sha1 or sha512.
	Algorithm string `yaml:"algorithm"`
	// Encoding of the signature: hex (default) or base64.
	Encoding string `yaml:"encoding"`
	// Prefix precedes the encoded signature ("sha256=").
	Prefix string `yaml:"prefix"`
	// SignatureKey makes Header a comma-separated key=value list whose
	// values under this key are the signatures (Stripe: v1).
	SignatureKey string `yaml:"signatureKey"`
	// TimestampKey takes the timestamp (Unix seconds) from that list
	// (Stripe: t); TimestampHeader from a header of its own.
	TimestampKey    string `yaml:"timestampKey"`
	TimestampHeader string `yaml:"timestampHeader"`
	// Signed is the signed content, with {timestamp} and {body} replaced
	// (default "{body}", or "{timestamp}.{body}" with a timestamp).
	Signed string `yaml:"signed"`
}

// TokenConfig is the token scheme: a shared secret in a header.
type TokenConfig struct {
	// Header carries the token ("X-Gitlab-Token"); "Authorization" accepts
	// "Bearer <token>" too.
	Header string `yaml:"header"`
}

// ReplyConfig is the signed callback of every answer.
type ReplyConfig struct {
	URL string `yaml:"url"`
	// SecretEnv names the variable holding the whsec_ secret the callback
	// is signed with (Standard Webhooks).
	SecretEnv string `yaml:"secretEnv"`
	// AllowPrivate lets callbacks reach loopback and private addresses (a
	// receiver on this machine or the operator's network). Link-local
	// addresses (cloud metadata) and the deployment's own services stay
	// refused.
	AllowPrivate bool `yaml:"allowPrivate"`
}

func init() { channels.RegisterDir(Dir, LoadDir) }

// LoadDir builds every endpoint of channels/webhooks/: one channel per
// *.yaml (or *.yml) file; *.disabled files are skipped. A broken file stops
// with an error naming the file and the field.
func LoadDir(dir string, getenv func(string) string) ([]*channels.Channel, error) {
	files, err := Files(dir)
	if err != nil {
		return nil, fmt.Errorf("channel %s: %w", dir, err)
	}
	var out []*channels.Channel
	for _, f := range files {
		if !f.Enabled {
			continue
		}
		ch, err := LoadFile(f.Path, getenv)
		if err != nil {
			return nil, err
		}
		out = append(out, ch)
	}
	return out, nil
}

// Files lists the endpoint files of dir: Name is the endpoint's name, a
// *.disabled file is listed as not Enabled.
func Files(dir string) ([]workspace.FileEntry, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []workspace.FileEntry
	for _, e := range entries {
		n := e.Name()
		base, disabled := strings.CutSuffix(n, ".disabled")
		ext := filepath.Ext(base)
		if e.IsDir() || strings.HasPrefix(n, ".") || (ext != ".yaml" && ext != ".yml") {
			continue
		}
		out = append(out, workspace.FileEntry{Name: strings.TrimSuffix(base, ext), Path: filepath.Join(dir, n), Enabled: !disabled})
	}
	return out, nil
}

// LoadFile builds the endpoint of one file, named after it.
func LoadFile(file string, getenv func(string) string) (*channels.Channel, error) {
	data, err := os.ReadFile(file) //nolint:gosec // G304: a file of the agent dir
	if err != nil {
		return nil, fmt.Errorf("channel %s: %w", file, err)
	}
	base := filepath.Base(file)
	ch, err := New(strings.TrimSuffix(base, filepath.Ext(base)), data, getenv)
	if err != nil {
		return nil, fmt.Errorf("channel %s: %w", file, err)
	}
	ch.File = file
	return ch, nil
}

// New builds endpoint name from its file's YAML and the environment.
func New(name string, file []byte, getenv func(string) string) (*channels.Channel, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	d, err := NewDoor(name, file, getenv)
	if err != nil {
		return nil, err
	}
	ch := &channels.Channel{Door: d}
	if d.reply != nil {
		ch.Replier = d.reply
	} else {
		ch.Replier = noReplier{kind: d.Kind()}
	}
	return ch, nil
}

// NewDoor builds endpoint name's door (and its reply, if any).
func NewDoor(name string, file []byte, getenv func(string) string) (*Door, error) {
	if !nameRE.MatchString(name) {
		return nil, fmt.Errorf("webhook: file name %q is not an endpoint name (lower-case letters, digits, - and _)", name)
	}
	var cfg Config
	if err := channels.Decode(file, &cfg); err != nil {
		return nil, fmt.Errorf("webhook %s: %w", name, err)
	}
	d, err := build(name, cfg, getenv)
	if err != nil {
		return nil, fmt.Errorf("webhook %s: %w", name, err)
	}
	return d, nil
}

// build checks endpoint name's file and builds its door: how requests are
// verified, how large they may be, how they map to a turn, how the
// endpoint responds and replies.
func build(name string, cfg Config, getenv func(string) string) (*Door, error) {
	d := &Door{name: name, cfg: cfg, maxBody: channels.MaxBody}
	var err error
	if d.verifier, d.secrets, err = verifierOf(cfg, getenv); err != nil {
		return nil, err
	}
	if cfg.MaxBodyBytes < 0 || cfg.MaxBodyBytes > channels.MaxBody {
		return nil, fmt.Errorf("maxBodyBytes: %d is not within 1..%d", cfg.MaxBodyBytes, channels.MaxBody)
	}
	if cfg.MaxBodyBytes > 0 {
		d.maxBody = cfg.MaxBodyBytes
	}
	if d.mapping, err = newMapping(name, cfg); err != nil {
		return nil, err
	}
	if d.respond, d.wait, err = responseOf(cfg); err != nil {
		return nil, err
	}
	if cfg.Reply != nil {
		if d.reply, err = newReplier(KindPrefix+name, *cfg.Reply, getenv); err != nil {
			return nil, fmt.Errorf("reply.%w", err)
		}
	}
	return d, nil
}

// verifierOf is the endpoint's request verifier by scheme, with the
// secrets it accepts (secretEnv holds one or more, space-separated).
func verifierOf(cfg Config, getenv func(string) string) (Verifier, []string, error) {
	tol := DefaultTolerance
	if cfg.Tolerance != "" {
		var err error
		if tol, err = time.ParseDuration(cfg.Tolerance); err != nil || tol <= 0 {
			return nil, nil, fmt.Errorf("tolerance: %q is not a positive duration (e.g. 5m)", cfg.Tolerance)
		}
	}
	if cfg.SecretEnv == "" {
		return nil, nil, errors.New("secretEnv: required (the environment variable that holds the secret)")
	}
	secrets := strings.Fields(getenv(cfg.SecretEnv))
	if len(secrets) == 0 {
		return nil, nil, fmt.Errorf("secretEnv: environment variable %s is not set", cfg.SecretEnv)
	}
	if cfg.Scheme != SchemeHMAC && cfg.HMAC != nil {
		return nil, nil, fmt.Errorf("hmac: only for scheme: hmac (scheme is %q)", cfg.Scheme)
	}
	if cfg.Scheme != SchemeToken && cfg.Token != nil {
		return nil, nil, fmt.Errorf("token: only for scheme: token (scheme is %q)", cfg.Scheme)
	}
	switch cfg.Scheme {
	case SchemeStandard:
		v, err := NewStandard(secrets, tol)
		if err != nil {
			return nil, nil, fmt.Errorf("secretEnv: %s: %w", cfg.SecretEnv, err)
		}
		return v, secrets, nil
	case SchemeHMAC:
		if cfg.HMAC == nil {
			return nil, nil, errors.New("hmac: required for scheme: hmac (at least hmac.header)")
		}
		v, err := NewHMAC(*cfg.HMAC, secrets, tol)
		if err != nil {
			return nil, nil, fmt.Errorf("hmac.%w", err)
		}
		return v, secrets, nil
	case SchemeToken:
		h := "Authorization"
		if cfg.Token != nil && cfg.Token.Header != "" {
			h = cfg.Token.Header
		}
		return &Token{Header: h, Tokens: secrets}, secrets, nil
	case "":
		return nil, nil, errors.New("scheme: required: standard, hmac or token (there are no unsigned endpoints)")
	default:
		return nil, nil, fmt.Errorf("scheme: %q is not one of standard, hmac, token", cfg.Scheme)
	}
}

// responseOf is how the endpoint answers a request (async, or wait for the
// turn) and, with wait, for how long.
func responseOf(cfg Config) (respond string, wait time.Duration, err error) {
	switch cfg.Respond {
	case "", RespondAsync:
		respond = RespondAsync
	case RespondWait:
		respond = RespondWait
	default:
		return "", 0, fmt.Errorf("respond: %q is not one of async, wait", cfg.Respond)
	}
	wait = DefaultWait
	if cfg.Wait != "" {
		if respond != RespondWait {
			return "", 0, errors.New("wait: only with respond: wait")
		}
		if wait, err = time.ParseDuration(cfg.Wait); err != nil || wait <= 0 || wait > MaxWait {
			return "", 0, fmt.Errorf("wait: %q is not a duration within 1s..%s", cfg.Wait, MaxWait)
		}
	}
	return respond, wait, nil
}
