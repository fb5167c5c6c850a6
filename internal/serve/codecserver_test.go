package serve

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/internal/codec"
	"github.com/fastagent/fastagent/internal/ingress"
)

// The standalone codec server refuses a request without a token (or from
// a principal without the codec right, or from another browser origin),
// decodes with a codec token, and answers the Web UI's preflight.
func TestCodecServer(t *testing.T) {
	t.Parallel()
	cdc, err := codec.New([]codec.Key{{ID: "k1", Key: bytes.Repeat([]byte{3}, 32)}}, false)
	if err != nil {
		t.Fatal(err)
	}
	h, err := CodecServer(CodecServerConfig{
		Codec: cdc, Host: "127.0.0.1", Origins: []string{"https://ui.example"},
		APITokens: "ops:codec:" + ingress.HashToken("codec-token") + ";bob:invoke:" + ingress.HashToken("bob-token"),
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)

	// An encrypted payload to decode: encode "secret" through the server.
	plain := `{"payloads":[{"metadata":{"encoding":"` + base64.StdEncoding.EncodeToString([]byte("json/plain")) + `"},"data":"` +
		base64.StdEncoding.EncodeToString([]byte(`"secret"`)) + `"}]}`
	code, encoded := post(t, hs.URL+"/codec/encode", "codec-token", "", plain)
	if code != http.StatusOK || strings.Contains(encoded, base64.StdEncoding.EncodeToString([]byte(`"secret"`))) {
		t.Fatalf("encode: %d %s", code, encoded)
	}
	tests := []struct {
		name, token, origin string
		want                int
	}{
		{"no token", "", "", http.StatusUnauthorized},
		{"wrong token", "nope", "", http.StatusUnauthorized},
		{"no codec right", "bob-token", "", http.StatusForbidden},
		{"other origin", "codec-token", "https://evil.example", http.StatusForbidden},
		{"codec token", "codec-token", "", http.StatusOK},
		{"codec token from the UI", "codec-token", "https://ui.example", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := post(t, hs.URL+"/codec/decode", tt.token, tt.origin, encoded)
			if code != tt.want {
				t.Fatalf("decode: %d %s, want %d", code, body, tt.want)
			}
			decoded := strings.Contains(body, base64.StdEncoding.EncodeToString([]byte(`"secret"`)))
			if decoded != (tt.want == http.StatusOK) {
				t.Fatalf("decode answered %d with body %s", code, body)
			}
		})
	}
	// The UI's preflight gets CORS headers; the other routes do not exist.
	req, _ := http.NewRequest(http.MethodOptions, hs.URL+"/codec/decode", nil)
	req.Header.Set("Origin", "https://ui.example")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "https://ui.example" {
		t.Fatalf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
	if code, _ := post(t, hs.URL+"/invoke", "codec-token", "", `{}`); code != http.StatusNotFound {
		t.Fatalf("POST /invoke on the codec server: %d, want 404", code)
	}
}

// Without keys or without tokens the codec server does not start.
func TestCodecServerRefusesToStart(t *testing.T) {
	t.Setenv("FASTAGENT_CODEC_KEYS", "")
	t.Setenv("FASTAGENT_CODEC_KEY_FILE", "")
	if _, err := CodecServer(CodecServerConfig{APIToken: "x"}); !errors.Is(err, ErrNoCodecKeys) {
		t.Fatalf("no keys: %v", err)
	}
	cdc, err := codec.New([]codec.Key{{ID: "k1", Key: bytes.Repeat([]byte{3}, 32)}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CodecServer(CodecServerConfig{Codec: cdc}); err == nil || !strings.Contains(err.Error(), "no API tokens") {
		t.Fatalf("no tokens: %v", err)
	}
}

func post(t *testing.T, url, token, origin, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
