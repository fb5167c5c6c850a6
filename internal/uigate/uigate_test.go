package uigate

import (
	"regexp"
	"testing"
)

// A login link points at the gate's login path with a fresh code: a
// 16-byte nonce and its 16-byte MAC, hex. (That the dev server's gate opens
// it once is internal/devserver's TestWebUILoginOpensOnce.)
func TestLoginURL(t *testing.T) {
	shape := regexp.MustCompile(`^http://127\.0\.0\.1:8233/login\?code=[0-9a-f]{64}$`)
	a, err := LoginURL("http://127.0.0.1:8233/", "key")
	if err != nil || !shape.MatchString(a) {
		t.Fatalf("LoginURL = %q %v", a, err)
	}
	b, _ := LoginURL("http://127.0.0.1:8233", "key")
	if a == b {
		t.Error("two links are the same")
	}
	if a[len(a)-32:] == b[len(b)-32:] {
		t.Error("two nonces share a MAC")
	}
}
