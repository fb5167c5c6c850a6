package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/testsupport/lab"
	"github.com/fastagent/fastagent/internal/testsupport/lab/chaosreport"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
)

// modelTimeout is fastagent.yaml's retry.modelTimeout in the fault workspace.
const modelTimeout = 3 * time.Second

// fault is one injected failure and the ending it must have.
type fault struct {
	name    string
	replies []modelserver.Reply
	// want checks the turn; calls is how many model requests it made.
	want func(f *faultTrial) string
	// answered: the turn ends with a reply in the store (not for failed turns).
	answered bool
}

type faultTrial struct {
	evs     []agent.Event
	term    agent.Event
	calls   []modelserver.Request
	session string
	kit     *lab.Kit
}

func wantCompleted(text string, calls int) func(*faultTrial) string {
	return func(f *faultTrial) string {
		if f.term.Type != agent.TypeCompleted {
			return "not completed: " + lab.Describe(f.evs)
		}
		if got := agent.AnswerText(f.evs); got != text {
			return fmt.Sprintf("client kept %q, want %q", got, text)
		}
		if len(f.calls) != calls {
			return fmt.Sprintf("%d model calls, want %d", len(f.calls), calls)
		}
		return ""
	}
}

var faults = []fault{
	{
		name:    "model 429 + Retry-After: 2",
		replies: []modelserver.Reply{{Status: 429, RetryAfter: "2", Message: "rate limited"}, {Text: []string{"after", " the wait"}}},
		want: func(f *faultTrial) string {
			if s := wantCompleted("after the wait", 2)(f); s != "" {
				return s
			}
			if gap := f.calls[1].Received.Sub(f.calls[0].Received); gap < 2*time.Second {
				return fmt.Sprintf("retried after %s, before the 2s Retry-After", gap.Round(time.Millisecond))
			}
			return ""
		},
		answered: true,
	},
	{
		name:     "model 500",
		replies:  []modelserver.Reply{{Status: 500, Message: "upstream overloaded"}, {Text: []string{"recovered"}}},
		want:     wantCompleted("recovered", 2),
		answered: true,
	},
	{
		name:    "model 401",
		replies: []modelserver.Reply{{Status: 401, Message: "Incorrect API key provided"}},
		want: func(f *faultTrial) string {
			if f.term.Type != agent.TypeFailed || f.term.Retryable {
				return "want failed, not retryable: " + lab.Describe(f.evs)
			}
			if !strings.Contains(f.term.Details, "401") {
				return "details do not name the status: " + f.term.Details
			}
			if len(f.calls) != 1 {
				return fmt.Sprintf("%d model calls, want 1", len(f.calls))
			}
			return ""
		},
	},
	{
		name:    "model disconnect mid-stream",
		replies: []modelserver.Reply{{Text: []string{"partial", " answ", "er that breaks"}, DisconnectAfter: 2}, {Text: []string{"whole", " answer"}}},
		want: func(f *faultTrial) string {
			if s := wantCompleted("whole answer", 2)(f); s != "" {
				return s
			}
			if !hasRetrying(f.evs) {
				return "no retrying event after the partial text"
			}
			return ""
		},
		answered: true,
	},
	{
		name:    fmt.Sprintf("model hang past retry.modelTimeout (%s)", modelTimeout),
		replies: []modelserver.Reply{{Text: []string{"working…"}, Hang: true}, {Text: []string{"after", " the timeout"}}},
		want: func(f *faultTrial) string {
			if s := wantCompleted("after the timeout", 2)(f); s != "" {
				return s
			}
			if gap := f.calls[1].Received.Sub(f.calls[0].Received); gap < modelTimeout {
				return fmt.Sprintf("retried after %s, before the timeout", gap.Round(time.Millisecond))
			}
			return ""
		},
		answered: true,
	},
	{
		name: "Go tool panics (in-process worker)",
		replies: []modelserver.Reply{
			{ToolCalls: []modelserver.ToolCall{{ID: "call_panic", Name: lab.PanicName, Args: `{}`}}},
			{Text: []string{"handled"}},
		},
		want: func(f *faultTrial) string {
			if s := wantCompleted("handled", 2)(f); s != "" {
				return s
			}
			if !toolResultSays(context.Background(), f.kit, f.session, "crashed") {
				return "no error tool result saying the tool crashed"
			}
			return ""
		},
		answered: true,
	},
}

