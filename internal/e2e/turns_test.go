package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/agent/agenttest"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows"
)

func collect(t *testing.T, a agent.Agent, ctx context.Context, session, text string) []agent.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var evs []agent.Event
	for ev := range a.Invoke(ctx, agent.Scope{Session: session}, agent.Prompt{Text: text}) {
		evs = append(evs, ev)
	}
	return evs
}

func userEntries(t *testing.T, e *env, session string) []transcript.Entry {
	t.Helper()
	all, err := e.kit.Store.Entries(context.Background(), session)
	if err != nil {
		t.Fatal(err)
	}
	var out []transcript.Entry
	for _, en := range all {
		if en.Message != nil && en.Message.Role == transcript.RoleUser {
			out = append(out, en)
		}
	}
	return out
}

// The same idempotency key sent three times (twice at once, then once after
// the turn ended) is one turn: one model call, one user entry, and every
// caller gets the same completed outcome.
func TestRedeliverySameKeyIsOneTurn(t *testing.T) {
	e := newEnv(t)
	e.startWorker()
	e.kit.Model.Enqueue(modelserver.Reply{Text: []string{"only", " once"}, ChunkDelay: 100 * time.Millisecond})
	ctx := agent.WithIdempotencyKey(context.Background(), "delivery-42")
	var wg sync.WaitGroup
	results := make([][]agent.Event, 3)
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = collect(t, e.agent, ctx, "redelivery", "do it once")
		}()
	}
	wg.Wait()
	results[2] = collect(t, e.agent, ctx, "redelivery", "do it once")
	for i, evs := range results {
		term := agenttest.CheckTerminal(t, evs)
		if term.Type != agent.TypeCompleted {
			t.Fatalf("delivery %d: want completed, got %+v", i, evs)
		}
	}
	if got := agenttest.TextAfterLastRetry(results[0]) + agenttest.TextAfterLastRetry(results[1]); !strings.Contains(got, "only once") {
		t.Errorf("the live callers did not see the answer: %q", got)
	}
	if n := e.kit.Model.Count(); n != 1 {
		t.Errorf("model called %d times, want 1", n)
	}
	if n := len(userEntries(t, e, "redelivery")); n != 1 {
		t.Errorf("store holds %d user entries, want 1", n)
	}
}

