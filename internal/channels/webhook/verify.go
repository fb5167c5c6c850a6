package webhook

import (
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // G505: HMAC-SHA1 is what some senders sign with; HMAC keeps it sound
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Verifier checks a request's headers and raw body. ID is the delivery's
// identity the scheme signs ("" when it signs none).
type Verifier interface {
	Verify(h http.Header, body []byte, now time.Time) (id string, err error)
}

// Standard Webhooks headers.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// SecretPrefix starts a Standard Webhooks symmetric secret.
const SecretPrefix = "whsec_"

// Standard verifies the Standard Webhooks scheme (symmetric, v1): the
// webhook-signature header lists space-separated "v1,<base64 HMAC-SHA256>"
// signatures of "<webhook-id>.<webhook-timestamp>.<body>"; any one made
// with any of the secrets (rotation) passes, if the timestamp is within
// the tolerance. It is implemented here (a few lines of the standard
// library) because no maintained Go module of the specification is among
// the project's allowed modules; the specification's published test
// vectors are in its tests.
type Standard struct {
	keys      [][]byte
	Tolerance time.Duration
}

// NewStandard returns the verifier of secrets ("whsec_<base64>", or the
// base64 alone).
func NewStandard(secrets []string, tolerance time.Duration) (*Standard, error) {
	s := &Standard{Tolerance: tolerance}
	for _, sec := range secrets {
		k, err := DecodeSecret(sec)
		if err != nil {
			return nil, err
		}
		s.keys = append(s.keys, k)
	}
	if len(s.keys) == 0 {
		return nil, errors.New("no secret")
	}
	return s, nil
}

// DecodeSecret decodes a Standard Webhooks secret.
func DecodeSecret(secret string) ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, SecretPrefix))
	if err != nil {
		return nil, errors.New("a Standard Webhooks secret is whsec_ followed by base64")
	}
	if len(k) == 0 {
		return nil, errors.New("empty Standard Webhooks secret")
	}
	return k, nil
}

// StandardSignature is the v1 signature of (id, ts, body) with key.
func StandardSignature(key []byte, id string, ts int64, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte("."))
	mac.Write([]byte(strconv.FormatInt(ts, 10)))
	mac.Write([]byte("."))
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// Verify implements Verifier.
func (s *Standard) Verify(h http.Header, body []byte, now time.Time) (string, error) {
	id, ts, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || ts == "" || sigs == "" {
		return "", errors.New("missing webhook-id, webhook-timestamp or webhook-signature")
	}
	if strings.ContainsAny(id, ". \t\r\n") || len(id) > 200 {
		return "", errors.New("malformed webhook-id")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return "", errors.New("malformed webhook-timestamp")
	}
	if err := fresh(sec, now, s.Tolerance); err != nil {
		return "", err
	}
	for _, k := range s.keys {
		want := StandardSignature(k, id, sec, body)
		for _, got := range strings.Fields(sigs) {
			if strings.HasPrefix(got, "v1,") && hmac.Equal([]byte(got), []byte(want)) {
				return id, nil
			}
		}
	}
	return "", errors.New("no matching signature")
}

// SignStandard returns the Standard Webhooks headers of body, signed with
// every secret (tests, `fastagent hook send`, callbacks).
func SignStandard(secrets []string, id string, now time.Time, body []byte) (http.Header, error) {
	h := http.Header{}
	var sigs []string
	for _, sec := range secrets {
		k, err := DecodeSecret(sec)
		if err != nil {
			return nil, err
		}
		sigs = append(sigs, StandardSignature(k, id, now.Unix(), body))
	}
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	h.Set(HeaderSignature, strings.Join(sigs, " "))
	h.Set("Content-Type", "application/json")
	return h, nil
}

// fresh checks a Unix timestamp is within tolerance of now, both ways.
func fresh(sec int64, now time.Time, tolerance time.Duration) error {
	t := time.Unix(sec, 0)
	if now.Sub(t) > tolerance {
		return errors.New("timestamp too old")
	}
	if t.Sub(now) > tolerance {
		return errors.New("timestamp too far in the future")
	}
	return nil
}

// HMAC verifies an HMAC signature header, configurable enough for Stripe,
// Shopify, GitLab-style and in-house senders.
type HMAC struct {
	cfg       HMACConfig
	hash      func() hash.Hash
	secrets   [][]byte
	tolerance time.Duration
}

// NewHMAC checks cfg and returns its verifier. Secrets are used as they
// are (Stripe's whsec_… included).
func NewHMAC(cfg HMACConfig, secrets []string, tolerance time.Duration) (*HMAC, error) {
	v := &HMAC{cfg: cfg, tolerance: tolerance}
	if cfg.Header == "" {
		return nil, errors.New("header: required (the header that carries the signature)")
	}
	switch cfg.Algorithm {
	case "", "sha256":
		v.hash = sha256.New
	case "sha1":
		v.hash = sha1.New
	case "sha512":
		v.hash = sha512.New
	default:
		return nil, fmt.Errorf("algorithm: %q is not one of sha256, sha1, sha512", cfg.Algorithm)
	}
	switch cfg.Encoding {
	case "", "hex", "base64":
	default:
		return nil, fmt.Errorf("encoding: %q is not one of hex, base64", cfg.Encoding)
	}
	if cfg.TimestampKey != "" && cfg.SignatureKey == "" {
		return nil, errors.New("timestampKey: only with signatureKey (a key=value signature header)")
	}
	if cfg.TimestampKey != "" && cfg.TimestampHeader != "" {
		return nil, errors.New("timestampKey: not with timestampHeader (one timestamp)")
	}
	ts := cfg.TimestampKey != "" || cfg.TimestampHeader != ""
	switch {
	case cfg.Signed == "" && ts:
		v.cfg.Signed = "{timestamp}.{body}"
	case cfg.Signed == "":
		v.cfg.Signed = "{body}"
	case !strings.Contains(cfg.Signed, "{body}"):
		return nil, fmt.Errorf("signed: %q does not contain {body}", cfg.Signed)
	case strings.Contains(cfg.Signed, "{timestamp}") && !ts:
		return nil, errors.New("signed: {timestamp} needs timestampHeader or timestampKey")
	}
	for _, s := range secrets {
		v.secrets = append(v.secrets, []byte(s))
	}
	return v, nil
}

