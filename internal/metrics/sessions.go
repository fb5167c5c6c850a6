package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/workflows"
)

// SessionsEvery is how long a count of open sessions is reused before a
// scrape asks Temporal again.
const SessionsEvery = 15 * time.Second

// sessionsQuery selects the open session workflows (visibility query).
const sessionsQuery = "WorkflowType = '" + workflows.SessionWorkflowType + "' AND ExecutionStatus = 'Running'"

// sessionsCollector reports fastagent_active_sessions from Temporal's
// visibility store, counted on scrape and cached for SessionsEvery.
type sessionsCollector struct {
	desc *prometheus.Desc

	mu    sync.Mutex
	c     client.Client
	every time.Duration
	n     int64
	at    time.Time
	known bool
}

func (s *sessionsCollector) watch(c client.Client, every time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c, s.every = c, every
}

// Describe implements prometheus.Collector.
func (s *sessionsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- s.desc }

// Collect implements prometheus.Collector; without a client, or before a
// first successful count, it reports nothing.
func (s *sessionsCollector) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c == nil {
		return
	}
	if !s.known || time.Since(s.at) >= s.every {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		res, err := s.c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: sessionsQuery})
		cancel()
		if err == nil {
			s.n, s.at, s.known = res.GetCount(), time.Now(), true
		}
	}
	if s.known {
		ch <- prometheus.MustNewConstMetric(s.desc, prometheus.GaugeValue, float64(s.n))
	}
}