// A 429 with Retry-After is retried after the delay, a 529 (overloaded)
// is retried; a context overflow fails with context_overflow; a 400 and a
// 401 end the turn as failed, not retryable, with a message that says what
// to check. Against both provider shapes.
func TestModelFaults(t *testing.T) {
	forProviders(t, func(t *testing.T, e *env) {
		e.startWorker()

		t.Run("429_retry_after", func(t *testing.T) {
			e.kit.Model.Enqueue(
				modelserver.Reply{Status: 429, RetryAfter: "2", Message: "rate limited"},
				modelserver.Reply{Text: []string{"after", " the wait"}},
			)
			before := e.kit.Model.Count()
			evs := collect(t, e.agent, context.Background(), e.session("fault-429"), "hi")
			if term := agenttest.CheckTerminal(t, evs); term.Type != agent.TypeCompleted {
				t.Fatalf("want completed after the retry, got %+v", evs)
			}
			reqs := e.kit.Model.Requests()[before:]
			if len(reqs) != 2 {
				t.Fatalf("want 2 model requests, got %d", len(reqs))
			}
			// The server's retry timer may fire a few milliseconds before the
			// delay measured here has passed (timer precision); the default
			// backoff (1 s) would fail this check, the Retry-After (2 s) passes.
			if gap := reqs[1].Received.Sub(reqs[0].Received); gap < 2*time.Second-100*time.Millisecond {
				t.Errorf("retried after %s, want the 2s Retry-After, not the 1s default backoff", gap)
			}
			if got := agenttest.TextAfterLastRetry(evs); got != "after the wait" {
				t.Errorf("text = %q", got)
			}
		})

		t.Run("529_overloaded_retried", func(t *testing.T) {
			e.kit.Model.Enqueue(modelserver.Overloaded(), modelserver.Reply{Text: []string{"back"}})
			before := e.kit.Model.Count()
			evs := collect(t, e.agent, context.Background(), e.session("fault-529"), "hi")
			if term := agenttest.CheckTerminal(t, evs); term.Type != agent.TypeCompleted {
				t.Fatalf("want completed after the retry, got %s", describe(evs))
			}
			if n := e.kit.Model.Count() - before; n != 2 {
				t.Errorf("want 2 model requests, got %d", n)
			}
		})

		t.Run("context_too_long", func(t *testing.T) {
			e.kit.Model.Enqueue(modelserver.ContextLengthExceeded(4000, 4100))
			evs := collect(t, e.agent, context.Background(), e.session("fault-overflow"), "hi")
			term := agenttest.CheckTerminal(t, evs)
			if term.Type != agent.TypeFailed || term.Code != agent.CodeContextOverflow || term.Retryable {
				t.Fatalf("want failed context_overflow, not retryable; got %+v", term)
			}
			if !strings.Contains(term.Details, "context window") {
				t.Errorf("details %q should say the context window is exceeded", term.Details)
			}
		})

		t.Run("400_invalid_not_retryable", func(t *testing.T) {
			e.kit.Model.Enqueue(modelserver.Reply{Status: 400, Message: "tools.0.name: String should match pattern"})
			before := e.kit.Model.Count()
			evs := collect(t, e.agent, context.Background(), e.session("fault-400"), "hi")
			term := agenttest.CheckTerminal(t, evs)
			if term.Type != agent.TypeFailed || term.Retryable || !strings.Contains(term.Details, "String should match pattern") {
				t.Fatalf("want failed, not retryable, with the provider's message; got %+v", term)
			}
			if n := e.kit.Model.Count() - before; n != 1 {
				t.Errorf("a 400 was sent %d times, want 1", n)
			}
		})

		t.Run("401_not_retryable", func(t *testing.T) {
			e.kit.Model.Enqueue(modelserver.Reply{Status: 401, Message: "Incorrect API key provided"})
			before := e.kit.Model.Count()
			evs := collect(t, e.agent, context.Background(), e.session("fault-401"), "hi")
			term := agenttest.CheckTerminal(t, evs)
			if term.Type != agent.TypeFailed || term.Retryable {
				t.Fatalf("want failed, not retryable; got %+v", term)
			}
			if !strings.Contains(term.Details, "401") || !strings.Contains(term.Details, e.kit.KeyEnv()) {
				t.Errorf("details should name the status and what to check: %q", term.Details)
			}
			if n := e.kit.Model.Count() - before; n != 1 {
				t.Errorf("a 401 was sent %d times, want 1", n)
			}
		})
	})
}

// A tool turn streams thinking and text, runs both tool calls of one model
// message, and reports the usage of all its model calls (cache reads and,
// for Anthropic, cache writes included) in completed.
func TestToolTurnThinkingAndUsage(t *testing.T) {
	forProviders(t, func(t *testing.T, e *env) {
		e.startWorker()
		e.kit.Model.Enqueue(
			modelserver.Reply{Thinking: []string{"two ", "counts"}, Text: []string{"Counting."},
				ToolCalls: []modelserver.ToolCall{
					{ID: "call_a", Name: testkit.CounterName, Args: `{"note":"a"}`},
					{ID: "call_b", Name: testkit.CounterName, Args: `{"note":"b"}`},
				},
				Usage: &modelserver.Usage{PromptTokens: 100, CompletionTokens: 20, CachedTokens: 60, CacheWriteTokens: 40}},
			modelserver.Reply{Text: []string{"counted ", "twice"},
				Usage: &modelserver.Usage{PromptTokens: 150, CompletionTokens: 5, CachedTokens: 100}},
		)
		evs := collect(t, e.agent, context.Background(), e.session("tool-usage"), "count twice")
		term := agenttest.CheckTerminal(t, evs)
		if term.Type != agent.TypeCompleted {
			t.Fatalf("want completed, got %s", describe(evs))
		}
		var thinking string
		started, ended := 0, 0
		for _, ev := range evs {
			switch ev.Type {
			case agent.TypeThinking:
				thinking += ev.Delta
			case agent.TypeToolStarted:
				started++
			case agent.TypeToolEnded:
				ended++
			}
		}
		if thinking != "two counts" || started != 2 || ended != 2 {
			t.Errorf("thinking %q, %d tool_started, %d tool_ended; events %s", thinking, started, ended, describe(evs))
		}
		if got := agenttest.TextAfterLastRetry(evs); !strings.HasSuffix(got, "counted twice") {
			t.Errorf("text %q", got)
		}
		if n := e.kit.Counter.Runs(e.session("tool-usage")); n != 2 {
			t.Errorf("counter ran %d times, want 2", n)
		}
		want := agent.Usage{Input: 250, Output: 25, CacheRead: 160, Calls: 2}
		if e.kit.Model.Shape() == modelserver.Anthropic {
			want.CacheWrite = 40
		}
		if term.Usage == nil || *term.Usage != want {
			t.Errorf("completed usage %+v, want %+v", term.Usage, want)
		}
		reqs := e.kit.Model.Requests()
		if roles := strings.Join(reqs[len(reqs)-1].Roles(), ","); roles != "system,user,assistant,tool,tool" {
			t.Errorf("second call's roles %s", roles)
		}
	})
}

