package tclient

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A CA bundle that cannot be used is a clear error before any dial.
func TestDialRefusesABadCABundle(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ file, want string }{
		{bad, "holds no PEM certificate"},
		{filepath.Join(dir, "missing.pem"), "read CA bundle (TEMPORAL_TLS_CA)"},
	} {
		_, err := Dial(context.Background(), Config{Address: "127.0.0.1:1", TLSCAFile: tc.file})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.file, err, tc.want)
		}
	}
}

func TestFromEnvReadsTLSSettings(t *testing.T) {
	t.Setenv("TEMPORAL_TLS_CA", "/ca.pem")
	t.Setenv("TEMPORAL_TLS_SERVER_NAME", "temporal.internal")
	c := Config{}.FromEnv()
	if c.TLSCAFile != "/ca.pem" || c.TLSServerName != "temporal.internal" {
		t.Fatalf("%+v", c)
	}
}

func TestDialRefusesHalfAClientCertificate(t *testing.T) {
	for _, c := range []Config{{TLSCertFile: "/c.pem"}, {TLSKeyFile: "/c.key"}} {
		c.Address = "127.0.0.1:1"
		_, err := Dial(context.Background(), c)
		if err == nil || !strings.Contains(err.Error(), "TEMPORAL_TLS_CERT and TEMPORAL_TLS_KEY go together") {
			t.Errorf("%+v: err = %v", c, err)
		}
	}
}

func TestHintNamesTheSetting(t *testing.T) {
	for _, tc := range []struct {
		err  string
		c    Config
		tls  bool
		want string
	}{
		{"x509: certificate signed by unknown authority", Config{}, true, "TEMPORAL_TLS_CA"},
		{"x509: certificate is valid for temporal.internal, not 127.0.0.1", Config{}, true, "TEMPORAL_TLS_SERVER_NAME"},
		{"x509: cannot validate certificate for 127.0.0.1 because it doesn't contain any IP SANs", Config{}, true, "TEMPORAL_TLS_SERVER_NAME"},
		{"remote error: tls: certificate required", Config{}, true, "set TEMPORAL_TLS_CERT and TEMPORAL_TLS_KEY"},
		{"remote error: tls: bad certificate", Config{TLSCertFile: "c"}, true, "refused the client certificate"},
		{"tls: first record does not look like a TLS handshake", Config{}, true, "speaks plaintext"},
		{"write tcp 127.0.0.1:41596->127.0.0.1:41681: write: broken pipe", Config{}, true, "requires a client certificate (mTLS), set TEMPORAL_TLS_CERT"},
		{"read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer", Config{}, true, "client certificate"},
		{"connection refused", Config{}, false, "fastagent dev"},
	} {
		if got := hint(errors.New(tc.err), tc.c, tc.tls); !strings.Contains(got, tc.want) {
			t.Errorf("%s: hint %q, want %q", tc.err, got, tc.want)
		}
	}
}

// TEMPORAL_TLS=false sends an API key in plaintext; with TLS files it is a
// contradiction named before any dial.
func TestFromEnvPlaintext(t *testing.T) {
	t.Setenv("TEMPORAL_TLS", "false")
	c := Config{}.FromEnv()
	if !c.Plaintext || c.TLS {
		t.Fatalf("%+v", c)
	}
	c.TLSCAFile = "/ca.pem"
	c.Address = "127.0.0.1:1"
	_, err := Dial(context.Background(), c)
	if err == nil || !strings.Contains(err.Error(), "TEMPORAL_TLS=false") {
		t.Errorf("err = %v", err)
	}
}

// The dev token is picked up for a loopback address without credentials,
// and never sent anywhere else or over another configured credential.
func TestWithDevToken(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, DevTokenFile), []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{}, "tok"},
		{Config{Address: "127.0.0.1:7233"}, "tok"},
		{Config{Address: "localhost:7999"}, "tok"},
		{Config{Address: "[::1]:7233"}, "tok"},
		{Config{Address: "temporal.internal:7233"}, ""},
		{Config{Address: "10.0.0.5:7233"}, ""},
		{Config{APIKey: "mine"}, "mine"},
		{Config{TLSCAFile: "/ca.pem"}, ""},
		{Config{TLS: true}, ""},
	} {
		got := tc.c.WithDevToken(dir)
		if got.APIKey != tc.want || (tc.want == "tok") != got.Plaintext {
			t.Errorf("%+v: APIKey %q plaintext %v, want %q", tc.c, got.APIKey, got.Plaintext, tc.want)
		}
	}
	if got := (Config{}).WithDevToken(t.TempDir()); got.APIKey != "" {
		t.Errorf("no token file: %+v", got)
	}
}

func TestGzip(t *testing.T) {
	yes, no := true, false
	for _, c := range []struct {
		cfg  Config
		want bool
	}{
		{Config{Address: "127.0.0.1:7233"}, false},
		{Config{Address: "localhost:7233"}, false},
		{Config{Address: "temporal.internal:7233"}, true},
		{Config{Address: "ns.acct.tmprl.cloud:7233"}, true},
		{Config{Address: "127.0.0.1:7233", Gzip: &yes}, true},
		{Config{Address: "ns.acct.tmprl.cloud:7233", Gzip: &no}, false},
	} {
		if got := gzipOn(c.cfg); got != c.want {
			t.Errorf("gzipOn(%s, %v) = %v, want %v", c.cfg.Address, c.cfg.Gzip, got, c.want)
		}
	}
	if (Config{}).FromEnv().Gzip != nil {
		t.Fatal("Gzip set without TEMPORAL_GRPC_GZIP")
	}
	t.Setenv("TEMPORAL_GRPC_GZIP", "false")
	if g := (Config{}).FromEnv().Gzip; g == nil || *g {
		t.Fatal("TEMPORAL_GRPC_GZIP=false did not turn gzip off")
	}
}
