// Package uigate is the client side of the login gate in front of the Web
// UI of `fastagent dev`: the one-time login links. The gate itself runs in
// the dev server program (cmd/fastagent-devserver, package uigate there),
// which checks these links with the same construction: a link carries a
// random nonce and its HMAC-SHA256 under the run's Temporal key, so only a
// holder of the key (fastagent dev, `fastagent ui-link`) makes one, and
// the gate accepts each once.
package uigate

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// LoginPath is where a login link points.
const LoginPath = "/login"

// SettingsPath is the UI server's settings route (it holds the codec
// endpoint, and answers 401 without the login).
const SettingsPath = "/api/v1/settings"

// LoginURL returns a new one-time login link to the UI at base (e.g.
// http://127.0.0.1:8233) for the server whose credential is key.
func LoginURL(base, key string) (string, error) {
	nonce := make([]byte, 16)
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("uigate: draw a login code: %w", err)
	}
	code := hex.EncodeToString(nonce) + hex.EncodeToString(mac(key, "login", nonce)[:16])
	return strings.TrimRight(base, "/") + LoginPath + "?code=" + code, nil
}

// mac is HMAC-SHA256 under key of a purpose label and data (the gate's
// construction).
func mac(key, purpose string, data []byte) []byte {
	h := hmac.New(sha256.New, []byte(key))
	h.Write([]byte("fastagent-ui-" + purpose + "\x00"))
	h.Write(data)
	return h.Sum(nil)
}