// POST /sessions/{id}/abort stops a running turn: the stream ends with
// failed{code: aborted} and the model call is cancelled upstream.
func TestAbortRunningTurn(t *testing.T) {
	forProviders(t, func(t *testing.T, e *env) {
		e.startWorker()
		hs := e.ingress()
		e.kit.Model.Enqueue(modelserver.Reply{Text: []string{"working…"}, Hang: true})
		aborted := e.kit.Model.Aborted()
		done := make(chan []agent.Event, 1)
		go func() { done <- collect(t, e.agent, context.Background(), e.session("abort-me"), "take forever") }()

		// The turn runs and its model call streams (its first text is
		// out): only a call that reached the provider can be cancelled
		// upstream. The session reports the turn running before its
		// model activity has sent the request; an abort in between stops
		// the call before it is made.
		var running string
		var err error
		if !wait.Until(30*time.Second, func() bool {
			v, verr := e.agent.State(context.Background(), e.session("abort-me"))
			running, err = v.Running, verr
			return err == nil && running != "" && modelStreaming(e)
		}) {
			t.Fatalf("turn never started streaming (running %q): %v", running, err)
		}
		resp, err := http.Post(hs.URL+"/sessions/"+e.session("abort-me")+"/abort", "application/json", strings.NewReader(`{"reason":"user pressed stop"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("abort: %s", resp.Status)
		}
		evs := <-done
		term := agenttest.CheckTerminal(t, evs)
		if term.Type != agent.TypeFailed || term.Code != agent.CodeAborted {
			t.Fatalf("want failed{code:aborted}, got %+v", term)
		}
		if !strings.Contains(term.Details, "user pressed stop") {
			t.Errorf("details %q should carry the reason", term.Details)
		}
		if err := waitAborted(e, aborted); err != nil {
			t.Error(err)
		}

		// Nothing runs now: a second abort is a clear 409 no_active_run.
		resp, err = http.Post(hs.URL+"/sessions/"+e.session("abort-me")+"/abort", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]string
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusConflict || body["code"] != agent.CodeNoActiveRun {
			t.Errorf("abort with nothing running: %s %v, want 409 no_active_run", resp.Status, body)
		}
		resp, err = http.Post(hs.URL+"/sessions/"+e.session("never-existed")+"/abort", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		body = nil
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || body["code"] != agent.CodeNoSuchSession {
			t.Errorf("abort of an unknown session: %s %v, want 404 no_such_session", resp.Status, body)
		}
	})
}

// modelStreaming reports whether a model call has streamed its first
// content to the worker.
func modelStreaming(e *env) bool {
	for _, r := range e.kit.Model.Requests() {
		if !r.FirstDelta.IsZero() {
			return true
		}
	}
	return false
}

func waitAborted(e *env, before int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return e.kit.Model.WaitAbortedN(ctx, before+1)
}

// Turns queue in arrival order; beyond the bound a turn is refused with
// failed{code: session_busy, retryable: true} without ever starting. The
// first turn's model reply is held until the queue is full and the extra turn
// was refused, so the outcome does not depend on how fast the machine is.
func TestQueueBoundAndOrder(t *testing.T) {
	e := newEnv(t)
	e.startWorker()
	// A fresh session per run: the embedded server outlives one run under -count.
	session := fmt.Sprintf("busy-%d", time.Now().UnixNano())
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce) // a failed test must not leave the reply held
	e.kit.Model.EnqueueFor("first", modelserver.Reply{Text: []string{"first done"}, Hold: release})
	e.kit.Model.Handle(func(r modelserver.Request) modelserver.Reply {
		return modelserver.Reply{Text: []string{"answer to " + r.LastUserText()}}
	})
	firstDone := make(chan []agent.Event, 1)
	go func() { firstDone <- collect(t, e.agent, context.Background(), session, "first") }()
	waitRunning(t, e, session)

	type res struct {
		i   int
		evs []agent.Event
	}
	results := make(chan res, workflows.MaxQueuedTurns)
	for i := 0; i < workflows.MaxQueuedTurns; i++ {
		go func() {
			results <- res{i, collect(t, e.agent, context.Background(), session, "queued "+string(rune('a'+i)))}
		}()
		waitQueued(t, e, session, i+1) // admit in a known order
	}
	over := collect(t, e.agent, context.Background(), session, "one too many")
	term := agenttest.CheckTerminal(t, over)
	if term.Type != agent.TypeFailed || term.Code != agent.CodeSessionBusy || !term.Retryable {
		t.Fatalf("over the bound: want failed{session_busy, retryable}, got %+v", term)
	}
	releaseOnce()
	if evs := <-firstDone; agenttest.CheckTerminal(t, evs).Type != agent.TypeCompleted {
		t.Fatalf("first turn: %+v", evs)
	}
	for i := 0; i < workflows.MaxQueuedTurns; i++ {
		r := <-results
		if agenttest.CheckTerminal(t, r.evs).Type != agent.TypeCompleted {
			t.Fatalf("queued turn %d: %+v", r.i, r.evs)
		}
	}
	users := userEntries(t, e, session)
	var order []string
	for _, u := range users {
		order = append(order, u.Message.Text)
	}
	want := []string{"first"}
	for i := 0; i < workflows.MaxQueuedTurns; i++ {
		want = append(want, "queued "+string(rune('a'+i)))
	}
	if strings.Join(order, ",") != strings.Join(want, ",") {
		t.Errorf("turns ran in order %v, want %v (and the refused one never started)", order, want)
	}
}

func waitRunning(t *testing.T, e *env, session string) {
	t.Helper()
	waitFor(t, 30*time.Second, "a turn to start in "+session, func() bool {
		v, err := e.agent.State(context.Background(), session)
		return err == nil && v.Running != ""
	})
}

func waitQueued(t *testing.T, e *env, session string, n int) {
	t.Helper()
	waitFor(t, 30*time.Second, fmt.Sprintf("%d queued turns in %s", n, session), func() bool {
		v, err := e.agent.State(context.Background(), session)
		return err == nil && len(v.Queued) >= n
	})
}

// A steering message sent while a tool runs reaches the model in the same
// turn, before its next call.
func TestSteeringDuringTool(t *testing.T) {
	forProviders(t, func(t *testing.T, e *env) {
		// The tool runs until the steering message was accepted (not for a
		// guessed second: on a loaded machine the steer may come late).
		release := e.kit.Counter.Hold("steer me")
		e.startWorker()
		hs := e.ingress()
		e.kit.Model.Enqueue(
			modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "c1", Name: "counter", Args: `{"note":"steer me"}`}}},
			modelserver.Reply{Text: []string{"steered"}},
		)
		done := make(chan []agent.Event, 1)
		go func() { done <- collect(t, e.agent, context.Background(), e.session("steer"), "count please") }()
		// While the tool runs: during the model step that asked for it the
		// turn may be ending, and a steering message is refused.
		waitFor(t, 30*time.Second, "the counter to start", func() bool { return e.kit.Counter.Started(e.session("steer")) > 0 })
		resp, err := http.Post(hs.URL+"/sessions/"+e.session("steer")+"/steer", "application/json", strings.NewReader(`{"text":"also say hi"}`))
		if err != nil {
			release()
			t.Fatal(err)
		}
		resp.Body.Close()
		release()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("steer: %s", resp.Status)
		}
		evs := <-done
		if agenttest.CheckTerminal(t, evs).Type != agent.TypeCompleted {
			t.Fatalf("%+v", evs)
		}
		reqs := e.kit.Model.Requests()
		last := reqs[len(reqs)-1]
		if last.LastUserText() != "also say hi" {
			t.Errorf("the second model call's last user message = %q, want the steering text", last.LastUserText())
		}
		if roles := strings.Join(last.Roles(), ","); roles != "system,user,assistant,tool,user" {
			t.Errorf("context roles = %s", roles)
		}
	})
}
