package workflows_test

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
	"github.com/fastagent/fastagent/workflows/wakes"
)

// wakeRig runs a session whose first turn calls the wake tool once; the fake
// tool turns the call into the directive the real tool would return.
type wakeRig struct {
	env     *testsuite.TestWorkflowEnvironment
	mu      sync.Mutex
	prompts []string // user texts the model saw, in order
	wake    func(now time.Time, id string) *wakes.Wake
	nexts   int
}

func newWakeRig(t *testing.T, wake func(now time.Time, id string) *wakes.Wake) *wakeRig {
	return newWakeRigWith(t, wake, agentloop.Settings{})
}

// newWakeRigWith is newWakeRig whose Session.Open answers settings.
func newWakeRigWith(t *testing.T, wake func(now time.Time, id string) *wakes.Wake, settings agentloop.Settings) *wakeRig {
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4}))))
	r := &wakeRig{env: suite.NewTestWorkflowEnvironment(), wake: wake}
	r.env.SetTestTimeout(30 * time.Second)
	r.env.RegisterWorkflowWithOptions(workflows.SessionWorkflow, workflow.RegisterOptions{Name: workflows.SessionWorkflowType})
	r.env.RegisterActivityWithOptions(func(context.Context, wire.OpenInput) (wire.OpenResult, error) {
		return wire.OpenResult{Settings: settings}, nil
	}, activity.RegisterOptions{Name: workflows.ActivitySessionOpen})
	users := map[string]string{} // user entry ID → text, as Turn.Begin stored them
	r.env.RegisterActivityWithOptions(func(_ context.Context, in wire.BeginTurnInput) (wire.BeginTurnResult, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		users[in.Entry.ID] = in.Entry.Message.Text
		r.prompts = append(r.prompts, in.Entry.Message.Text)
		return wire.BeginTurnResult{}, nil
	}, activity.RegisterOptions{Name: workflows.ActivityTurnBegin})
	r.env.RegisterActivityWithOptions(func(context.Context, wire.RecordTurnInput) error { return nil },
		activity.RegisterOptions{Name: workflows.ActivityTurnRecord})
	r.env.RegisterActivityWithOptions(func(ctx context.Context, c agentloop.ModelCall) (agentloop.ModelResult, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, e := range c.Prepend {
			r.prompts = append(r.prompts, e.Message.Text)
		}
		res := agentloop.ModelResult{EntryID: c.EntryID, StopReason: "stop"}
		if c.Step == 1 && users[c.Leaf] == "set a wake-up" {
			res.Calls = []agentloop.Call{{ID: "w-call", Name: wakes.WakeName, Known: true, Sequential: true}}
		}
		return res, nil
	}, activity.RegisterOptions{Name: workflows.ActivityModelGenerate})
	r.env.RegisterActivityWithOptions(func(ctx context.Context, c agentloop.ToolCall) (agentloop.ToolOutcome, error) {
		if c.Synthetic != nil {
			return agentloop.ToolOutcome{IsError: c.Synthetic.IsError}, nil
		}
		return agentloop.ToolOutcome{Wake: r.wake(activity.GetInfo(ctx).StartedTime, c.NextWakeID)}, nil
	}, activity.RegisterOptions{Name: workflows.ActivityToolExecute})
	r.env.RegisterActivityWithOptions(func(_ context.Context, in wire.NextWakeInput) (time.Time, error) {
		r.mu.Lock()
		r.nexts++
		r.mu.Unlock()
		return wakes.Next(in.Cron, in.TZ, in.After)
	}, activity.RegisterOptions{Name: workflows.ActivityWakeNext})
	return r
}

func (r *wakeRig) turn(t *testing.T, at time.Duration, key, text string) {
	r.env.RegisterDelayedCallback(func() {
		r.env.UpdateWorkflow(workflows.UpdateTurn, key, &testsuite.TestUpdateCallback{
			OnReject:   func(err error) { t.Errorf("turn %s rejected: %v", key, err) },
			OnAccept:   func() {},
			OnComplete: func(any, error) {},
		}, workflows.TurnRequest{Prompt: agent.Prompt{Text: text}})
	}, at)
}

func (r *wakeRig) state(t *testing.T) workflows.SessionView {
	v, err := r.env.QueryWorkflow(workflows.QueryState)
	if err != nil {
		t.Fatal(err)
	}
	var view workflows.SessionView
	if err := v.Get(&view); err != nil {
		t.Fatal(err)
	}
	return view
}

