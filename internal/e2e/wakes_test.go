package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
	"github.com/fastagent/fastagent/internal/waketools"
	"github.com/fastagent/fastagent/workflows/wakes"
)

// On the real server: the agent sets a wake-up with its wake tool; the
// worker is replaced while the timer is pending; the woken turn then runs
// once in the same session with the enveloped prompt. (The one-shot bound is
// lowered to 1 s for the test; the 60 s bound and the timer logic are
// covered by the time-skipping tests in workflows/ and internal/wakes.)
func TestSelfWakeFiresOnceAcrossWorkerRestart(t *testing.T) {
	e := newEnv(t)
	e.kit.Loader.Wakes = waketools.Options{MinOneShot: time.Second}
	e.writeConfig("selfSchedule: true\n")
	w := e.startWorker()
	woken := make(chan string, 4)
	e.kit.Model.Handle(func(r modelserver.Request) modelserver.Reply {
		if last := r.LastUserText(); strings.HasPrefix(last, "[wake-up") {
			woken <- last
			return modelserver.Reply{Text: []string{"woke up"}}
		}
		return modelserver.Reply{Text: []string{"ok"}}
	})
	e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "k1", Name: "wake", Args: `{"in":"3s","prompt":"check the oven"}`}}},
		modelserver.Reply{Text: []string{"I will check in 3 seconds."}},
	)
	evs := collect(t, e.agent, context.Background(), "waker", "remind yourself")
	must(t, evs, agent.TypeCompleted)
	for _, ev := range evs {
		if ev.Type == agent.TypeToolEnded && ev.IsError {
			t.Fatalf("wake tool failed: %s", ev.Content)
		}
	}
	v, err := e.agent.State(context.Background(), "waker")
	if err != nil || len(v.Wakes) != 1 || v.Wakes[0].Prompt != "check the oven" {
		t.Fatalf("pending wake-ups = %+v (%v)", v.Wakes, err)
	}
	w.Stop()
	e.startWorker()

	select {
	case got := <-woken:
		if got != wakes.Envelope(v.Wakes[0].ID, "check the oven") {
			t.Errorf("woken prompt = %q", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the wake-up never fired")
	}
	wait.Until(10*time.Second, func() bool { // the check below says what is wrong
		v, _ = e.agent.State(context.Background(), "waker")
		return len(v.WakeLog) == 1
	})
	if len(v.Wakes) != 0 || len(v.WakeLog) != 1 || v.WakeLog[0].Status != agent.TypeCompleted {
		t.Errorf("after firing: wakes %+v, log %+v", v.Wakes, v.WakeLog)
	}
	select {
	case again := <-woken:
		t.Errorf("the one-shot wake-up fired twice: %q", again)
	case <-time.After(2 * time.Second):
	}
	users := userEntries(t, e, "waker")
	if len(users) != 2 || users[1].Message.Source != "wake" {
		t.Errorf("session entries: %d user messages, want the prompt and one woken turn", len(users))
	}
}
