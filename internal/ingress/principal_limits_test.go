package ingress

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/turnusage"
)

// value reads a counter's or a gauge's value.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	if out.Counter != nil {
		return out.Counter.GetValue()
	}
	return out.Gauge.GetValue()
}

// The limiter counts a principal's running turns and its turns of the
// last minute; a refused turn is not counted, done is idempotent, admins
// are exempt only when configured, the exempt list always, and each
// refusal is counted per principal and limit.
func TestPrincipalLimiter(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	l := NewPrincipalLimiter(PrincipalLimits{ConcurrentTurns: 2, TurnsPerMinute: 3, Exempt: []string{"ci"}})
	l.now = func() time.Time { return now }
	refusedBefore := value(t, principalRefused.WithLabelValues("limiter-p", "concurrent_turns"))

	d1, err := l.Take("limiter-p", false)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := l.Take("limiter-p", false)
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Take("limiter-p", false)
	if err == nil {
		t.Fatal("a third concurrent turn was admitted")
	}
	if rr, ok := err.(interface{ RetryDelay() time.Duration }); !ok || rr.RetryDelay() != time.Second {
		t.Errorf("refusal %v: want a 1 s retry delay", err)
	}
	if got := value(t, principalRefused.WithLabelValues("limiter-p", "concurrent_turns")) - refusedBefore; got != 1 {
		t.Errorf("refusals counted: %v, want 1", got)
	}
	if got := value(t, principalRunning.WithLabelValues("limiter-p")); got != 2 {
		t.Errorf("running gauge: %v, want 2", got)
	}
	if _, err := l.Take("other", false); err != nil {
		t.Errorf("another principal was refused: %v", err)
	}
	d1()
	d1() // idempotent
	if got := value(t, principalRunning.WithLabelValues("limiter-p")); got != 1 {
		t.Errorf("running gauge after one ended (done twice): %v, want 1", got)
	}
	d3, err := l.Take("limiter-p", false)
	if err != nil {
		t.Fatalf("a turn after one ended: %v", err)
	}
	d2()
	d3()
	// Three turns this minute: the fourth waits until the first leaves the window.
	now = now.Add(20 * time.Second)
	_, err = l.Take("limiter-p", false)
	rd, ok := err.(interface{ RetryDelay() time.Duration })
	if !ok || rd.RetryDelay() != 40*time.Second {
		t.Fatalf("fourth turn in a minute: %v, want a refusal retrying in 40s", err)
	}
	now = now.Add(40 * time.Second)
	if _, err := l.Take("limiter-p", false); err != nil {
		t.Errorf("a turn once the minute passed: %v", err)
	}
	// Exemptions.
	for i := 0; i < 5; i++ {
		if _, err := l.Take("ci", false); err != nil {
			t.Fatalf("exempt principal refused: %v", err)
		}
	}
	if _, err := l.Take("root", true); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Take("root", true); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Take("root", true); err == nil {
		t.Error("an admin was exempt though exemptAdmins is off")
	}
	admins := NewPrincipalLimiter(PrincipalLimits{ConcurrentTurns: 1, ExemptAdmins: true})
	for i := 0; i < 3; i++ {
		if _, err := admins.Take("root", true); err != nil {
			t.Fatalf("admin refused with exemptAdmins: %v", err)
		}
	}
	var nilLimiter *PrincipalLimiter
	if done, err := nilLimiter.Take("x", false); err != nil || done == nil {
		t.Errorf("a nil limiter: %v", err)
	}
}

// Tokens count per UTC day: a principal refused late in the day is told
// to wait until 00:00 UTC, and is admitted once the day changed.
func TestPrincipalTokensNextDay(t *testing.T) {
	now := time.Date(2026, 1, 1, 23, 0, 0, 0, time.FixedZone("UTC+9", 9*3600))
	l := NewPrincipalLimiter(PrincipalLimits{TokensPerDay: 10})
	l.now = func() time.Time { return now }
	before := value(t, principalTokens.WithLabelValues("day-p"))
	l.Charge("day-p", false, turnusage.Report{Turn: "k", Usage: agent.Usage{Input: 7, Output: 5}})
	if got := value(t, principalTokens.WithLabelValues("day-p")) - before; got != 12 {
		t.Errorf("tokens metric: %v, want 12", got)
	}
	_, err := l.Take("day-p", false)
	rd, ok := err.(interface{ RetryDelay() time.Duration })
	if !ok || rd.RetryDelay() != 10*time.Hour {
		t.Fatalf("over the day's tokens at 14:00 UTC: %v, want a refusal retrying in 10h", err)
	}
	now = now.Add(10 * time.Hour)
	if _, err := l.Take("day-p", false); err != nil {
		t.Errorf("the next UTC day: %v", err)
	}
}
