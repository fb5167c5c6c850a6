package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fastagent/fastagent"
	"github.com/fastagent/fastagent/internal/codec"
	"github.com/fastagent/fastagent/internal/tclient"
)

// The embedding API mounts what `fastagent start` does: GET /metrics and the
// codec server on the ingress, behind its tokens, and Runtime.Metrics for a
// server of the program's own.
func TestEmbeddingMountsMetricsAndCodec(t *testing.T) {
	e := newEnv(t)
	key := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32))
	// With codec keys the client must encode with them (the plugin's
	// clients and fastagent's own do): a plain one is refused.
	cdc, err := codec.New([]codec.Key{{ID: "emb", Key: bytes.Repeat([]byte{9}, 32)}}, false)
	if err != nil {
		t.Fatal(err)
	}
	encoded, err := tclient.Dial(context.Background(), tclient.Config{
		Address: server.FrontendAddress(), APIKey: server.APIKey(), Plaintext: true, Namespace: server.Namespace(), Codec: cdc,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(encoded.Close)
	rt, err := fastagent.Start(context.Background(), fastagent.Options{
		Dir: e.kit.Dir, StateDir: t.TempDir(), Store: filepath.Join(t.TempDir(), "sessions.db"), TaskQueue: e.queue,
		Temporal: fastagent.Temporal{Client: encoded},
		Roles:    fastagent.Roles{Ingress: true},
		HTTPAddr: "127.0.0.1:0", APIToken: "embed-admin",
		CodecKeys: "emb:" + key,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	for token, want := range map[string]int{"": 401, "embed-admin": 200} {
		if code, body, _ := send(t, http.MethodGet, rt.URL()+"/metrics", token, "", nil); code != want {
			t.Errorf("GET /metrics with token %q: %d %s, want %d", token, code, body, want)
		}
	}
	plain := `{"payloads":[{"metadata":{"encoding":"` + base64.StdEncoding.EncodeToString([]byte("json/plain")) + `"},"data":"` +
		base64.StdEncoding.EncodeToString([]byte(`"x"`)) + `"}]}`
	ct := map[string]string{"Content-Type": "application/json"}
	if code, _, _ := send(t, http.MethodPost, rt.URL()+"/codec/encode", "", plain, ct); code != 401 {
		t.Errorf("codec without a token: %d, want 401", code)
	}
	code, body, _ := send(t, http.MethodPost, rt.URL()+"/codec/encode", "embed-admin", plain, ct)
	if code != 200 || !strings.Contains(body, base64.StdEncoding.EncodeToString([]byte("emb"))) {
		t.Errorf("codec encode with the admin token: %d %s, want the payload encrypted with key emb", code, body)
	}
	w := httptest.NewRecorder()
	rt.Metrics().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if w.Code != 200 || !strings.Contains(w.Body.String(), "fastagent_turns_started_total") {
		t.Errorf("Runtime.Metrics: %d", w.Code)
	}
}

// With codec keys, fastagent.Start on a Temporal client made without them
// refuses to start its worker — the client's workers would write every
// payload unencrypted — and says how to get the codec on the client.
func TestEmbeddingRefusesAClientWithoutTheCodec(t *testing.T) {
	e := newEnv(t)
	key := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32))
	rt, err := fastagent.Start(context.Background(), fastagent.Options{
		Dir: e.kit.Dir, StateDir: t.TempDir(), Store: filepath.Join(t.TempDir(), "sessions.db"), TaskQueue: e.queue,
		Temporal: fastagent.Temporal{Client: e.client}, Roles: fastagent.Roles{Worker: true},
		Getenv: e.kit.Getenv, CodecKeys: "emb:" + key,
	})
	if err == nil {
		rt.Close()
		t.Fatal("the worker started on a client without the codec")
	}
	if !strings.Contains(err.Error(), "unencrypted") || !strings.Contains(err.Error(), "client.Options.Plugins") {
		t.Errorf("error %q does not say why and what to do", err)
	}
	// The ingress alone on that client would send the prompts in clear.
	rt, err = fastagent.Start(context.Background(), fastagent.Options{
		Dir: e.kit.Dir, StateDir: t.TempDir(), Store: filepath.Join(t.TempDir(), "sessions.db"), TaskQueue: e.queue,
		Temporal: fastagent.Temporal{Client: e.client}, Roles: fastagent.Roles{Ingress: true}, HTTPAddr: "127.0.0.1:0",
		Getenv: e.kit.Getenv, CodecKeys: "emb:" + key,
	})
	if err == nil {
		rt.Close()
		t.Fatal("the ingress started on a client without the codec")
	}
	if !strings.Contains(err.Error(), "unencrypted") || !strings.Contains(err.Error(), "client.Options.Plugins") {
		t.Errorf("ingress: error %q does not say why and what to do", err)
	}
}
