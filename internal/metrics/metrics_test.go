package metrics_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/metrics"
	"github.com/fastagent/fastagent/workflows"
)

func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	w := httptest.NewRecorder()
	m.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if w.Code != http.StatusOK {
		t.Fatalf("scrape: %d %s", w.Code, w.Body)
	}
	return w.Body.String()
}

// The SDK reports one name with different tag sets; the scrape stays valid
// (one label set per name, missing labels empty) and sums per series.
func TestSDKHandler(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	h := m.SDKHandler()
	h.WithTags(map[string]string{"namespace": "default"}).Counter("temporal_request").Inc(2)
	h.WithTags(map[string]string{"namespace": "default", "operation": "Poll"}).Counter("temporal_request").Inc(1)
	h.Counter("temporal_request").Inc(1)
	h.Gauge("temporal_num_pollers").Update(3)
	h.Gauge("temporal_num_pollers").Update(5)
	tm := h.WithTags(map[string]string{"task-queue": "q"}).Timer("temporal_workflow_task_execution_latency")
	tm.Record(20 * time.Millisecond)
	tm.Record(2 * time.Minute) // beyond the last bucket: only in +Inf
	body := scrape(t, m)
	for _, want := range []string{
		`temporal_request{namespace="default",operation=""} 2`,
		`temporal_request{namespace="default",operation="Poll"} 1`,
		`temporal_request{namespace="",operation=""} 1`,
		`temporal_num_pollers 5`,
		`temporal_workflow_task_execution_latency_bucket{task_queue="q",le="0.025"} 1`,
		`temporal_workflow_task_execution_latency_bucket{task_queue="q",le="+Inf"} 2`,
		`temporal_workflow_task_execution_latency_count{task_queue="q"} 2`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
}

func TestWrapDoor(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	tests := []struct {
		channel string
		status  int
		want    string
	}{
		{"slack", http.StatusOK, `fastagent_webhook_ack_seconds_count{channel="slack",status="2xx"} 1`},
		{"feishu", http.StatusUnauthorized, `fastagent_webhook_ack_seconds_count{channel="feishu",status="4xx"} 1`},
	}
	for _, tt := range tests {
		door := m.WrapDoor(tt.channel, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(tt.status) }))
		door.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/x", nil))
	}
	body := scrape(t, m)
	for _, tt := range tests {
		if !strings.Contains(body, tt.want) {
			t.Errorf("scrape lacks %s", tt.want)
		}
	}
}

// ObserveModel records time to first token and tokens by model; the queue
// depth is the sum of what each session last reported, without a session
// label.
func TestObserveModelAndQueueDepth(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	tests := []activities.ModelStats{
		{Model: "openai/a", FirstToken: 300 * time.Millisecond, Usage: &agent.Usage{Input: 100, Output: 7, CacheRead: 40}},
		{Model: "openai/a", Usage: &agent.Usage{Input: 10, Output: 3}}, // nothing streamed
		{Model: "anthropic/b", FirstToken: time.Second, Failed: true},
	}
	for _, st := range tests {
		m.ObserveModel(st)
	}
	depth := func(session string) func(float64) {
		return m.SDKHandler().WithTags(map[string]string{"workflow_type": "Session", workflows.MetricSessionTag: session}).Gauge(workflows.MetricTurnQueueDepth).Update
	}
	depth("s1")(2)
	depth("s2")(1)
	depth("s1")(0)
	m.SDKHandler().WithTags(map[string]string{workflows.MetricSessionTag: "s3"}).Counter(workflows.MetricTurnQueueDepth).Inc(-5) // an old delta: dropped
	body := scrape(t, m)
	for _, want := range []string{
		`fastagent_model_first_token_seconds_count{model="openai/a"} 1`,
		`fastagent_model_first_token_seconds_count{model="anthropic/b"} 1`,
		`fastagent_model_tokens_total{kind="input",model="openai/a"} 110`,
		`fastagent_model_tokens_total{kind="output",model="openai/a"} 10`,
		`fastagent_model_tokens_total{kind="cache_read",model="openai/a"} 40`,
		"fastagent_turn_queue_depth 1",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	if strings.Contains(body, `model="anthropic/b",kind`) || strings.Contains(body, `fastagent_model_tokens_total{kind="input",model="anthropic/b"}`) {
		t.Error("a failed call without usage counted tokens")
	}
	// Without WatchSessions the active-sessions gauge is absent, not 0.
	if strings.Contains(body, "fastagent_active_sessions ") {
		t.Error("fastagent_active_sessions reported without a client")
	}
}

// What a session counts from workflow code — refused turns by reason and
// way in, channel replies that failed for good by channel — lands in named
// counters with those labels only (not the SDK's own tags).
func TestSessionCounters(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	sdk := m.SDKHandler().WithTags(map[string]string{"workflow_type": "Session", "namespace": "default", "task_queue": "fastagent"})
	sdk.WithTags(map[string]string{"reason": "queue_full", "via": "deliver"}).Counter(workflows.MetricTurnsRefused).Inc(1)
	sdk.WithTags(map[string]string{"reason": "queue_full", "via": "deliver"}).Counter(workflows.MetricTurnsRefused).Inc(1)
	sdk.WithTags(map[string]string{"reason": "no_key", "via": "deliver"}).Counter(workflows.MetricTurnsRefused).Inc(1)
	sdk.WithTags(map[string]string{"channel": "hook:orders"}).Counter(workflows.MetricRepliesFailed).Inc(1)
	body := scrape(t, m)
	for _, want := range []string{
		`fastagent_turns_refused_total{reason="queue_full",via="deliver"} 2`,
		`fastagent_turns_refused_total{reason="no_key",via="deliver"} 1`,
		`fastagent_channel_replies_failed_total{channel="hook:orders"} 1`,
		"# HELP fastagent_turns_refused_total Turns a session refused",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
}
