package github

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/internal/channels"
)

// flakyStarter fails its first fail Signal-With-Start calls (fail < 0:
// every call), then hands off.
type flakyStarter struct {
	mu     sync.Mutex
	fail   int
	calls  int
	handed []string
}

func (s *flakyStarter) SignalWithStartWorkflow(_ context.Context, id, _ string, _ interface{},
	_ client.StartWorkflowOptions, _ interface{}, _ ...interface{}) (client.WorkflowRun, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.fail < 0 || s.calls <= s.fail {
		return nil, errors.New("unavailable: the frontend is restarting")
	}
	s.handed = append(s.handed, id)
	return nil, nil
}

func post(t *testing.T, h http.Handler, body []byte) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
	r.Header = Sign(testSecret, "issue_comment", "72d3162e-cc78-11e3-81ab-4c9367dc0958", body)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// handoffFailures reads fastagent_channel_handoff_failures_total{channel=github}.
func handoffFailures(t *testing.T) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(channels.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "fastagent_channel_handoff_failures_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "channel" && l.GetValue() == Kind {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestHandOffRetriedWithinGitHubsBudget: GitHub never redelivers a
// delivery answered 5xx by itself, so a hand-off that fails for a moment
// is retried while GitHub still waits (10 s) and the delivery is accepted;
// one that still fails is answered 503 with how to redeliver it, logged
// and counted.
func TestHandOffRetriedWithinGitHubsBudget(t *testing.T) {
	body := fixture(t, "issue_comment.json")

	t.Run("a brief outage", func(t *testing.T) {
		st := &flakyStarter{fail: 2}
		w := post(t, channels.Handler(door(t, mentionRules), st, "q", nil), body)
		if w.Code != http.StatusAccepted {
			t.Fatalf("status %d (%s), want 202", w.Code, strings.TrimSpace(w.Body.String()))
		}
		if len(st.handed) != 1 {
			t.Errorf("handed off %q, want one session", st.handed)
		}
	})

	t.Run("an outage longer than GitHub waits", func(t *testing.T) {
		before := handoffFailures(t)
		st := &flakyStarter{fail: -1}
		var logs bytes.Buffer
		log := slog.New(slog.NewTextHandler(&logs, nil))
		w := post(t, channels.Handler(door(t, mentionRules), st, "q", log), body)
		if w.Code != http.StatusServiceUnavailable {
			t.Fatalf("status %d, want 503", w.Code)
		}
		if st.calls < 2 {
			t.Errorf("%d hand-off attempts, want retries", st.calls)
		}
		for _, where := range []string{w.Body.String(), logs.String()} {
			if !strings.Contains(where, "Redeliver") || !strings.Contains(where, "72d3162e-cc78-11e3-81ab-4c9367dc0958") {
				t.Errorf("no redeliver hint naming the delivery in %q", where)
			}
		}
		if got := handoffFailures(t) - before; got != 1 {
			t.Errorf("fastagent_channel_handoff_failures_total{channel=github} grew by %v, want 1", got)
		}
	})
}
