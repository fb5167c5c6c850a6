package webhook

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// SecretEnvName is the variable `fastagent add webhook` names for
// endpoint name's secret: HOOK_<NAME>_SECRET.
func SecretEnvName(name string) string {
	return "HOOK_" + strings.ToUpper(strings.NewReplacer("-", "_").Replace(name)) + "_SECRET"
}

// NewSecret returns a fresh secret for scheme: whsec_<base64 of 32 random
// bytes> for standard, 64 hex digits otherwise.
func NewSecret(scheme string) string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	if scheme == SchemeStandard {
		return SecretPrefix + base64.StdEncoding.EncodeToString(b)
	}
	return hex.EncodeToString(b)
}

// File is the channels/webhooks/<name>.yaml `fastagent add webhook` writes.
func File(name, scheme string) ([]byte, error) {
	if !nameRE.MatchString(name) {
		return nil, fmt.Errorf("%q is not an endpoint name (lower-case letters, digits, - and _, at most 63)", name)
	}
	env := SecretEnvName(name)
	var verify string
	switch scheme {
	case SchemeStandard:
		verify = `# Standard Webhooks (webhook-id, webhook-timestamp, webhook-signature):
# Svix, and every sender that follows https://www.standardwebhooks.com.
scheme: standard
secretEnv: ` + env + `      # whsec_...; several, space-separated, during a rotation
# tolerance: 5m
`
	case SchemeHMAC:
		verify = `# An HMAC of the body in a header. This is "X-Signature: sha256=<hex>";
# for Stripe use header: Stripe-Signature, signatureKey: v1, timestampKey: t
# and no prefix (docs/webhooks.md).
scheme: hmac
secretEnv: ` + env + `
hmac:
  header: X-Signature
  algorithm: sha256       # sha1, sha512
  encoding: hex           # base64
  prefix: "sha256="
  # timestampHeader: X-Timestamp   # folded in as "{timestamp}.{body}", checked within tolerance
`
	case SchemeToken:
		verify = `# A shared secret in a header, compared in constant time (GitLab's
# X-Gitlab-Token, Alertmanager behind a proxy).
scheme: token
secretEnv: ` + env + `
token:
  header: Authorization   # "Bearer <secret>"; GitLab: X-Gitlab-Token
`
	default:
		return nil, fmt.Errorf("scheme: %q is not one of standard, hmac, token", scheme)
	}
	return []byte(`# Webhook endpoint POST ` + PathPrefix + name + `. Each verified event is a turn.
` + verify + `
# Optional filter (CEL over body, headers, id, name); false answers 204:
# when: body.type == "order.created"
# Templates over .body, .headers, .raw, .id, .name (defaults shown):
# session: "hook:` + name + `"    # or "hook:` + name + `:{{.body.customer}}": always within hook:` + name + `, no "/"
# key: "{{.id}}"
prompt: |
  Webhook event ` + name + `:
  {{.raw}}
# respond: async          # 202 at once; wait: hold up to "wait:" for the answer
# reply:                  # POST each answer, signed (Standard Webhooks)
#   url: https://example.com/agent-answers
#   secretEnv: ` + strings.TrimSuffix(env, "_SECRET") + `_REPLY_SECRET
#   allowPrivate: false   # true: the receiver may be on loopback or a private network
`), nil
}

// SignRequest returns the headers that make body a valid request to the
// endpoint now, with its first secret (`fastagent hook send`, tests).
func (d *Door) SignRequest(body []byte, now time.Time) (http.Header, error) {
	if len(d.secrets) == 0 {
		return nil, errors.New("no secret")
	}
	h := http.Header{"Content-Type": {"application/json"}}
	switch v := d.verifier.(type) {
	case *Standard:
		b := make([]byte, 12)
		_, _ = rand.Read(b)
		return SignStandard(d.secrets[:1], "msg_"+hex.EncodeToString(b), now, body)
	case *HMAC:
		v.Sign(h, body, strconv.FormatInt(now.Unix(), 10))
	case *Token:
		tok := d.secrets[0]
		if strings.EqualFold(v.Header, "Authorization") {
			tok = "Bearer " + tok
		}
		h.Set(v.Header, tok)
	default:
		return nil, fmt.Errorf("cannot sign for %T", v)
	}
	return h, nil
}
