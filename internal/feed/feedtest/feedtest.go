// Package feedtest is a conformance suite for feed.Bus implementations.
package feedtest

import (
	"context"
	"encoding/json"
	"fmt"
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
		{"SessionIsolation", testSessionIsolation},
		{"TwoSubscribers", testTwoSubscribers},
		{"SlowSubscriberDoesNotBlockPublisher", testSlowSubscriber},
		{"CloseClosesChannel", testCloseClosesChannel},
		{"CloseOneOfTwo", testCloseOneOfTwo},
		{"BusCloseClosesSubscriptions", testBusClose},
		{"NoDeliveryBeforeSubscribe", testNoDeliveryBeforeSubscribe},
		{"FlushThenDelivered", testFlushThenDelivered},
		{"EmptySessionRejected", testEmptySession},
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

func subscribe(t *testing.T, b feed.Bus, session string) feed.Subscription {
	t.Helper()
	s, err := b.Subscribe(ctxT(t), session)
	if err != nil {
		t.Fatalf("Subscribe(%q): %v", session, err)
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

// receive waits for the next message on s.
func receive(t *testing.T, s feed.Subscription, timer <-chan time.Time) feed.Message {
	t.Helper()
	select {
	case m, ok := <-s.C():
		if !ok {
			t.Fatal("subscription channel closed early")
		}
		return m
	case <-timer:
		t.Fatal("timed out waiting for a message")
	}
	return feed.Message{}
}

// receiveN receives n messages within waitTimeout.
func receiveN(t *testing.T, s feed.Subscription, n int) []feed.Message {
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

// expectNothing asserts that s delivers nothing within d.
func expectNothing(t *testing.T, s feed.Subscription, d time.Duration) {
	t.Helper()
	select {
	case m, ok := <-s.C():
		if ok {
			t.Fatalf("unexpected message %+v", m)
		}
	case <-time.After(d):
	}
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

// sample returns the i-th message of a deterministic mixed stream.
func sample(session string, i int) feed.Message {
	m := feed.Message{Session: session, Turn: "turn-" + strconv.Itoa(i/100), Step: i % 7}
	evs := AllEvents()
	switch i % 13 {
	case 11:
		m.Kind, m.Attempt, m.MaxAttempts = feed.KindAttempt, 2, 3
	case 12:
		m.Kind, m.Marker = feed.KindEnd, "marker-"+strconv.Itoa(i)
	default:
		m.Kind = feed.KindEvent
		e := *evs[i%13%len(evs)]
		if e.Type == agent.TypeText {
			e.Delta = fmt.Sprintf("%s #%d", e.Delta, i)
		}
		m.Event = &e
	}
	return m
}

func checkEqual(t *testing.T, i int, got, want feed.Message) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(want)
		t.Fatalf("message %d:\n got  %s\n want %s\n (got %#v, want %#v)", i, gj, wj, got.Event, want.Event)
	}
}

func testOrder(t *testing.T, newBus NewBusFunc) {
	pub, sub := newBus(t)
	const n = 1000
	s := subscribe(t, sub, "order")
	for i := range n {
		publish(t, pub, sample("order", i))
	}
	flush(t, pub)
	for i, m := range receiveN(t, s, n) {
		checkEqual(t, i, m, sample("order", i))
	}
}

func testEventRoundTrip(t *testing.T, newBus NewBusFunc) {
	pub, sub := newBus(t)
	s := subscribe(t, sub, "events")
	evs := AllEvents()
	for i, e := range evs {
		publish(t, pub, feed.Message{Session: "events", Turn: "t", Kind: feed.KindEvent, Step: i, Event: e})
	}
	flush(t, pub)
	for i, m := range receiveN(t, s, len(evs)) {
		if m.Event == nil {
			t.Fatalf("message %d has no event", i)
		}
		if !reflect.DeepEqual(*m.Event, *evs[i]) {
			t.Fatalf("event %d (%s) did not round-trip:\n got  %#v\n want %#v", i, evs[i].Type, *m.Event, *evs[i])
		}
	}
}

// OddSessions are session IDs that naive subject mappings get wrong.
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

func testSessionIsolation(t *testing.T, newBus NewBusFunc) {
	pub, sub := newBus(t)
	const per = 20
	subs := make([]feed.Subscription, len(OddSessions))
	for i, sess := range OddSessions {
		subs[i] = subscribe(t, sub, sess)
	}
	for j := range per {
		for _, sess := range OddSessions {
			publish(t, pub, feed.Message{Session: sess, Turn: strconv.Itoa(j), Kind: feed.KindEvent, Event: ev(agent.Text(sess))})
		}
	}
	// A final end marker per session: anything leaked from another session
	// would arrive before it.
	for _, sess := range OddSessions {
		publish(t, pub, feed.Message{Session: sess, Turn: "last", Kind: feed.KindEnd})
	}
	flush(t, pub)
	for i, sess := range OddSessions {
		got := receiveN(t, subs[i], per+1)
		for j, m := range got[:per] {
			if m.Session != sess || m.Turn != strconv.Itoa(j) || m.Event == nil || m.Event.Delta != sess {
				t.Fatalf("session %q: message %d is %+v", sess, j, m)
			}
		}
		if last := got[per]; last.Session != sess || last.Kind != feed.KindEnd {
			t.Fatalf("session %q: expected end marker, got %+v", sess, last)
		}
		expectNothing(t, subs[i], 20*time.Millisecond)
	}
}

func testTwoSubscribers(t *testing.T, newBus NewBusFunc) {
	pub, sub := newBus(t)
	const n = 200
	a := subscribe(t, sub, "shared")
	b := subscribe(t, sub, "shared")
	for i := range n {
		publish(t, pub, sample("shared", i))
	}
	flush(t, pub)
	for _, s := range []feed.Subscription{a, b} {
		for i, m := range receiveN(t, s, n) {
			checkEqual(t, i, m, sample("shared", i))
		}
	}
}

func testSlowSubscriber(t *testing.T, newBus NewBusFunc) {
	pub, sub := newBus(t)
	const n = 10000
	s := subscribe(t, sub, "slow")
	done := make(chan error, 1)
	go func() {
		ctx := context.Background()
		for i := range n {
			m := feed.Message{Session: "slow", Turn: "t", Kind: feed.KindEvent, Step: i, Event: ev(agent.Text(strconv.Itoa(i)))}
			if err := pub.Publish(ctx, m); err != nil {
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
	for i, m := range receiveN(t, s, n) {
		if m.Step != i || m.Event == nil || m.Event.Delta != strconv.Itoa(i) {
			t.Fatalf("message %d out of order: %+v", i, m)
		}
	}
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
	s := subscribe(t, sub, "close")
	// Leave undelivered messages queued: Close must still close the channel.
	for i := range 100 {
		publish(t, pub, sample("close", i))
	}
	flush(t, pub)
	receiveN(t, s, 1)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	waitClosed(t, s)
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	// Publishing to a session without subscribers is fine.
	publish(t, pub, sample("close", 0))
	flush(t, pub)
}

func testCloseOneOfTwo(t *testing.T, newBus NewBusFunc) {
	pub, sub := newBus(t)
	a := subscribe(t, sub, "pair")
	b := subscribe(t, sub, "pair")
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	waitClosed(t, a)
	publish(t, pub, sample("pair", 1))
	flush(t, pub)
	checkEqual(t, 0, receiveN(t, b, 1)[0], sample("pair", 1))
}

func testBusClose(t *testing.T, newBus NewBusFunc) {
	_, sub := newBus(t)
	a := subscribe(t, sub, "bus-close-a")
	b := subscribe(t, sub, "bus-close-b")
	if err := sub.Close(); err != nil {
		t.Fatalf("bus Close: %v", err)
	}
	waitClosed(t, a)
	waitClosed(t, b)
	if _, err := sub.Subscribe(ctxT(t), "after-close"); err == nil {
		t.Fatal("Subscribe on a closed bus succeeded")
	}
	if err := sub.Close(); err != nil {
		t.Fatalf("second bus Close: %v", err)
	}
}

func testNoDeliveryBeforeSubscribe(t *testing.T, newBus NewBusFunc) {
	pub, sub := newBus(t)
	publish(t, pub, feed.Message{Session: "late", Turn: "before", Kind: feed.KindEvent, Event: ev(agent.Text("early"))})
	flush(t, pub)
	s := subscribe(t, sub, "late")
	publish(t, pub, feed.Message{Session: "late", Turn: "after", Kind: feed.KindEvent, Event: ev(agent.Text("late"))})
	flush(t, pub)
	if m := receiveN(t, s, 1)[0]; m.Turn != "after" {
		t.Fatalf("got %+v, want only the message published after Subscribe", m)
	}
	expectNothing(t, s, 50*time.Millisecond)
}

func testFlushThenDelivered(t *testing.T, newBus NewBusFunc) {
	pub, sub := newBus(t)
	s := subscribe(t, sub, "flush")
	want := feed.Message{Session: "flush", Turn: "t", Kind: feed.KindEnd, Marker: "m1"}
	publish(t, pub, want)
	flush(t, pub)
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	checkEqual(t, 0, receive(t, s, timer.C), want)
}

func testEmptySession(t *testing.T, newBus NewBusFunc) {
	pub, sub := newBus(t)
	if err := pub.Publish(ctxT(t), feed.Message{Kind: feed.KindEnd}); err == nil {
		t.Error("Publish with an empty session succeeded")
	}
	if s, err := sub.Subscribe(ctxT(t), ""); err == nil {
		_ = s.Close()
		t.Error("Subscribe to an empty session succeeded")
	}
}
