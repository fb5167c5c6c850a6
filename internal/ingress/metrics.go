package ingress

import "github.com/prometheus/client_golang/prometheus"

// sessionsDeleted counts DELETE /sessions/{id} by outcome: deleted,
// refused_running, not_found, error.
var sessionsDeleted = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "fastagent_sessions_deleted_total",
	Help: "Session deletions (DELETE /sessions/{id}) by outcome: deleted, refused_running, not_found, error.",
}, []string{"outcome"})

// Collectors are the ingress's Prometheus collectors.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{sessionsDeleted, principalRunning, principalRefused, principalTokens}
}
