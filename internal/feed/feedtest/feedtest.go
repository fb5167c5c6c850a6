// Package feedtest is a conformance suite for feed.Bus implementations.
//
// A bus keeps each turn as a log: Subscribe(ctx, session, turn) delivers the
// turn's retained messages from its start, then its live ones, in log order,
// each with its position in the log (Seq, increasing, the same for every
// consumer). Messages of other turns and sessions are never delivered.
package feedtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/feed"
)

// waitTimeout bounds every wait for a delivery in the suite.
const waitTimeout = 20 * time.Second

// NewBusFunc returns the buses for one test case: pub publishes and sub
// subscribes. They may be the same bus (in process) or two connections (like
// a worker and an ingress in two processes). The function registers cleanup
// of both with t.
type NewBusFunc func(t *testing.T) (pub feed.Bus, sub feed.Bus)

// Run runs the conformance suite against the buses returned by newBus.
func Run(t *testing.T, newBus NewBusFunc) {
	cases := []struct {
		name string
		fn   func(t *testing.T, newBus NewBusFunc)
	}{
		{"Order", testOrder},
		{"AllEventTypesRoundTrip", testEventRoundTrip},
		{"TurnIsolation", testTurnIsolation},
		{"TwoSubscribers", testTwoSubscribers},
		{"SlowSubscriberDoesNotBlockPublisher", testSlowSubscriber},
		{"CloseClosesChannel", testCloseClosesChannel},
		{"CloseOneOfTwo", testCloseOneOfTwo},
		{"BusCloseClosesSubscriptions", testBusClose},
		{"FlushThenDelivered", testFlushThenDelivered},
		{"EmptySessionOrTurnRejected", testEmptySessionOrTurn},
		{"ReplayFromStart", testReplayFromStart},
		{"AttachMidStream", testAttachMidStream},
		{"SeqSameForEveryConsumer", testSeqSameForEveryConsumer},
		{"StopReachesWatchers", testStopReachesWatchers},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, newBus)
		})
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

