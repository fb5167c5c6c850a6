package serve

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fastagent/fastagent/internal/metrics"
)

// The metrics listener's GET /health is the worker's probe: 503 until the
// worker role's workers started, 200 after; a process without the worker
// role answers 200 at once. Other methods and paths are not served.
func TestMetricsListenerHealth(t *testing.T) {
	get := func(h http.Handler, method, path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
		b, _ := io.ReadAll(rec.Result().Body)
		return rec.Code, string(b)
	}
	p := &Parts{Config: Config{Roles: Roles{Worker: true}, Metrics: metrics.New()}}
	h := p.metricsMux()
	if code, body := get(h, http.MethodGet, "/health"); code != http.StatusServiceUnavailable || body != "starting" {
		t.Fatalf("before the workers started: %d %q, want 503 starting", code, body)
	}
	p.workersUp.Store(true)
	if code, body := get(h, http.MethodGet, "/health"); code != http.StatusOK || body != "ok" {
		t.Fatalf("after the workers started: %d %q, want 200 ok", code, body)
	}
	if code, _ := get(h, http.MethodPost, "/health"); code != http.StatusMethodNotAllowed {
		t.Errorf("POST /health: %d, want 405", code)
	}
	if code, _ := get(h, http.MethodGet, "/invoke"); code != http.StatusNotFound {
		t.Errorf("GET /invoke on the metrics listener: %d, want 404", code)
	}
	ingressOnly := (&Parts{Config: Config{Roles: Roles{Ingress: true}, Metrics: metrics.New()}}).metricsMux()
	if code, _ := get(ingressOnly, http.MethodGet, "/health"); code != http.StatusOK {
		t.Errorf("ingress-only process: %d, want 200", code)
	}
}
