package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/agent/agenttest"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/httpagent"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// storedAnswer is the text the store keeps for the session's last turn: the
// assistant replies after its last user prompt (steering excluded), joined.
func storedAnswer(t *testing.T, e *env, session string) string {
	t.Helper()
	ctx := context.Background()
	leaf, err := e.kit.Store.Leaf(ctx, session)
	if err != nil {
		t.Fatal(err)
	}
	branch, err := e.kit.Store.Branch(ctx, session, leaf)
	if err != nil {
		t.Fatal(err)
	}
	start := 0
	for i, en := range branch {
		if m := en.Message; m != nil && m.Role == transcript.RoleUser && m.Source != "steer" {
			start = i + 1
		}
	}
	var b strings.Builder
	for _, en := range branch[start:] {
		if m := en.Message; m != nil && m.Role == transcript.RoleAssistant {
			b.WriteString(m.Text)
		}
	}
	return b.String()
}

func chunks(n int, format string) ([]string, string) {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(format, i)
	}
	return out, strings.Join(out, "")
}

// checkWhole asserts a client's events: the answer equals the stored text,
// exactly one terminal, completed, last.
func checkWhole(t *testing.T, e *env, session string, evs []agent.Event) {
	t.Helper()
	term := agenttest.CheckTerminal(t, evs)
	if term.Type != agent.TypeCompleted {
		t.Fatalf("want completed, got %s", describe(evs))
	}
	if got, want := agent.AnswerText(evs), storedAnswer(t, e, session); got != want || want == "" {
		t.Fatalf("client text differs from the stored answer:\n got  %q\n want %q", got, want)
	}
}

// A client that asked to be able to resume (Resume-Within) and drops its
// connection mid-stream detaches: the turn keeps running (the model stream
// is not aborted), and re-sending the same key with Last-Event-ID — on POST
// /invoke, or on the attach route — resumes exactly where it left off. A
// turn nobody comes back to is aborted after the grace (what the client
// asked for, capped by the server's detach grace), not before.
func TestDisconnectDetachesAndReattachResumes(t *testing.T) {
	e := newEnv(t)
	e.agent.DetachGrace = 3 * time.Second
	e.startWorker()
	hs := e.ingress()
	slow, _ := chunks(30, "w%02d ")

	for _, route := range []string{"invoke", "attach"} {
		t.Run(route, func(t *testing.T) {
			session := "detach-" + route
			e.kit.Model.Enqueue(modelserver.Reply{Text: slow, ChunkDelay: 60 * time.Millisecond})
			aborted := e.kit.Model.Aborted()
			key := "key-" + route
			ctx, cancel := context.WithCancel(agent.WithIdempotencyKey(context.Background(), key))
			client := &httpagent.Agent{BaseURL: hs.URL, ResumeWithin: time.Minute}
			var first []agent.Event
			for ev := range client.Invoke(ctx, agent.Scope{Session: session}, agent.Prompt{Text: "stream slowly"}) {
				first = append(first, ev)
				if len(first) == 5 {
					break // the connection drops
				}
			}
			cancel()
			// The turn streams on without its client: five deltas more.
			waitFeedTexts(t, e, session, key, textCount(first)+5)
			last := first[len(first)-1].Seq
			if last == 0 {
				t.Fatalf("events carry no SSE id: %s", describe(first))
			}
			rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
			defer rcancel()
			var rest []agent.Event
			if route == "invoke" {
				req := resumeRequest(t, hs.URL, session, key, last)
				rest = readAll(t, req)
			} else {
				for ev := range client.Attach(rctx, session, key, last) {
					rest = append(rest, ev)
				}
			}
			checkWhole(t, e, session, append(first, rest...))
			if n := e.kit.Model.Aborted(); n != aborted {
				t.Fatalf("the model stream was aborted %d time(s) although the client came back", n-aborted)
			}
			if c := e.kit.Model.Count(); c == 0 {
				t.Fatal("no model call")
			}
		})
	}

	t.Run("abandoned turn is aborted after the grace", func(t *testing.T) {
		e.kit.Model.Enqueue(modelserver.Reply{Text: []string{"a", "b"}, Hang: true})
		aborted := e.kit.Model.Aborted()
		ctx, cancel := context.WithCancel(context.Background())
		client := &httpagent.Agent{BaseURL: hs.URL, ResumeWithin: time.Minute}
		for ev := range client.Invoke(ctx, agent.Scope{Session: "detach-abandoned"}, agent.Prompt{Text: "hang"}) {
			if ev.Type == agent.TypeText {
				break
			}
		}
		left := time.Now()
		cancel()
		// An abort before the grace ran out fails the elapsed-time check below.
		if err := waitAborted(e, aborted); err != nil {
			t.Fatalf("the abandoned turn was never aborted: %v", err)
		}
		if d := time.Since(left); d < 3*time.Second {
			t.Fatalf("aborted %s after the client left, before the 3s grace", d)
		}
	})
}

