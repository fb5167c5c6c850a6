// Package agenttest is the Agent contract's conformance suite, reusable by
// any implementation: call Run with a Harness that can script the model
// behind the agent. The eight cases follow FastAgent's spec conformance
// tests (success, engine failure, consumer break, JSON round-trip,
// portability, failure after output, retry before output, no tool re-run).
// Cases lists them so that each can also be run against a recorder (Try),
// which is how the suite's own tests show every case can fail.
package agenttest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
)

// Scenario is a model behaviour a harness scripts for the next turn.
type Scenario int

const (
	// Reply answers Answer in at least two text deltas.
	Reply Scenario = iota + 1
	// Fail rejects the call non-retryably (like an invalid API key) before any output.
	Fail
	// Echo answers with every user text of the conversation so far, joined by "|".
	Echo
	// FailAfterOutput streams Partial, then the connection breaks; the next
	// attempt answers Answer.
	FailAfterOutput
	// TransientThenReply fails transiently (HTTP 500) before any output, then answers Answer.
	TransientThenReply
	// ToolThenTransient calls the tool "counter" once; the next model call
	// fails transiently once, then answers Answer.
	ToolThenTransient
	// Slow streams one delta, then hangs until the call is cancelled.
	Slow
	// ToolLostThenTransient calls the tool "counter" once; the tool runs
	// (its side effect happens) but its result is lost before it is
	// reported, as when the worker running it dies right after the call.
	// The next model call fails transiently once, then answers Answer. An
	// engine that retries the lost call, or re-runs the step after the
	// model failure, runs the tool twice.
	ToolLostThenTransient
)

// Answer is the text scripted replies carry; Partial is what FailAfterOutput
// streams before breaking.
const (
	Answer  = "hello world"
	Partial = "partial answ"
)

// Harness adapts one Agent implementation to the suite.
type Harness interface {
	// Agent returns instance 0 or 1; both share one backend (store, engine).
	Agent(t testing.TB, instance int) agent.Agent
	// Script programs the model (and, for ToolLostThenTransient, the
	// fault) for the next turn of session.
	Script(t testing.TB, session string, s Scenario)
	// ToolRuns reports how many times the "counter" tool ran in session,
	// counted by its side effect.
	ToolRuns(t testing.TB, session string) int
	// WaitAborted returns nil once the in-flight model call of session has
	// been cancelled at the model provider, or an error after timeout.
	WaitAborted(t testing.TB, session string, timeout time.Duration) error
}

// Case is one conformance case. Run must be given a fresh session name.
type Case struct {
	Name string
	Run  func(t testing.TB, h Harness, session string)
}

// Cases returns the conformance cases in the order Run runs them.
func Cases() []Case {
	return []Case{
		{"1_success_stream", successStream},
		{"2_engine_failure", engineFailure},
		{"3_consumer_break", consumerBreak},
		{"4_json_round_trip", jsonRoundTrip},
		{"5_portable", portable},
		{"6_failure_after_output_is_not_silent", failureAfterOutput},
		{"7_failure_before_output_is_retried", retryBeforeOutput},
		{"8_executed_tool_not_rerun", toolNotRerun},
	}
}

// Run runs every case as a subtest, one after another (the harness scripts
// one model shared by all of them).
func Run(t *testing.T, h Harness) {
	prefix := fmt.Sprintf("conf-%d-", time.Now().UnixNano()%1_000_000)
	for _, c := range Cases() {
		session := prefix + c.Name
		if c.Name == "5_portable" {
			session = "-1001234567890" + "-" + prefix
		}
		t.Run(c.Name, func(t *testing.T) { c.Run(t, h, session) })
	}
}

// invoke collects every event of one turn, failing the test on a hang.
func invoke(t testing.TB, a agent.Agent, session, text string) []agent.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var evs []agent.Event
	for ev := range a.Invoke(ctx, agent.Scope{Session: session}, agent.Prompt{Text: text}) {
		evs = append(evs, ev)
	}
	if ctx.Err() != nil {
		t.Fatalf("turn did not finish within 2 minutes; events so far: %s", dump(evs))
	}
	return evs
}

