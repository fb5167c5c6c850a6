package ingress_test

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fastagent/fastagent/ingress"
)

// Paths that play with the mount prefix — dot segments, doubled and
// encoded slashes, a detour through /health — never reach a route without
// the resolver's say: each request is refused (401), not found, or
// redirected, and only /health itself answers 200.
func TestPrefixConfusion(t *testing.T) {
	t.Parallel()
	var asked atomic.Int32
	refuse := ingress.PrincipalsFunc(func(*http.Request) (ingress.Principal, error) {
		asked.Add(1)
		return ingress.Principal{}, errors.New("refused")
	})
	h, err := ingress.New(noClient{}, ingress.Options{Dir: t.TempDir(), Principals: refuse})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	hs := mounted(t, h)
	addr := strings.TrimPrefix(hs.URL, "http://")
	for _, path := range []string{
		"/agent/../sessions", "/agent/%2e%2e/sessions", "/agent//sessions", "/agent/./sessions",
		"/agent/health/../sessions", "/agent/health/..%2fsessions", "/agent/health%2f..%2fsessions",
		"/agent/sessions%2fs1", "/agent/sessions/s1%2ftranscript", "/agent/agents/fastagent/../../sessions",
		"/agent/health/", "/agent/health%00", "/agent/HEALTH", "/agent/metrics/", "/agent/sessions/",
		"/agentsessions", "/agent%2fsessions", "//agent/sessions",
	} {
		status := rawGet(t, addr, path)
		if status == http.StatusOK || status/100 == 2 {
			t.Errorf("GET %s: %d without a principal", path, status)
		}
	}
	if status := rawGet(t, addr, "/agent/health"); status != http.StatusOK {
		t.Errorf("/agent/health: %d", status)
	}
}

// rawGet sends path exactly as written (no client-side cleaning) and
// returns the status.
func rawGet(t *testing.T, addr, path string) int {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, addr)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
