// Package metrics is fastagent's Prometheus registry: the Temporal SDK's own
// metrics (through client.MetricsHandler), fastagent's turn, model, tool and
// webhook metrics (recorded by a worker interceptor and the channel doors),
// and the Go runtime's, served as Prometheus text by Handler.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.temporal.io/sdk/client"
)

// EnvAddr names the variable of the separate, unauthenticated listen address
// for GET /metrics (e.g. 127.0.0.1:9464 or :9464 inside a pod network).
const EnvAddr = "FASTAGENT_METRICS_ADDR"

// latencyBuckets (seconds) fit turns and model calls: tens of ms to minutes.
var latencyBuckets = []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// Metrics holds the registry and fastagent's collectors. One per process.
type Metrics struct {
	reg           *prometheus.Registry
	sdk           *sdkMetrics
	turnsStarted  prometheus.Counter
	turnsFinished *prometheus.CounterVec
	turnLatency   *prometheus.HistogramVec
	modelLatency  *prometheus.HistogramVec
	toolCalls     *prometheus.CounterVec
	webhookAck    *prometheus.HistogramVec
}

// New returns a registry with every collector registered.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		sdk: newSDKMetrics(),
		turnsStarted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fastagent_turns_started_total", Help: "Turns a worker started (a key answered from its record is not counted).",
		}),
		turnsFinished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fastagent_turns_finished_total", Help: "Turns recorded as finished, by status (completed, failed) and error code.",
		}, []string{"status", "code"}),
		turnLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fastagent_turn_duration_seconds", Help: "Time from a turn's start to its recorded outcome, by status (measured by the worker that started it).",
			Buckets: latencyBuckets,
		}, []string{"status"}),
		modelLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fastagent_model_call_duration_seconds", Help: "Duration of one model call attempt (Model.Generate), by outcome (ok, error).",
			Buckets: latencyBuckets,
		}, []string{"outcome"}),
		toolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fastagent_tool_calls_total", Help: "Tool call attempts by tool and outcome (ok, tool_error: the tool reported an error, error: the call failed).",
		}, []string{"tool", "outcome"}),
		webhookAck: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fastagent_webhook_ack_seconds", Help: "Time a channel's webhook door took to answer the platform, by channel and status class.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2, 3, 5},
		}, []string{"channel", "status"}),
	}
	m.reg.MustRegister(m.sdk, m.turnsStarted, m.turnsFinished, m.turnLatency, m.modelLatency, m.toolCalls, m.webhookAck,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the registry as Prometheus text.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// SDKHandler is the client.MetricsHandler for client.Options: the SDK's
// worker, workflow and activity metrics land in this registry.
func (m *Metrics) SDKHandler() client.MetricsHandler { return sdkHandler{m: m.sdk} }

// Registry is the underlying registry, for tests and extra collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// WebhookAck records how long a channel door took to answer.
func (m *Metrics) WebhookAck(channel string, status int, d time.Duration) {
	m.webhookAck.WithLabelValues(channel, statusClass(status)).Observe(d.Seconds())
}

// WrapDoor times a channel door's handler into WebhookAck.
func (m *Metrics) WrapDoor(channel string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r)
		m.WebhookAck(channel, sw.status, time.Since(start))
	})
}

func statusClass(status int) string {
	return string(rune('0'+status/100)) + "xx"
}

type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
