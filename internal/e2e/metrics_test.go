package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/agent/agenttest"
	"github.com/fastagent/fastagent/internal/metrics"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
	"github.com/fastagent/fastagent/workflows"
)

// queueDepthLine is the unlabelled queue depth sample of a scrape.
var queueDepthLine = regexp.MustCompile(`(?m)^` + workflows.MetricTurnQueueDepth + ` (\S+)$`)

// scrapeQueueDepth returns m's queue depth sample as printed ("" if absent).
func scrapeQueueDepth(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	w := httptest.NewRecorder()
	m.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if got := queueDepthLine.FindStringSubmatch(w.Body.String()); got != nil {
		return got[1]
	}
	return ""
}

// startMetricsWorker dials a client reporting into m (a worker process of
// its own, as far as metrics go) and starts a worker on it.
func (e *env) startMetricsWorker(m *metrics.Metrics) func() {
	e.t.Helper()
	e.useCodec(nil, m)
	w := e.startWorker(func(c *serve.Config, _ *serve.Components) { c.Metrics = m }) // observes model calls, intercepts the worker
	var once sync.Once
	stop := func() { once.Do(w.Stop) }
	e.t.Cleanup(stop)
	return stop
}

// A worker that replaces one which died while a turn was queued (a fresh
// process: it replays the session and sees only what happens next) reports
// the queue as it is: the depth ends at 0, never negative.
func TestQueueDepthAfterWorkerRestart(t *testing.T) {
	t.Parallel() // it mostly waits out a worker's timeouts: shards.sh runs it beside the others
	e := newEnv(t)
	first := metrics.New()
	stopFirst := e.startMetricsWorker(first)
	a := e.agent

	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce)
	e.kit.Model.EnqueueFor("hold me",
		modelserver.Reply{Text: []string{"held"}, Hold: release},
		modelserver.Reply{Text: []string{"held, then answered"}})
	e.kit.Model.EnqueueFor("queued", modelserver.Reply{Text: []string{"after"}})
	done := make(chan []agent.Event, 2)
	go func() { done <- collect(t, a, context.Background(), "queue-depth", "hold me") }()
	waitFor(t, 30*time.Second, "the held model call to start", func() bool { return e.kit.Model.Count() >= 1 })
	go func() { done <- collect(t, a, context.Background(), "queue-depth", "queued") }()
	waitFor(t, 30*time.Second, "the first worker to report the queued turn", func() bool { return scrapeQueueDepth(t, first) == "1" })

	stopFirst() // the held call is cancelled and retried by the next worker
	second := metrics.New()
	e.startMetricsWorker(second)
	releaseOnce()
	for range 2 {
		if term := agenttest.CheckTerminal(t, <-done); term.Type != agent.TypeCompleted {
			t.Fatalf("turn: %+v", term)
		}
	}
	var depth string
	if !wait.Until(30*time.Second, func() bool { depth = scrapeQueueDepth(t, second); return depth == "0" }) {
		t.Fatalf("queue depth on the replacing worker is %q, want 0", depth)
	}
}
