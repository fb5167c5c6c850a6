package e2e

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/channels/slack"
	"github.com/fastagent/fastagent/internal/testsupport/fakeslack"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
)

// TestSlackFinalReplyAfterLiveReply: when a live update is still in
// flight at Slack after the turn (a slow chat.appendStream, 9 s), the
// final reply waits until the live reply has stopped — it does not write
// the message while the live reply may still write it.
func TestSlackFinalReplyAfterLiveReply(t *testing.T) {
	t.Parallel()
	s := newSlackStack(t)
	var mu sync.Mutex
	var slowDone time.Time
	slowed := false
	s.fake.srv.Wrap("chat.appendStream", func(next fakeslack.Handler) fakeslack.Handler {
		return func(srv *fakeslack.Server, c fakeslack.Call) map[string]any {
			mu.Lock()
			first := !slowed
			slowed = true
			mu.Unlock()
			if !first {
				return next(srv, c)
			}
			// Deliberate: Slack's latency, long past the turn's end (its
			// stream lasts about a second); what the final reply waits out.
			time.Sleep(9 * time.Second)
			out := next(srv, c)
			mu.Lock()
			slowDone = time.Now()
			mu.Unlock()
			return out
		}
	})
	s.e.kit.Model.Enqueue(modelserver.Reply{Text: []string{"Hello", " there,", " all", " done."}, ChunkDelay: 300 * time.Millisecond})
	s.startWorker()
	const channel, ts = "C0SETTLE", "1515449901.000001"
	session := slack.SessionID(s.team, channel, ts)
	t.Cleanup(func() { s.terminate(session) })
	if code, _, _ := s.post(s.event("EvSettle", "app_mention", "", channel, ts, "", "<@U0LAN0Z89> hi"), slackSecret, time.Now(), nil); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	waitFor(t, 2*time.Minute, "the stream stopped", func() bool { return s.fake.settled(1) })
	var done time.Time
	waitFor(t, time.Minute, "the slowed update returned", func() bool {
		mu.Lock()
		defer mu.Unlock()
		done = slowDone
		return !done.IsZero()
	})
	stops := s.fake.srv.Calls("chat.stopStream")
	if len(stops) == 0 {
		t.Fatal("no chat.stopStream")
	}
	if stops[0].At.Before(done) {
		t.Errorf("the final reply stopped the stream %v before the live reply's update returned", done.Sub(stops[0].At).Round(time.Millisecond))
	}
}