// faults runs every fault's trials concurrently, one fault after the other,
// on an in-process worker whose workspace sets retry.modelTimeout.
func (ch *chaos) faults() error {
	kit, err := lab.NewKit(lab.PanicTool{})
	if err != nil {
		return err
	}
	defer kit.Close()
	if err := kit.WriteConfig(fmt.Sprintf("retry:\n  modelTimeout: %s\n  heartbeat: 3s\n", modelTimeout)); err != nil {
		return err
	}
	bus := feed.NewInProcess()
	defer bus.Close()
	queue := lab.NewQueue("faults")
	w, err := lab.StartWorker(ch.c, kit, bus, queue)
	if err != nil {
		return err
	}
	defer w.Stop()
	a, err := lab.Durable(ch.c, kit, bus, queue)
	if err != nil {
		return err
	}
	for fi, f := range faults {
		var t chaosreport.Tally
		t.Row.Scenario = f.name
		var mu sync.Mutex
		var wg sync.WaitGroup
		var done atomic.Int64
		for i := 0; i < ch.f.trials; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := ch.faultTrial(kit, a, f, fmt.Sprintf("fault%d-%s-%d", fi, ch.run, i))
				mu.Lock()
				t.Add(r)
				mu.Unlock()
				ch.prog.Printf("%s: %d/%d trials", f.name, done.Add(1), ch.f.trials)
			}()
		}
		wg.Wait()
		ch.rows = append(ch.rows, t.Done())
	}
	return nil
}

func (ch *chaos) faultTrial(kit *lab.Kit, a agent.Agent, f fault, session string) (res chaosreport.Trial) {
	var notes []string
	defer func() { res.Note = strings.Join(notes, ", ") }()
	warmPrompt, prompt := session+" warm up", session+" faulty"
	kit.Model.EnqueueFor(session+" warm", modelserver.Reply{Text: []string{"ready"}})
	kit.Model.EnqueueFor(session+" faulty", f.replies...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	warm := lab.Events(lab.InvokeAgent(ctx, a, session, warmPrompt, "", nil))
	wt, wn, wok := lab.Terminal(warm)
	t0 := time.Now()
	evs := lab.Events(lab.InvokeAgent(ctx, a, session, prompt, "", nil))
	res.Took = time.Since(t0)
	term, n, ok := lab.Terminal(evs)
	for _, c := range []int{wn, n} {
		switch {
		case c == 0:
			res.Lost++
		case c > 1:
			res.Duplicates += c - 1
		}
	}
	res.OneTerminal = wok && ok
	if !wok || wt.Type != agent.TypeCompleted {
		notes = append(notes, "warm-up: "+lab.Describe(warm))
	}
	ft := &faultTrial{evs: evs, term: term, session: session, kit: kit}
	for _, r := range kit.Model.Requests() {
		if r.LastUserText() == prompt {
			ft.calls = append(ft.calls, r)
		}
	}
	spec := ok
	if s := f.want(ft); s != "" {
		spec = false
		notes = append(notes, s)
	}
	tr := lab.CheckTranscript(context.Background(), kit.Store, session, []string{warmPrompt, prompt}, f.answered)
	res.Duplicates += tr.Duplicates
	res.Lost += tr.Missing
	if len(tr.Problems) > 0 {
		notes = append(notes, strings.Join(tr.Problems, "; "))
	}
	res.AsSpecified = spec && tr.OK()
	return res
}
