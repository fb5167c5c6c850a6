package e2e

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows"
)

// dieAfterBegin makes the first workflow task that completes a Turn.Begin
// fail right after it (a workflow panic: the SDK fails the task and the
// server retries it), as when the worker dies after Turn.Begin stored the
// prompt but before its workflow task completed. The retried task draws its
// randomness again.
type dieAfterBegin struct {
	interceptor.WorkerInterceptorBase
	fired atomic.Bool
}

func (d *dieAfterBegin) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	i := &dieInbound{d: d}
	i.Next = next
	return i
}

type dieInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	d *dieAfterBegin
}

func (i *dieInbound) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	o := &dieOutbound{d: i.d}
	o.Next = outbound
	return i.Next.Init(o)
}

type dieOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
	d *dieAfterBegin
}

func (o *dieOutbound) ExecuteLocalActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	f := o.Next.ExecuteLocalActivity(ctx, activityType, args...)
	if activityType != workflows.ActivityTurnBegin {
		return f
	}
	return &dieFuture{Future: f, d: o.d}
}

type dieFuture struct {
	workflow.Future
	d *dieAfterBegin
}

func (f *dieFuture) Get(ctx workflow.Context, v any) error {
	err := f.Future.Get(ctx, v)
	if err == nil && !workflow.IsReplaying(ctx) && f.d.fired.CompareAndSwap(false, true) {
		panic("test: the worker dies after Turn.Begin stored the prompt")
	}
	return err
}

// A worker that dies after Turn.Begin stored the prompt, before its workflow
// task completed, does not make the retry store the prompt a second time:
// the prompt's entry ID comes from the turn key, not from the randomness the
// lost task drew.
func TestPromptStoredOnceWhenTurnBeginIsRetried(t *testing.T) {
	e := newEnv(t)
	die := &dieAfterBegin{}
	e.startWorker(withInterceptors(die))
	e.kit.Model.Handle(echo)
	const session = "begin-retried"
	out := e.sendTurn(session, "k1", "store me once", 0)
	if out.Status != agent.TypeCompleted {
		t.Fatalf("turn: %+v", out)
	}
	if !die.fired.Load() {
		t.Fatal("the workflow task after Turn.Begin never failed: the test did not test anything")
	}
	entries, err := e.kit.Store.Entries(context.Background(), session)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, en := range entries {
		if m := en.Message; m != nil && m.Role == transcript.RoleUser && m.Text == "store me once" {
			n++
		}
	}
	if n != 1 {
		var ids []string
		for _, en := range entries {
			ids = append(ids, en.ID+"<"+en.ParentID)
		}
		t.Errorf("the prompt is stored %d times, want once (entries: %v)", n, ids)
	}
	if got := e.answerOf(session, out); got != "answer to store me once" {
		t.Errorf("stored answer %q", got)
	}
}

// An aborted queued turn is recorded: attaching to its key gets the aborted
// terminal, and after a terminate and restart (no snapshot left) the same
// key is answered "aborted", not run.
func TestAbortedQueuedTurnIsAnsweredAfterRestart(t *testing.T) {
	e := newEnv(t)
	e.startWorker()
	const session = "abort-queued"
	slow := make([]string, 10)
	for i := range slow {
		slow[i] = "slow "
	}
	e.kit.Model.Handle(func(req modelserver.Request) modelserver.Reply {
		if strings.Contains(req.LastUserText(), "take your time") {
			return modelserver.Reply{Text: slow, ChunkDelay: 200 * time.Millisecond}
		}
		return echo(req)
	})
	first := make(chan struct{})
	go func() {
		defer close(first)
		e.sendTurn(session, "t1", "take your time", 0)
	}()
	waitModelCalls(t, e, 1)
	queued := make(chan struct{})
	go func() {
		defer close(queued)
		e.sendTurn(session, "t2", "queued and dropped", 0)
	}()
	var v workflows.SessionView
	var err error
	if !wait.Until(time.Minute, func() bool {
		v, err = e.agent.State(context.Background(), session)
		return err == nil && len(v.Queued) == 1
	}) {
		t.Fatalf("t2 never queued: %+v, %v", v, err)
	}
	if _, err := e.agent.Abort(context.Background(), session, "t2", "not needed"); err != nil {
		t.Fatalf("abort: %v", err)
	}
	<-queued
	<-first
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	evs, err := e.agent.Attach(ctx, session, "t2")
	if err != nil {
		t.Fatalf("attach to the aborted turn: %v", err)
	}
	var last agent.Event
	for ev := range evs {
		last = ev
	}
	if last.Type != agent.TypeFailed || last.Code != agent.CodeAborted {
		t.Errorf("attach to the aborted turn ended with %+v, want failed{aborted}", last)
	}
	if err := e.client.TerminateWorkflow(context.Background(), workflows.WorkflowID(session), "", "test"); err != nil {
		t.Fatal(err)
	}
	calls := len(e.kit.Model.Requests())
	out := e.sendTurn(session, "t2", "queued and dropped", 0)
	if out.Status != agent.TypeFailed || out.Code != agent.CodeAborted {
		t.Errorf("the aborted key after a restart: %+v, want failed{aborted}", out)
	}
	if n := len(e.kit.Model.Requests()); n != calls {
		t.Errorf("the aborted key ran after the restart (%d model calls, want %d)", n, calls)
	}
}

// A rewind is not undone by a terminate and restart: the new workflow
// chain opens at the session's head (the rewind's leaf), not at the last
// recorded turn's leaf.
func TestRewindSurvivesTerminateAndRestart(t *testing.T) {
	e := newEnv(t)
	e.startWorker()
	const session = "rewind-restart"
	e.kit.Model.Handle(echo) // the rewind's summary too
	a := e.sendTurn(session, "a", "first idea", 0)
	if a.Status != agent.TypeCompleted {
		t.Fatalf("a: %+v", a)
	}
	if b := e.sendTurn(session, "b", "second idea", 0); b.Status != agent.TypeCompleted {
		t.Fatalf("b: %+v", b)
	}
	if _, err := e.agent.Rewind(context.Background(), session, a.Leaf); err != nil {
		t.Fatalf("rewind: %v", err)
	}
	if err := e.client.TerminateWorkflow(context.Background(), workflows.WorkflowID(session), "", "test"); err != nil {
		t.Fatal(err)
	}
	if c := e.sendTurn(session, "c", "third idea", 0); c.Status != agent.TypeCompleted {
		t.Fatalf("c: %+v", c)
	}
	reqs := e.kit.Model.Requests()
	last := reqs[len(reqs)-1]
	got := strings.Join(userTexts(last), "|")
	if strings.Contains(got, "|second idea|") || !strings.HasPrefix(got, "first idea|") || !strings.HasSuffix(got, "|third idea") {
		t.Errorf("after rewind and restart the model saw user messages %q; want first idea, the branch summary, third idea (not the second idea)", got)
	}
}
