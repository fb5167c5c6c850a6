package ingress_test

import (
	"context"
	"encoding/json"
	"io"
	"iter"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/admission"
	"github.com/fastagent/fastagent/internal/ingress"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
)

// countingAgent counts the turns it was asked to run and holds each one
// open until release is closed.
type countingAgent struct {
	invoked atomic.Int64
	release chan struct{}
}

func (a *countingAgent) Invoke(ctx context.Context, _ agent.Scope, _ agent.Prompt) iter.Seq[agent.Event] {
	a.invoked.Add(1)
	return func(yield func(agent.Event) bool) {
		if !yield(agent.Event{Type: agent.TypeText, Delta: "working"}) {
			return
		}
		select {
		case <-a.release:
		case <-ctx.Done():
			return
		}
		yield(agent.Event{Type: agent.TypeCompleted})
	}
}

func postInvoke(t *testing.T, url, session, lastEventID string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/invoke", strings.NewReader(`{"session":"`+session+`","text":"hi"}`))
	req.Header.Set("Content-Type", "application/json")
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestAdmissionRefusesWhenSaturated fills the in-flight limit with held
// turns, then checks that a new turn gets 429 with Retry-After and a JSON
// reason without reaching the agent, that resuming a turn is not refused,
// and that a place freed by a finished turn admits again.
func TestAdmissionRefusesWhenSaturated(t *testing.T) {
	t.Parallel()
	a := &countingAgent{release: make(chan struct{})}
	lim := admission.New(admission.Limits{MaxInFlight: 2, RetryAfter: 3 * time.Second}, nil, nil)
	s := &ingress.Server{Agent: a, NoAuth: true, Admission: lim, Attacher: knownTurn{"s1", "k1"}}
	s.SetReady(true)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	// Held turns end before the server closes, also when the test fails
	// half-way (cleanups run last-registered first).
	release := sync.OnceFunc(func() { close(a.release) })
	t.Cleanup(release)

	held := []*http.Response{postInvoke(t, hs.URL, "s1", ""), postInvoke(t, hs.URL, "s2", "")}
	for _, r := range held {
		if r.StatusCode != http.StatusOK {
			t.Fatalf("turn under the limit: status %d", r.StatusCode)
		}
	}
	if got := lim.InFlight(); got != 2 {
		t.Fatalf("in flight = %d, want 2", got)
	}
	// The stream's headers are sent before the agent is called: wait until
	// both held turns reached it.
	wait.For(t, 10*time.Second, "both held turns to reach the agent", func() bool { return a.invoked.Load() == 2 })

	resp := postInvoke(t, hs.URL, "s3", "")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("turn past the limit: status %d (%s), want 429", resp.StatusCode, body)
	}
	if ra, _ := strconv.Atoi(resp.Header.Get("Retry-After")); ra < 3 || ra > 6 {
		t.Errorf("Retry-After = %q, want 3–6 (3 s and its jitter)", resp.Header.Get("Retry-After"))
	}
	var msg struct{ Error, Code string }
	if err := json.Unmarshal(body, &msg); err != nil || msg.Code != ingress.CodeOverloaded || !strings.Contains(msg.Error, "limit 2") {
		t.Errorf("refusal body = %s, want code %q and the limit in the message", body, ingress.CodeOverloaded)
	}
	if got := a.invoked.Load(); got != 2 {
		t.Fatalf("the agent ran %d turns, want 2: the refused turn reached it", got)
	}

	// A Last-Event-ID naming no turn is a new turn: refused like one.
	madeUp := postInvoke(t, hs.URL, "s1", "made-up.1")
	_, _ = io.Copy(io.Discard, madeUp.Body)
	madeUp.Body.Close()
	if madeUp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a made-up resume past the limit: status %d, want 429", madeUp.StatusCode)
	}
	// Resuming a turn (Last-Event-ID) is not a new turn: never refused.
	resumed := postInvoke(t, hs.URL, "s1", "k1.1")
	if resumed.StatusCode != http.StatusOK {
		t.Errorf("resuming a turn: status %d, want 200", resumed.StatusCode)
	}

	// Finished turns give their places back.
	release()
	for _, r := range append(held, resumed) {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	wait.For(t, 10*time.Second, "every place to be given back after the streams ended", func() bool { return lim.InFlight() == 0 })
	again := postInvoke(t, hs.URL, "s3", "")
	_, _ = io.Copy(io.Discard, again.Body)
	again.Body.Close()
	if again.StatusCode != http.StatusOK {
		t.Errorf("turn after places were freed: status %d, want 200", again.StatusCode)
	}
}

// knownTurn is an Attacher that knows one turn of one session.
type knownTurn struct{ session, key string }

func (k knownTurn) Attach(_ context.Context, session, key string) (iter.Seq[agent.Event], error) {
	if session == k.session && key == k.key {
		return func(func(agent.Event) bool) {}, nil
	}
	return nil, agent.NewError(agent.CodeNoSuchTurn, "no such turn")
}
