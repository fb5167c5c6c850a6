package metrics

import (
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/workflows"
)

// sdkBuckets are the timer buckets (seconds) of the SDK's latency metrics.
var sdkBuckets = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// sdkMetrics collects what the Temporal SDK reports through
// client.MetricsHandler. The SDK picks a metric's tags at run time, so one
// name can come with several tag sets; Collect pads every series of a name
// to the union of its tag names, as Prometheus wants one label set per name.
type sdkMetrics struct {
	mu     sync.Mutex
	series map[string]*series // by name + "\xff" + encoded tags
	// bySession are fastagent's gauges reported from workflow code, one
	// value per session (tag SessionTag): each lands in a gauge, without
	// tags, as the sum over the sessions this process last heard from.
	bySession map[string]*sessionGauge
	// named are fastagent's counters reported from workflow code: each
	// lands in its own counter, labelled by the tags it names only.
	named map[string]namedCounter
}

// namedCounter is a counter of fastagent's reported through the SDK's
// metrics handler, and the tags that become its labels.
type namedCounter struct {
	vec    *prometheus.CounterVec
	labels []string
}

// SessionTag is the tag under which workflow code reports a per-session
// gauge (the session's workflow ID).
const SessionTag = workflows.MetricSessionTag

// sessionGauge sums the last value each session reported. Absolute values,
// not deltas: a process that replaces a crashed worker replays a session
// without reporting and hears only what happens next, so deltas would
// drift (a queue drained after the crash went negative).
type sessionGauge struct {
	gauge prometheus.Gauge
	by    map[string]float64
}

func (g *sessionGauge) set(session string, v float64) {
	if v == 0 {
		delete(g.by, session)
	} else {
		g.by[session] = v
	}
	sum := 0.0
	for _, x := range g.by {
		sum += x
	}
	g.gauge.Set(sum)
}

type kind int

const (
	kindCounter kind = iota
	kindGauge
	kindTimer
)

type series struct {
	name   string
	kind   kind
	tags   map[string]string
	value  float64  // counter total or gauge value
	counts []uint64 // timer: per bucket (not cumulative)
	sum    float64
	count  uint64
}

func newSDKMetrics() *sdkMetrics { return &sdkMetrics{series: map[string]*series{}} }

func (m *sdkMetrics) get(name string, k kind, tags map[string]string) *series {
	keys := slices.Sorted(maps.Keys(tags))
	var b strings.Builder
	b.WriteString(name)
	for _, k := range keys {
		b.WriteString("\xff" + k + "=" + tags[k])
	}
	id := b.String()
	s, ok := m.series[id]
	if !ok {
		s = &series{name: name, kind: k, tags: tags}
		if k == kindTimer {
			s.counts = make([]uint64, len(sdkBuckets))
		}
		m.series[id] = s
	}
	return s
}

// Describe sends nothing: the collector is unchecked, its names are the SDK's.
func (m *sdkMetrics) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (m *sdkMetrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	labels := map[string]map[string]bool{}
	kinds := map[string]kind{}
	for _, s := range m.series {
		if labels[s.name] == nil {
			labels[s.name] = map[string]bool{}
			kinds[s.name] = s.kind
		}
		for k := range s.tags {
			labels[s.name][k] = true
		}
	}
	descs := map[string]*prometheus.Desc{}
	names := map[string][]string{}
	for name, ls := range labels {
		names[name] = slices.Sorted(maps.Keys(ls))
		descs[name] = prometheus.NewDesc(sanitize(name), "Temporal SDK metric "+name+".", names[name], nil)
	}
	for _, s := range m.series {
		if s.kind != kinds[s.name] {
			continue // a name reported as two kinds: keep the first seen
		}
		vals := make([]string, len(names[s.name]))
		for i, l := range names[s.name] {
			vals[i] = s.tags[l]
		}
		d := descs[s.name]
		switch s.kind {
		case kindCounter:
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, s.value, vals...)
		case kindGauge:
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, s.value, vals...)
		case kindTimer:
			buckets := make(map[float64]uint64, len(sdkBuckets))
			var cum uint64
			for i, ub := range sdkBuckets {
				cum += s.counts[i]
				buckets[ub] = cum
			}
			ch <- prometheus.MustNewConstHistogram(d, s.count, s.sum, buckets, vals...)
		}
	}
}

// sanitize makes name a valid Prometheus metric name.
func sanitize(name string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || r == ':' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			return r
		}
		return '_'
	}, name)
}

// sdkHandler is a client.MetricsHandler onto sdkMetrics with fixed tags.
type sdkHandler struct {
	m    *sdkMetrics
	tags map[string]string
}

var _ client.MetricsHandler = sdkHandler{}

func (h sdkHandler) WithTags(tags map[string]string) client.MetricsHandler {
	merged := maps.Clone(h.tags)
	if merged == nil {
		merged = map[string]string{}
	}
	for k, v := range tags {
		merged[sanitize(k)] = v
	}
	return sdkHandler{m: h.m, tags: merged}
}

func (h sdkHandler) Counter(name string) client.MetricsCounter {
	if _, ok := h.m.bySession[name]; ok {
		return counterFunc(func(int64) {}) // reported as a gauge; a counter of that name is dropped
	}
	if nc, ok := h.m.named[name]; ok {
		vals := make([]string, len(nc.labels))
		for i, l := range nc.labels {
			vals[i] = h.tags[l]
		}
		c := nc.vec.WithLabelValues(vals...)
		return counterFunc(func(d int64) {
			if d > 0 { // a counter only goes up
				c.Add(float64(d))
			}
		})
	}
	return counterFunc(func(d int64) {
		h.m.mu.Lock()
		defer h.m.mu.Unlock()
		h.m.get(name, kindCounter, h.tags).value += float64(d)
	})
}

func (h sdkHandler) Gauge(name string) client.MetricsGauge {
	if g, ok := h.m.bySession[name]; ok {
		session := h.tags[SessionTag]
		return gaugeFunc(func(v float64) {
			h.m.mu.Lock()
			defer h.m.mu.Unlock()
			g.set(session, v)
		})
	}
	return gaugeFunc(func(v float64) {
		h.m.mu.Lock()
		defer h.m.mu.Unlock()
		h.m.get(name, kindGauge, h.tags).value = v
	})
}

func (h sdkHandler) Timer(name string) client.MetricsTimer {
	return timerFunc(func(d time.Duration) {
		h.m.mu.Lock()
		defer h.m.mu.Unlock()
		s := h.m.get(name, kindTimer, h.tags)
		v := d.Seconds()
		if i := sort.SearchFloat64s(sdkBuckets, v); i < len(sdkBuckets) {
			s.counts[i]++
		}
		s.sum += v
		s.count++
	})
}

type counterFunc func(int64)

func (f counterFunc) Inc(d int64) { f(d) }

type gaugeFunc func(float64)

func (f gaugeFunc) Update(v float64) { f(v) }

type timerFunc func(time.Duration)

func (f timerFunc) Record(d time.Duration) { f(d) }
