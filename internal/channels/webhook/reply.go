package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/wire"
)

// Callback is the JSON body of a reply callback.
type Callback struct {
	Type    string `json:"type"`
	Name    string `json:"name"`
	Session string `json:"session"`
	Turn    string `json:"turn"`
	Text    string `json:"text"`
	// Status is how the turn ended: completed, or failed (Text then says
	// why); Code is the failure's error code (session_busy: the session
	// refused the event, its queue being full — send it again later as a
	// new event).
	Status string `json:"status,omitempty"`
	Code   string `json:"code,omitempty"`
}

// CallbackType is Callback.Type.
const CallbackType = "turn.answered"

// Replier POSTs a turn's stored answer to the endpoint's callback URL,
// signed with Standard Webhooks; webhook-id is the turn key, the same on
// every attempt, so the receiver deduplicates a retried callback. A
// callback the receiver accepted (2xx) is stored as the turn's reply
// reference and never sent again; anything else is retried by the reply
// activity with backoff.
type Replier struct {
	kind    string
	url     string
	secrets []string
	target  *callbackTarget
	client  *http.Client
}

func newReplier(kind string, cfg ReplyConfig, getenv func(string) string) (*Replier, error) {
	u, err := url.Parse(cfg.URL)
	if cfg.URL == "" || err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("url: %q is not an http(s) URL", cfg.URL)
	}
	if cfg.SecretEnv == "" {
		return nil, errors.New("secretEnv: required (the whsec_ secret callbacks are signed with)")
	}
	secrets := strings.Fields(getenv(cfg.SecretEnv))
	if len(secrets) == 0 {
		return nil, fmt.Errorf("secretEnv: environment variable %s is not set", cfg.SecretEnv)
	}
	for _, s := range secrets {
		if _, err := DecodeSecret(s); err != nil {
			return nil, fmt.Errorf("secretEnv: %s: %w", cfg.SecretEnv, err)
		}
	}
	target := &callbackTarget{kind: kind, allowPrivate: cfg.AllowPrivate}
	if err := target.checkURL(u); err != nil {
		return nil, fmt.Errorf("url: %q: %w", cfg.URL, err)
	}
	return &Replier{kind: kind, url: cfg.URL, secrets: secrets[:1], target: target, client: target.client()}, nil
}

// Kind implements channels.Replier.
func (r *Replier) Kind() string { return r.kind }

// URL is the callback URL.
func (r *Replier) URL() string { return r.url }

// Render implements channels.Replier.
func (r *Replier) Render(_ context.Context, target wire.Target, ref string) (channels.Render, error) {
	return &callback{r: r, target: target, ref: ref}, nil
}

// callback is one turn's callback. It shows nothing live: the answer goes
// once, when the turn has ended.
type callback struct {
	r      *Replier
	target wire.Target
	ref    string
}

func (c *callback) Show(context.Context, *channels.View) error { return nil }

func (c *callback) Ref() string { return c.ref }

// Finish POSTs text, unless an earlier attempt was accepted.
func (c *callback) Finish(ctx context.Context, text string) error {
	return c.Conclude(ctx, text, "", "")
}

// Conclude POSTs text with the turn's status and code, unless an earlier
// attempt was accepted.
func (c *callback) Conclude(ctx context.Context, text, status, code string) error {
	if c.ref != "" {
		return nil
	}
	key := c.target.Message
	if key == "" {
		return channels.Permanent(errors.New("webhook reply: the target has no turn key"))
	}
	body, err := json.Marshal(Callback{Type: CallbackType, Name: strings.TrimPrefix(c.r.kind, KindPrefix),
		Session: c.target.Chat, Turn: key, Text: text, Status: status, Code: code})
	if err != nil {
		return err
	}
	h, err := SignStandard(c.r.secrets, key, time.Now(), body)
	if err != nil {
		return channels.Permanent(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.r.url, bytes.NewReader(body))
	if err != nil {
		return channels.Permanent(err)
	}
	req.Header = h
	req.Header.Set("User-Agent", "fastagent-webhook")
	resp, err := c.r.client.Do(req)
	if err != nil {
		return fmt.Errorf("webhook reply: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook reply: %s answered %d", c.r.url, resp.StatusCode)
	}
	c.ref = "callback:" + strconv.Itoa(resp.StatusCode)
	return nil
}

// noReplier is the replier of an endpoint without reply: (its turns have
// no reply target, so it is never asked).
type noReplier struct{ kind string }

func (n noReplier) Kind() string { return n.kind }

func (n noReplier) Render(context.Context, wire.Target, string) (channels.Render, error) {
	return nil, channels.Permanent(fmt.Errorf("webhook %s has no reply target", n.kind))
}
