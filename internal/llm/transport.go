package llm

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// recorderKey carries a call's *recorder in the request context, so one
// shared transport keeps concurrent calls apart.
type recorderKey struct{}

// recorder is what the transport saw of one Generate call.
type recorder struct {
	mu         sync.Mutex
	attempted  bool
	status     int
	retryAfter time.Duration
	netErr     error // the transport's own error, before langchaingo rewords it
	dog        *watchdog
}

func (r *recorder) snapshot() (attempted bool, status int, retryAfter time.Duration, netErr error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.attempted, r.status, r.retryAfter, r.netErr
}

// recordingTransport notes the status and Retry-After of each response in
// the recorder of the call that sent it, and kicks the call's watchdog on
// headers and on every body read that returns bytes.
type recordingTransport struct {
	base http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rec, _ := req.Context().Value(recorderKey{}).(*recorder)
	if rec == nil {
		return t.base.RoundTrip(req)
	}
	rec.mu.Lock()
	rec.attempted = true
	rec.mu.Unlock()
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		rec.mu.Lock()
		rec.netErr = err
		rec.mu.Unlock()
		return nil, err
	}
	rec.dog.kick()
	rec.mu.Lock()
	rec.status = resp.StatusCode
	rec.retryAfter = parseRetryAfter(resp.Header, time.Now())
	rec.mu.Unlock()
	resp.Body = &kickingBody{ReadCloser: resp.Body, dog: rec.dog}
	return resp, nil
}

// kickingBody kicks the watchdog whenever bytes arrive.
type kickingBody struct {
	io.ReadCloser
	dog *watchdog
}

func (b *kickingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.dog.kick()
	}
	return n, err
}

// parseRetryAfter reads retry-after-ms (OpenAI) or Retry-After in seconds or
// as an HTTP date; 0 when absent or unparsable.
func parseRetryAfter(h http.Header, now time.Time) time.Duration {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		return time.Duration(secs * float64(time.Second))
	}
	if at, err := http.ParseTime(v); err == nil {
		if d := at.Sub(now); d > 0 {
			return d.Round(time.Second)
		}
	}
	return 0
}

// errStalled is the cancellation cause the watchdog uses.
var errStalled = errors.New("model stream stalled")

// watchdog cancels a call when no bytes arrived for its timeout.
type watchdog struct {
	timer   *time.Timer
	d       time.Duration
	stopped atomic.Bool
}

// startWatchdog arms a watchdog that cancels with errStalled after d of
// silence.
func startWatchdog(d time.Duration, cancel context.CancelCauseFunc) *watchdog {
	w := &watchdog{d: d}
	w.timer = time.AfterFunc(d, func() { cancel(errStalled) })
	return w
}

// kick restarts the silence period.
func (w *watchdog) kick() {
	if w == nil || w.stopped.Load() {
		return
	}
	w.timer.Reset(w.d)
}

// stop disarms the watchdog for good.
func (w *watchdog) stop() {
	w.stopped.Store(true)
	w.timer.Stop()
}
