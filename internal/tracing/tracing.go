// Package tracing wires OpenTelemetry tracing through fastagent: the Temporal
// SDK's tracing interceptor on clients and workers, a span per HTTP request
// on the ingress (continuing a caller's W3C traceparent), OTLP export
// configured by the standard OTEL_* variables, and log records that carry
// the current trace and span IDs.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"

	"github.com/fastagent/fastagent/internal/wire"
)

// ServiceName is the default service.name of fastagent's spans
// (OTEL_SERVICE_NAME overrides it).
const ServiceName = "fastagent"

// instrumentation names fastagent's tracer.
const instrumentation = "github.com/fastagent/fastagent"

// Tracing is a tracer provider with the propagator fastagent uses on HTTP
// and in Temporal headers. A nil *Tracing traces nothing: its methods are
// no-ops, so callers need no checks.
type Tracing struct {
	provider   trace.TracerProvider
	propagator propagation.TextMapPropagator
	shutdown   func(context.Context) error
}

// New traces into provider (tests use an SDK provider with an in-memory
// exporter); spans are propagated as W3C trace context and baggage.
func New(provider trace.TracerProvider) *Tracing {
	return &Tracing{provider: provider,
		propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})}
}

// Enabled reports whether the OTEL_* variables ask for span export: an
// OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set and OTEL_TRACES_EXPORTER is
// not "none" (OTEL_SDK_DISABLED=true switches it off too).
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	if e := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); e != "" && e != "otlp" {
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// FromEnv returns tracing exported by OTLP when Enabled, else nil. The
// protocol is OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or
// OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf" (the default) or "grpc".
// getenv only decides whether and how: the exporters read the endpoint and
// the other OTEL_EXPORTER_OTLP_* variables (headers, timeout, TLS) from the
// process environment themselves. Call Shutdown to flush spans on exit.
func FromEnv(ctx context.Context, getenv func(string) string) (*Tracing, error) {
	if !Enabled(getenv) {
		return nil, nil
	}
	proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch proto {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("tracing: OTEL_EXPORTER_OTLP_PROTOCOL %q: want http/protobuf or grpc", proto)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: otlp exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", ServiceName)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	t := New(tp)
	t.shutdown = tp.Shutdown
	return t, nil
}

// Provider is the tracer provider spans go to.
func (t *Tracing) Provider() trace.TracerProvider { return t.provider }

// Shutdown flushes and stops the exporter FromEnv started.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil || t.shutdown == nil {
		return nil
	}
	if err := t.shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}

// Interceptor is the Temporal SDK's OpenTelemetry interceptor for
// client.Options.Interceptors; a worker built on that client uses it too.
// Spans: UpdateWithStartWorkflow, HandleUpdate, RunWorkflow, StartActivity
// and RunActivity, …; a session turn's activities hang under its update.
func (t *Tracing) Interceptor() (interceptor.ClientInterceptor, error) {
	if t == nil {
		return nil, nil
	}
	i, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{
		Tracer:            t.provider.Tracer(instrumentation),
		TextMapPropagator: t.propagator,
		SpanContextKey:    wire.TraceSpanKey{},
	})
	if err != nil {
		return nil, fmt.Errorf("tracing: temporal interceptor: %w", err)
	}
	return i, nil
}

// Middleware starts a server span per HTTP request ("POST /invoke"),
// continuing the caller's traceparent header when it sends one.
func (t *Tracing) Middleware(h http.Handler) http.Handler {
	if t == nil {
		return h
	}
	return otelhttp.NewHandler(h, "http", otelhttp.WithTracerProvider(t.provider),
		otelhttp.WithPropagators(t.propagator),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			return r.Method + " " + routeOf(r.URL.Path)
		}))
}

// routeOf names a request path's route without its IDs, to keep span names
// few ("/sessions/{id}/abort").
func routeOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	if len(parts) >= 2 && parts[0] == "sessions" {
		parts[1] = "{id}"
		if len(parts) >= 4 && (parts[2] == "turns" || parts[2] == "approvals") {
			parts[3] = "{key}"
		}
	}
	return "/" + strings.Join(parts, "/")
}

// LogHandler wraps h so that a record logged with a context holding a span
// (slog.InfoContext(ctx, …)) carries trace_id and span_id.
func LogHandler(h slog.Handler) slog.Handler { return logHandler{h} }

type logHandler struct{ slog.Handler }

func (l logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return l.Handler.Handle(ctx, r)
}

func (l logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return logHandler{l.Handler.WithAttrs(as)}
}

func (l logHandler) WithGroup(name string) slog.Handler { return logHandler{l.Handler.WithGroup(name)} }
