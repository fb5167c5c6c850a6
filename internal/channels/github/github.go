// Package github is the GitHub channel (go-github, ghinstallation). A
// webhook (POST /github) is verified by its X-Hub-Signature-256 HMAC over
// the capped raw body, then a policy — declarative rules in
// channels/github.yaml, or an executable — maps the event to zero or more
// intents (session, prompt); each becomes a delivery Signal-With-Started on
// its session workflow, deduplicated by the signed body (BodyID; the
// X-GitHub-Delivery header is not signed). A rule accepts only the
// repository's owner, members and collaborators unless it says otherwise
// (authorAssociation). The replier (reply.go) posts the answer as an
// issue/PR comment (or a PR review), idempotently: the comment's ID is the
// turn's stored reply reference, and a hidden marker in the body finds a
// comment whose reference was lost.
package github

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/sandbox"
	"github.com/fastagent/fastagent/internal/tools"
	"github.com/fastagent/fastagent/internal/wire"
)

// Kind is the channel kind and the name of its file, channels/github.yaml.
const Kind = "github"

// Path is the ingress route of the webhook.
const Path = "/github"

// Default environment variable names; Config may override them.
const (
	DefaultSecretEnv     = "GITHUB_WEBHOOK_SECRET"  //nolint:gosec // G101: an environment variable name, not a secret
	DefaultTokenEnv      = "GITHUB_TOKEN"           //nolint:gosec // G101: an environment variable name, not a secret
	DefaultAppIDEnv      = "GITHUB_APP_ID"          //nolint:gosec // G101: an environment variable name, not a secret
	DefaultPrivateKeyEnv = "GITHUB_APP_PRIVATE_KEY" //nolint:gosec // G101: an environment variable name, not a secret
	// APIURLEnv overrides the REST API base URL (tests, GitHub Enterprise
	// Server: https://<host>/api/v3).
	APIURLEnv = "GITHUB_API_URL"
)

// Webhook headers.
const (
	HeaderSignature = "X-Hub-Signature-256"
	HeaderEvent     = "X-GitHub-Event"
	HeaderDelivery  = "X-GitHub-Delivery"
)

// Config is channels/github.yaml. Secrets never live in the file: it names
// the environment variables that hold them.
type Config struct {
	// SecretEnv names the webhook secret (default GITHUB_WEBHOOK_SECRET).
	SecretEnv string `yaml:"secretEnv"`
	// TokenEnv names a token (PAT or fine-grained) replies are posted with
	// (default GITHUB_TOKEN). Without it the channel authenticates as a
	// GitHub App.
	TokenEnv string `yaml:"tokenEnv"`
	// AppIDEnv and PrivateKeyEnv name the GitHub App's ID and PEM private
	// key (default GITHUB_APP_ID, GITHUB_APP_PRIVATE_KEY; the key may also
	// be a file named by <PrivateKeyEnv>_FILE).
	AppIDEnv      string `yaml:"appIdEnv"`
	PrivateKeyEnv string `yaml:"privateKeyEnv"`
	// Bot is the login the agent posts as ("my-bot" or "my-app[bot]"):
	// events it sent are never turns. Optional.
	Bot string `yaml:"bot"`
	// Rules map an event to intents; every matching rule gives one.
	Rules []Rule `yaml:"rules"`
	// Policy is an executable policy, instead of Rules.
	Policy *ExecPolicy `yaml:"policy"`
	// ApproverAssociation lists the author associations whose
	// "/approve <token>" or "/deny <token>" comments decide a tool call
	// waiting for approval (default OWNER, MEMBER).
	ApproverAssociation []string `yaml:"approverAssociation"`
	// WhileBusy is what a comment does while its session is busy: queue,
	// steer, interrupt or reject ("": fastagent.yaml's
	// conversation.whileBusy, else queue).
	WhileBusy string `yaml:"whileBusy"`
}

func init() { channels.Register(Kind, New) }

// New builds the GitHub channel from its file and the environment: the
// webhook secret must be set, and either a token or a GitHub App.
func New(file []byte, getenv func(string) string) (*channels.Channel, error) {
	var cfg Config
	if err := channels.Decode(file, &cfg); err != nil {
		return nil, fmt.Errorf("github: %w", err)
	}
	pol, err := cfg.compile()
	if err != nil {
		return nil, fmt.Errorf("github: %w", err)
	}
	if cfg.SecretEnv == "" {
		cfg.SecretEnv = DefaultSecretEnv
	}
	secret := getenv(cfg.SecretEnv)
	if secret == "" {
		return nil, fmt.Errorf("github: secretEnv: environment variable %s is not set", cfg.SecretEnv)
	}
	auth, err := authFromEnv(cfg, getenv)
	if err != nil {
		return nil, fmt.Errorf("github: %w", err)
	}
	rp, err := NewReplier(auth, getenv(APIURLEnv))
	if err != nil {
		return nil, fmt.Errorf("github: %w", err)
	}
	rp.Answering = answering(cfg)
	rp.approvalKey = approvalKey([]byte(secret))
	for _, a := range cfg.ApproverAssociation {
		if !slices.Contains(authorAssociations, strings.ToUpper(a)) {
			return nil, fmt.Errorf("github: approverAssociation: %q is not one of %s", a, strings.Join(authorAssociations, ", "))
		}
	}
	if err := channels.CheckWhileBusy("whileBusy", cfg.WhileBusy); err != nil {
		return nil, fmt.Errorf("github: %w", err)
	}
	door := &Door{Secret: []byte(secret), Policy: pol, ApproverAssociation: upper(cfg.ApproverAssociation), WhileBusy: cfg.WhileBusy}
	return &channels.Channel{Door: door, Replier: rp}, nil
}

