package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	historypb "go.temporal.io/api/history/v1"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/agent/agenttest"
	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/durable"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/relay"
	"github.com/fastagent/fastagent/internal/testsupport/lab"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// fastagentBinary builds cmd/fastagent once per test run.
func fastagentBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fastagent-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "fastagent")
		cmd := exec.Command("go", "build", "-o", binPath, "../../cmd/fastagent")
		out, err := cmd.CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// natsURL is the NATS server the multi-process tests share a feed through.
func natsURL() string {
	if u := os.Getenv("FASTAGENT_TEST_NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

// proc is a fastagent process started by a test.
type proc struct {
	cmd *exec.Cmd
	out *bytes.Buffer
	mu  *sync.Mutex
}

// startProcess runs `fastagent <command>` against the embedded server, the
// env's SQLite store and NATS; its output is shown if the test fails.
func (e *env) startProcess(t *testing.T, command string, args ...string) *proc {
	t.Helper()
	args = append([]string{command,
		"--dir", e.kit.Dir,
		"--temporal-address", server.FrontendAddress(),
		"--namespace", server.Namespace(),
		"--task-queue", e.queue,
		"--store", filepath.Join(e.kit.Dir, ".fastagent", "sessions.db"),
		"--log-level", "warn",
	}, args...)
	cmd := exec.Command(fastagentBinary(t), args...)
	// The feed URL may hold a token: never on the command line.
	cmd.Env = append(e.kit.ProcessEnv(), "TEMPORAL_API_KEY="+server.APIKey(), "TEMPORAL_TLS=false", "FASTAGENT_FEED="+natsURL())
	cmd.Env = append(cmd.Env, e.extraEnv...)
	if !e.noProcessToken {
		cmd.Env = append(cmd.Env, "FASTAGENT_API_TOKEN="+e2eToken)
	}
	p := &proc{cmd: cmd, out: &bytes.Buffer{}, mu: &sync.Mutex{}}
	w := &lockedWriter{buf: p.out, mu: p.mu}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatalf("start fastagent %s: %v", command, err)
	}
	e.lastProc = p
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			p.mu.Lock()
			t.Logf("%s %d output:\n%s", command, cmd.Process.Pid, p.out.String())
			p.mu.Unlock()
		}
	})
	return p
}

// startWorkerProcess runs `fastagent worker` with the scripted model.
func (e *env) startWorkerProcess(t *testing.T) *proc {
	t.Helper()
	return e.startProcess(t, "worker")
}

func (p *proc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill worker: %v", err)
	}
	_ = p.cmd.Wait()
}

type lockedWriter struct {
	buf *bytes.Buffer
	mu  *sync.Mutex
}

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(b)
}

// newProcessEnv is an env whose workers run as separate processes: the feed
// is NATS and the store a SQLite file both sides open.
func newProcessEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t)
	processEnv(t, e)
	return e
}

// processEnv switches e to NATS and a heartbeat short enough for worker
// deaths to be noticed quickly (see newProcessEnv).
func processEnv(t *testing.T, e *env) {
	t.Helper()
	bus, err := feed.NewNATS(natsURL())
	testkit.RequireService(t, "nats", natsURL(), err)
	t.Cleanup(func() { _ = bus.Close() })
	e.bus = bus
	e.agent.Feed = bus
	e.writeConfig("retry:\n  heartbeat: 3s\n")
}