// resumeRequest re-sends a turn with Last-Event-ID (and the key taken from it).
func resumeRequest(t *testing.T, base, session, key string, last int64) *http.Request {
	t.Helper()
	body := fmt.Sprintf(`{"session":%q,"text":"stream slowly"}`, session)
	req, err := http.NewRequest(http.MethodPost, base+"/invoke", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+e2eToken)
	req.Header.Set("Last-Event-ID", fmt.Sprintf("%s.%d", key, last))
	return req
}

func readAll(t *testing.T, req *http.Request) []agent.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %s", resp.Status)
	}
	var out []agent.Event
	for ev, err := range httpagent.ReadSSE(resp.Body) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
		if ev.IsTerminal() {
			break
		}
	}
	return out
}

// A consumer attaching at a random point of a 200-delta stream receives the
// turn from its start: its text equals the stored text. Attaching after the
// end gives the whole answer; an unknown key is a 404.
func TestAttachAnywhere(t *testing.T) {
	e := newEnv(t)
	e.startWorker()
	hs := e.ingress()
	deltas, _ := chunks(200, "d%03d ")
	e.kit.Model.Enqueue(modelserver.Reply{Text: deltas, ChunkDelay: 5 * time.Millisecond})
	const session, key = "attach-anywhere", "attach-key"
	started := make(chan struct{})
	e.kit.Model.OnFirstDelta(func(modelserver.Request, time.Time) { close(started) })
	done := make(chan []agent.Event, 1)
	go func() {
		ctx := agent.WithIdempotencyKey(context.Background(), key)
		done <- collect(t, e.agent, ctx, session, "two hundred deltas")
	}()
	<-started
	at := 1 + rand.IntN(len(deltas)-1)
	t.Logf("attaching after delta %d", at)
	waitFeedTexts(t, e, session, key, at)
	client := &httpagent.Agent{BaseURL: hs.URL}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var attached []agent.Event
	for ev := range client.Attach(ctx, session, key, 0) {
		attached = append(attached, ev)
	}
	owner := <-done
	checkWhole(t, e, session, owner)
	checkWhole(t, e, session, attached)

	var after []agent.Event
	for ev := range client.Attach(ctx, session, key, 0) {
		after = append(after, ev)
	}
	checkWhole(t, e, session, after)

	resp, err := http.Get(hs.URL + "/sessions/" + session + "/turns/no-such-key/events")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown turn: status %d, want 404", resp.StatusCode)
	}
}

// A redelivered key whose live-feed log has expired still gets the whole
// answer (rebuilt from the store), not just the terminal.
func TestRedeliveryAfterFeedRetentionGetsWholeAnswer(t *testing.T) {
	e := newEnv(t)
	bus := feed.NewInProcess()
	bus.Retention = 50 * time.Millisecond
	t.Cleanup(func() { _ = bus.Close() })
	e.bus, e.agent.Feed = bus, bus
	e.startWorker()
	e.kit.Model.Enqueue(modelserver.Reply{
		Text:      []string{"Let me ", "count."},
		ToolCalls: []modelserver.ToolCall{{ID: "c1", Name: "counter", Args: `{"note":"x"}`}},
	}, modelserver.Reply{Text: []string{"Counted ", "once."}})
	ctx := agent.WithIdempotencyKey(context.Background(), "expired-key")
	first := collect(t, e.agent, ctx, "expired", "count")
	checkWhole(t, e, "expired", first)
	// Deliberate: past the retention and the once-a-second sweep, which the
	// in-process bus runs on the wall clock (its clock seam is the feed
	// package's own).
	time.Sleep(1200 * time.Millisecond)
	_ = bus.Publish(context.Background(), feed.Message{Session: "other", Turn: "x", Kind: feed.KindEnd})
	calls := e.kit.Model.Count()
	again := collect(t, e.agent, ctx, "expired", "count")
	checkWhole(t, e, "expired", again)
	if agent.AnswerText(again) != "Let me count.Counted once." {
		t.Fatalf("redelivery text %q", agent.AnswerText(again))
	}
	if e.kit.Model.Count() != calls {
		t.Fatal("the redelivered key called the model again")
	}
}