// CheckTerminal asserts exactly one terminal, last, and returns it.
func CheckTerminal(t testing.TB, evs []agent.Event) agent.Event {
	t.Helper()
	n := 0
	for _, ev := range evs {
		if ev.IsTerminal() {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("want exactly one terminal event, got %d: %s", n, dump(evs))
	}
	last := evs[len(evs)-1]
	if !last.IsTerminal() {
		t.Fatalf("the terminal is not the last event: %s", dump(evs))
	}
	return last
}

// TextAfterLastRetry is the answer text a client keeps (agent.AnswerText).
func TextAfterLastRetry(evs []agent.Event) string { return agent.AnswerText(evs) }

func successStream(t testing.TB, h Harness, session string) {
	h.Script(t, session, Reply)
	evs := invoke(t, h.Agent(t, 0), session, "say hello")
	term := CheckTerminal(t, evs)
	if term.Type != agent.TypeCompleted {
		t.Fatalf("want completed, got %s", dump(evs))
	}
	texts := 0
	for _, ev := range evs {
		if ev.Type == agent.TypeText {
			texts++
		}
	}
	if texts < 2 {
		t.Errorf("want the answer streamed in several deltas, got %d text events", texts)
	}
	if got := TextAfterLastRetry(evs); got != Answer {
		t.Errorf("answer = %q, want %q", got, Answer)
	}
	res, err := agent.Collect(sliceSeq(evs))
	if err != nil || res.Text != Answer {
		t.Errorf("Collect = %+v, %v; want text %q", res, err, Answer)
	}
}

func engineFailure(t testing.TB, h Harness, session string) {
	h.Script(t, session, Fail)
	evs := invoke(t, h.Agent(t, 0), session, "this will fail")
	term := CheckTerminal(t, evs)
	if term.Type != agent.TypeFailed {
		t.Fatalf("want failed, got %s", dump(evs))
	}
	if strings.TrimSpace(term.Details) == "" {
		t.Errorf("failed.details is empty")
	}
	if term.Retryable {
		t.Errorf("a rejected call must not be retryable: %s", dump(evs))
	}
	raw, _ := json.Marshal(term)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	if _, ok := m["details"].(string); !ok {
		t.Errorf("details is not a JSON string: %s", raw)
	}
	if _, ok := m["retryable"].(bool); !ok {
		t.Errorf("retryable is not a JSON bool: %s", raw)
	}
	_, err := agent.Collect(sliceSeq(evs))
	var f *agent.Failure
	if !errors.As(err, &f) || f.Details == "" {
		t.Errorf("Collect error = %v, want *agent.Failure with details", err)
	}
}

func consumerBreak(t testing.TB, h Harness, session string) {
	h.Script(t, session, Slow)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var evs []agent.Event
	for ev := range h.Agent(t, 0).Invoke(ctx, agent.Scope{Session: session}, agent.Prompt{Text: "stream slowly"}) {
		evs = append(evs, ev)
		if ev.Type == agent.TypeText || ev.IsTerminal() {
			break
		}
	}
	for _, ev := range evs {
		if ev.IsTerminal() {
			t.Fatalf("the stream ended before the consumer broke off: %s", dump(evs))
		}
	}
	if len(evs) == 0 {
		t.Fatalf("no event before the break")
	}
	if err := h.WaitAborted(t, session, 3*time.Second); err != nil {
		t.Fatalf("engine cleanup: the model call was not cancelled within 3 s after the consumer stopped: %v", err)
	}
}

func jsonRoundTrip(t testing.TB, h Harness, session string) {
	check := func(evs []agent.Event) {
		for _, ev := range evs {
			b, err := json.Marshal(ev)
			if err != nil {
				t.Fatalf("marshal %+v: %v", ev, err)
			}
			var back agent.Event
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatalf("unmarshal %s: %v", b, err)
			}
			b2, _ := json.Marshal(back)
			if string(b) != string(b2) || !reflect.DeepEqual(normalize(ev), normalize(back)) {
				t.Errorf("event does not round-trip: %s -> %s", b, b2)
			}
		}
	}
	h.Script(t, session, ToolThenTransient)
	ok := invoke(t, h.Agent(t, 0), session, "use the counter")
	if CheckTerminal(t, ok).Type != agent.TypeCompleted {
		t.Fatalf("want completed: %s", dump(ok))
	}
	check(ok)
	h.Script(t, session, Fail)
	bad := invoke(t, h.Agent(t, 0), session, "fail now")
	if CheckTerminal(t, bad).Type != agent.TypeFailed {
		t.Fatalf("want failed: %s", dump(bad))
	}
	check(bad)
}

func normalize(ev agent.Event) agent.Event {
	ev.Seq = 0 // a stream position, not part of the event's JSON
	if len(ev.Args) > 0 {
		var v any
		if json.Unmarshal(ev.Args, &v) == nil {
			ev.Args, _ = json.Marshal(v)
		}
	}
	if ev.Type == agent.TypeToolStarted && len(ev.Args) == 0 {
		ev.Args = json.RawMessage("{}")
	}
	return ev
}

func portable(t testing.TB, h Harness, session string) {
	h.Script(t, session, Echo)
	first := invoke(t, h.Agent(t, 0), session, "alpha")
	if CheckTerminal(t, first).Type != agent.TypeCompleted {
		t.Fatalf("instance A: want completed: %s", dump(first))
	}
	h.Script(t, session, Echo)
	second := invoke(t, h.Agent(t, 1), session, "beta")
	if CheckTerminal(t, second).Type != agent.TypeCompleted {
		t.Fatalf("instance B: want completed: %s", dump(second))
	}
	if got := TextAfterLastRetry(second); got != "alpha|beta" {
		t.Errorf("instance B saw the conversation %q, want %q (A's turn missing)", got, "alpha|beta")
	}
}

