package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/testsupport/lab"
	"github.com/fastagent/fastagent/internal/testsupport/lab/chaosreport"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/transcript"
)

// procEnv is a durable stack whose workers are subprocesses: a workspace
// with heartbeat 3s, a NATS feed, an ingress in this process, and the
// worker process currently serving the queue.
type procEnv struct {
	ch    *chaos
	kit   *lab.Kit
	bus   feed.Bus
	queue string
	http  *lab.HTTP
	spec  lab.WorkerSpec

	mu      sync.Mutex
	workers []*lab.Proc
}

func (ch *chaos) newProcEnv(config string, workers int) (*procEnv, error) {
	if err := lab.NATSReachable(ch.f.nats); err != nil {
		return nil, fmt.Errorf("worker-process scenarios need NATS at %s (-nats): %w", ch.f.nats, err)
	}
	ch.prog.Logf("building the fastagent binary")
	bin, err := ch.bins.Worker()
	if err != nil {
		return nil, err
	}
	kit, err := lab.NewKit()
	if err != nil {
		return nil, err
	}
	e := &procEnv{ch: ch, kit: kit, queue: lab.NewQueue("chaos")}
	if err := kit.WriteConfig(config); err != nil {
		e.close()
		return nil, err
	}
	if e.bus, err = feed.NewNATS(ch.f.nats, feed.WithName("fastagent-lab-ingress")); err != nil {
		e.close()
		return nil, err
	}
	rt, err := kit.Runtime(e.bus, e.queue)
	if err != nil {
		e.close()
		return nil, err
	}
	if e.http, err = lab.ServeIngress(rt, rt.Agent(ch.c)); err != nil {
		e.close()
		return nil, err
	}
	e.spec = lab.WorkerSpec{Bin: bin, Kit: kit, TemporalAddress: ch.srv.FrontendAddress(), TemporalAPIKey: ch.srv.APIKey(), Namespace: ch.srv.Namespace(), TaskQueue: e.queue, Feed: ch.f.nats}
	for i := 0; i < workers; i++ {
		if _, err := e.startWorker(); err != nil {
			e.close()
			return nil, err
		}
	}
	return e, nil
}

func (e *procEnv) startWorker() (*lab.Proc, error) {
	p, err := lab.StartWorkerProc(e.spec)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.workers = append(e.workers, p)
	e.mu.Unlock()
	return p, nil
}

// replace SIGKILLs worker i and starts another in its place.
func (e *procEnv) replace(i int) (*lab.Proc, error) {
	e.mu.Lock()
	old := e.workers[i]
	e.mu.Unlock()
	old.Kill()
	p, err := lab.StartWorkerProc(e.spec)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.workers[i] = p
	e.mu.Unlock()
	return p, nil
}

func (e *procEnv) close() {
	e.mu.Lock()
	ws := e.workers
	e.workers = nil
	e.mu.Unlock()
	for _, w := range ws {
		w.Stop(5 * time.Second)
	}
	if e.http != nil {
		e.http.Close()
	}
	if e.bus != nil {
		_ = e.bus.Close()
	}
	e.kit.Close()
}

// killPoints are where a trial SIGKILLs the worker process.
var killPoints = []struct{ name, label string }{
	{"stream", "worker SIGKILL during a model stream"},
	{"result", "worker SIGKILL after a model result, before its tool"},
	{"tool", "worker SIGKILL during a (non-idempotent) tool"},
	{"between", "worker SIGKILL between turns"},
}

// workerKills runs the kill-point trials, one worker process at a time,
// another taking over after each kill.
func (ch *chaos) workerKills() error {
	e, err := ch.newProcEnv("retry:\n  heartbeat: 3s\n", 1)
	if err != nil {
		return err
	}
	defer e.close()
	for _, kp := range killPoints {
		var t chaosreport.Tally
		t.Row.Scenario = kp.label
		for i := 0; i < ch.f.trials; i++ {
			ch.prog.Logf("%s: trial %d/%d", kp.name, i+1, ch.f.trials)
			r := e.killTrial(kp.name, i)
			t.Add(r)
		}
		ch.rows = append(ch.rows, t.Done())
	}
	return nil
}