// Step 1 streams text and calls a tool; step 2's stream is cut and retried:
// the client keeps step 1's text (the retrying names step 2 only).
func TestRetryOfLaterStepKeepsEarlierText(t *testing.T) {
	e := newEnv(t)
	e.startWorker()
	e.kit.Model.Enqueue(
		modelserver.Reply{Text: []string{"I'll check ", "the counter."}, ToolCalls: []modelserver.ToolCall{{ID: "c1", Name: "counter", Args: `{"note":"y"}`}}},
		modelserver.Reply{Text: []string{"It ", "says ", "one."}, DisconnectAfter: 2},
		modelserver.Reply{Text: []string{"It ", "says ", "one."}},
	)
	evs := collect(t, e.agent, context.Background(), "later-step", "check")
	checkWhole(t, e, "later-step", evs)
	sawRetry := false
	for _, ev := range evs {
		if ev.Type == agent.TypeRetrying {
			sawRetry = true
			if ev.Step != 2 {
				t.Fatalf("retrying names step %d, want 2: %s", ev.Step, describe(evs))
			}
		}
	}
	if !sawRetry {
		t.Fatalf("no retrying: %s", describe(evs))
	}
	if got := agent.AnswerText(evs); got != "I'll check the counter.It says one." {
		t.Fatalf("answer %q", got)
	}
}

// An ingress process killed (SIGKILL) or stopped (SIGTERM) mid-stream: the
// client resumes on the other ingress with its key and Last-Event-ID and
// ends with exactly the stored text and one terminal; the turn is never
// aborted, and a stopped ingress exits promptly.
func TestIngressStoppedMidStreamClientResumesElsewhere(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			e := newProcessEnv(t)
			e.startWorker()
			slow, _ := chunks(30, "s%02d ")
			e.kit.Model.Enqueue(modelserver.Reply{Text: slow, ChunkDelay: 80 * time.Millisecond})
			aborted := e.kit.Model.Aborted()
			a := e.startIngressProcessProc(t)
			b := e.startIngressProcessProc(t)
			client := &httpagent.Agent{BaseURL: a.base, Fallbacks: []string{b.base}, Reconnects: 3, Token: e2eToken, RetryDelay: 100 * time.Millisecond}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			session := "ingress-" + strings.ToLower(sig.String())
			var evs []agent.Event
			var stopped time.Duration
			for ev := range client.Invoke(ctx, agent.Scope{Session: session}, agent.Prompt{Text: "stream"}) {
				evs = append(evs, ev)
				if len(evs) == 5 {
					start := time.Now()
					if err := a.p.cmd.Process.Signal(sig); err != nil {
						t.Fatal(err)
					}
					_ = a.p.cmd.Wait()
					stopped = time.Since(start)
				}
			}
			checkWhole(t, e, session, evs)
			if n := e.kit.Model.Aborted(); n != aborted {
				t.Fatalf("the turn was aborted %d time(s) by an ingress going away", n-aborted)
			}
			t.Logf("%s: ingress gone after %s; %d events", sig, stopped, len(evs))
			if sig == syscall.SIGTERM && stopped > 10*time.Second {
				t.Fatalf("SIGTERM: the ingress took %s to exit", stopped)
			}
		})
	}
}

type ingressProc struct {
	p    *proc
	base string
}

