package feed_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/feed/feedtest"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
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
	prefix := randomPrefix(tb)
	b, err := feed.NewNATS(natsURL, feed.WithPrefix(prefix), feed.WithNATSOptions(nats.Timeout(2*time.Second)))
	testkit.RequireService(tb, "nats", natsURL, err)
	_ = b.Close()
	deleteStream(tb, prefix)
}

func randomPrefix(tb testing.TB) string {
	var buf [8]byte
	if _, err := rand.Read(buf[:]); err != nil {
		tb.Fatal(err)
	}
	return "test." + hex.EncodeToString(buf[:])
}

// deleteStream deletes the stream of a test prefix.
func deleteStream(tb testing.TB, prefix string) {
	tb.Helper()
	nc, err := nats.Connect(natsURL, nats.Timeout(5*time.Second))
	if err != nil {
		tb.Errorf("delete stream of %s: %v", prefix, err)
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Errorf("delete stream of %s: %v", prefix, err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := js.DeleteStream(ctx, feed.StreamName(prefix)); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		tb.Errorf("delete stream %s: %v", feed.StreamName(prefix), err)
	}
}

// newNATS connects a bus with the given prefix; the bus is closed at the end
// of the test.
func newNATS(tb testing.TB, prefix, name string) *feed.NATS {
	tb.Helper()
	b, err := feed.NewNATS(natsURL, feed.WithPrefix(prefix), feed.WithName(name))
	if err != nil {
		tb.Fatalf("NewNATS: %v", err)
	}
	tb.Cleanup(func() { _ = b.Close() })
	return b
}

// newNATSPrefix returns a fresh prefix whose stream is deleted at the end of
// the test, after the buses registered later are closed.
func newNATSPrefix(tb testing.TB) string {
	tb.Helper()
	prefix := randomPrefix(tb)
	tb.Cleanup(func() { deleteStream(tb, prefix) })
	return prefix
}

// newNATSPair returns two connections sharing a fresh prefix, like a worker
// and an ingress in two processes.
func newNATSPair(tb testing.TB) (feed.Bus, feed.Bus) {
	tb.Helper()
	prefix := newNATSPrefix(tb)
	return newNATS(tb, prefix, "feed-test-pub"), newNATS(tb, prefix, "feed-test-sub")
}

func TestNATS(t *testing.T) {
	natsAvailable(t)
	feedtest.Run(t, func(t *testing.T) (feed.Bus, feed.Bus) { return newNATSPair(t) })
}

func TestNATSSingleConnection(t *testing.T) {
	natsAvailable(t)
	feedtest.Run(t, func(t *testing.T) (feed.Bus, feed.Bus) {
		b := newNATS(t, newNATSPrefix(t), "feed-test")
		return b, b
	})
}

func TestNATSSubjectIsOneToken(t *testing.T) {
	natsAvailable(t)
	prefix := newNATSPrefix(t)
	b := newNATS(t, prefix, "feed-test")
	seen := map[string]string{}
	for _, s := range feedtest.OddSessions {
		for _, turn := range []string{"t", s} {
			subj := b.Subject(s, turn)
			rest, ok := strings.CutPrefix(subj, prefix+".")
			toks := strings.Split(rest, ".")
			if !ok || len(toks) != 2 {
				t.Fatalf("Subject(%q, %q) = %q: want %s.<session>.<turn>", s, turn, subj, prefix)
			}
			for _, tok := range toks {
				if tok == "" || strings.ContainsAny(tok, ".*> \t\r\n") {
					t.Errorf("Subject(%q, %q) = %q: %q is not a single plain token", s, turn, subj, tok)
				}
			}
			key := fmt.Sprintf("%q/%q", s, turn)
			if other, dup := seen[subj]; dup && other != key {
				t.Errorf("Subject(%q, %q) = Subject of %s = %q", s, turn, other, subj)
			}
			seen[subj] = key
		}
	}
}

// TestNATSSeqIsStreamSequence checks that Seq is the stream sequence: it
// counts the messages of all turns, so one turn's Seqs have gaps.
func TestNATSSeqIsStreamSequence(t *testing.T) {
	natsAvailable(t)
	pub, sub := newNATSPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const n = 10
	for i := range 2 * n {
		turn := []string{"a", "b"}[i%2]
		if err := pub.Publish(ctx, feedtest.Sample("s", turn, i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for k, turn := range []string{"a", "b"} {
		s, err := sub.Subscribe(ctx, "s", turn)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		for j, m := range feedtest.ReceiveN(t, s, n) {
			feedtest.CheckEqual(t, j, m, feedtest.Sample("s", turn, k+2*j))
			if want := int64(k + 2*j + 1); m.Seq != want {
				t.Fatalf("turn %s: message %d has Seq %d, want stream sequence %d", turn, j, m.Seq, want)
			}
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
		if !feed.IsInProcess(b) {
			t.Fatalf("Open(%q) = %T, want the in-process bus", u, b)
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
// The in-process feed is one per process: a worker and an ingress that
// each open it (worker.Run beside ingress.New) see the same turns. Closing
// one opener's bus ends its own subscriptions and refuses its publishing,
// not the other's; once every opener closed, the next Open starts empty.
func TestOpenInProcessIsShared(t *testing.T) {
	ctx := context.Background()
	worker, err := feed.Open("")
	if err != nil {
		t.Fatal(err)
	}
	ingress, err := feed.Open("inprocess")
	if err != nil {
		t.Fatal(err)
	}
	sub := inSubscribe(t, ingress, "shared", "t1")
	mine := inSubscribe(t, worker, "shared", "t1")
	e := agent.Text("hello")
	inPublish(t, worker, feed.Message{Session: "shared", Turn: "t1", Kind: feed.KindEvent, Event: &e})
	select {
	case m := <-sub.C():
		if m.Event == nil || m.Event.Delta != "hello" {
			t.Fatalf("the ingress's bus got %+v", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a message published on the worker's bus did not reach the ingress's")
	}
	_ = worker.Close()
	if err := worker.Publish(ctx, feed.Message{Session: "shared", Turn: "t1", Kind: feed.KindEnd}); !errors.Is(err, feed.ErrClosed) {
		t.Errorf("Publish after Close: %v, want ErrClosed", err)
	}
	if _, ok := <-mine.C(); ok {
		t.Error("a subscription of the closed opener is still open")
	}
	inPublish(t, ingress, feed.Message{Session: "shared", Turn: "t1", Kind: feed.KindEnd})
	select {
	case m := <-sub.C():
		if m.Kind != feed.KindEnd || m.Seq != 2 {
			t.Fatalf("after the worker closed, the ingress got %+v", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the ingress's bus stopped when the worker's closed")
	}
	_ = ingress.Close()
	again, err := feed.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	s2 := inSubscribe(t, again, "shared", "t1")
	inPublish(t, again, feed.Message{Session: "shared", Turn: "t1", Kind: feed.KindEnd})
	if m := <-s2.C(); m.Seq != 1 {
		t.Fatalf("a new bus after every opener closed continues the old log: first message %+v", m)
	}
}

func TestInProcessNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	b := feed.NewInProcess()
	ctx := context.Background()
	var subs []feed.Subscription
	for i := range 50 {
		s, err := b.Subscribe(ctx, "leak", "t"+strconv.Itoa(i%3))
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			subs = append(subs, s)
		}
	}
	for i := range 30 {
		e := agent.Text("x")
		if err := b.Publish(ctx, feed.Message{Session: "leak", Turn: "t" + strconv.Itoa(i%3), Kind: feed.KindEvent, Step: i, Event: &e}); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range subs {
		_ = s.Close()
	}
	_ = b.Close() // closes the other half
	if !wait.Until(5*time.Second, func() bool { return runtime.NumGoroutine() <= before }) {
		t.Fatalf("goroutines: %d before, %d after closing", before, runtime.NumGoroutine())
	}
}

func TestPublishAfterClose(t *testing.T) {
	t.Parallel()
	b := feed.NewInProcess()
	_ = b.Close()
	if err := b.Publish(context.Background(), feed.Message{Session: "s", Turn: "t", Kind: feed.KindEnd}); !errors.Is(err, feed.ErrClosed) {
		t.Fatalf("Publish on a closed bus: error %v, want ErrClosed", err)
	}
}

// fakeClock is a settable clock for the in-process bus.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newClockedInProcess(t *testing.T) (*feed.InProcess, *fakeClock) {
	b := feed.NewInProcess()
	clock := &fakeClock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	feed.SetClock(b, clock.now)
	t.Cleanup(func() { _ = b.Close() })
	return b, clock
}

func inSubscribe(t *testing.T, b feed.Bus, session, turn string) feed.Subscription {
	t.Helper()
	s, err := b.Subscribe(context.Background(), session, turn)
	if err != nil {
		t.Fatalf("Subscribe(%q, %q): %v", session, turn, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func inPublish(t *testing.T, b feed.Bus, m feed.Message) {
	t.Helper()
	if err := b.Publish(context.Background(), m); err != nil {
		t.Fatalf("Publish: %v", err)
	}
}

// TestInProcessSeqPerTurn checks that in process Seq counts 1, 2, 3… in
// each turn separately, however the turns' messages interleave.
func TestInProcessSeqPerTurn(t *testing.T) {
	t.Parallel()
	b := feed.NewInProcess()
	t.Cleanup(func() { _ = b.Close() })
	ids := [][2]string{{"s1", "a"}, {"s1", "b"}, {"s2", "a"}}
	for i := range 30 {
		id := ids[i%len(ids)]
		inPublish(t, b, feedtest.Sample(id[0], id[1], i))
	}
	for k, id := range ids {
		got := feedtest.ReceiveN(t, inSubscribe(t, b, id[0], id[1]), 10)
		for j, m := range got {
			feedtest.CheckEqual(t, j, m, feedtest.Sample(id[0], id[1], k+j*len(ids)))
			if m.Seq != int64(j+1) {
				t.Fatalf("turn %v: message %d has Seq %d, want %d", id, j, m.Seq, j+1)
			}
		}
	}
}

// TestInProcessRetention checks that a turn's log outlives its last message
// and its last subscriber by Retention, and no longer.
func TestInProcessRetention(t *testing.T) {
	t.Parallel()
	b, clock := newClockedInProcess(t)
	b.Retention = time.Minute
	for i := range 3 {
		inPublish(t, b, feedtest.Sample("ret", "t", i))
	}
	// Kept while young.
	clock.advance(50 * time.Second)
	young := inSubscribe(t, b, "ret", "t")
	feedtest.ReceiveN(t, young, 3)
	_ = young.Close()

	// Kept while someone is subscribed, however long.
	holder := inSubscribe(t, b, "ret", "t")
	feedtest.ReceiveN(t, holder, 3)
	clock.advance(10 * time.Minute)
	late := inSubscribe(t, b, "ret", "t")
	feedtest.ReceiveN(t, late, 3)
	_ = late.Close()
	_ = holder.Close()

	// Kept for Retention after the last subscriber left.
	clock.advance(50 * time.Second)
	again := inSubscribe(t, b, "ret", "t")
	got := feedtest.ReceiveN(t, again, 3)
	for i, m := range got {
		feedtest.CheckEqual(t, i, m, feedtest.Sample("ret", "t", i))
	}
	_ = again.Close()

	// Other turns are swept on their own schedule: this one is fresh.
	inPublish(t, b, feedtest.Sample("ret", "fresh", 0))
	clock.advance(30 * time.Second)
	inPublish(t, b, feedtest.Sample("ret", "fresh", 1))

	// Gone after Retention without subscribers: a new subscriber gets
	// nothing old, only what is published from then on.
	clock.advance(31 * time.Second)
	s := inSubscribe(t, b, "ret", "t")
	feedtest.ExpectNothing(t, s, 50*time.Millisecond)
	inPublish(t, b, feedtest.Sample("ret", "t", 100))
	feedtest.CheckEqual(t, 0, feedtest.ReceiveN(t, s, 1)[0], feedtest.Sample("ret", "t", 100))
	feedtest.ExpectNothing(t, s, 20*time.Millisecond)

	fresh := feedtest.ReceiveN(t, inSubscribe(t, b, "ret", "fresh"), 2)
	feedtest.CheckEqual(t, 1, fresh[1], feedtest.Sample("ret", "fresh", 1))
}

// TestInProcessMaxTurnMessages checks that a turn's log keeps only its
// newest MaxTurnMessages, with Seq counting on, while a subscriber attached
// from the start still gets everything.
func TestInProcessMaxTurnMessages(t *testing.T) {
	t.Parallel()
	const max, n = 10, 25
	b := feed.NewInProcess()
	b.MaxTurnMessages = max
	t.Cleanup(func() { _ = b.Close() })
	early := inSubscribe(t, b, "cap", "t")
	for i := range n {
		inPublish(t, b, feedtest.Sample("cap", "t", i))
	}
	all := feedtest.ReceiveN(t, early, n)
	for i, m := range all {
		feedtest.CheckEqual(t, i, m, feedtest.Sample("cap", "t", i))
		if m.Seq != int64(i+1) {
			t.Fatalf("early subscriber: message %d has Seq %d, want %d", i, m.Seq, i+1)
		}
	}

	late := inSubscribe(t, b, "cap", "t")
	got := feedtest.ReceiveN(t, late, max)
	if got[0].Seq <= 1 {
		t.Fatalf("first retained Seq %d, want > 1 after dropping the oldest", got[0].Seq)
	}
	for j, m := range got {
		i := n - max + j
		feedtest.CheckEqual(t, j, m, feedtest.Sample("cap", "t", i))
		if m.Seq != int64(i+1) {
			t.Fatalf("late subscriber: message %d has Seq %d, want %d", j, m.Seq, i+1)
		}
	}
	feedtest.ExpectNothing(t, late, 20*time.Millisecond)
	inPublish(t, b, feedtest.Sample("cap", "t", n))
	if m := feedtest.ReceiveN(t, late, 1)[0]; m.Seq != n+1 {
		t.Fatalf("next message has Seq %d, want %d", m.Seq, n+1)
	}
}

// TestInProcessPublishAtCapIsCheap checks that publishing to a turn at its
// MaxTurnMessages costs about what publishing below it does (dropping the
// oldest message must not copy the whole log under the bus's lock).
func TestInProcessPublishAtCapIsCheap(t *testing.T) {
	t.Parallel()
	const max, extra = 20_000, 1_000
	b := feed.NewInProcess()
	b.MaxTurnMessages = max
	t.Cleanup(func() { _ = b.Close() })
	e := agent.Text("tok")
	m := feed.Message{Session: "s", Turn: "t", Kind: feed.KindEvent, Event: &e}
	start := time.Now()
	for range max {
		inPublish(t, b, m)
	}
	per := time.Since(start) / max
	budget := 50*per*extra + 200*time.Millisecond
	start = time.Now()
	for i := range extra {
		inPublish(t, b, m)
		if d := time.Since(start); d > budget {
			t.Fatalf("%d publishes at the cap took %v; %d below it took %v each", i+1, d, max, per)
		}
	}
	s := inSubscribe(t, b, "s", "t")
	if got := feedtest.ReceiveN(t, s, max); got[0].Seq != extra+1 || got[max-1].Seq != max+extra {
		t.Fatalf("retained Seqs %d..%d, want %d..%d", got[0].Seq, got[max-1].Seq, extra+1, max+extra)
	}
}

// BenchmarkPublishToReceive measures the latency from Publish to receipt by
// a subscriber, one message in flight at a time.
func BenchmarkPublishToReceive(b *testing.B) {
	run := func(b *testing.B, pub, sub feed.Bus) {
		ctx := context.Background()
		s, err := sub.Subscribe(ctx, "bench", "t")
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

// subjectCount is how many messages the stream of b holds for subject.
func subjectCount(t *testing.T, prefix, subject string) uint64 {
	t.Helper()
	nc, err := nats.Connect(natsURL, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, feed.StreamName(prefix))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[subject]
}

// NATS keeps a turn for the retention after its end, not each message for
// the retention after it was sent: a turn longer than the retention keeps
// its start; once it has ended, it is dropped after the retention.
func TestNATSRetentionIsPerTurn(t *testing.T) {
	natsAvailable(t)
	prefix := newNATSPrefix(t)
	const retention = time.Second
	mk := func(name string) *feed.NATS {
		b, err := feed.NewNATS(natsURL, feed.WithPrefix(prefix), feed.WithName(name), feed.WithRetention(retention))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	pub, sub := mk("feed-test-worker"), mk("feed-test-ingress")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	turn := []feed.Message{
		{Session: "s", Turn: "long", Kind: feed.KindAttempt, Step: 1, Attempt: 1},
		{Session: "s", Turn: "long", Kind: feed.KindEvent, Step: 1, Attempt: 1, Event: &agent.Event{Type: agent.TypeText, Delta: "start"}},
		{Session: "s", Turn: "long", Kind: feed.KindEnd, Step: 1, Marker: "long/m1"},
		{Session: "s", Turn: "long", Kind: feed.KindOutcome, Outcome: []byte(`{"turn":"long"}`)},
	}
	for i, m := range turn {
		if i == 2 {
			// Deliberate: the turn outlasts the retention (in the broker's
			// wall time) before it ends.
			time.Sleep(retention + 500*time.Millisecond)
		}
		if err := pub.Publish(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := sub.Subscribe(ctx, "s", "long")
	if err != nil {
		t.Fatal(err)
	}
	got := feedtest.ReceiveN(t, s, 1)
	_ = s.Close()
	if got[0].Kind != feed.KindAttempt {
		t.Fatalf("the turn's log starts with a %s message: its start was dropped while the turn ran", got[0].Kind)
	}
	subject := pub.Subject("s", "long")
	var kept uint64
	if !wait.Until(10*time.Second, func() bool { kept = subjectCount(t, prefix, subject); return kept == 0 }) {
		t.Fatalf("the ended turn's %d messages are still kept long after the retention", kept)
	}
}

// A feed URL's token or password never reaches an error (and so a log):
// the URL is shown with its user info masked.
func TestNATSErrorHidesTheToken(t *testing.T) {
	for _, u := range []string{"nats://tok-8e1f@127.0.0.1:1", "nats://user:tok-8e1f@127.0.0.1:1,nats://127.0.0.1:2"} {
		_, err := feed.NewNATS(u, feed.WithReconnectWait(time.Millisecond))
		if err == nil {
			t.Fatalf("%s: connected to nothing", u)
		}
		if strings.Contains(err.Error(), "tok-8e1f") {
			t.Errorf("the error shows the token: %v", err)
		}
		if !strings.Contains(err.Error(), "127.0.0.1:1") {
			t.Errorf("the error no longer says where: %v", err)
		}
	}
}