func subscribe(t *testing.T, b feed.Bus, session, turn string) feed.Subscription {
	t.Helper()
	s, err := b.Subscribe(ctxT(t), session, turn)
	if err != nil {
		t.Fatalf("Subscribe(%q, %q): %v", session, turn, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func publish(t *testing.T, b feed.Bus, m feed.Message) {
	t.Helper()
	if err := b.Publish(ctxT(t), m); err != nil {
		t.Fatalf("Publish(%+v): %v", m, err)
	}
}

func flush(t *testing.T, b feed.Bus) {
	t.Helper()
	if err := b.Flush(ctxT(t)); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}

// ReceiveN receives n messages from s within the suite's wait timeout and
// fails t if the channel closes or the time runs out first.
func ReceiveN(t *testing.T, s feed.Subscription, n int) []feed.Message {
	t.Helper()
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	out := make([]feed.Message, 0, n)
	for len(out) < n {
		select {
		case m, ok := <-s.C():
			if !ok {
				t.Fatalf("subscription channel closed after %d of %d messages", len(out), n)
			}
			out = append(out, m)
		case <-timer.C:
			t.Fatalf("timed out after %d of %d messages", len(out), n)
		}
	}
	return out
}

// ExpectNothing asserts that s delivers no message within d (a closed
// channel counts as nothing).
func ExpectNothing(t *testing.T, s feed.Subscription, d time.Duration) {
	t.Helper()
	select {
	case m, ok := <-s.C():
		if ok {
			t.Fatalf("unexpected message %s (Seq %d)", js(m), m.Seq)
		}
	case <-time.After(d):
	}
}

// CheckSeqIncreasing fails t unless the messages' Seqs are positive and
// strictly increasing, starting above after.
func CheckSeqIncreasing(t *testing.T, after int64, msgs []feed.Message) {
	t.Helper()
	prev := after
	for i, m := range msgs {
		if m.Seq <= 0 || m.Seq <= prev {
			t.Fatalf("message %d: Seq %d after %d, want positive and strictly increasing", i, m.Seq, prev)
		}
		prev = m.Seq
	}
}

// SameContent reports whether got equals want, ignoring Seq (set by the bus).
func SameContent(got, want feed.Message) bool {
	got.Seq, want.Seq = 0, 0
	return reflect.DeepEqual(got, want)
}

// CheckEqual fails t unless got equals want, ignoring Seq.
func CheckEqual(t *testing.T, i int, got, want feed.Message) {
	t.Helper()
	if !SameContent(got, want) {
		t.Fatalf("message %d:\n got  %s\n want %s\n (got %#v, want %#v)", i, js(got), js(want), got.Event, want.Event)
	}
}

func js(m feed.Message) string {
	b, _ := json.Marshal(m)
	return string(b)
}

func ev(e agent.Event) *agent.Event { return &e }

// AllEvents returns one event of every agent event type, plus an unknown type
// that relays must pass through.
func AllEvents() []*agent.Event {
	return []*agent.Event{
		ev(agent.Text("hello, wörld <&> \"quoted\" \\ \n\t 🚀")),
		ev(agent.Thinking("let me think…")),
		ev(agent.ToolStarted("call_1", "bash", json.RawMessage(`{"command":"ls -la","timeout":5}`))),
		ev(agent.ToolEnded("call_1", true, "exit code 2\nstderr…")),
		ev(agent.ToolEnded("call_2", false, "")),
		ev(agent.Event{Type: agent.TypeRetrying, Attempt: 2, MaxAttempts: 5, DelayMs: 1500, Reason: "rate limited"}),
		ev(agent.Completed(json.RawMessage(`{"answer":42,"list":[1,"two",null]}`))),
		ev(agent.Completed(nil)),
		ev(agent.Failed("boom", true, agent.CodeSessionBusy)),
		ev(agent.Failed("plain", false, "")),
		ev(agent.Event{Type: "future_type", Extra: map[string]json.RawMessage{
			"x": json.RawMessage(`1`), "nested": json.RawMessage(`{"a":[true,false]}`),
		}}),
	}
}

// Sample returns the i-th message of a deterministic mixed stream of one
// turn: events of every type, attempt announcements, end markers, attach
// announcements and outcomes.
func Sample(session, turn string, i int) feed.Message {
	m := feed.Message{Session: session, Turn: turn, Step: i % 7}
	evs := AllEvents()
	switch i % 15 {
	case 11:
		m.Kind, m.Attempt, m.MaxAttempts = feed.KindAttempt, 2, 3
	case 12:
		m.Kind, m.Marker = feed.KindEnd, "marker-"+strconv.Itoa(i)
	case 13:
		m.Kind, m.Attach = feed.KindAttach, "consumer-"+strconv.Itoa(i)
	case 14:
		m.Kind, m.Outcome = feed.KindOutcome, json.RawMessage(`{"status":"completed","n":`+strconv.Itoa(i)+`}`)
	default:
		m.Kind = feed.KindEvent
		e := *evs[i%15%len(evs)]
		if e.Type == agent.TypeText {
			e.Delta = fmt.Sprintf("%s #%d", e.Delta, i)
		}
		m.Event = &e
	}
	return m
}

// delta is message i of a stream of text deltas of one turn.
func delta(session, turn string, i int) feed.Message {
	return feed.Message{Session: session, Turn: turn, Kind: feed.KindEvent, Step: 1, Event: ev(agent.Text(strconv.Itoa(i)))}
}

// checkDeltas fails t unless msgs are deltas from..from+len(msgs)-1 of the
// turn, in order, with strictly increasing Seqs.
func checkDeltas(t *testing.T, session, turn string, from int, msgs []feed.Message) {
	t.Helper()
	for i, m := range msgs {
		if !SameContent(m, delta(session, turn, from+i)) {
			t.Fatalf("message %d: got %s, want delta %d (duplicate, gap or reorder)", i, js(m), from+i)
		}
	}
	CheckSeqIncreasing(t, 0, msgs)
}

func testOrder(t *testing.T, newBus NewBusFunc) {
	pub, sub := newBus(t)
	const n = 1000
	s := subscribe(t, sub, "order", "t1")
	for i := range n {
		publish(t, pub, Sample("order", "t1", i))
	}
	flush(t, pub)
	got := ReceiveN(t, s, n)
	for i, m := range got {
		CheckEqual(t, i, m, Sample("order", "t1", i))
	}
	CheckSeqIncreasing(t, 0, got)
	ExpectNothing(t, s, 20*time.Millisecond)
}

func testEventRoundTrip(t *testing.T, newBus NewBusFunc) {
	pub, sub := newBus(t)
	s := subscribe(t, sub, "events", "t")
	evs := AllEvents()
	for i, e := range evs {
		publish(t, pub, feed.Message{Session: "events", Turn: "t", Kind: feed.KindEvent, Step: i, Event: e})
	}
	flush(t, pub)
	for i, m := range ReceiveN(t, s, len(evs)) {
		if m.Event == nil {
			t.Fatalf("message %d has no event", i)
		}
		if !reflect.DeepEqual(*m.Event, *evs[i]) {
			t.Fatalf("event %d (%s) did not round-trip:\n got  %#v\n want %#v", i, evs[i].Type, *m.Event, *evs[i])
		}
	}
}

// OddSessions are IDs (of sessions and of turns) that naive subject or key
// mappings get wrong.
var OddSessions = []string{
	"slack:T1:C2:1700000000.0001",
	"a.b*c>d",
	"a.b",
	"a_b",
	"a b",
	"*",
	">",
	"A",
	"a",
	"会话-🚀-ünïcødé",
	"-1001234567890",
	"with\nnewline\tand\x00nul",
	string(make([]byte, 300)),
}

type turnID struct{ session, turn string }

// isolationTurns are the (session, turn) pairs of TurnIsolation: every odd ID
// as a session with two odd turn IDs (so that each turn ID is also used by
// another session, and each session has two turns), plus pairs that collide
// when session and turn are joined naively.
func isolationTurns() []turnID {
	n := len(OddSessions)
	var ids []turnID
	for i, s := range OddSessions {
		ids = append(ids, turnID{s, OddSessions[i]}, turnID{s, OddSessions[(i+1)%n]})
	}
	return append(ids,
		turnID{"a.b", "c"}, turnID{"a", "b.c"},
		turnID{"a:b", "c"}, turnID{"a", "b:c"},
		turnID{"a b", "c"}, turnID{"a", "b c"},
		turnID{"a/b", "c"}, turnID{"a", "b/c"},
	)
}

func testTurnIsolation(t *testing.T, newBus NewBusFunc) {
	pub, sub := newBus(t)
	const per = 10
	ids := isolationTurns()
	msg := func(id turnID, j int) feed.Message {
		return feed.Message{Session: id.session, Turn: id.turn, Kind: feed.KindEvent, Step: j, Event: ev(agent.Text(fmt.Sprintf("%q/%q", id.session, id.turn)))}
	}
	// Half the messages are retained before anyone subscribes, half are
	// live: neither path may leak.
	for j := range per / 2 {
		for _, id := range ids {
			publish(t, pub, msg(id, j))
		}
	}
	flush(t, pub)
	subs := make([]feed.Subscription, len(ids))
	for i, id := range ids {
		subs[i] = subscribe(t, sub, id.session, id.turn)
	}
	for j := per / 2; j < per; j++ {
		for _, id := range ids {
			publish(t, pub, msg(id, j))
		}
	}
	// A final end marker per turn: anything leaked from another turn
	// published before it would arrive before it.
	for _, id := range ids {
		publish(t, pub, feed.Message{Session: id.session, Turn: id.turn, Kind: feed.KindEnd})
	}
	flush(t, pub)
	for i, id := range ids {
		got := ReceiveN(t, subs[i], per+1)
		for j, m := range got[:per] {
			if !SameContent(m, msg(id, j)) {
				t.Fatalf("turn %q of session %q: message %d is %s, want %s", id.turn, id.session, j, js(m), js(msg(id, j)))
			}
		}
		if last := got[per]; last.Session != id.session || last.Turn != id.turn || last.Kind != feed.KindEnd {
			t.Fatalf("turn %q of session %q: expected its end marker, got %s", id.turn, id.session, js(last))
		}
		CheckSeqIncreasing(t, 0, got)
	}
	// Nothing after the end markers either (the end markers of turns
	// published later would show up here).
	time.Sleep(50 * time.Millisecond)
	for i, id := range ids {
		select {
		case m, ok := <-subs[i].C():
			if ok {
				t.Fatalf("turn %q of session %q: unexpected message %s", id.turn, id.session, js(m))
			}
		default:
		}
	}
}

func testTwoSubscribers(t *testing.T, newBus NewBusFunc) {
	pub, sub := newBus(t)
	const n = 200
	a := subscribe(t, sub, "shared", "t")
	b := subscribe(t, sub, "shared", "t")
	for i := range n {
		publish(t, pub, Sample("shared", "t", i))
	}
	flush(t, pub)
	ga, gb := ReceiveN(t, a, n), ReceiveN(t, b, n)
	for i := range n {
		CheckEqual(t, i, ga[i], Sample("shared", "t", i))
		CheckEqual(t, i, gb[i], Sample("shared", "t", i))
		if ga[i].Seq != gb[i].Seq {
			t.Fatalf("message %d: Seq %d for one subscriber, %d for the other", i, ga[i].Seq, gb[i].Seq)
		}
	}
	CheckSeqIncreasing(t, 0, ga)
}

func testSlowSubscriber(t *testing.T, newBus NewBusFunc) {
	pub, sub := newBus(t)
	const n = 10000
	s := subscribe(t, sub, "slow", "t")
	done := make(chan error, 1)
	go func() {
		ctx := context.Background()
		for i := range n {
			if err := pub.Publish(ctx, delta("slow", "t", i)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Publish: %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("publisher blocked by a subscriber that does not read")
	}
	flush(t, pub)
	// Leave the subscriber unread a little longer so the broker has
	// delivered everything into its queue.
	time.Sleep(100 * time.Millisecond)
	checkDeltas(t, "slow", "t", 0, ReceiveN(t, s, n))
}

// waitClosed drains s.C() until it is closed.
func waitClosed(t *testing.T, s feed.Subscription) {
	t.Helper()
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	for {
		select {
		case _, ok := <-s.C():
			if !ok {
				return
			}
		case <-timer.C:
			t.Fatal("subscription channel not closed")
		}
	}
}

func testCloseClosesChannel(t *testing.T, newBus NewBusFunc) {
	pub, sub := newBus(t)
	s := subscribe(t, sub, "close", "t")
	// Leave undelivered messages queued: Close must still close the channel.
	for i := range 100 {
		publish(t, pub, Sample("close", "t", i))
	}
	flush(t, pub)
	ReceiveN(t, s, 1)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	waitClosed(t, s)
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	// Publishing to a turn without subscribers is fine.
	publish(t, pub, Sample("close", "t", 0))
	flush(t, pub)
}

func testCloseOneOfTwo(t *testing.T, newBus NewBusFunc) {
	pub, sub := newBus(t)
	a := subscribe(t, sub, "pair", "t")
	b := subscribe(t, sub, "pair", "t")
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	waitClosed(t, a)
	publish(t, pub, Sample("pair", "t", 1))
	publish(t, pub, Sample("pair", "t", 2))
	flush(t, pub)
	got := ReceiveN(t, b, 2)
	CheckEqual(t, 0, got[0], Sample("pair", "t", 1))
	CheckEqual(t, 1, got[1], Sample("pair", "t", 2))
}

func testBusClose(t *testing.T, newBus NewBusFunc) {
	_, sub := newBus(t)
	a := subscribe(t, sub, "bus-close-a", "t")
	b := subscribe(t, sub, "bus-close-b", "t")
	c := subscribe(t, sub, "bus-close-a", "t2")
	if err := sub.Close(); err != nil {
		t.Fatalf("bus Close: %v", err)
	}
	waitClosed(t, a)
	waitClosed(t, b)
	waitClosed(t, c)
	if s, err := sub.Subscribe(ctxT(t), "after-close", "t"); !errors.Is(err, feed.ErrClosed) {
		if err == nil {
			_ = s.Close()
		}
		t.Fatalf("Subscribe on a closed bus: error %v, want ErrClosed", err)
	}
	if err := sub.Publish(ctxT(t), feed.Message{Session: "after-close", Turn: "t", Kind: feed.KindEnd}); !errors.Is(err, feed.ErrClosed) {
		t.Fatalf("Publish on a closed bus: error %v, want ErrClosed", err)
	}
	if err := sub.Flush(ctxT(t)); !errors.Is(err, feed.ErrClosed) {
		t.Fatalf("Flush on a closed bus: error %v, want ErrClosed", err)
	}
	if err := sub.Close(); err != nil {
		t.Fatalf("second bus Close: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("subscription Close after bus Close: %v", err)
	}
}

func testFlushThenDelivered(t *testing.T, newBus NewBusFunc) {
	pub, sub := newBus(t)
	s := subscribe(t, sub, "flush", "t")
	want := feed.Message{Session: "flush", Turn: "t", Kind: feed.KindEnd, Marker: "m1"}
	publish(t, pub, want)
	flush(t, pub)
	got := ReceiveN(t, s, 1)
	CheckEqual(t, 0, got[0], want)
	CheckSeqIncreasing(t, 0, got)
}

func testEmptySessionOrTurn(t *testing.T, newBus NewBusFunc) {
	pub, sub := newBus(t)
	for _, m := range []feed.Message{
		{Kind: feed.KindEnd},
		{Turn: "t", Kind: feed.KindEnd},
		{Session: "s", Kind: feed.KindEnd},
	} {
		if err := pub.Publish(ctxT(t), m); err == nil {
			t.Errorf("Publish with session %q, turn %q succeeded", m.Session, m.Turn)
		}
	}
	for _, id := range []turnID{{"", ""}, {"", "t"}, {"s", ""}} {
		if s, err := sub.Subscribe(ctxT(t), id.session, id.turn); err == nil {
			_ = s.Close()
			t.Errorf("Subscribe with session %q, turn %q succeeded", id.session, id.turn)
		}
	}
	// The bus still works.
	s := subscribe(t, sub, "s", "t")
	publish(t, pub, Sample("s", "t", 0))
	flush(t, pub)
	CheckEqual(t, 0, ReceiveN(t, s, 1)[0], Sample("s", "t", 0))
}

func testReplayFromStart(t *testing.T, newBus NewBusFunc) {
	pub, sub := newBus(t)
	const n, live = 50, 20
	for i := range n {
		publish(t, pub, Sample("replay", "t", i))
	}
	// Another turn of the same session, before and after: not replayed.
	publish(t, pub, Sample("replay", "other", 0))
	flush(t, pub)
	s := subscribe(t, sub, "replay", "t")
	old := ReceiveN(t, s, n)
	for i, m := range old {
		CheckEqual(t, i, m, Sample("replay", "t", i))
	}
	CheckSeqIncreasing(t, 0, old)
	ExpectNothing(t, s, 20*time.Millisecond)
	for i := n; i < n+live; i++ {
		publish(t, pub, Sample("replay", "t", i))
		publish(t, pub, Sample("replay", "other", i))
	}
	flush(t, pub)
	got := ReceiveN(t, s, live)
	for i, m := range got {
		CheckEqual(t, n+i, m, Sample("replay", "t", n+i))
	}
	CheckSeqIncreasing(t, old[n-1].Seq, got)
	ExpectNothing(t, s, 50*time.Millisecond)
}

func testAttachMidStream(t *testing.T, newBus NewBusFunc) {
	pub, sub := newBus(t)
	const n, rounds = 200, 3
	for r := range rounds {
		turn := "t" + strconv.Itoa(r)
		at := 1 + rand.IntN(n-2) // attach after this many were published
		reached := make(chan struct{})
		published := make(chan int, n)
		done := make(chan error, 1)
		go func() {
			ctx := context.Background()
			for i := range n {
				if err := pub.Publish(ctx, delta("mid", turn, i)); err != nil {
					done <- err
					return
				}
				published <- i
				if i+1 == at {
					close(reached)
				}
				// Slow enough that Subscribe lands inside the stream.
				time.Sleep(100 * time.Microsecond)
			}
			done <- pub.Flush(ctx)
		}()
		select {
		case <-reached:
		case err := <-done:
			t.Fatalf("publisher: %v", err)
		case <-time.After(waitTimeout):
			t.Fatal("publisher stuck")
		}
		s := subscribe(t, sub, "mid", turn)
		attachedAfter := len(published)
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("publisher: %v", err)
			}
		case <-time.After(waitTimeout):
			t.Fatal("publisher stuck")
		}
		t.Logf("round %d: subscribed after %d (returned after %d) of %d deltas", r, at, attachedAfter, n)
		checkDeltas(t, "mid", turn, 0, ReceiveN(t, s, n))
		ExpectNothing(t, s, 50*time.Millisecond)
	}
}

func testSeqSameForEveryConsumer(t *testing.T, newBus NewBusFunc) {
	pub, sub := newBus(t)
	const n = 100
	early := subscribe(t, sub, "seq", "t")
	for i := range n / 2 {
		publish(t, pub, Sample("seq", "t", i))
	}
	flush(t, pub)
	middle := subscribe(t, sub, "seq", "t")
	for i := n / 2; i < n; i++ {
		publish(t, pub, Sample("seq", "t", i))
	}
	flush(t, pub)
	// A late consumer, on the publisher's side when that is another
	// connection: the cursor is the bus's, not the connection's.
	late := subscribe(t, pub, "seq", "t")
	ge, gm, gl := ReceiveN(t, early, n), ReceiveN(t, middle, n), ReceiveN(t, late, n)
	for i := range n {
		want := Sample("seq", "t", i)
		CheckEqual(t, i, ge[i], want)
		CheckEqual(t, i, gm[i], want)
		CheckEqual(t, i, gl[i], want)
		if ge[i].Seq != gm[i].Seq || ge[i].Seq != gl[i].Seq {
			t.Fatalf("message %d: Seq %d (subscribed first), %d (midway), %d (last)", i, ge[i].Seq, gm[i].Seq, gl[i].Seq)
		}
	}
	CheckSeqIncreasing(t, 0, ge)
}

// A stop published on one bus closes the watches of that turn on the other
// (and only of that turn); a watch registered after the notice is closed at
// once; a released watch is not required to close.
func testStopReachesWatchers(t *testing.T, newBus NewBusFunc) {
	pub, sub := newBus(t)
	ctx := ctxT(t)
	stopped, release := sub.WatchStop("s-stop", "t1")
	defer release()
	other, releaseOther := sub.WatchStop("s-stop", "t2")
	defer releaseOther()
	sameTurnOtherSession, releaseOS := sub.WatchStop("s-other", "t1")
	defer releaseOS()
	if err := pub.Stop(ctx, "s-stop", "t1"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stopped:
	case <-time.After(waitTimeout):
		t.Fatal("the watch of the stopped turn was not closed")
	}
	// The notice that closed the watch has been handled; the other watches
	// would have been closed by the same handling.
	select {
	case <-other:
		t.Error("a stop of turn t1 closed the watch of turn t2")
	case <-sameTurnOtherSession:
		t.Error("a stop of session s-stop closed a watch of session s-other")
	default:
	}
	late, releaseLate := sub.WatchStop("s-stop", "t1")
	defer releaseLate()
	select {
	case <-late:
	default:
		t.Error("a watch registered after the stop was not closed at once")
	}
	if err := pub.Stop(ctx, "", "t1"); err == nil {
		t.Error("a stop without a session was accepted")
	}
}
