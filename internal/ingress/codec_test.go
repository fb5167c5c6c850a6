package ingress_test

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/fastagent/fastagent/internal/codec"
	"github.com/fastagent/fastagent/internal/ingress"
)

const uiOrigin = "http://127.0.0.1:8233"

func codecServer(t *testing.T, devUI bool) (*ingress.Server, *codec.Codec) {
	t.Helper()
	c, err := codec.New([]codec.Key{{ID: "k", Key: bytes.Repeat([]byte{7}, 32)}}, false)
	if err != nil {
		t.Fatal(err)
	}
	toks := &ingress.Tokens{}
	toks.AddToken("ops", "codec-token", ingress.RightCodec)
	toks.AddToken("user", "user-token", ingress.RightInvoke, ingress.RightControl)
	toks.AddToken("prom", "metrics-token", ingress.RightMetrics)
	s := &ingress.Server{
		Agent: &recorder{}, Control: &recorder{}, Tokens: toks,
		Codec: c.Handler(), CodecOrigins: []string{uiOrigin}, AnyHost: true,
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("up 1\n")) }),
	}
	if devUI {
		s.DevUIOrigin, s.DevCodecKey = "http://127.0.0.1:9999", "devkey123"
	}
	return s, c
}

func encrypted(t *testing.T, c *codec.Codec, text string) []byte {
	t.Helper()
	p, err := c.DataConverter().ToPayload(text)
	if err != nil {
		t.Fatal(err)
	}
	b, err := protojson.Marshal(&commonpb.Payloads{Payloads: []*commonpb.Payload{p}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCodecRoutes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, path, token, origin, ctype string
		dev                              bool
		want                             int
	}{
		{name: "decode", path: "/codec/decode", token: "codec-token", want: 200},
		{name: "decode from the UI", path: "/codec/decode", token: "codec-token", origin: uiOrigin, want: 200},
		{name: "no token", path: "/codec/decode", want: 401},
		{name: "bad token", path: "/codec/decode", token: "nope", want: 401},
		{name: "session rights only", path: "/codec/decode", token: "user-token", want: 403},
		{name: "other origin", path: "/codec/decode", token: "codec-token", origin: "https://evil.example", want: 403},
		{name: "form post", path: "/codec/decode", token: "codec-token", ctype: "text/plain", want: 415},
		{name: "dev UI with the run's key", path: "/codec/dev/devkey123/decode", origin: "http://127.0.0.1:9999", dev: true, want: 200},
		{name: "dev UI with a wrong key", path: "/codec/dev/guess/decode", origin: "http://127.0.0.1:9999", dev: true, want: 401},
		{name: "dev UI without key or token", path: "/codec/decode", origin: "http://127.0.0.1:9999", dev: true, want: 401},
		{name: "dev routes off outside dev", path: "/codec/dev/devkey123/decode", origin: "http://127.0.0.1:9999", want: 404},
		{name: "dev UI origin unset", path: "/codec/decode", origin: "http://127.0.0.1:9999", want: 403},
		{name: "other origin in dev", path: "/codec/decode", origin: uiOrigin, dev: true, want: 401},
		{name: "metrics", path: "/metrics", token: "metrics-token", want: 200},
		{name: "metrics no token", path: "/metrics", want: 401},
		{name: "metrics codec token", path: "/metrics", token: "codec-token", want: 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, c := codecServer(t, tt.dev)
			method, body := http.MethodPost, encrypted(t, c, "canary-42")
			if tt.path == "/metrics" {
				method, body = http.MethodGet, nil
			}
			req := httptest.NewRequest(method, tt.path, bytes.NewReader(body))
			if method == http.MethodPost {
				req.Header.Set("Content-Type", "application/json")
			}
			if tt.ctype != "" {
				req.Header.Set("Content-Type", tt.ctype)
			}
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			if tt.origin != "" {
				req.Header.Set("Origin", tt.origin)
			}
			w := httptest.NewRecorder()
			s.Handler().ServeHTTP(w, req)
			if w.Code != tt.want {
				t.Fatalf("status %d, want %d: %s", w.Code, tt.want, w.Body)
			}
			if tt.want != 200 || tt.path != "/codec/decode" {
				return
			}
			var out commonpb.Payloads
			if err := protojson.Unmarshal(w.Body.Bytes(), &out); err != nil {
				t.Fatal(err)
			}
			if len(out.Payloads) != 1 || !strings.Contains(string(out.Payloads[0].Data), "canary-42") {
				t.Fatalf("decoded %v", &out)
			}
			if tt.origin != "" && w.Header().Get("Access-Control-Allow-Origin") != tt.origin {
				t.Fatalf("no CORS header for %s", tt.origin)
			}
		})
	}
}

func TestCodecPreflightAndEncode(t *testing.T) {
	t.Parallel()
	s, c := codecServer(t, false)
	req := httptest.NewRequest(http.MethodOptions, "/codec/decode", nil)
	req.Header.Set("Origin", uiOrigin)
	req.Header.Set("Access-Control-Request-Method", "POST")
	req.Header.Set("Access-Control-Request-Headers", "authorization,content-type,x-namespace")
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, req)
	if w.Code != http.StatusNoContent || w.Header().Get("Access-Control-Allow-Origin") != uiOrigin ||
		!strings.Contains(w.Header().Get("Access-Control-Allow-Headers"), "Authorization") {
		t.Fatalf("preflight: %d %v", w.Code, w.Header())
	}
	req.Header.Set("Origin", "https://evil.example")
	w = httptest.NewRecorder()
	s.Handler().ServeHTTP(w, req)
	if w.Header().Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("preflight from another origin got CORS headers: %v", w.Header())
	}

	// Encode then decode through the routes.
	plain := `{"payloads":[{"metadata":{"encoding":"` + base64.StdEncoding.EncodeToString([]byte("json/plain")) + `"},"data":"` + base64.StdEncoding.EncodeToString([]byte(`"hi"`)) + `"}]}`
	req = httptest.NewRequest(http.MethodPost, "/codec/encode", strings.NewReader(plain))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer codec-token")
	w = httptest.NewRecorder()
	s.Handler().ServeHTTP(w, req)
	var enc commonpb.Payloads
	if err := protojson.Unmarshal(w.Body.Bytes(), &enc); err != nil || w.Code != 200 {
		t.Fatalf("encode: %d %s %v", w.Code, w.Body, err)
	}
	var got string
	if err := c.DataConverter().FromPayload(enc.Payloads[0], &got); err != nil || got != "hi" {
		t.Fatalf("encoded payload decodes to %q, %v", got, err)
	}
	if string(enc.Payloads[0].Metadata[codec.MetadataKeyID]) != "k" {
		t.Fatalf("encoded payload lacks the key id: %v", enc.Payloads[0].Metadata)
	}
}
