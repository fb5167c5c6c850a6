package slack_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/channels/slack"
)

// TestReplyMarkedAndFoundAgain: every reply message carries its turn's key
// in Slack metadata; a renderer with no stored reference (the first
// attempt crashed between posting and storing it, or its post timed out
// after Slack carried it out) finds that message and settles it instead
// of posting a second one — in a thread and at the top level.
func TestReplyMarkedAndFoundAgain(t *testing.T) {
	t.Parallel()
	for _, threadTS := range []string{thread, ""} {
		r, fake := replier(t)
		tg := target(threadTS)
		tg.Turn = "slack:" + team + ":" + channel + ":" + thread
		first := open(t, r, tg, "")
		if err := first.Finish(context.Background(), "Hello"); err != nil {
			t.Fatal(err)
		}
		m := onlyMessage(t, fake)
		if !strings.Contains(m.Metadata, slack.ReplyEventType) || !strings.Contains(m.Metadata, tg.Turn) {
			t.Errorf("thread %q: reply metadata %q, want the event type and the turn key", threadTS, m.Metadata)
		}
		// The reference was lost: a retry opens with none.
		again := open(t, r, tg, "")
		if err := again.Finish(context.Background(), "Hello, settled"); err != nil {
			t.Fatal(err)
		}
		m = onlyMessage(t, fake)
		if m.Text != "Hello, settled" || again.Ref() != "msg:"+m.TS {
			t.Errorf("thread %q: message %q (ref %q), want the first one settled", threadTS, m.Text, again.Ref())
		}
		// Another turn in the same place is its own message.
		other := tg
		other.Turn += "-other"
		if err := open(t, r, other, "").Finish(context.Background(), "Second"); err != nil {
			t.Fatal(err)
		}
		if n := len(fake.Messages("")); n != 2 {
			t.Errorf("thread %q: %d messages after a second turn, want 2", threadTS, n)
		}
	}
}

// TestReplierCallsTimeOut: a Web API call that hangs fails after
// HTTPTimeout instead of outliving the activity attempt (whose retry would
// then post again).
func TestReplierCallsTimeOut(t *testing.T) {
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hung.Close()
	defer close(release)
	saved := slack.HTTPTimeout
	slack.HTTPTimeout = 200 * time.Millisecond
	r := slack.NewReplier("xoxb-test", hung.URL)
	slack.HTTPTimeout = saved
	rd := open(t, r, target(""), "")
	done := make(chan error, 1)
	go func() { done <- rd.Finish(context.Background(), "Hello") }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a hung chat.postMessage succeeded")
		}
	case <-time.After(30 * time.Second): // a guard only: without a timeout the call never returns
		t.Fatal("chat.postMessage still hung after 30 s: the client has no timeout")
	}
}