// bashSide is a bash tool call that appends one line to side, then
// optionally sleeps.
func bashSide(side string, sleep int) modelserver.ToolCall {
	cmd := fmt.Sprintf("echo ran >> %s; ", side)
	if sleep > 0 {
		cmd += fmt.Sprintf("sleep %d; ", sleep)
	}
	args, _ := json.Marshal(map[string]string{"command": cmd + "echo finished"})
	return modelserver.ToolCall{ID: "call_side", Name: "bash", Args: string(args)}
}

func countRuns(side string) int {
	b, _ := os.ReadFile(side)
	return strings.Count(string(b), "ran")
}

// invokeResult checks one invoke's stream.
type invokeResult struct {
	evs  []agent.Event
	term agent.Event
	n    int  // terminals
	ok   bool // exactly one terminal, and last
	err  error
}

func (e *procEnv) invoke(session, prompt, key string, each func(lab.Received)) invokeResult {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rs, err := lab.InvokeHTTP(ctx, e.http.URL, session, prompt, key, each)
	r := invokeResult{evs: lab.Events(rs), err: err}
	r.term, r.n, r.ok = lab.Terminal(r.evs)
	return r
}

// killTrial runs one trial at one kill point in a fresh session: a warm-up
// turn (the session learns heartbeat 3s from it; a session's first model
// call runs with the default 20s), then the turn under test.
func (e *procEnv) killTrial(point string, i int) (res chaosreport.Trial) {
	session := fmt.Sprintf("kill-%s-%s-%d", point, e.ch.run, i)
	side := filepath.Join(e.kit.Dir, session+".side")
	warmPrompt, prompt := session+" warm up", session+" risky thing"
	ms := e.kit.Model
	var prompts []string
	var notes []string
	defer func() {
		res.Note = strings.Join(notes, ", ")
	}()
	allOK := true
	check := func(r invokeResult, what string) {
		if !r.ok {
			allOK = false
			notes = append(notes, fmt.Sprintf("%s: %d terminals (%v) %s", what, r.n, r.err, lab.OneLine(lab.Describe(r.evs), 120)))
		}
		switch {
		case r.n == 0:
			res.Lost++
		case r.n > 1:
			res.Duplicates += r.n - 1
		}
	}
	if !e.ch.f.skipWarmup {
		ms.EnqueueFor(session+" warm", modelserver.Reply{Text: []string{"ready"}})
		check(e.invoke(session, warmPrompt, "", nil), "warm-up")
		prompts = append(prompts, warmPrompt)
	}

	slow := make([]string, 20)
	for j := range slow {
		slow[j] = fmt.Sprintf("word%d ", j)
	}
	key := "key-" + session
	var pred func(feed.Message) bool
	sleep := 0
	switch point {
	case "stream":
		ms.EnqueueFor(session+" risky",
			modelserver.Reply{Text: slow, ChunkDelay: 100 * time.Millisecond},
			modelserver.Reply{Text: []string{"Running it."}, ToolCalls: []modelserver.ToolCall{bashSide(side, 0)}},
			modelserver.Reply{Text: []string{"all", " done"}})
		pred = func(m feed.Message) bool {
			return m.Kind == feed.KindEvent && m.Event != nil && m.Event.Type == agent.TypeText
		}
	case "result":
		ms.EnqueueFor(session+" risky",
			modelserver.Reply{Text: []string{"Running it."}, ToolCalls: []modelserver.ToolCall{bashSide(side, 0)}},
			modelserver.Reply{Text: []string{"all", " done"}})
		marker := activities.ModelMarker(key, 1)
		pred = func(m feed.Message) bool { return m.Kind == feed.KindEnd && m.Marker == marker }
	case "tool":
		sleep = 5
		ms.EnqueueFor(session+" risky",
			modelserver.Reply{Text: []string{"Running it."}, ToolCalls: []modelserver.ToolCall{bashSide(side, sleep)}},
			modelserver.Reply{Text: []string{"all", " done"}})
		pred = func(m feed.Message) bool {
			return m.Kind == feed.KindEvent && m.Event != nil && m.Event.Type == agent.TypeToolStarted
		}
	case "between":
		ms.EnqueueFor(session+" first", modelserver.Reply{Text: []string{"first answer"}})
		first := e.invoke(session, session+" first turn", "", nil)
		check(first, "turn before the kill")
		prompts = append(prompts, session+" first turn")
		if _, err := e.replace(0); err != nil {
			notes = append(notes, "replace worker: "+err.Error())
			res.Lost++
			return res
		}
		ms.EnqueueFor(session+" risky",
			modelserver.Reply{Text: []string{"Running it."}, ToolCalls: []modelserver.ToolCall{bashSide(side, 0)}},
			modelserver.Reply{Text: []string{"all", " done"}})
	}

	// The killer watches the raw live feed of the session.
	killed := make(chan string, 1)
	if pred != nil {
		sub, err := e.bus.Subscribe(context.Background(), session, key)
		if err != nil {
			notes = append(notes, "subscribe: "+err.Error())
			return res
		}
		defer sub.Close()
		go func() {
			for m := range sub.C() {
				if m.Turn != key || !pred(m) {
					continue
				}
				state := ""
				if point == "tool" {
					waitFile(side, 30*time.Second)
				}
				if point == "result" && countRuns(side) > 0 {
					state = "the tool had already run at the kill"
				}
				if _, err := e.replace(0); err != nil {
					state = "replace worker: " + err.Error()
				}
				killed <- state
				return
			}
			killed <- "the kill point never came"
		}()
	} else {
		killed <- ""
	}

	t0 := time.Now()
	r := e.invoke(session, prompt, key, nil)
	res.Took = time.Since(t0)
	check(r, "turn under test")
	prompts = append(prompts, prompt)
	select {
	case s := <-killed:
		if s != "" {
			notes = append(notes, s)
		}
	case <-time.After(time.Minute):
		notes = append(notes, "the kill never happened")
	}

	res.OneTerminal = allOK && r.ok
	spec := r.ok && r.term.Type == agent.TypeCompleted
	text := agent.AnswerText(r.evs)
	if !strings.HasSuffix(text, "all done") || strings.Contains(text, "word") {
		spec = false
		notes = append(notes, fmt.Sprintf("client kept text %q", lab.OneLine(text, 60)))
	}
	if point == "stream" && !hasRetrying(r.evs) {
		spec = false
		notes = append(notes, "no retrying event after the mid-stream kill")
	}

	ctx := context.Background()
	tr := lab.CheckTranscript(ctx, e.kit.Store, session, prompts, true)
	res.Duplicates += tr.Duplicates
	res.Lost += tr.Missing
	if len(tr.Problems) > 0 {
		notes = append(notes, strings.Join(tr.Problems, "; "))
	}
	if point == "tool" {
		if !toolResultSays(ctx, e.kit, session, "unknown") {
			spec = false
			notes = append(notes, "the tool result after the kill does not say the outcome is unknown")
		}
	}
	runs := countRuns(side)
	res.SideChecked = true
	res.SideOK = runs <= 1
	if runs > 1 {
		res.Duplicates++
		notes = append(notes, fmt.Sprintf("the bash side effect ran %d times", runs))
	}
	if runs == 0 {
		spec = false
		notes = append(notes, "the bash side effect never ran")
	}
	res.AsSpecified = spec && tr.OK()
	return res
}

func hasRetrying(evs []agent.Event) bool {
	for _, ev := range evs {
		if ev.Type == agent.TypeRetrying {
			return true
		}
	}
	return false
}

// toolResultSays reports whether the session's (last) tool result is an
// error containing s.
func toolResultSays(ctx context.Context, k *lab.Kit, session, s string) bool {
	entries, err := k.Store.Entries(ctx, session)
	if err != nil {
		return false
	}
	for i := len(entries) - 1; i >= 0; i-- {
		if m := entries[i].Message; m != nil && m.Role == transcript.RoleToolResult {
			return m.IsError && strings.Contains(m.Text, s)
		}
	}
	return false
}

func waitFile(path string, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}
