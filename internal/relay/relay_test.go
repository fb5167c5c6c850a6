package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/relay"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

func ev(e agent.Event) *agent.Event { return &e }

// turnLog publishes msgs as turn t1 of session s on a fresh in-process bus.
func turnLog(t *testing.T, msgs []feed.Message) *feed.InProcess {
	t.Helper()
	bus := feed.NewInProcess()
	t.Cleanup(func() { _ = bus.Close() })
	for _, m := range msgs {
		m.Session, m.Turn = "s", "t1"
		if err := bus.Publish(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	return bus
}

// relayLog relays turn t1 of bus with the terminal already known.
func relayLog(t *testing.T, bus feed.Bus, term relay.Terminal, opt relay.Options) []agent.Event {
	t.Helper()
	sub, err := bus.Subscribe(context.Background(), "s", "t1")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	out := make(chan relay.Terminal, 1)
	out <- term
	var got []agent.Event
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !relay.Run(ctx, sub, out, opt, func(e agent.Event) bool { got = append(got, e); return true }) {
		t.Fatal("relay did not finish")
	}
	return got
}

func types(evs []agent.Event) []string {
	var out []string
	for _, e := range evs {
		s := e.Type
		if e.Delta != "" {
			s += ":" + e.Delta
		}
		if e.Type == agent.TypeRetrying {
			s += fmt.Sprintf(":step%d", e.Step)
		}
		out = append(out, s)
	}
	return out
}

func same(t *testing.T, got, want []string) {
	t.Helper()
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}

func completed(steps int, marker string) relay.Terminal {
	return relay.Terminal{Event: agent.Completed(nil), Marker: marker, Steps: steps, Completed: true}
}

func TestRelaySynthesizesRetryingAfterPartialText(t *testing.T) {
	t.Parallel()
	bus := turnLog(t, []feed.Message{
		{Kind: feed.KindAttempt, Step: 1, Attempt: 1, MaxAttempts: 6},
		{Kind: feed.KindEvent, Step: 1, Attempt: 1, Event: ev(agent.Text("part"))},
		{Kind: feed.KindAttempt, Step: 1, Attempt: 2, MaxAttempts: 6},
		{Kind: feed.KindEvent, Step: 1, Attempt: 1, Event: ev(agent.Text("late"))}, // superseded attempt
		{Kind: feed.KindEvent, Step: 1, Attempt: 2, Event: ev(agent.Text("whole"))},
		{Kind: feed.KindEnd, Step: 1, Marker: "t1/m1"},
	})
	got := relayLog(t, bus, completed(1, "t1/m1"), relay.Options{})
	same(t, types(got), []string{"text:part", "retrying:step1", "text:whole", "completed"})
	if a := agent.AnswerText(got); a != "whole" {
		t.Fatalf("answer %q", a)
	}
}

// Step 1 streams text and calls a tool; step 2 is cut and retried: the
// retrying names step 2, and every client keeps step 1's text.
func TestRelayRetryingNamesItsStep(t *testing.T) {
	t.Parallel()
	bus := turnLog(t, []feed.Message{
		{Kind: feed.KindAttempt, Step: 1, Attempt: 1},
		{Kind: feed.KindEvent, Step: 1, Attempt: 1, Event: ev(agent.Text("I'll check the file."))},
		{Kind: feed.KindEnd, Step: 1, Marker: "t1/m1"},
		{Kind: feed.KindEvent, Step: 1, Event: ev(agent.ToolStarted("c1", "read", nil))},
		{Kind: feed.KindEvent, Step: 1, Event: ev(agent.ToolEnded("c1", false, "hi"))},
		{Kind: feed.KindEnd, Marker: "t1/t/c1"},
		{Kind: feed.KindAttempt, Step: 2, Attempt: 1},
		{Kind: feed.KindEvent, Step: 2, Attempt: 1, Event: ev(agent.Text("It sa"))},
		{Kind: feed.KindAttempt, Step: 2, Attempt: 2},
		{Kind: feed.KindEvent, Step: 2, Attempt: 2, Event: ev(agent.Text("It says hi."))},
		{Kind: feed.KindEnd, Step: 2, Marker: "t1/m2"},
	})
	got := relayLog(t, bus, completed(2, "t1/m2"), relay.Options{})
	if a := agent.AnswerText(got); a != "I'll check the file.It says hi." {
		t.Fatalf("answer %q (events %q)", a, types(got))
	}
	for _, e := range got {
		if e.Type == agent.TypeRetrying && e.Step != 2 {
			t.Fatalf("retrying names step %d, want 2", e.Step)
		}
	}
}

func TestRelayNoRetryingWithoutPartialText(t *testing.T) {
	t.Parallel()
	bus := turnLog(t, []feed.Message{
		{Kind: feed.KindAttempt, Step: 1, Attempt: 1},
		{Kind: feed.KindAttempt, Step: 1, Attempt: 2},
		{Kind: feed.KindEvent, Step: 1, Attempt: 2, Event: ev(agent.Text("ok"))},
		{Kind: feed.KindEnd, Step: 1, Marker: "m"},
	})
	same(t, types(relayLog(t, bus, completed(1, "m"), relay.Options{})), []string{"text:ok", "completed"})
}

func TestRelayDedupesToolEventsAndAnnouncedRetries(t *testing.T) {
	t.Parallel()
	retry := agent.Event{Type: agent.TypeRetrying, Step: 1, Attempt: 2, MaxAttempts: 6, Reason: "429"}
	bus := turnLog(t, []feed.Message{
		{Kind: feed.KindAttempt, Step: 1, Attempt: 1},
		{Kind: feed.KindEvent, Step: 1, Attempt: 1, Event: ev(agent.Text("a"))},
		{Kind: feed.KindEvent, Step: 1, Attempt: 1, Event: &retry},
		{Kind: feed.KindAttempt, Step: 1, Attempt: 2}, // already announced: no second retrying
		{Kind: feed.KindEvent, Step: 1, Event: ev(agent.ToolStarted("c", "bash", nil))},
		{Kind: feed.KindEvent, Step: 1, Event: ev(agent.ToolStarted("c", "bash", nil))},
		{Kind: feed.KindEvent, Step: 1, Event: ev(agent.ToolEnded("c", false, "x"))},
		{Kind: feed.KindEvent, Step: 1, Event: ev(agent.ToolEnded("c", false, "x"))},
		{Kind: feed.KindEvent, Step: 1, Event: ev(agent.Completed(nil))}, // terminals only come from the outcome
		{Kind: feed.KindEnd, Marker: "m"},
	})
	got := relayLog(t, bus, relay.Terminal{Event: agent.Failed("x", false, ""), Marker: "m", Steps: 1}, relay.Options{})
	same(t, types(got), []string{"text:a", "retrying:step1", "tool_started", "tool_ended", "failed"})
}

// An approval wait's events pass through once each, in order, though a
// retried or replayed Feed.Publish sends them again.
func TestRelayDedupesApprovalEvents(t *testing.T) {
	t.Parallel()
	req := agent.ApprovalRequested("c", "deploy", json.RawMessage(`{"env":"prod"}`), "sha256:a", "sha256:d", nil, time.Unix(0, 0))
	res := agent.ApprovalResolved("c", true, "alice", "", false)
	other := agent.ApprovalRequested("c2", "deploy", nil, "", "", nil, time.Unix(0, 0))
	bus := turnLog(t, []feed.Message{
		{Kind: feed.KindAttempt, Step: 1, Attempt: 1},
		{Kind: feed.KindEnd, Step: 1, Marker: "s1"},
		{Kind: feed.KindEvent, Step: 1, Event: &req},
		{Kind: feed.KindEvent, Step: 1, Event: &req},
		{Kind: feed.KindEvent, Step: 1, Event: &other},
		{Kind: feed.KindEvent, Step: 1, Event: &res},
		{Kind: feed.KindEvent, Step: 1, Event: &res},
		{Kind: feed.KindEvent, Step: 1, Event: ev(agent.ToolStarted("c", "deploy", nil))},
		{Kind: feed.KindEvent, Step: 1, Event: ev(agent.ToolEnded("c", false, "ok"))},
		{Kind: feed.KindEnd, Marker: "m"},
	})
	got := relayLog(t, bus, completed(1, "m"), relay.Options{})
	var ids []string
	for _, e := range got {
		ids = append(ids, e.Type+":"+e.ID)
	}
	same(t, ids, []string{"approval_requested:c", "approval_requested:c2", "approval_resolved:c", "tool_started:c", "tool_ended:c", "completed:"})
	if got[0].ArgsHash != "sha256:a" || string(got[0].Args) != `{"env":"prod"}` || got[2].By != "alice" || !got[2].Approved {
		t.Errorf("approval events lost their fields: %+v / %+v", got[0], got[2])
	}
}

// A 200-delta turn relayed from every cut point: a consumer that has events
// up to Seq n and resumes there ends with exactly the whole text, each delta
// once, and one terminal.
func TestRelayResumeAtEveryPoint(t *testing.T) {
	t.Parallel()
	var msgs []feed.Message
	var want strings.Builder
	msgs = append(msgs, feed.Message{Kind: feed.KindAttempt, Step: 1, Attempt: 1})
	for i := range 200 {
		d := fmt.Sprintf("d%03d ", i)
		want.WriteString(d)
		msgs = append(msgs, feed.Message{Kind: feed.KindEvent, Step: 1, Attempt: 1, Event: ev(agent.Text(d))})
	}
	msgs = append(msgs, feed.Message{Kind: feed.KindEnd, Step: 1, Marker: "t1/m1"})
	bus := turnLog(t, msgs)
	full := relayLog(t, bus, completed(1, "t1/m1"), relay.Options{})
	if agent.AnswerText(full) != want.String() {
		t.Fatal("whole relay lost text")
	}
	for cut := 0; cut < len(full); cut++ {
		first := full[:cut]
		var after int64
		if cut > 0 {
			after = first[cut-1].Seq
		}
		rest := relayLog(t, bus, completed(1, "t1/m1"), relay.Options{After: after})
		all := append(append([]agent.Event(nil), first...), rest...)
		if got := agent.AnswerText(all); got != want.String() {
			t.Fatalf("cut after %d events: text differs (len %d, want %d)", cut, len(got), want.Len())
		}
		terms := 0
		for i, e := range all {
			if e.IsTerminal() {
				terms++
			}
			if i > 0 && !e.IsTerminal() && e.Seq <= all[i-1].Seq {
				t.Fatalf("cut %d: Seq not increasing at %d", cut, i)
			}
		}
		if terms != 1 {
			t.Fatalf("cut %d: %d terminals", cut, terms)
		}
	}
}

// The feed lost step 2's end (and part of its text): the relay says so with
// a retrying for step 2 and sends the stored text, then the terminal.
func TestRelayFillsInLostText(t *testing.T) {
	t.Parallel()
	bus := turnLog(t, []feed.Message{
		{Kind: feed.KindAttempt, Step: 1, Attempt: 1},
		{Kind: feed.KindEvent, Step: 1, Attempt: 1, Event: ev(agent.Text("one."))},
		{Kind: feed.KindEnd, Step: 1, Marker: "t1/m1"},
		{Kind: feed.KindAttempt, Step: 2, Attempt: 1},
		{Kind: feed.KindEvent, Step: 2, Attempt: 1, Event: ev(agent.Text("tw"))},
		// lost: the rest of step 2 and its end marker
	})
	term := completed(2, "t1/m2")
	term.Stored = func(context.Context) ([]string, error) { return []string{"one.", "two."}, nil }
	start := time.Now()
	got := relayLog(t, bus, term, relay.Options{Grace: 100 * time.Millisecond})
	same(t, types(got), []string{"text:one.", "text:tw", "retrying:step2", "text:two.", "completed"})
	if agent.AnswerText(got) != "one.two." {
		t.Fatalf("answer %q", agent.AnswerText(got))
	}
	if time.Since(start) < 100*time.Millisecond {
		t.Error("the relay filled in before the grace for late feed messages ran out")
	}
}

// The turn's log expired: the whole answer comes from the store.
func TestRelayRebuildsExpiredTurn(t *testing.T) {
	t.Parallel()
	bus := turnLog(t, nil)
	term := completed(2, "t1/m2")
	term.Stored = func(context.Context) ([]string, error) { return []string{"one.", "two."}, nil }
	got := relayLog(t, bus, term, relay.Options{})
	same(t, types(got), []string{"text:one.", "text:two.", "completed"})
}

// Without a store to fill a known gap, the relay never sends a terminal
// that looks complete: the stream fails, retryable.
func TestRelayKnownGapWithoutStoreFails(t *testing.T) {
	t.Parallel()
	bus := turnLog(t, []feed.Message{{Kind: feed.KindEvent, Step: 1, Attempt: 1, Event: ev(agent.Text("a"))}})
	got := relayLog(t, bus, completed(1, "t1/m1"), relay.Options{Grace: 50 * time.Millisecond})
	last := got[len(got)-1]
	if last.Type != agent.TypeFailed || !last.Retryable {
		t.Fatalf("got %q, want a retryable failure", types(got))
	}
}

// A failed turn's last step may store nothing: no wait, no fill-in for it.
func TestRelayFailedLastStepNeedsNoMarker(t *testing.T) {
	t.Parallel()
	bus := turnLog(t, []feed.Message{
		{Kind: feed.KindAttempt, Step: 1, Attempt: 1},
		{Kind: feed.KindEvent, Step: 1, Attempt: 1, Event: ev(agent.Text("partial"))},
	})
	start := time.Now()
	got := relayLog(t, bus, relay.Terminal{Event: agent.Failed("401", false, ""), Steps: 1}, relay.Options{Grace: 5 * time.Second})
	same(t, types(got), []string{"text:partial", "failed"})
	if time.Since(start) > 2*time.Second {
		t.Error("the relay waited for a marker a failed step never sends")
	}
}

// A turn without a caller-held outcome (a follow-up or wake turn) ends with
// the outcome published on the feed.
func TestRelayTakesOutcomeFromFeed(t *testing.T) {
	t.Parallel()
	o, _ := json.Marshal(agentloop.Outcome{Turn: "t1", Status: agent.TypeCompleted, Steps: 1, Marker: "t1/m1"})
	bus := turnLog(t, []feed.Message{
		{Kind: feed.KindAttempt, Step: 1, Attempt: 1},
		{Kind: feed.KindEvent, Step: 1, Attempt: 1, Event: ev(agent.Text("hello"))},
		{Kind: feed.KindEnd, Step: 1, Marker: "t1/m1"},
		{Kind: feed.KindOutcome, Outcome: o},
	})
	sub, _ := bus.Subscribe(context.Background(), "s", "t1")
	defer sub.Close()
	var got []agent.Event
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if !relay.Run(ctx, sub, nil, relay.Options{}, func(e agent.Event) bool { got = append(got, e); return true }) {
		t.Fatal("relay did not finish")
	}
	same(t, types(got), []string{"text:hello", "completed"})
}

func TestRelayConsumerStop(t *testing.T) {
	t.Parallel()
	bus := turnLog(t, []feed.Message{{Kind: feed.KindEvent, Event: ev(agent.Text("a"))}})
	sub, _ := bus.Subscribe(context.Background(), "s", "t1")
	defer sub.Close()
	if relay.Run(context.Background(), sub, make(chan relay.Terminal), relay.Options{}, func(agent.Event) bool { return false }) {
		t.Fatal("Run should report that the consumer stopped")
	}
}

// streamTurn starts a turn behind relay.Stream whose run blocks until release
// is closed; the consumer reads one event and leaves (or stays, when keep).
type detachCase struct {
	bus     *feed.InProcess
	aborts  atomic.Int32
	release chan struct{}
	left    chan struct{}
	ended   chan struct{} // closed by Ended: the turn's work is over
}

func startDetached(t *testing.T, opt relay.StreamOptions, cancelCause error) *detachCase {
	t.Helper()
	d := &detachCase{bus: feed.NewInProcess(), release: make(chan struct{}), left: make(chan struct{}), ended: make(chan struct{})}
	t.Cleanup(func() { _ = d.bus.Close() })
	opt.Abort = func(context.Context) { d.aborts.Add(1) }
	opt.Ended = func() { close(d.ended) }
	_ = d.bus.Publish(context.Background(), feed.Message{Session: "s", Turn: "t1", Kind: feed.KindEvent, Event: ev(agent.Text("x"))})
	ctx, cancel := context.WithCancelCause(context.Background())
	go func() {
		defer close(d.left)
		relay.Stream(ctx, d.bus, "s", "t1", opt, func(ctx context.Context) relay.Terminal {
			select {
			case <-d.release:
			case <-ctx.Done():
			}
			return completed(0, "")
		}, func(agent.Event) bool { cancel(cancelCause); return true })
	}()
	<-d.left
	return d
}

func TestStreamDetach(t *testing.T) {
	t.Parallel()
	waitAborts := func(d *detachCase, want int32, within time.Duration) {
		t.Helper()
		if !wait.Until(within, func() bool { return d.aborts.Load() == want }) {
			t.Fatalf("aborts = %d, want %d", d.aborts.Load(), want)
		}
	}
	// waitEnded waits until the turn's work is over: an abort, had there
	// been one, came before.
	waitEnded := func(d *detachCase) {
		t.Helper()
		select {
		case <-d.ended:
		case <-time.After(10 * time.Second):
			t.Fatal("the turn's work never ended")
		}
	}
	t.Run("ImmediateWhenNoGrace", func(t *testing.T) {
		d := startDetached(t, relay.StreamOptions{}, nil)
		waitAborts(d, 1, time.Second)
	})
	t.Run("AbortedAfterGraceWhenNobodyComesBack", func(t *testing.T) {
		d := startDetached(t, relay.StreamOptions{DetachGrace: 300 * time.Millisecond}, nil)
		if d.aborts.Load() != 0 {
			t.Fatal("aborted before the grace")
		}
		waitAborts(d, 1, 5*time.Second)
	})
	t.Run("ReattachWithinGraceKeepsTheTurn", func(t *testing.T) {
		d := startDetached(t, relay.StreamOptions{DetachGrace: 500 * time.Millisecond}, nil)
		_ = d.bus.Publish(context.Background(), feed.Message{Session: "s", Turn: "t1", Kind: feed.KindAttach, Attach: "someone-else"})
		// Deliberate: past the grace, while the turn still runs — the abort
		// that must not come would come at 500 ms (no clock seam in relay).
		time.Sleep(time.Second)
		waitAborts(d, 0, 0)
		close(d.release)
		waitEnded(d)
		waitAborts(d, 0, 0)
	})
	t.Run("TurnEndingWithinGraceAbortsNothing", func(t *testing.T) {
		d := startDetached(t, relay.StreamOptions{DetachGrace: 500 * time.Millisecond}, nil)
		close(d.release)
		waitEnded(d)
		waitAborts(d, 0, 0)
	})
	t.Run("HandOffAbortsNothing", func(t *testing.T) {
		d := startDetached(t, relay.StreamOptions{}, agent.ErrHandOff)
		waitEnded(d)
		waitAborts(d, 0, 0)
	})
}

// twoStepLog is a two-step turn: step 1 streams and calls a tool, step 2
// streams its answer.
func twoStepLog() ([]feed.Message, string) {
	msgs := []feed.Message{{Kind: feed.KindAttempt, Step: 1, Attempt: 1}}
	var one, two strings.Builder
	for i := range 20 {
		d := fmt.Sprintf("a%02d ", i)
		one.WriteString(d)
		msgs = append(msgs, feed.Message{Kind: feed.KindEvent, Step: 1, Attempt: 1, Event: ev(agent.Text(d))})
	}
	msgs = append(msgs,
		feed.Message{Kind: feed.KindEnd, Step: 1, Marker: "t1/m1"},
		feed.Message{Kind: feed.KindEvent, Step: 1, Event: ev(agent.ToolStarted("c1", "read", nil))},
		feed.Message{Kind: feed.KindEvent, Step: 1, Event: ev(agent.ToolEnded("c1", false, "hi"))},
		feed.Message{Kind: feed.KindEnd, Marker: "t1/t/c1"},
		feed.Message{Kind: feed.KindAttempt, Step: 2, Attempt: 1})
	for i := range 20 {
		d := fmt.Sprintf("b%02d ", i)
		two.WriteString(d)
		msgs = append(msgs, feed.Message{Kind: feed.KindEvent, Step: 2, Attempt: 1, Event: ev(agent.Text(d))})
	}
	msgs = append(msgs, feed.Message{Kind: feed.KindEnd, Step: 2, Marker: "t1/m2"})
	return msgs, one.String() + "|" + two.String()
}

// checkResumed asserts that a consumer's events before and after a resume
// hold the stored answer exactly once and one terminal.
func checkResumed(t *testing.T, what string, first, rest []agent.Event, want string) {
	t.Helper()
	all := append(append([]agent.Event(nil), first...), rest...)
	if got := agent.AnswerText(all); got != want {
		t.Fatalf("%s: text differs:\n got  %q\n want %q\n(events after the resume: %q)", what, got, want, types(rest))
	}
	terms := 0
	for _, e := range all {
		if e.IsTerminal() {
			terms++
		}
	}
	if terms != 1 {
		t.Fatalf("%s: %d terminals", what, terms)
	}
}

// A resume position means the same thing whatever happened to the turn's
// log: a consumer that resumes after the log was swept (answered from the
// store), after it was recreated with other bus positions (a restart, or
// another bus such as NATS whose sequence counts every turn), gets exactly
// the rest of the answer, each text once.
func TestRelayResumeSurvivesLogRecreated(t *testing.T) {
	t.Parallel()
	msgs, whole := twoStepLog()
	parts := strings.SplitN(whole, "|", 2)
	want := parts[0] + parts[1]
	stored := func(context.Context) ([]string, error) { return parts, nil }
	term := completed(2, "t1/m2")
	term.Stored = stored
	full := relayLog(t, turnLog(t, msgs), term, relay.Options{})
	if agent.AnswerText(full) != want {
		t.Fatalf("whole relay: %q", agent.AnswerText(full))
	}
	// The same turn on a bus where other messages came first (its positions
	// on the bus are all different).
	shifted := append([]feed.Message{
		{Kind: feed.KindAttach, Attach: "a"}, {Kind: feed.KindAttach, Attach: "b"}, {Kind: feed.KindAttach, Attach: "c"},
	}, msgs...)
	logs := map[string]func() *feed.InProcess{
		"swept":    func() *feed.InProcess { return turnLog(t, nil) },
		"shifted":  func() *feed.InProcess { return turnLog(t, shifted) },
		"same log": func() *feed.InProcess { return turnLog(t, msgs) },
	}
	for name, mk := range logs {
		bus := mk()
		for cut := 1; cut < len(full); cut++ {
			first := full[:cut]
			rest := relayLog(t, bus, term, relay.Options{After: first[cut-1].Seq, Grace: 20 * time.Millisecond})
			checkResumed(t, fmt.Sprintf("%s, resumed after %d events", name, cut), first, rest, want)
		}
	}
}

// A log whose start was cut (a broker expired the first messages of a long
// turn) but whose step-end markers survive is not complete: the cut step is
// filled in from the store, never sent cut off.
func TestRelayCutStartIsFilledIn(t *testing.T) {
	t.Parallel()
	msgs, whole := twoStepLog()
	parts := strings.SplitN(whole, "|", 2)
	term := completed(2, "t1/m2")
	term.Stored = func(context.Context) ([]string, error) { return parts, nil }
	got := relayLog(t, turnLog(t, msgs[10:]), term, relay.Options{Grace: 20 * time.Millisecond})
	if a := agent.AnswerText(got); a != parts[0]+parts[1] {
		t.Fatalf("answer %q\nwant   %q", a, parts[0]+parts[1])
	}
}

// A consumer that re-attaches (on another ingress) while the first one's
// stream is still open — before the first notices its client is gone —
// keeps the turn: the first consumer's leaving aborts nothing.
func TestStreamReattachBeforeDisconnectNoticed(t *testing.T) {
	t.Parallel()
	bus := feed.NewInProcess()
	t.Cleanup(func() { _ = bus.Close() })
	var aborts atomic.Int32
	release := make(chan struct{})
	defer close(release)
	_ = bus.Publish(context.Background(), feed.Message{Session: "s", Turn: "t1", Kind: feed.KindEvent, Event: ev(agent.Text("x"))})
	opt := relay.StreamOptions{DetachGrace: 300 * time.Millisecond, Abort: func(context.Context) { aborts.Add(1) }}
	relay.Stream(context.Background(), bus, "s", "t1", opt, func(ctx context.Context) relay.Terminal {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return completed(0, "")
	}, func(e agent.Event) bool {
		switch e.Delta {
		case "x": // another consumer attaches, then more text comes
			_ = bus.Publish(context.Background(), feed.Message{Session: "s", Turn: "t1", Kind: feed.KindAttach, Attach: "other-ingress"})
			_ = bus.Publish(context.Background(), feed.Message{Session: "s", Turn: "t1", Kind: feed.KindEvent, Event: ev(agent.Text("y"))})
			return true
		default: // the write fails: this consumer's client is gone
			return false
		}
	})
	// Deliberate: past the 300 ms grace, while the turn still runs — the
	// abort that must not come would come by then (no clock seam in relay).
	time.Sleep(time.Second)
	if n := aborts.Load(); n != 0 {
		t.Fatalf("the turn was aborted %d time(s) although another consumer attached", n)
	}
}

// A delegate call's sub-agent is followed from the call's tool_started:
// its events (deduplicated like a turn's) come wrapped as delegated, with
// no position, all before the call's tool_ended; a consumer that resumes
// is not sent them again, and without Follow nothing is followed.
func TestRelayFollowsSubAgents(t *testing.T) {
	t.Parallel()
	child := agentloop.DelegateSession("s", "t1", "d1")
	bus := turnLog(t, []feed.Message{
		{Kind: feed.KindAttempt, Step: 1, Attempt: 1},
		{Kind: feed.KindEnd, Step: 1, Marker: "m1"},
		{Kind: feed.KindEvent, Step: 1, Event: ev(agent.ToolStarted("d1", agentloop.DelegateTool, json.RawMessage(`{"agent":"reviewer","task":"x"}`)))},
	})
	for _, m := range []feed.Message{
		{Kind: feed.KindAttempt, Step: 1, Attempt: 1},
		{Kind: feed.KindEvent, Step: 1, Attempt: 1, Event: ev(agent.Text("looks "))},
		{Kind: feed.KindEvent, Step: 1, Attempt: 1, Event: ev(agent.Text("fine"))},
		{Kind: feed.KindEnd, Step: 1, Marker: "c1"},
		{Kind: feed.KindOutcome, Outcome: json.RawMessage(`{"turn":"delegate","status":"completed","steps":1}`)},
	} {
		m.Session, m.Turn = child, agentloop.DelegateTurn
		if err := bus.Publish(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []feed.Message{
		{Kind: feed.KindEvent, Step: 1, Event: ev(agent.ToolEnded("d1", false, "looks fine"))},
		{Kind: feed.KindEnd, Marker: "m2"},
	} {
		m.Session, m.Turn = "s", "t1"
		if err := bus.Publish(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	term := relay.Terminal{Event: agent.Completed(nil), Marker: "m2", Steps: 1, Completed: true}
	got := relayLog(t, bus, term, relay.Options{Follow: bus.Subscribe})
	var seq []string
	for _, e := range got {
		s := e.Type
		if e.Type == agent.TypeDelegated {
			s += ":" + e.Agent + ":" + e.ID + ":" + e.Sub.Delta
			if e.Seq != 0 {
				t.Errorf("delegated event with Seq %d, want none", e.Seq)
			}
		}
		seq = append(seq, s)
	}
	same(t, seq, []string{"tool_started", "delegated:reviewer:d1:looks ", "delegated:reviewer:d1:fine", "tool_ended", "completed"})

	resumed := relayLog(t, bus, term, relay.Options{Follow: bus.Subscribe, After: relay.Position(1, 1)})
	same(t, types(resumed), []string{"tool_ended", "completed"})
	same(t, types(relayLog(t, bus, term, relay.Options{})), []string{"tool_started", "tool_ended", "completed"})
}

// A tool's progress is relayed live, in order, without a position (no SSE
// id, the positions of the other events unchanged); a late report after
// the call's end is dropped; a consumer resuming after a cursor gets only
// the reports that follow it in the log.
func TestRelayToolProgress(t *testing.T) {
	t.Parallel()
	prog := func(msg string) *agent.Event {
		return ev(agent.ToolProgress("c1", "bash", agent.Progress{Message: msg}))
	}
	msgs := []feed.Message{
		{Kind: feed.KindAttempt, Step: 1, Attempt: 1},
		{Kind: feed.KindEvent, Step: 1, Attempt: 1, Event: ev(agent.Text("Running it."))},
		{Kind: feed.KindEnd, Step: 1, Marker: "t1/m1"},
		{Kind: feed.KindEvent, Step: 1, Event: ev(agent.ToolStarted("c1", "bash", nil))},
		{Kind: feed.KindEvent, Step: 1, Event: prog("step 1")},
		{Kind: feed.KindEvent, Step: 1, Event: prog("step 2")},
		{Kind: feed.KindEvent, Step: 1, Event: ev(agent.ToolEnded("c1", false, "done"))},
		{Kind: feed.KindEvent, Step: 1, Event: prog("step 3")}, // late
		{Kind: feed.KindEnd, Marker: "t1/t/c1"},
		{Kind: feed.KindAttempt, Step: 2, Attempt: 1},
		{Kind: feed.KindEvent, Step: 2, Attempt: 1, Event: ev(agent.Text("Done."))},
		{Kind: feed.KindEnd, Step: 2, Marker: "t1/m2"},
	}
	got := relayLog(t, turnLog(t, msgs), completed(2, "t1/m2"), relay.Options{})
	var shown []string
	var seqs []int64
	for _, e := range got {
		s := e.Type
		if e.Type == agent.TypeToolProgress {
			s += ":" + e.Content
			if e.Seq != 0 {
				t.Fatalf("tool_progress has Seq %d, want none", e.Seq)
			}
		} else {
			seqs = append(seqs, e.Seq)
		}
		shown = append(shown, s)
	}
	same(t, shown, []string{"text", "tool_started", "tool_progress:step 1", "tool_progress:step 2", "tool_ended", "text", "completed"})
	quiet := append(append([]feed.Message{}, msgs[:4]...), msgs[6]) // without any report
	quiet = append(quiet, msgs[8:]...)
	withoutProgress := relayLog(t, turnLog(t, quiet), completed(2, "t1/m2"), relay.Options{})
	if len(withoutProgress) != len(seqs) {
		t.Fatalf("without progress the relay shows %s", types(withoutProgress))
	}
	for i, e := range withoutProgress {
		if e.Seq != seqs[i] {
			t.Fatalf("event %d (%s) has Seq %d with progress in the log, %d without", i, e.Type, seqs[i], e.Seq)
		}
	}

	// Resumed after tool_started: the reports after it are shown again.
	after := seqs[1]
	resumed := relayLog(t, turnLog(t, msgs), completed(2, "t1/m2"), relay.Options{After: after})
	var progress []string
	for _, e := range resumed {
		if e.Type == agent.TypeToolProgress {
			progress = append(progress, e.Content)
		}
	}
	same(t, progress, []string{"step 1", "step 2"})
	// Resumed after tool_ended: none are.
	resumed = relayLog(t, turnLog(t, msgs), completed(2, "t1/m2"), relay.Options{After: seqs[2]})
	for _, e := range resumed {
		if e.Type == agent.TypeToolProgress {
			t.Fatalf("a consumer resuming after the call's end was sent %q", e.Content)
		}
	}
}