// failureAfterOutput: the first attempt streams Partial and breaks. The
// client may see a final failure, or a retrying event followed by a fresh
// answer; it must never see text of two attempts run together (a silent
// re-run). Each run of text between retrying events is therefore a prefix of
// what one attempt streams: Partial before the first retrying, Answer after.
func failureAfterOutput(t testing.TB, h Harness, session string) {
	h.Script(t, session, FailAfterOutput)
	evs := invoke(t, h.Agent(t, 0), session, "break mid-stream")
	term := CheckTerminal(t, evs)
	segments := textSegments(evs)
	if segments[0] == "" {
		t.Fatalf("the scripted partial output never reached the client before any retrying event: %s", dump(evs))
	}
	for i, seg := range segments {
		want := Answer
		if i == 0 {
			want = Partial
		}
		if !strings.HasPrefix(want, seg) {
			t.Errorf("text %q (after %d retrying events) is not part of one attempt's output %q: "+
				"a call was re-run after output without a retrying event: %s", seg, i, want, dump(evs))
		}
	}
	switch term.Type {
	case agent.TypeFailed:
		// A final failure is allowed; the segments above show nothing was
		// re-sent silently.
	case agent.TypeCompleted:
		if len(segments) == 1 {
			t.Fatalf("completed without a retrying event after the partial output (silent re-run): %s", dump(evs))
		}
		if last := segments[len(segments)-1]; last != Answer {
			t.Errorf("text after the last retrying = %q, want %q", last, Answer)
		}
	}
}

// textSegments splits the text deltas at retrying events: the first element
// is the text before any retrying, the last the text after the last one.
func textSegments(evs []agent.Event) []string {
	segs := []string{""}
	for _, ev := range evs {
		switch ev.Type {
		case agent.TypeText:
			segs[len(segs)-1] += ev.Delta
		case agent.TypeRetrying:
			segs = append(segs, "")
		}
	}
	return segs
}

func retryBeforeOutput(t testing.TB, h Harness, session string) {
	h.Script(t, session, TransientThenReply)
	evs := invoke(t, h.Agent(t, 0), session, "fail once then answer")
	if CheckTerminal(t, evs).Type != agent.TypeCompleted {
		t.Fatalf("a failure before any output must be retried; got %s", dump(evs))
	}
	if got := strings.Join(textDeltas(evs), ""); got != Answer {
		t.Errorf("text = %q, want %q exactly once", got, Answer)
	}
}

// toolNotRerun: the counter tool runs but its result is lost before it is
// reported (as when its worker dies), then the next model call fails once.
// Neither fault may run the tool again: its side-effect count stays 1. The
// client sees one tool call (tool_started may be repeated for it when the
// lost result is recorded) that ends once, and the final answer.
func toolNotRerun(t testing.TB, h Harness, session string) {
	h.Script(t, session, ToolLostThenTransient)
	evs := invoke(t, h.Agent(t, 0), session, "use the counter")
	if CheckTerminal(t, evs).Type != agent.TypeCompleted {
		t.Fatalf("want completed: %s", dump(evs))
	}
	if n := h.ToolRuns(t, session); n != 1 {
		t.Errorf("counter tool ran %d times, want 1 (an executed, non-idempotent tool was run again)", n)
	}
	started := map[string]bool{}
	ended := map[string]int{}
	for _, ev := range evs {
		switch ev.Type {
		case agent.TypeToolStarted:
			started[ev.ID] = true
		case agent.TypeToolEnded:
			if !started[ev.ID] {
				t.Errorf("tool_ended for %q before its tool_started: %s", ev.ID, dump(evs))
			}
			ended[ev.ID]++
		}
	}
	if len(started) != 1 || len(ended) != 1 {
		t.Errorf("want one tool call started and ended, got %d started and %d ended: %s", len(started), len(ended), dump(evs))
	}
	for id, n := range ended {
		if n != 1 {
			t.Errorf("tool call %q ended %d times, want once: %s", id, n, dump(evs))
		}
	}
	if got := TextAfterLastRetry(evs); got != Answer {
		t.Errorf("answer = %q, want %q", got, Answer)
	}
}

func textDeltas(evs []agent.Event) []string {
	var out []string
	for _, ev := range evs {
		if ev.Type == agent.TypeText {
			out = append(out, ev.Delta)
		}
	}
	return out
}

func sliceSeq(evs []agent.Event) func(func(agent.Event) bool) {
	return func(yield func(agent.Event) bool) {
		for _, ev := range evs {
			if !yield(ev) {
				return
			}
		}
	}
}

func dump(evs []agent.Event) string {
	var parts []string
	for _, ev := range evs {
		b, _ := json.Marshal(ev)
		parts = append(parts, string(b))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
