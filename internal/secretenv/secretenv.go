// Package secretenv recognises the worker's own secrets among environment
// variable names, and the secret files such variables point at, so that
// tools can be kept from both (see DESIGN.md, "Security model").
package secretenv

import (
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// names are the worker's own secrets by exact name.
var names = []string{
	"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OLLAMA_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY",
	"AZURE_OPENAI_API_KEY", "MISTRAL_API_KEY", "GROQ_API_KEY", "OPENROUTER_API_KEY",
	"TEMPORAL_API_KEY", "TEMPORAL_TLS", "FASTAGENT_STORE", "FASTAGENT_API_TOKEN", "FASTAGENT_API_TOKENS",
	"FASTAGENT_API_TOKENS_FILE", "FASTAGENT_TOKENS_FILE", "DATABASE_URL", "PGPASSWORD",
	"NATS_TOKEN", "NATS_CREDS", "NATS_USER", "NATS_PASSWORD", "NATS_NKEY", "NATS_URL",
	"AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
}

// prefixes and suffixes catch the rest by shape.
var (
	prefixes = []string{"TEMPORAL_TLS_", "FASTAGENT_STORE_", "FASTAGENT_API_TOKEN", "FASTAGENT_NATS_", "FASTAGENT_CODEC_", "NATS_"}
	suffixes = []string{"_API_KEY", "_APIKEY", "_SECRET", "_SECRET_KEY", "_TOKEN", "_TOKENS", "_PASSWORD", "_DSN",
		"_CREDS", "_CREDENTIALS", "_PRIVATE_KEY", "_ENCRYPT_KEY"}
)

// IsSecret reports whether name looks like one of the worker's own secrets:
// a model provider key, Temporal credentials, the session store DSN, the API
// tokens, codec keys, NATS credentials, any name ending in _API_KEY,
// _SECRET, _TOKEN, _PASSWORD, _DSN, _CREDS, _PRIVATE_KEY and the like, and
// <secret>_FILE, the path of a file holding one.
func IsSecret(name string) bool {
	n := strings.ToUpper(name)
	if slices.Contains(names, n) {
		return true
	}
	for _, p := range prefixes {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	for _, s := range suffixes {
		if strings.HasSuffix(n, s) {
			return true
		}
	}
	if stem, ok := strings.CutSuffix(n, "_FILE"); ok && stem != "" {
		return IsSecret(stem)
	}
	return false
}

// Files returns the absolute paths of existing files that secret variables
// of environ ("NAME=value" pairs) name — a key file, a token file, a TLS
// private key — so that a sandbox can hide them from tools. A value counts
// when the variable is secret (IsSecret) and ends in _FILE, or is one of
// Temporal's TLS key and certificate paths; values that are not absolute
// paths of regular files are skipped.
func Files(environ []string) []string {
	var out []string
	for _, kv := range environ {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || val == "" || !IsSecret(name) {
			continue
		}
		n := strings.ToUpper(name)
		if !strings.HasSuffix(n, "_FILE") && !strings.HasPrefix(n, "TEMPORAL_TLS_") {
			continue
		}
		if !filepath.IsAbs(val) {
			abs, err := filepath.Abs(val)
			if err != nil {
				continue
			}
			val = abs
		}
		if real, err := filepath.EvalSymlinks(val); err == nil {
			val = real
		}
		if st, err := os.Stat(val); err != nil || !st.Mode().IsRegular() {
			continue
		}
		if !slices.Contains(out, val) {
			out = append(out, val)
		}
	}
	return out
}

// minSecretValue is the shortest value Values reports: shorter ones
// ("1", "true") would redact ordinary words.
const minSecretValue = 8

// Values returns the values of the secret variables of environ ("NAME=value"
// pairs, IsSecret names), longest first, skipping values shorter than 8
// bytes; for Redact.
func Values(environ []string) []string {
	var out []string
	for _, kv := range environ {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || len(val) < minSecretValue || !IsSecret(name) || slices.Contains(out, val) {
			continue
		}
		out = append(out, val)
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// Encoded returns values (Values) with the common encodings of each
// beside it, longest first, for Redact: standard and URL-safe base64
// (padded or not, and the part of the encoding that does not depend on
// where the value starts in a longer encoded string — the password of a
// base64 "user:password"), lower- and upper-case hex, and URL escaping
// (query and path). Other transformations (another encoding, a value
// split, reversed, encrypted or encoded twice) are not recognised.
func Encoded(values []string) []string {
	var out []string
	add := func(s string) {
		if len(s) >= minSecretValue && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	for _, v := range values {
		add(v)
		b := []byte(v)
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			add(enc.EncodeToString(b))
			raw := enc.WithPadding(base64.NoPadding)
			// At each of the three offsets a value can start at within
			// the 3-byte groups of a longer string, the characters that
			// encode its bytes alone.
			for off := range 3 {
				e := raw.EncodeToString(append(make([]byte, off), b...))
				from := (off*8 + 5) / 6
				to := (off + len(b)) * 8 / 6
				if to > from {
					add(e[from:to])
				}
			}
		}
		add(hex.EncodeToString(b))
		add(strings.ToUpper(hex.EncodeToString(b)))
		add(url.QueryEscape(v))
		add(url.PathEscape(v))
	}
	slices.SortStableFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// Redacted replaces a secret value in text Redact removed.
const Redacted = "[redacted]"

// Redact returns text with every one of values (Values) replaced by
// Redacted, and whether it replaced any.
func Redact(text string, values []string) (string, bool) {
	changed := false
	for _, v := range values {
		if v != "" && strings.Contains(text, v) {
			text, changed = strings.ReplaceAll(text, v, Redacted), true
		}
	}
	return text, changed
}
