package ingress_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"strings"
	"testing"

	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/ingress"
	"github.com/fastagent/fastagent/worker"
)

// With codec keys, the ingress refuses a Temporal client that would send
// the prompts to Temporal unencrypted (one not made with the fastagent
// plugin), saying what to do, and takes one made with the plugin.
func TestCodecKeysNeedTheCodecOnTheClient(t *testing.T) {
	keys := "k1:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32))
	dir, env, done := exampleAgent("")
	defer done()
	plain, err := client.Dial(temporalOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	h, err := ingress.New(plain, ingress.Options{Dir: dir, Getenv: env, APIToken: "tok", CodecKeys: keys, Logger: quiet})
	if err == nil {
		_ = h.Close()
		t.Fatal("the ingress took a client without the codec: prompts would reach Temporal unencrypted")
	}
	if !strings.Contains(err.Error(), "client.Options.Plugins") || !strings.Contains(err.Error(), "unencrypted") {
		t.Fatalf("New: %v, want the refusal to say to make the client with the plugin", err)
	}

	p, err := worker.New(context.Background(), worker.Options{Dir: dir, Getenv: env, CodecKeys: keys, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	opts := temporalOptions()
	opts.Plugins = []client.Plugin{p}
	encoded, err := client.Dial(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer encoded.Close()
	h, err = ingress.New(encoded, ingress.Options{Dir: dir, Getenv: env, APIToken: "tok", CodecKeys: keys, Logger: quiet})
	if err != nil {
		t.Fatalf("New with the plugin's client: %v", err)
	}
	_ = h.Close()
}