// Door is the GitHub webhook door.
type Door struct {
	Secret []byte
	Policy *Policy
	// ApproverAssociation: see Config (nil: DefaultApproverAssociation).
	ApproverAssociation []string
	// WhileBusy is what a delivery does while its session is busy (see
	// Config.WhileBusy).
	WhileBusy string
}

// DefaultWhileBusy implements channels.BusyDefaulter.
func (d *Door) DefaultWhileBusy(mode string) {
	if d.WhileBusy == "" {
		d.WhileBusy = mode
	}
}

func upper(list []string) []string {
	var out []string
	for _, s := range list {
		out = append(out, strings.ToUpper(s))
	}
	return out
}

// Kind implements channels.Door.
func (d *Door) Kind() string { return Kind }

// Path implements channels.Door.
func (d *Door) Path() string { return Path }

// AckBudget implements channels.Budgeted: GitHub waits 10 s for an
// answer, so a failed hand-off is retried for about 9 s.
func (d *Door) AckBudget() time.Duration { return AckBudget }

// AckBudget is how long the door may take to answer GitHub, inside its
// 10 s delivery timeout.
const AckBudget = 9 * time.Second

// RedeliverHint implements channels.Hinted: GitHub never redelivers a
// failed delivery by itself.
func (d *Door) RedeliverHint(r channels.Request) string {
	return fmt.Sprintf("the event could not be handed off; GitHub does not redeliver it by itself: "+
		"open the webhook's Recent Deliveries (repository or organization Settings → Webhooks, or the GitHub App's Advanced page), "+
		"select delivery %s and press Redeliver", strconv.Quote(header(r.Header, HeaderDelivery)))
}

// NeedsSandbox implements channels.Confined: an executable policy runs in
// the tool sandbox.
func (d *Door) NeedsSandbox() bool { return d.Policy != nil && d.Policy.exec != nil }

// Confine implements channels.Confined: the executable policy runs in sb,
// with the secret paths of protected (the agent's .env and state dir, the
// worker's) hidden.
func (d *Door) Confine(sb *sandbox.Sandbox, protected []tools.Protected) {
	if d.Policy != nil {
		d.Policy.box, d.Policy.protected = sb, protected
	}
}

// Executables implements channels.Confined: the executable policy, which
// decides who starts a turn.
func (d *Door) Executables() []string {
	if d.Policy == nil || d.Policy.exec == nil {
		return nil
	}
	return []string{d.Policy.exec.Exec}
}

// Locate implements channels.Located: a relative executable policy is
// resolved against the folder of the channel file, and must exist.
func (d *Door) Locate(file string) error {
	if d.Policy == nil || d.Policy.exec == nil {
		return nil
	}
	e := d.Policy.exec
	if !filepath.IsAbs(e.Exec) {
		e.Exec = filepath.Join(filepath.Dir(file), e.Exec)
	}
	st, err := os.Stat(e.Exec)
	if err != nil {
		return fmt.Errorf("github: policy.exec: %w", err)
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("github: policy.exec: %s is not an executable file", e.Exec)
	}
	return nil
}

// Verify implements channels.Door: X-Hub-Signature-256 must be
// "sha256=<hex HMAC-SHA256 of the raw body with the secret>", compared in
// constant time.
func (d *Door) Verify(r channels.Request) error {
	if len(d.Secret) == 0 {
		return errors.New("github: verify: no webhook secret")
	}
	return VerifySignature(d.Secret, header(r.Header, HeaderSignature), r.Body)
}

// VerifySignature checks an X-Hub-Signature-256 value against body.
func VerifySignature(secret []byte, sig string, body []byte) error {
	hexSum, ok := strings.CutPrefix(sig, "sha256=")
	if !ok {
		return errors.New("github: verify: missing or malformed " + HeaderSignature)
	}
	got, err := hex.DecodeString(hexSum)
	if err != nil {
		return errors.New("github: verify: signature is not hex")
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return errors.New("github: verify: signature mismatch")
	}
	return nil
}

// Sign returns the headers GitHub sends with body: its signature with
// secret, the event and the delivery ID (tests and benchmarks).
func Sign(secret, event, delivery string, body []byte) http.Header {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	h := http.Header{}
	h.Set(HeaderSignature, "sha256="+hex.EncodeToString(mac.Sum(nil)))
	h.Set(HeaderEvent, event)
	h.Set(HeaderDelivery, delivery)
	h.Set("Content-Type", "application/json")
	return h
}

