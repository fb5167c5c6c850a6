package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fastagent/fastagent/internal/tclient"
	"github.com/fastagent/fastagent/internal/uigate"
)

// writeDevKey writes a dev server key into dir's state dir.
func writeDevKey(t *testing.T, dir, key string) {
	t.Helper()
	state := filepath.Join(dir, ".fastagent")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, tclient.DevTokenFile), []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// ui-link signs a login link with the key in the state dir, for the Web UI
// on --ui-port, once something answers there. (That the dev server's gate
// opens such a link once is internal/devserver's TestWebUILoginOpensOnce.)
func TestUILinkSignsALoginLink(t *testing.T) {
	dir := t.TempDir()
	writeDevKey(t, dir, "dev-key")
	ui := httptest.NewServer(http.NotFoundHandler())
	defer ui.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(ui.URL, "http://"))

	out, errOut, code := execute(t, "", "ui-link", "--dir", dir, "--ui-port", port)
	link := strings.TrimSpace(out)
	if code != 0 || !regexp.MustCompile(`^`+regexp.QuoteMeta(ui.URL+uigate.LoginPath)+`\?code=[0-9a-f]{64}$`).MatchString(link) {
		t.Fatalf("ui-link: exit %d %q %s", code, out, errOut)
	}
	again, _, _ := execute(t, "", "ui-link", "--dir", dir, "--ui-port", port)
	if strings.TrimSpace(again) == link {
		t.Error("two links are the same: each must be new")
	}

	if _, errOut, code := execute(t, "", "ui-link", "--dir", t.TempDir(), "--ui-port", port); code != exitFailure || !strings.Contains(errOut, "fastagent dev") {
		t.Errorf("ui-link without a key: exit %d %s", code, errOut)
	}
	ui.Close()
	if _, errOut, code := execute(t, "", "ui-link", "--dir", dir, "--ui-port", port); code != exitFailure || !strings.Contains(errOut, "no Web UI") {
		t.Errorf("ui-link without a UI: exit %d %s", code, errOut)
	}
}

// The CLI commands that dial Temporal send the key of a `fastagent dev` in
// the state dir to a loopback address, and TEMPORAL_API_KEY instead when
// it is set.
func TestTemporalCommandsSendTheDevKey(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []string
	)
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		md, _ := metadata.FromIncomingContext(stream.Context())
		mu.Lock()
		seen = append(seen, strings.Join(md.Get("authorization"), ","))
		mu.Unlock()
		return status.Error(codes.PermissionDenied, "refused by the test")
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	addr := "127.0.0.1:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)

	dir := t.TempDir()
	writeDevKey(t, dir, "dev-key")
	t.Setenv("TEMPORAL_API_KEY", "")
	t.Setenv("TEMPORAL_TLS", "")
	for _, tc := range []struct {
		envKey, want string
	}{
		{"", "Bearer dev-key"},
		{"env-key", "Bearer env-key"},
	} {
		t.Setenv("TEMPORAL_API_KEY", tc.envKey)
		if tc.envKey != "" {
			t.Setenv("TEMPORAL_TLS", "false")
		}
		mu.Lock()
		seen = nil
		mu.Unlock()
		_, _, _ = execute(t, "", "fire", "nightly", "--dir", dir, "--temporal-address", addr)
		mu.Lock()
		got := seen
		mu.Unlock()
		if len(got) == 0 || got[0] != tc.want {
			t.Errorf("TEMPORAL_API_KEY=%q: the server saw authorization %q, want %q", tc.envKey, got, tc.want)
		}
	}
}
