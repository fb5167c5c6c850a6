package tracing

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestEnabled(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  map[string]string
		want bool
	}{
		{"nothing set", nil, false},
		{"endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true},
		{"traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true},
		{"exporter none", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
		{"sdk disabled", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, false},
		{"exporter otlp", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "otlp"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Enabled(func(k string) string { return tt.env[k] }); got != tt.want {
				t.Fatalf("Enabled = %v, want %v", got, tt.want)
			}
		})
	}
}

// FromEnv: nothing without an endpoint; a clear error for an unknown
// protocol; an exporter (created lazily, no connection) for each known one.
func TestFromEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		proto   string
		wantErr bool
	}{{"", false}, {"http/protobuf", false}, {"grpc", false}, {"http/json", true}}
	for _, tt := range tests {
		env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": tt.proto}
		tr, err := FromEnv(context.Background(), func(k string) string { return env[k] })
		if (err != nil) != tt.wantErr || (err == nil) != (tr != nil) {
			t.Fatalf("protocol %q: %v, %v", tt.proto, tr, err)
		}
		if err != nil && !strings.Contains(err.Error(), tt.proto) {
			t.Errorf("protocol %q: error %q does not name it", tt.proto, err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // nothing to flush; do not wait for the unreachable collector
		_ = tr.Shutdown(ctx)
	}
	if tr, err := FromEnv(context.Background(), func(string) string { return "" }); tr != nil || err != nil {
		t.Fatalf("without an endpoint: %v, %v", tr, err)
	}
}

// The middleware starts one server span per request, named by route, that
// continues the caller's traceparent; a log record in it carries its IDs.
func TestMiddlewareAndLogs(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tr := New(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	var logs bytes.Buffer
	log := slog.New(LogHandler(slog.NewTextHandler(&logs, nil)))
	h := tr.Middleware(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		log.InfoContext(r.Context(), "in the request")
	}))
	req := httptest.NewRequest(http.MethodPost, "/sessions/s1/abort", nil)
	req.Header.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	h.ServeHTTP(httptest.NewRecorder(), req)
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	s := spans[0]
	if s.Name() != "POST /sessions/{id}/abort" || s.SpanContext().TraceID().String() != "0af7651916cd43dd8448eb211c80319c" ||
		s.Parent().SpanID().String() != "b7ad6b7169203331" {
		t.Fatalf("span %q trace %s parent %s", s.Name(), s.SpanContext().TraceID(), s.Parent().SpanID())
	}
	if !strings.Contains(logs.String(), "trace_id=0af7651916cd43dd8448eb211c80319c") ||
		!strings.Contains(logs.String(), "span_id="+s.SpanContext().SpanID().String()) {
		t.Fatalf("log lacks the span's IDs: %s", logs.String())
	}
	// A nil Tracing changes nothing.
	var none *Tracing
	if none.Middleware(h) == nil {
		t.Fatal("nil Tracing's Middleware dropped the handler")
	}
	if i, err := none.Interceptor(); i != nil || err != nil {
		t.Fatalf("nil Tracing's Interceptor: %v %v", i, err)
	}
}

func TestRouteOf(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]string{
		"/invoke":                       "/invoke",
		"/sessions/abc":                 "/sessions/{id}",
		"/sessions/abc/turns/k1/events": "/sessions/{id}/turns/{key}/events",
		"/sessions/abc/approvals/c1":    "/sessions/{id}/approvals/{key}",
		"/codec/decode":                 "/codec/decode",
	} {
		if got := routeOf(path); got != want {
			t.Errorf("routeOf(%q) = %q, want %q", path, got, want)
		}
	}
}

// FromEnv exports by OTLP/HTTP to the configured endpoint: a span ended
// before Shutdown reaches the collector. (The exporter reads the process
// environment itself, hence Setenv.)
func TestFromEnvExports(t *testing.T) {
	got := make(chan string, 4)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Method + " " + r.URL.Path
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(collector.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	tr, err := FromEnv(context.Background(), os.Getenv)
	if err != nil || tr == nil {
		t.Fatalf("FromEnv: %v %v", tr, err)
	}
	_, span := tr.provider.Tracer("test").Start(context.Background(), "one")
	span.End()
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case req := <-got:
		if req != "POST /v1/traces" {
			t.Fatalf("collector got %q", req)
		}
	default:
		t.Fatal("the collector received nothing")
	}
}