// A worker process is SIGKILLed in the middle of a model stream, then a new
// one in the middle of a (non-idempotent) tool call. The turn still ends
// with exactly one terminal; the client was told to drop the partial text;
// the store holds each entry once; the tool ran once and the model was told
// its outcome is unknown.
func TestCrashWorkerMidStreamAndMidTool(t *testing.T) {
	t.Parallel() // it mostly waits out a worker's timeouts: shards.sh runs it beside the others
	forProviders(t, func(t *testing.T, e *env) {
		processEnv(t, e)
		sideFile := filepath.Join(e.kit.Dir, "side-effect.txt")
		slow := make([]string, 20)
		for i := range slow {
			slow[i] = fmt.Sprintf("word%d ", i)
		}
		e.kit.Model.Enqueue(
			modelserver.Reply{Text: []string{"ready"}}, // warm-up turn: loads settings
			modelserver.Reply{Text: slow, ChunkDelay: 250 * time.Millisecond},
			modelserver.Reply{Text: []string{"Running it."}, ToolCalls: []modelserver.ToolCall{{
				ID: "call_side", Name: "bash",
				Args: fmt.Sprintf(`{"command":"echo ran >> %s; sleep 8; echo finished"}`, sideFile),
			}}},
			modelserver.Reply{Text: []string{"all", " done"}},
		)
		w1 := e.startWorkerProcess(t)
		if term := agenttest.CheckTerminal(t, collect(t, e.agent, context.Background(), e.session("crash"), "warm up")); term.Type != agent.TypeCompleted {
			t.Fatalf("warm-up turn: %+v", term)
		}

		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		var evs []agent.Event
		var w2 *proc
		killedInTool := false
		key := durable.NewKey() // the NATS feed outlives test runs
		for ev := range e.agent.Invoke(agent.WithIdempotencyKey(ctx, key), agent.Scope{Session: e.session("crash")}, agent.Prompt{Text: "do the risky thing"}) {
			evs = append(evs, ev)
			switch {
			case ev.Type == agent.TypeText && w2 == nil && strings.HasPrefix(ev.Delta, "word"):
				w1.kill(t) // mid-stream
				w2 = e.startWorkerProcess(t)
			case ev.Type == agent.TypeToolStarted && !killedInTool:
				killedInTool = true
				waitForFile(t, sideFile)
				w2.kill(t) // mid-tool
				e.startWorkerProcess(t)
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("turn did not finish: %s", describe(evs))
		}
		t.Logf("events: %s", describe(evs))
		term := agenttest.CheckTerminal(t, evs)
		if term.Type != agent.TypeCompleted {
			t.Fatalf("want completed, got %s", describe(evs))
		}
		sawRetrying := false
		for _, ev := range evs {
			if ev.Type == agent.TypeRetrying {
				sawRetrying = true
			}
		}
		if !sawRetrying {
			t.Errorf("no retrying event after the worker died mid-stream: %s", describe(evs))
		}
		// The whole answer, not just its end: the client keeps exactly the
		// text the store holds for the turn, and that is what the model
		// said in the steps that counted.
		stored := recordedAnswer(t, e, e.session("crash"), key)
		if got := agenttest.TextAfterLastRetry(evs); got != stored {
			t.Errorf("text the client keeps differs from the turn's stored answer:\n got    %q\n stored %q", got, stored)
		}
		if stored != "Running it.all done" {
			t.Errorf("the turn's stored answer = %q, want %q", stored, "Running it.all done")
		}
		b, _ := os.ReadFile(sideFile)
		if n := strings.Count(string(b), "ran"); n != 1 {
			t.Errorf("the non-idempotent tool ran %d times, want 1", n)
		}

		entries, err := e.kit.Store.Entries(context.Background(), e.session("crash"))
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]bool{}
		var kinds []string
		for _, en := range entries {
			if ids[en.ID] {
				t.Errorf("duplicate entry %s", en.ID)
			}
			ids[en.ID] = true
			kinds = append(kinds, en.Message.Role)
		}
		want := "user,assistant,user,assistant,toolResult,assistant"
		if got := strings.Join(kinds, ","); got != want {
			t.Errorf("entries = %s, want %s (none missing, none twice)", got, want)
		}
		branch, err := e.kit.Store.Branch(context.Background(), e.session("crash"), entries[len(entries)-1].ID)
		if err != nil || len(branch) != len(entries) {
			t.Errorf("the transcript is not one unbroken branch: %d of %d entries (%v)", len(branch), len(entries), err)
		}
		for _, en := range entries {
			if en.Message.Role == transcript.RoleToolResult {
				if !en.Message.IsError || !strings.Contains(en.Message.Text, "unknown") {
					t.Errorf("tool result after the crash should say the outcome is unknown: %+v", en.Message)
				}
			}
		}
	})
}

// recordedAnswer waits for the record of turn key in session and returns
// the answer the store keeps for it: the text of each of its model steps,
// in order, joined as a client joins them.
func recordedAnswer(t *testing.T, e *env, session, key string) string {
	t.Helper()
	var rec agentloop.Outcome
	waitFor(t, time.Minute, "the record of turn "+key, func() bool {
		r, err := e.kit.Store.Turn(context.Background(), session, key)
		return err == nil && json.Unmarshal(r.Outcome, &rec) == nil
	})
	steps, err := relay.StoredSteps(context.Background(), e.kit.Store, session, rec)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(steps, "")
}