func (r *wakeRig) woken() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, p := range r.prompts {
		if strings.HasPrefix(p, "[wake-up ") {
			out = append(out, p)
		}
	}
	return out
}

// A one-shot wake-up 61 s ahead fires exactly once, in the same session,
// with its prompt enveloped, and is then gone from the pending list.
func TestWakeOneShotFiresOnce(t *testing.T) {
	t.Parallel()
	r := newWakeRig(t, func(now time.Time, id string) *wakes.Wake {
		return &wakes.Wake{ID: id, Prompt: "check the deploy", FireAt: now.Add(61 * time.Second)}
	})
	r.turn(t, time.Second, "t1", "set a wake-up")
	var pendingAfterTurn []wakes.Wake
	r.env.RegisterDelayedCallback(func() { pendingAfterTurn = r.state(t).Wakes }, 30*time.Second)
	var after workflows.SessionView
	r.env.RegisterDelayedCallback(func() { after = r.state(t); r.env.CancelWorkflow() }, 10*time.Minute)
	r.env.ExecuteWorkflow(workflows.SessionWorkflowType, workflows.SessionInput{Session: "s"})

	if len(pendingAfterTurn) != 1 || pendingAfterTurn[0].ID != "w1" {
		t.Fatalf("pending after the turn = %+v, want w1", pendingAfterTurn)
	}
	woken := r.woken()
	if len(woken) != 1 || woken[0] != wakes.Envelope("w1", "check the deploy") {
		t.Fatalf("woken prompts = %q, want one enveloped w1", woken)
	}
	if len(after.Wakes) != 0 {
		t.Errorf("one-shot still pending after firing: %+v", after.Wakes)
	}
	if len(after.WakeLog) != 1 || after.WakeLog[0].ID != "w1" || after.WakeLog[0].Status != agent.TypeCompleted {
		t.Errorf("wake log = %+v", after.WakeLog)
	}
}

// A recurring wake-up fires on each cron instant and stays pending.
func TestWakeRecurringRearms(t *testing.T) {
	t.Parallel()
	r := newWakeRig(t, func(now time.Time, id string) *wakes.Wake {
		next, _ := wakes.Next("0 * * * *", "Europe/Berlin", now)
		return &wakes.Wake{ID: id, Prompt: "hourly", FireAt: next, Cron: "0 * * * *", TZ: "Europe/Berlin"}
	})
	r.turn(t, time.Second, "t1", "set a wake-up")
	var after workflows.SessionView
	r.env.RegisterDelayedCallback(func() { after = r.state(t); r.env.CancelWorkflow() }, 3*time.Hour+30*time.Minute)
	r.env.ExecuteWorkflow(workflows.SessionWorkflowType, workflows.SessionInput{Session: "s"})

	if n := len(r.woken()); n != 3 && n != 4 {
		t.Fatalf("hourly wake-up fired %d times in 3.5 h, want 3 or 4", n)
	}
	if len(after.Wakes) != 1 || after.Wakes[0].Fired != len(r.woken()) {
		t.Errorf("recurring wake-up should stay pending with its fire count: %+v", after.Wakes)
	}
	if after.Wakes[0].FireAt.Minute() != 0 {
		t.Errorf("next instant %s is not on the hour", after.Wakes[0].FireAt)
	}
}

// Pending wake-ups travel through continue-as-new and are re-armed there.
func TestWakeSurvivesContinueAsNew(t *testing.T) {
	t.Parallel()
	r := newWakeRig(t, nil)
	fireAt := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	r.env.SetStartTime(fireAt.Add(-time.Hour))
	snap := &workflows.Snapshot{Opened: true, IDPrefix: "abcd1234", WakeSeq: 1,
		Wakes: []wakes.Wake{{ID: "w1", Prompt: "after CAN", FireAt: fireAt}}}
	var after workflows.SessionView
	r.env.RegisterDelayedCallback(func() { after = r.state(t); r.env.CancelWorkflow() }, 2*time.Hour)
	r.env.ExecuteWorkflow(workflows.SessionWorkflowType, workflows.SessionInput{Session: "s", Snapshot: snap})
	if w := r.woken(); len(w) != 1 || !strings.Contains(w[0], "after CAN") {
		t.Fatalf("a wake-up carried in the snapshot did not fire: %q", w)
	}
	if len(after.Wakes) != 0 || len(after.WakeLog) != 1 {
		t.Errorf("state after: %+v", after)
	}
}
