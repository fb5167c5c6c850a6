package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	// extra are top-level JSON fields added to the request body (fields
	// langchaingo cannot send, such as OpenAI's reasoning_effort).
	extra map[string]any
	// edit, when set, rewrites the request body's top-level fields after
	// extra is added (Anthropic's cache breakpoints and thinking blocks).
	edit func(map[string]json.RawMessage) error
	// watch, when set, sees the response body as the client reads it.
	watch *thinkingWatch
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
	if len(rec.extra) > 0 || rec.edit != nil {
		var err error
		if req, err = withFields(req, rec.extra, rec.edit); err != nil {
			return nil, err
		}
	}
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
	kb := &kickingBody{ReadCloser: resp.Body, dog: rec.dog}
	if rec.watch != nil && resp.StatusCode == http.StatusOK {
		kb.watch = rec.watch
	}
	resp.Body = kb
	return resp, nil
}

// kickingBody kicks the watchdog whenever bytes arrive.
type kickingBody struct {
	io.ReadCloser
	dog   *watchdog
	watch *thinkingWatch
}

func (b *kickingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.dog.kick()
		if b.watch != nil {
			b.watch.write(p[:n])
		}
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

// withFields returns a copy of req whose JSON object body has fields added
// (existing fields of the same name are replaced), then edited by edit
// when it is not nil.
func withFields(req *http.Request, fields map[string]any, edit func(map[string]json.RawMessage) error) (*http.Request, error) {
	if req.Body == nil || req.Method != http.MethodPost {
		return req, nil
	}
	raw, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("llm: read request body: %w", err)
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(raw, &body); err != nil {
		return nil, fmt.Errorf("llm: request body is not a JSON object: %w", err)
	}
	for k, v := range fields {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("llm: encode request field %s: %w", k, err)
		}
		body[k] = b
	}
	if edit != nil {
		if err := edit(body); err != nil {
			return nil, err
		}
	}
	out, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("llm: encode request body: %w", err)
	}
	r := req.Clone(req.Context())
	r.Body = io.NopCloser(bytes.NewReader(out))
	r.ContentLength = int64(len(out))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(out)), nil }
	return r, nil
}