func waitForFile(t *testing.T, path string) {
	t.Helper()
	waitFor(t, 30*time.Second, path+" to be written", func() bool {
		b, err := os.ReadFile(path)
		return err == nil && len(b) > 0
	})
}

func describe(evs []agent.Event) string { return lab.Describe(evs) }

// A worker process is SIGKILLed after a turn's reply was stored and
// before its record (which the model step that ended the turn writes, then
// publishes the outcome): the store refuses the record until the worker is
// dead. The turn is not answered before it is recorded; a new worker
// retries the step, which finds the stored reply (the model is not called
// again) and records the turn; the next turn then answers as usual.
func TestWorkerKilledBetweenTurns(t *testing.T) {
	t.Parallel() // it mostly waits out a worker's timeouts: shards.sh runs it beside the others
	e := newProcessEnv(t)
	// The NATS feed outlives test runs: names unique to this run.
	session, key := "kill-between-turns-"+durable.NewKey(), "first-turn"
	e.kit.Model.Enqueue(
		modelserver.Reply{Text: []string{"ready"}}, // warm-up turn: loads settings
		modelserver.Reply{Text: []string{"first", " answer"}},
		modelserver.Reply{Text: []string{"second", " answer"}},
	)
	w1 := e.startWorkerProcess(t)
	must(t, collect(t, e.agent, context.Background(), session, "warm up"), agent.TypeCompleted)
	t.Logf("%s warm-up answered", time.Now().Format("15:04:05.000"))

	hold := holdTurnRecord(t, e, key)
	ended := stepEnded(t, e, session, key)
	firstDone := make(chan []agent.Event, 1)
	go func() {
		firstDone <- collect(t, e.agent, agent.WithIdempotencyKey(context.Background(), key), session, "first turn")
	}()
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the first turn's model step never ended")
	}
	t.Logf("%s first turn's reply stored, its record refused", time.Now().Format("15:04:05.000"))
	select {
	case evs := <-firstDone:
		t.Fatalf("the first turn answered before it was recorded: %s", describe(evs))
	default:
	}
	w1.kill(t)
	hold.release()
	e.startWorkerProcess(t)
	t.Logf("%s worker killed, another started", time.Now().Format("15:04:05.000"))

	var first []agent.Event
	select {
	case first = <-firstDone:
	case <-time.After(2 * time.Minute):
		t.Fatal("the first turn did not answer after the worker was replaced")
	}
	must(t, first, agent.TypeCompleted)
	if got, stored := agent.AnswerText(first), recordedAnswer(t, e, session, key); got != "first answer" || stored != "first answer" {
		t.Errorf("first turn's text = %q, stored answer %q; want both %q", got, stored, "first answer")
	}
	if n := e.kit.Model.Count(); n != 2 {
		t.Errorf("the model was called %d times for the warm-up and the first turn, want 2 (the retried step reuses the stored reply)", n)
	}
	second := collect(t, e.agent, agent.WithIdempotencyKey(context.Background(), "second-turn"), session, "second turn")
	must(t, second, agent.TypeCompleted)
	if got, stored := agent.AnswerText(second), recordedAnswer(t, e, session, "second-turn"); got != "second answer" || got != stored {
		t.Errorf("second turn's text = %q, stored answer %q; want both %q", got, stored, "second answer")
	}
	if t.Failed() {
		id := workflows.WorkflowID(session)
		runs := runIDs(t, e, id)
		t.Logf("history:\n%s", timeline(fetchHistory(t, e, id, runs[len(runs)-1])))
		for _, r := range e.kit.Model.Requests() {
			t.Logf("model request %d: last user text %q", r.Seq, r.LastUserText())
		}
	}
}

// stepEnded is closed when the turn's first model step has ended on the
// feed (its reply stored).
func stepEnded(t *testing.T, e *env, session, key string) <-chan struct{} {
	t.Helper()
	sub, err := e.bus.Subscribe(context.Background(), session, key)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	marker := activities.ModelMarker(key, 1)
	go func() {
		defer sub.Close()
		for m := range sub.C() {
			if m.Kind == feed.KindEnd && m.Marker == marker {
				close(done)
				return
			}
		}
	}()
	return done
}

// recordHold makes the env's SQLite store refuse the record of one turn key
// (a trigger) until released.
type recordHold struct {
	t  *testing.T
	db *sql.DB
}

