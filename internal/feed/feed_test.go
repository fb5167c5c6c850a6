package feed_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/feed/feedtest"
	"github.com/fastagent/fastagent/internal/testkit"
)

// natsURL is the NATS server of the tests; FASTAGENT_TEST_NATS_URL overrides it.
var natsURL = func() string {
	if u := os.Getenv("FASTAGENT_TEST_NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}()

func TestInProcess(t *testing.T) {
	feedtest.Run(t, func(t *testing.T) (feed.Bus, feed.Bus) {
		b := feed.NewInProcess()
		t.Cleanup(func() { _ = b.Close() })
		return b, b
	})
}

// natsAvailable skips (or, when services are required, fails) when no NATS server is reachable.
func natsAvailable(tb testing.TB) {
	tb.Helper()
	b, err := feed.NewNATS(natsURL, feed.WithNATSOptions(nats.Timeout(2*time.Second)))
	testkit.RequireService(tb, "nats", natsURL, err)
	_ = b.Close()
}

func randomPrefix(tb testing.TB) string {
	var buf [8]byte
	if _, err := rand.Read(buf[:]); err != nil {
		tb.Fatal(err)
	}
	return "test." + hex.EncodeToString(buf[:])
}

// newNATSPair returns two connections sharing a fresh prefix, like a worker
// and an ingress in two processes.
func newNATSPair(tb testing.TB) (feed.Bus, feed.Bus) {
	tb.Helper()
	prefix := randomPrefix(tb)
	pub, err := feed.NewNATS(natsURL, feed.WithPrefix(prefix), feed.WithName("feed-test-pub"))
	if err != nil {
		tb.Fatalf("NewNATS: %v", err)
	}
	tb.Cleanup(func() { _ = pub.Close() })
	sub, err := feed.NewNATS(natsURL, feed.WithPrefix(prefix), feed.WithName("feed-test-sub"))
	if err != nil {
		tb.Fatalf("NewNATS: %v", err)
	}
	tb.Cleanup(func() { _ = sub.Close() })
	return pub, sub
}

func TestNATS(t *testing.T) {
	natsAvailable(t)
	feedtest.Run(t, func(t *testing.T) (feed.Bus, feed.Bus) { return newNATSPair(t) })
}

func TestNATSSingleConnection(t *testing.T) {
	natsAvailable(t)
	feedtest.Run(t, func(t *testing.T) (feed.Bus, feed.Bus) {
		b, err := feed.NewNATS(natsURL, feed.WithPrefix(randomPrefix(t)))
		if err != nil {
			t.Fatalf("NewNATS: %v", err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b, b
	})
}

func TestNATSSubjectIsOneToken(t *testing.T) {
	natsAvailable(t)
	b, err := feed.NewNATS(natsURL, feed.WithPrefix("p.q"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, s := range feedtest.OddSessions {
		subj := b.Subject(s)
		tok, ok := strings.CutPrefix(subj, "p.q.")
		if !ok || tok == "" || strings.ContainsAny(tok, ".*> \t\r\n") {
			t.Errorf("Subject(%q) = %q: not a single plain token", s, subj)
		}
	}
}

func TestNewNATSBadPrefix(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"", "a..b", "a.*", "a b", ">"} {
		if _, err := feed.NewNATS(natsURL, feed.WithPrefix(p)); err == nil {
			t.Errorf("prefix %q accepted", p)
		}
	}
}

func TestOpen(t *testing.T) {
	for _, u := range []string{"", "inprocess"} {
		b, err := feed.Open(u)
		if err != nil {
			t.Fatalf("Open(%q): %v", u, err)
		}
		if _, ok := b.(*feed.InProcess); !ok {
			t.Fatalf("Open(%q) = %T, want *feed.InProcess", u, b)
		}
		_ = b.Close()
	}
	for _, u := range []string{"redis://x", "127.0.0.1:4222", "kafka"} {
		if _, err := feed.Open(u); err == nil || !strings.Contains(err.Error(), "feed:") {
			t.Errorf("Open(%q) error = %v, want a feed: error", u, err)
		}
	}
	natsAvailable(t)
	b, err := feed.Open(natsURL)
	if err != nil {
		t.Fatalf("Open(%q): %v", natsURL, err)
	}
	if _, ok := b.(*feed.NATS); !ok {
		t.Fatalf("Open(%q) = %T, want *feed.NATS", natsURL, b)
	}
	_ = b.Close()
}

// TestInProcessNoGoroutineLeak checks that closing subscriptions (with
// undelivered messages queued) and buses stops their goroutines.
func TestInProcessNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	b := feed.NewInProcess()
	ctx := context.Background()
	var subs []feed.Subscription
	for i := range 50 {
		s, err := b.Subscribe(ctx, "leak")
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			subs = append(subs, s)
		}
	}
	for i := range 10 {
		e := agent.Text("x")
		if err := b.Publish(ctx, feed.Message{Session: "leak", Kind: feed.KindEvent, Step: i, Event: &e}); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range subs {
		_ = s.Close()
	}
	_ = b.Close() // closes the other half
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("goroutines: %d before, %d after closing", before, runtime.NumGoroutine())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestPublishAfterClose(t *testing.T) {
	t.Parallel()
	b := feed.NewInProcess()
	_ = b.Close()
	if err := b.Publish(context.Background(), feed.Message{Session: "s"}); err == nil {
		t.Fatal("Publish on a closed bus succeeded")
	}
}

// BenchmarkPublishToReceive measures the latency from Publish to receipt by
// a subscriber, one message in flight at a time.
func BenchmarkPublishToReceive(b *testing.B) {
	run := func(b *testing.B, pub, sub feed.Bus) {
		ctx := context.Background()
		s, err := sub.Subscribe(ctx, "bench")
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		e := agent.Text("some token delta")
		m := feed.Message{Session: "bench", Turn: "t", Kind: feed.KindEvent, Event: &e}
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < b.N; i++ {
			m.Step = i
			if err := pub.Publish(ctx, m); err != nil {
				b.Fatal(err)
			}
			if got := <-s.C(); got.Step != i {
				b.Fatalf("got step %d, want %d", got.Step, i)
			}
		}
		b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N), "ns/msg")
	}
	b.Run("InProcess", func(b *testing.B) {
		bus := feed.NewInProcess()
		defer bus.Close()
		run(b, bus, bus)
	})
	b.Run("NATS", func(b *testing.B) {
		natsAvailable(b)
		pub, sub := newNATSPair(b)
		run(b, pub, sub)
	})
}
