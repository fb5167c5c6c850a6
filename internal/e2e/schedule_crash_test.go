package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/schedules"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/workflows"
)

// A worker process is SIGKILLed while it streams a scheduled turn: it ran
// both the fire's activity and the turn's model call. Another worker takes
// both over; the fire ends with one record whose reply is the whole answer
// the store keeps for the turn (not the cut-off stream, nor text twice), and
// the schedule's session holds the prompt once.
func TestScheduleFireSurvivesWorkerKill(t *testing.T) {
	e := newProcessEnv(t)
	name := scheduleName("crash")
	e.deleteScheduleAtEnd(name)
	const prompt = "Summarise the night."
	e.writeSchedule(name+".yaml", schedYAML("0 9 1 1 *", "UTC", prompt)) // fires only when triggered
	e.mustReconcile()

	slow := make([]string, 20)
	for i := range slow {
		slow[i] = fmt.Sprintf("word%d ", i)
	}
	e.kit.Model.Enqueue(
		modelserver.Reply{Text: slow, ChunkDelay: 250 * time.Millisecond},
		modelserver.Reply{Text: []string{"all quiet", " tonight"}},
	)
	streaming := make(chan struct{}, 1)
	e.kit.Model.OnFirstDelta(func(modelserver.Request, time.Time) {
		select {
		case streaming <- struct{}{}:
		default:
		}
	})
	w1 := e.startWorkerProcess(t)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ex, err := schedules.Trigger(ctx, e.client, name, 0)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-streaming:
	case <-ctx.Done():
		t.Fatal("the scheduled turn never reached the model")
	}
	w1.kill(t) // mid-stream, with the fire's activity in flight on the same worker
	e.startWorkerProcess(t)

	rec, err := schedules.Wait(ctx, e.client, ex)
	if err != nil {
		t.Fatalf("fire %s: %v", ex.WorkflowID, err)
	}
	if rec.Outcome != workflows.FireCompleted {
		t.Fatalf("fire record = %+v, want completed", rec)
	}
	session := workflows.ScheduleSession(name)
	stored := recordedAnswer(t, e, session, ex.WorkflowID)
	if stored != "all quiet tonight" {
		t.Errorf("the turn's stored answer = %q, want the retried step's %q", stored, "all quiet tonight")
	}
	if rec.Reply != stored {
		t.Errorf("the fire's reply differs from the turn's stored answer:\n reply  %q\n stored %q", rec.Reply, stored)
	}
	if n := len(userEntries(t, e, session)); n != 1 {
		t.Errorf("session %s holds the prompt %d times, want 1", session, n)
	}
	if n := e.kit.Model.Count(); n != 2 {
		t.Errorf("model called %d times, want 2 (the killed stream and its retry)", n)
	}
}
