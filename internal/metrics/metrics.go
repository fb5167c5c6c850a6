// Package metrics is fastagent's Prometheus registry: the Temporal SDK's own
// metrics (through client.MetricsHandler), fastagent's turn, model, tool and
// webhook metrics (recorded by a worker interceptor and the channel doors),
// and the Go runtime's, served as Prometheus text by Handler.
package metrics

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/ingress"
	"github.com/fastagent/fastagent/workflows"
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
	firstToken    *prometheus.HistogramVec
	tokens        *prometheus.CounterVec
	queueDepth    prometheus.Gauge
	sessions      *sessionsCollector
	refused       *prometheus.CounterVec
	repliesFailed *prometheus.CounterVec
}

var (
	defaultOnce sync.Once
	defaultM    *Metrics
)

// Default is the process's registry, made on first use: what a process of
// one role (`fastagent ingress`, a mounted ingress.Handler) records and
// serves, its Temporal client's SDK metrics included.
func Default() *Metrics {
	defaultOnce.Do(func() { defaultM = New() })
	return defaultM
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
		firstToken: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fastagent_model_first_token_seconds", Help: "Time from a model request to its first streamed delta (text or thinking), by model.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2, 3, 5, 10, 20, 30, 60},
		}, []string{"model"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fastagent_model_tokens_total", Help: "Tokens the providers reported, by model and kind (input, output, cache_read, cache_write).",
		}, []string{"model", "kind"}),
		queueDepth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: workflows.MetricTurnQueueDepth, Help: "Turns waiting behind a running turn, over the sessions this worker ran (sum over workers for the cluster's).",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: workflows.MetricTurnsRefused, Help: "Turns a session refused, by reason (queue_full, window_full, too_large, no_key, internal_key, bad_key, no_prompt) " +
				"and way in (deliver: the deliver signal of channels and webhooks; update: a turn update).",
		}, []string{"reason", "via"}),
		repliesFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: workflows.MetricRepliesFailed, Help: "Channel replies (answers, busy notices, webhook callbacks) that still failed after their retries, by channel.",
		}, []string{"channel"}),
		sessions: &sessionsCollector{desc: prometheus.NewDesc("fastagent_active_sessions",
			"Open session workflows in the namespace (Temporal visibility; the same figure on every process, so take max, not sum).", nil, nil)},
	}
	m.sdk.bySession = map[string]*sessionGauge{workflows.MetricTurnQueueDepth: {gauge: m.queueDepth, by: map[string]float64{}}}
	m.sdk.named = map[string]namedCounter{
		workflows.MetricTurnsRefused:  {vec: m.refused, labels: []string{"reason", "via"}},
		workflows.MetricRepliesFailed: {vec: m.repliesFailed, labels: []string{"channel"}},
	}
	m.reg.MustRegister(m.firstToken, m.tokens, m.queueDepth, m.sessions, m.refused, m.repliesFailed)
	m.reg.MustRegister(channels.Collectors()...)
	m.reg.MustRegister(ingress.Collectors()...)
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

// ObserveModel records a model call's time to first token and the tokens
// its provider reported; it makes Metrics an activities.ModelObserver.
func (m *Metrics) ObserveModel(st activities.ModelStats) {
	if st.FirstToken > 0 {
		m.firstToken.WithLabelValues(st.Model).Observe(st.FirstToken.Seconds())
	}
	if u := st.Usage; u != nil {
		for _, k := range []struct {
			kind string
			n    int64
		}{{"input", u.Input}, {"output", u.Output}, {"cache_read", u.CacheRead}, {"cache_write", u.CacheWrite}} {
			if k.n > 0 {
				m.tokens.WithLabelValues(st.Model, k.kind).Add(float64(k.n))
			}
		}
	}
}

// WatchSessions makes fastagent_active_sessions count the open session
// workflows of c's namespace when scraped, at most once per every (0:
// SessionsEvery).
func (m *Metrics) WatchSessions(c client.Client, every time.Duration) {
	if every <= 0 {
		every = SessionsEvery
	}
	m.sessions.watch(c, every)
}

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