// Parse implements channels.Door: ping answers 204; any other event
// answers 202 with one delivery per intent the policy gives (none is
// fine), keyed "<BodyID>:<intent index>". A request without an event or
// delivery ID, or whose payload cannot be read, answers 400 and starts
// nothing.
func (d *Door) Parse(r channels.Request) (channels.Parsed, error) {
	bad := channels.Parsed{Answer: channels.Answer{Status: http.StatusBadRequest}}
	event, delivery := header(r.Header, HeaderEvent), header(r.Header, HeaderDelivery)
	if event == "ping" {
		return channels.Parsed{Answer: channels.Answer{Status: http.StatusNoContent}}, nil
	}
	if event == "" || delivery == "" {
		return bad, fmt.Errorf("github: parse: missing %s or %s", HeaderEvent, HeaderDelivery)
	}
	if len(delivery) > 100 || strings.ContainsAny(delivery, " \t\r\n") {
		return bad, fmt.Errorf("github: parse: malformed %s", HeaderDelivery)
	}
	ev, err := NewEvent(event, r.Body)
	if err != nil {
		return bad, err
	}
	ok := channels.Parsed{Answer: channels.Answer{Status: http.StatusAccepted}}
	id := BodyID(r.Body)
	if d.Policy != nil && ev.skip(d.Policy.bot) {
		return ok, nil
	}
	if dec, isDecision, refused := d.decide(ev, id); isDecision {
		// A decision comment is never a turn, whether or not it decides.
		if dec != nil {
			ok.Decisions = []channels.Decision{*dec}
		}
		if refused != nil {
			// Shown in the webhook's Recent Deliveries; GitHub must not
			// retry it.
			slog.Warn("github: decision comment refused", "repo", ev.Repo, "number", ev.Number, "sender", ev.Sender, "reason", refused)
			ok.Answer.ContentType, ok.Answer.Body = "text/plain; charset=utf-8", []byte(refused.Error()+"\n")
		}
		return ok, nil
	}
	if d.Policy == nil {
		return ok, nil
	}
	intents, err := d.Policy.IntentsContext(context.Background(), ev, delivery)
	if err != nil {
		// The platform must not retry what the policy cannot map; it
		// changes nothing.
		return ok, err
	}
	for i, in := range intents {
		data, err := json.Marshal(targetData{Installation: ev.Installation, Review: in.Review && ev.PR})
		if err != nil {
			return ok, fmt.Errorf("github: reply data: %w", err)
		}
		dl := channels.Delivery{Kind: Kind, ID: id + ":" + strconv.Itoa(i), Session: in.Session,
			Prompt: agent.Prompt{Text: in.Prompt}, Answer: d.Policy.answerText(ev.Comment), WhileBusy: d.WhileBusy}
		if ev.Comment != "" {
			// A comment that is only "/stop" (or /new, /status, /help,
			// perhaps after the bot's mention) is a command, not a turn.
			dl.Command = channels.CommandOf(d.Policy.answerText(ev.Comment))
		}
		if ev.Repo != "" && ev.Number > 0 {
			// Events without an issue or PR (push, release…) are answered
			// nowhere.
			dl.Reply = &wire.Target{Chat: ev.Repo, Thread: strconv.Itoa(ev.Number), Message: dl.Key(),
				User: ev.Sender, Data: data}
		}
		ok.Deliveries = append(ok.Deliveries, dl)
	}
	if len(ok.Deliveries) > 0 {
		ok.Answer.ContentType = "text/plain"
		ok.Answer.Body = []byte(fmt.Sprintf("%d turn(s) accepted\n", len(ok.Deliveries)))
	}
	return ok, nil
}

// BodyID identifies a webhook delivery by its signed raw body: the hex
// SHA-256 of the bytes the X-Hub-Signature-256 HMAC covers.
//
// It, not X-GitHub-Delivery, makes the turn key. The delivery ID and the
// event name are headers outside the HMAC, so anyone who captured one
// signed request could replay its body with fresh headers; keyed on the
// body, every replay is the same turn and is deduplicated by the session
// within its idempotency window (24 h). The body is also robust where the
// event's own IDs are not: every event GitHub sends carries changing
// fields (IDs, updated_at, the sender, the comment), while events like
// issues.labeled carry no ID of their own. GitHub's own retries and
// Redeliver send the same body, so they stay one turn.
func BodyID(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

// targetData is the GitHub part of a reply target.
type targetData struct {
	// Installation is the GitHub App installation the event came from
	// (0 without an App).
	Installation int64 `json:"installation,omitempty"`
	// Review posts the answer as a pull request review.
	Review bool `json:"review,omitempty"`
}

// header is the first value of h's key k, canonicalised.
func header(h map[string][]string, k string) string {
	return http.Header(h).Get(k)
}

// execTimeoutMax bounds an executable policy: the door must answer GitHub
// (10 s) after handing off (2.5 s).
const execTimeoutMax = 5 * time.Second