func (e *env) startIngressProcessProc(t *testing.T) ingressProc {
	t.Helper()
	base := e.startIngressProcess(t)
	return ingressProc{p: e.lastProc, base: base}
}

// Steering that arrives too late for its turn (here: while the tool of the
// only step maxSteps allows runs) runs as a follow-up turn "@steer:<key>";
// GET /sessions/{id} names it and its output can be attached to, from the
// start.
func TestLateSteeringFollowUpCanBeAttached(t *testing.T) {
	e := newEnv(t)
	e.writeConfig("maxSteps: 1\n")
	e.startWorker()
	hs := e.ingress()
	release := e.kit.Counter.Hold("held")
	defer release()
	e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "c1", Name: testkit.CounterName, Args: `{"note":"held"}`}}},
		modelserver.Reply{Text: []string{"follow", "-up ", "answer"}, ChunkDelay: 400 * time.Millisecond},
	)
	const session, key = "late-steer", "late-key"
	done := make(chan []agent.Event, 1)
	go func() {
		done <- collect(t, e.agent, agent.WithIdempotencyKey(context.Background(), key), session, "talk")
	}()
	waitFor(t, time.Minute, "the tool runs", func() bool { return e.kit.Counter.Started(session) == 1 })
	resp, err := http.Post(hs.URL+"/sessions/"+session+"/steer", "application/json", strings.NewReader(`{"text":"and one more thing"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("steer: %s", resp.Status)
	}
	release()
	if term := agenttest.CheckTerminal(t, <-done); term.Type != agent.TypeFailed || term.Code != agent.CodeMaxSteps {
		t.Fatalf("first turn: %+v", term)
	}
	follow := workflows.InternalKeyPrefix + "steer:" + key
	// The follow-up is named by the session while it waits or runs (its
	// reply takes more than a second; it is queued once the first turn's
	// record is stored).
	var v workflows.SessionView
	if !wait.Until(10*time.Second, func() bool {
		v, err = e.agent.State(context.Background(), session)
		if err != nil {
			t.Fatal(err)
		}
		return v.Running == follow || slices.Contains(v.Queued, follow)
	}) {
		t.Fatalf("state after the first turn: running %q, queued %v; the follow-up %q never showed", v.Running, v.Queued, follow)
	}
	client := &httpagent.Agent{BaseURL: hs.URL}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var evs []agent.Event
	for ev := range client.Attach(ctx, session, follow, 0) {
		evs = append(evs, ev)
	}
	if term := agenttest.CheckTerminal(t, evs); term.Type != agent.TypeCompleted {
		t.Fatalf("follow-up: %s", describe(evs))
	}
	if got := agent.AnswerText(evs); got != "follow-up answer" {
		t.Fatalf("follow-up text %q", got)
	}
	// Afterwards the session is idle with both turns counted, its leaf the
	// follow-up's end. The terminal comes from the turn's record, which is
	// stored just before the workflow counts the turn: wait for that.
	wait.Until(10*time.Second, func() bool { // the check below says what is wrong
		v, err = e.agent.State(context.Background(), session)
		if err != nil {
			t.Fatal(err)
		}
		return v.Running == "" && v.Turns == 2
	})
	rec, err := e.kit.Store.Turn(context.Background(), session, follow)
	if err != nil {
		t.Fatalf("the follow-up's record: %v", err)
	}
	var out agentloop.Outcome
	if err := json.Unmarshal(rec.Outcome, &out); err != nil {
		t.Fatal(err)
	}
	if v.Running != "" || len(v.Queued) != 0 || v.Turns != 2 || v.Leaf != out.Leaf || out.Leaf == "" {
		t.Errorf("state after the follow-up: running %q, queued %v, turns %d, leaf %q; want idle, 2 turns, leaf %q",
			v.Running, v.Queued, v.Turns, v.Leaf, out.Leaf)
	}
}

// waitFeedTexts waits until the live feed of turn holds n text deltas: the
// turn has streamed that far, whoever follows it.
func waitFeedTexts(t *testing.T, e *env, session, turn string, n int) {
	t.Helper()
	sub, err := e.bus.Subscribe(context.Background(), session, turn)
	if err != nil {
		t.Fatalf("subscribe to the feed of %s/%s: %v", session, turn, err)
	}
	defer sub.Close()
	limit := time.NewTimer(30 * time.Second)
	defer limit.Stop()
	for seen := 0; seen < n; {
		select {
		case m, ok := <-sub.C():
			if !ok {
				t.Fatalf("the feed of %s/%s closed after %d of %d text deltas", session, turn, seen, n)
			}
			if m.Kind == feed.KindEvent && m.Event != nil && m.Event.Type == agent.TypeText {
				seen++
			}
		case <-limit.C:
			t.Fatalf("the feed of %s/%s held %d of %d text deltas after 30 s", session, turn, seen, n)
		}
	}
}

// textCount is how many text deltas evs hold.
func textCount(evs []agent.Event) int {
	n := 0
	for _, ev := range evs {
		if ev.Type == agent.TypeText {
			n++
		}
	}
	return n
}

// waitTurnsDone waits until session has neither a running nor a queued turn.
func waitTurnsDone(t *testing.T, e *env, session string) {
	t.Helper()
	waitFor(t, 30*time.Second, "session "+session+" to become idle", func() bool {
		v, err := e.agent.State(context.Background(), session)
		return err == nil && v.Running == "" && len(v.Queued) == 0 && storedAnswer(t, e, session) != ""
	})
}

// A client that resumes a finished turn with Last-Event-ID gets exactly the
// rest of the answer, whatever happened to the turn's live log meanwhile:
// the log was swept after its retention, the process serving it restarted
// (a new in-process feed that never saw the turn), or NATS dropped it after
// its retention. The whole text equals the stored answer, each part once.
func TestResumeAfterTheLogIsGone(t *testing.T) {
	for _, mode := range []string{"sweep", "restart", "nats"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			e.agent.DetachGrace = time.Minute
			switch mode {
			case "sweep":
				bus := feed.NewInProcess()
				bus.Retention = 50 * time.Millisecond
				t.Cleanup(func() { _ = bus.Close() })
				e.bus, e.agent.Feed = bus, bus
			case "nats":
				prefix := fmt.Sprintf("e2e.resume%d", time.Now().UnixNano())
				w, err := feed.NewNATS(natsURL(), feed.WithPrefix(prefix), feed.WithRetention(time.Second))
				testkit.RequireService(t, "nats", natsURL(), err)
				t.Cleanup(func() { _ = w.Close() })
				in, err := feed.NewNATS(natsURL(), feed.WithPrefix(prefix), feed.WithRetention(time.Second))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = in.Close() })
				e.bus, e.agent.Feed = w, in // a worker and an ingress process
			}
			e.startWorker()
			hs := e.ingress()
			slow, _ := chunks(40, "r%02d ")
			e.kit.Model.Enqueue(modelserver.Reply{Text: slow, ChunkDelay: 30 * time.Millisecond})
			session, key := "resume-gone-"+mode, "resume-gone-key-"+mode
			ctx, cancel := context.WithCancel(agent.WithIdempotencyKey(context.Background(), key))
			client := &httpagent.Agent{BaseURL: hs.URL, ResumeWithin: time.Minute}
			var first []agent.Event
			for ev := range client.Invoke(ctx, agent.Scope{Session: session}, agent.Prompt{Text: "stream slowly"}) {
				first = append(first, ev)
				if len(first) == 15 {
					break // the connection drops
				}
			}
			cancel()
			waitTurnsDone(t, e, session)
			switch mode {
			case "sweep":
				// Deliberate: as in TestRedeliveryAfterFeedRetentionGetsWholeAnswer.
				time.Sleep(1200 * time.Millisecond)
			case "restart":
				bus := feed.NewInProcess()
				t.Cleanup(func() { _ = bus.Close() })
				restarted := *e.agent
				restarted.Feed = bus
				hs = e.serveNoAuth(e.server(&restarted))
			case "nats":
				// Deliberate: past the 1 s retention after the turn's end, which
				// the NATS server keeps on its own clock.
				time.Sleep(2500 * time.Millisecond)
			}
			rest := readAll(t, resumeRequest(t, hs.URL, session, key, first[len(first)-1].Seq))
			checkWhole(t, e, session, append(first, rest...))
		})
	}
}