// Verify implements Verifier; the hmac scheme signs no delivery ID.
func (v *HMAC) Verify(h http.Header, body []byte, now time.Time) (string, error) {
	raw := h.Get(v.cfg.Header)
	if raw == "" {
		return "", fmt.Errorf("missing %s", v.cfg.Header)
	}
	var sigs []string
	ts := ""
	if v.cfg.SignatureKey != "" {
		for _, part := range strings.Split(raw, ",") {
			k, val, ok := strings.Cut(strings.TrimSpace(part), "=")
			switch {
			case !ok:
			case k == v.cfg.SignatureKey:
				sigs = append(sigs, val)
			case k == v.cfg.TimestampKey:
				ts = val
			}
		}
	} else {
		sigs = []string{raw}
	}
	if v.cfg.TimestampHeader != "" {
		ts = h.Get(v.cfg.TimestampHeader)
	}
	if v.cfg.TimestampKey != "" || v.cfg.TimestampHeader != "" {
		sec, err := strconv.ParseInt(ts, 10, 64)
		if err != nil {
			return "", errors.New("missing or malformed timestamp")
		}
		if err := fresh(sec, now, v.tolerance); err != nil {
			return "", err
		}
	}
	if len(sigs) == 0 {
		return "", fmt.Errorf("no %s= signature in %s", v.cfg.SignatureKey, v.cfg.Header)
	}
	before, after, _ := strings.Cut(v.cfg.Signed, "{body}")
	before = strings.ReplaceAll(before, "{timestamp}", ts)
	after = strings.ReplaceAll(after, "{timestamp}", ts)
	for _, sig := range sigs {
		enc, ok := strings.CutPrefix(strings.TrimSpace(sig), v.cfg.Prefix)
		if !ok {
			continue
		}
		var got []byte
		var err error
		if v.cfg.Encoding == "base64" {
			got, err = base64.StdEncoding.DecodeString(enc)
		} else {
			got, err = hex.DecodeString(enc)
		}
		if err != nil {
			continue
		}
		for _, sec := range v.secrets {
			mac := hmac.New(v.hash, sec)
			mac.Write([]byte(before))
			mac.Write(body)
			mac.Write([]byte(after))
			if hmac.Equal(got, mac.Sum(nil)) {
				return "", nil
			}
		}
	}
	return "", errors.New("signature mismatch")
}

// Sign returns the signature header value of body as v would accept it,
// with timestamp ts ("" without one) — tests and `fastagent hook send`.
// The timestamp, when configured in its own header, is set too.
func (v *HMAC) Sign(h http.Header, body []byte, ts string) {
	before, after, _ := strings.Cut(v.cfg.Signed, "{body}")
	before = strings.ReplaceAll(before, "{timestamp}", ts)
	after = strings.ReplaceAll(after, "{timestamp}", ts)
	mac := hmac.New(v.hash, v.secrets[0])
	mac.Write([]byte(before))
	mac.Write(body)
	mac.Write([]byte(after))
	sum := mac.Sum(nil)
	enc := hex.EncodeToString(sum)
	if v.cfg.Encoding == "base64" {
		enc = base64.StdEncoding.EncodeToString(sum)
	}
	sig := v.cfg.Prefix + enc
	switch {
	case v.cfg.SignatureKey != "" && v.cfg.TimestampKey != "":
		sig = v.cfg.TimestampKey + "=" + ts + "," + v.cfg.SignatureKey + "=" + sig
	case v.cfg.SignatureKey != "":
		sig = v.cfg.SignatureKey + "=" + sig
	}
	h.Set(v.cfg.Header, sig)
	if v.cfg.TimestampHeader != "" {
		h.Set(v.cfg.TimestampHeader, ts)
	}
}

// Token verifies a shared secret header in constant time.
type Token struct {
	Header string
	Tokens []string
}

// Verify implements Verifier; the token scheme signs no delivery ID.
func (t *Token) Verify(h http.Header, _ []byte, _ time.Time) (string, error) {
	got := h.Get(t.Header)
	if strings.EqualFold(t.Header, "Authorization") {
		if b, ok := strings.CutPrefix(got, "Bearer "); ok {
			got = b
		}
	}
	if got == "" {
		return "", fmt.Errorf("missing %s", t.Header)
	}
	ok := 0
	for _, want := range t.Tokens {
		ok |= subtle.ConstantTimeCompare([]byte(got), []byte(want))
	}
	if ok != 1 {
		return "", fmt.Errorf("wrong %s", t.Header)
	}
	return "", nil
}
