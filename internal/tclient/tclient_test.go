package tclient

import (
	"context"
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