func holdTurnRecord(t *testing.T, e *env, key string) *recordHold {
	t.Helper()
	path := filepath.Join(e.kit.Dir, ".fastagent", "sessions.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TRIGGER hold_record BEFORE INSERT ON turns WHEN NEW.key = '` + key + `'
BEGIN SELECT RAISE(ABORT, 'record held by the test'); END`); err != nil {
		t.Fatalf("hold the record: %v", err)
	}
	h := &recordHold{t: t, db: db}
	t.Cleanup(h.release)
	return h
}

// release drops the trigger.
func (h *recordHold) release() {
	if h.db == nil {
		return
	}
	if _, err := h.db.Exec(`DROP TRIGGER IF EXISTS hold_record`); err != nil {
		h.t.Errorf("release the record: %v", err)
	}
	_ = h.db.Close()
	h.db = nil
}

// timeline is a run's history, one event a line: seconds since the first
// event, event type, and the activity or timeout it names.
func timeline(h *historypb.History) string {
	var b strings.Builder
	var t0 time.Time
	acts := map[int64]string{}
	for _, ev := range h.GetEvents() {
		at := ev.GetEventTime().AsTime()
		if t0.IsZero() {
			t0 = at
		}
		what := ""
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			acts[ev.GetEventId()] = a.GetActivityType().GetName()
			what = a.GetActivityType().GetName()
		}
		if a := ev.GetActivityTaskStartedEventAttributes(); a != nil {
			what = fmt.Sprintf("%s attempt %d", acts[a.GetScheduledEventId()], a.GetAttempt())
		}
		if a := ev.GetActivityTaskTimedOutEventAttributes(); a != nil {
			what = fmt.Sprintf("%s %s", acts[a.GetScheduledEventId()], a.GetFailure().GetTimeoutFailureInfo().GetTimeoutType())
		}
		if a := ev.GetActivityTaskCompletedEventAttributes(); a != nil {
			what = acts[a.GetScheduledEventId()]
		}
		if a := ev.GetWorkflowTaskTimedOutEventAttributes(); a != nil {
			what = a.GetTimeoutType().String()
		}
		if a := ev.GetWorkflowExecutionUpdateAcceptedEventAttributes(); a != nil {
			what = a.GetAcceptedRequest().GetMeta().GetUpdateId()
		}
		if a := ev.GetWorkflowExecutionUpdateCompletedEventAttributes(); a != nil {
			what = a.GetMeta().GetUpdateId()
		}
		if a := ev.GetWorkflowTaskScheduledEventAttributes(); a != nil {
			what = a.GetTaskQueue().GetKind().String()
		}
		fmt.Fprintf(&b, "%7.2fs %s %4d %s %s\n", at.Sub(t0).Seconds(), at.Format("15:04:05.000"), ev.GetEventId(), ev.GetEventType(), what)
	}
	return b.String()
}

// An abort reaches a model stream in a worker process through the stop
// notice on NATS, not through a heartbeat: with a 60 s heartbeat timeout
// (first heartbeat at 30 s) the model server still sees the request
// cancelled within seconds.
func TestAbortAcrossProcesses(t *testing.T) {
	e := newProcessEnv(t)
	e.writeConfig("retry:\n  heartbeat: 60s\n")
	e.kit.Model.Enqueue(modelserver.Reply{Text: []string{"working…"}, Hang: true})
	aborted := e.kit.Model.Aborted()
	e.startWorkerProcess(t)
	session := fmt.Sprintf("abort-proc-%d", time.Now().UnixNano())
	ctx := context.Background()
	done := make(chan []agent.Event, 1)
	go func() { done <- collect(t, e.agent, ctx, session, "take forever") }()
	waitFor(t, time.Minute, "the model call", func() bool { return e.kit.Model.Count() == 1 })
	if _, err := e.agent.Abort(ctx, session, "", "user pressed stop"); err != nil {
		t.Fatalf("abort: %v", err)
	}
	if term := agenttest.CheckTerminal(t, <-done); term.Type != agent.TypeFailed || term.Code != agent.CodeAborted {
		t.Fatalf("want failed{aborted}, got %+v", term)
	}
	if err := waitAborted(e, aborted); err != nil {
		t.Errorf("the model stream in the worker process was not stopped: %v", err)
	}
}
