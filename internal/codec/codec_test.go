package codec_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/proto"

	"github.com/fastagent/fastagent/internal/codec"
)

func key(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

func entry(id string, b byte) string { return id + ":" + base64.StdEncoding.EncodeToString(key(b)) }

func mustNew(t *testing.T, compress bool, keys ...codec.Key) *codec.Codec {
	t.Helper()
	c, err := codec.New(keys, compress)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	canary := "canary-" + strings.Repeat("secret prompt ", 50)
	for _, compress := range []bool{false, true} {
		c := mustNew(t, compress, codec.Key{ID: "a", Key: key(1)})
		dc := c.DataConverter()
		p, err := dc.ToPayload(map[string]string{"text": canary})
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(p.Data, []byte("canary")) {
			t.Fatalf("compress=%v: encrypted payload holds the plain text", compress)
		}
		if got := string(p.Metadata[converter.MetadataEncoding]); got != codec.Encoding {
			t.Fatalf("encoding = %q", got)
		}
		if got := string(p.Metadata[codec.MetadataKeyID]); got != "a" {
			t.Fatalf("key id metadata = %q, want a", got)
		}
		var back map[string]string
		if err := dc.FromPayload(p, &back); err != nil {
			t.Fatal(err)
		}
		if back["text"] != canary {
			t.Fatalf("compress=%v: round trip lost the text", compress)
		}
	}
}

func TestCompressShrinks(t *testing.T) {
	t.Parallel()
	text := strings.Repeat("aaaaaaaa", 1000)
	plain, _ := mustNew(t, false, codec.Key{ID: "a", Key: key(1)}).DataConverter().ToPayload(text)
	small, _ := mustNew(t, true, codec.Key{ID: "a", Key: key(1)}).DataConverter().ToPayload(text)
	if len(small.Data) >= len(plain.Data)/4 {
		t.Fatalf("compressed %d bytes, uncompressed %d", len(small.Data), len(plain.Data))
	}
}

func TestRotation(t *testing.T) {
	t.Parallel()
	old := mustNew(t, false, codec.Key{ID: "a", Key: key(1)})
	rotated := mustNew(t, false, codec.Key{ID: "b", Key: key(2)}, codec.Key{ID: "a", Key: key(1)})
	p, err := old.DataConverter().ToPayload("written with a")
	if err != nil {
		t.Fatal(err)
	}
	var s string
	if err := rotated.DataConverter().FromPayload(p, &s); err != nil || s != "written with a" {
		t.Fatalf("rotated codec cannot read old payload: %q %v", s, err)
	}
	q, _ := rotated.DataConverter().ToPayload("new")
	if got := string(q.Metadata[codec.MetadataKeyID]); got != "b" {
		t.Fatalf("new payloads encrypted with %q, want b (the first key)", got)
	}
	// Plain payloads (history from before encryption) still decode.
	plain, _ := converter.GetDefaultDataConverter().ToPayload("plain")
	if err := rotated.DataConverter().FromPayload(plain, &s); err != nil || s != "plain" {
		t.Fatalf("plain payload: %q %v", s, err)
	}
}

func TestWrongKey(t *testing.T) {
	t.Parallel()
	p, _ := mustNew(t, false, codec.Key{ID: "a", Key: key(1)}).DataConverter().ToPayload("x")
	var s string
	err := mustNew(t, false, codec.Key{ID: "b", Key: key(2)}).DataConverter().FromPayload(p, &s)
	if !errors.Is(err, codec.ErrUnknownKey) || !strings.Contains(err.Error(), `"a"`) {
		t.Fatalf("unknown key: err = %v", err)
	}
	err = mustNew(t, false, codec.Key{ID: "a", Key: key(3)}).DataConverter().FromPayload(p, &s)
	if err == nil || !strings.Contains(err.Error(), "decrypt with key") {
		t.Fatalf("same id, other key material: err = %v", err)
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "keys")
	if err := os.WriteFile(file, []byte("# rotated 2026\n"+entry("f", 4)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		env     map[string]string
		want    string // first key id; "" = no codec
		wantErr string
	}{
		{name: "unset"},
		{name: "keys", env: map[string]string{codec.EnvKeys: entry("k2", 2) + "," + entry("k1", 1)}, want: "k2"},
		{name: "file", env: map[string]string{codec.EnvKeyFile: file}, want: "f"},
		{name: "both", env: map[string]string{codec.EnvKeys: entry("k", 1), codec.EnvKeyFile: file}, want: "k"},
		{name: "short key", env: map[string]string{codec.EnvKeys: "k:" + base64.StdEncoding.EncodeToString([]byte("short"))}, wantErr: "32"},
		{name: "no id", env: map[string]string{codec.EnvKeys: base64.StdEncoding.EncodeToString(key(1))}, wantErr: "id:base64key"},
		{name: "bad base64", env: map[string]string{codec.EnvKeys: "k:!!!"}, wantErr: "base64"},
		{name: "duplicate", env: map[string]string{codec.EnvKeys: entry("k", 1) + "," + entry("k", 2)}, wantErr: "twice"},
		{name: "missing file", env: map[string]string{codec.EnvKeyFile: filepath.Join(dir, "nope")}, wantErr: codec.EnvKeyFile},
		{name: "bad compress", env: map[string]string{codec.EnvKeys: entry("k", 1), codec.EnvCompress: "yes"}, wantErr: codec.EnvCompress},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := codec.FromEnv(func(k string) string { return tt.env[k] })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to mention %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tt.want == "" && c != nil:
				t.Fatalf("codec configured without keys")
			case tt.want != "" && (c == nil || c.KeyID() != tt.want):
				t.Fatalf("codec = %v, want first key %q", c, tt.want)
			}
		})
	}
}

// FailureConverter encrypts a failure's message and stack trace (the SDK's
// encoded attributes) with the codec, for every failure in the cause
// chain, and gives them back on the way in; the error type stays readable.
func TestFailureConverter(t *testing.T) {
	t.Parallel()
	const canary = "canary-provider-said-no"
	c := mustNew(t, false, codec.Key{ID: "a", Key: key(1)})
	fc := c.FailureConverter()
	err := temporal.NewApplicationErrorWithCause("model call: "+canary, "model_error", errors.New("cause: "+canary))
	f := fc.ErrorToFailure(err)
	raw, merr := proto.Marshal(f)
	if merr != nil {
		t.Fatal(merr)
	}
	if bytes.Contains(raw, []byte(canary)) {
		t.Fatal("the encoded failure holds the message in clear text")
	}
	if f.GetMessage() != "Encoded failure" || f.GetCause().GetMessage() != "Encoded failure" ||
		f.GetApplicationFailureInfo().GetType() != "model_error" {
		t.Fatalf("failure %v: want encoded messages and the type kept", f)
	}
	back := fc.FailureToError(f)
	var app *temporal.ApplicationError
	if !errors.As(back, &app) || app.Message() != "model call: "+canary || app.Type() != "model_error" ||
		!strings.Contains(back.Error(), "cause: "+canary) {
		t.Fatalf("decoded %v, want the message, type and cause back", back)
	}
	// Without the key the message stays unreadable, never garbage.
	other := mustNew(t, false, codec.Key{ID: "b", Key: key(2)}).FailureConverter()
	if got := other.FailureToError(fc.ErrorToFailure(err)); strings.Contains(got.Error(), canary) {
		t.Fatalf("decoded without the key: %v", got)
	}
}
