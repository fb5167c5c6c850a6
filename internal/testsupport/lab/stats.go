package lab

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Sample is a set of measured durations.
type Sample []time.Duration

// Percentile returns the p-th percentile (0 < p ≤ 100) by the nearest-rank
// method; zero for an empty sample.
func (s Sample) Percentile(p float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	sorted := slices.Clone(s)
	slices.Sort(sorted)
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = max(1, min(rank, len(sorted)))
	return sorted[rank-1]
}

// P50 is the median.
func (s Sample) P50() time.Duration { return s.Percentile(50) }

// P99 is the 99th percentile.
func (s Sample) P99() time.Duration { return s.Percentile(99) }

// Mean is the arithmetic mean.
func (s Sample) Mean() time.Duration {
	if len(s) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return sum / time.Duration(len(s))
}

// Ms formats a duration as milliseconds with one decimal ("12.3 ms").
func Ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", MsOf(d)) }

// MsOf is d in (fractional) milliseconds.
func MsOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// SignedMs formats a difference with its sign ("+3.2 ms").
func SignedMs(d time.Duration) string { return fmt.Sprintf("%+.1f ms", MsOf(d)) }

// Bytes formats a byte count in B, KiB or MiB.
func Bytes(n int64) string {
	switch a := math.Abs(float64(n)); {
	case a >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case a >= 10<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%d B", n)
	}
}

// Machine are the facts a benchmark result depends on.
type Machine struct {
	Cores     int    `json:"cores"`
	CPU       string `json:"cpu"`
	GoVersion string `json:"goVersion"`
	GOOS      string `json:"goos"`
	GOARCH    string `json:"goarch"`
	Load      string `json:"loadAverage"`
	MemTotal  string `json:"memTotal"`
}

// MachineFacts reads the machine's facts (CPU model from /proc/cpuinfo).
func MachineFacts() Machine {
	m := Machine{Cores: runtime.NumCPU(), GoVersion: runtime.Version(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, CPU: "unknown"}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.Load = strings.Join(f[:3], " ")
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				var kb int64
				if _, err := fmt.Sscan(rest, &kb); err == nil {
					m.MemTotal = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
				}
			}
		}
	}
	return m
}

// String is the one-line summary printed above a table.
func (m Machine) String() string {
	s := fmt.Sprintf("%d cores · %s · %s %s/%s", m.Cores, m.CPU, m.GoVersion, m.GOOS, m.GOARCH)
	if m.MemTotal != "" {
		s += " · " + m.MemTotal + " RAM"
	}
	if m.Load != "" {
		s += " · load " + m.Load
	}
	return s
}

// Paired returns the per-pair differences b[i] − a[i] of two samples
// measured in pairs (same index, same round).
func Paired(a, b Sample) (Sample, error) {
	if len(a) != len(b) {
		return nil, fmt.Errorf("paired samples differ in size: %d and %d", len(a), len(b))
	}
	out := make(Sample, len(a))
	for i := range a {
		out[i] = b[i] - a[i]
	}
	return out, nil
}

// Ratio is a/b formatted as "3.2×", or "n/a" when b is not positive.
func Ratio(a, b time.Duration) string {
	if b <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", float64(a)/float64(b))
}
