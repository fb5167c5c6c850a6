package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/schedules"
	"github.com/fastagent/fastagent/internal/testsupport/fakeslack"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/workflows"
)

// A worker process is SIGKILLed while it streams a scheduled turn: it ran
// both the fire's activity and the turn's model call. Another worker takes
// both over; the fire ends with one record whose reply is the whole answer
// the store keeps for the turn (not the cut-off stream, nor text twice), and
// the schedule's session holds the prompt once.
func TestScheduleFireSurvivesWorkerKill(t *testing.T) {
	t.Parallel() // it mostly waits out a worker's timeouts: shards.sh runs it beside the others
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

// A schedule with deliver: slack:#ops fires; the worker process running
// its Channel.Send activity is SIGKILLed after Slack has posted the answer
// but before Slack's response reached the worker (the fake holds the
// chat.postMessage response until the kill). Another worker retries the
// send: it finds the message already posted, the channel holds the answer
// exactly once, and the fire's record says it was delivered.
func TestScheduleDeliveryExactlyOnceAcrossWorkerKill(t *testing.T) {
	t.Parallel() // it mostly waits out a worker's timeouts: shards.sh runs it beside the others
	e := newProcessEnv(t)
	fake := fakeslack.New()
	t.Cleanup(fake.Close)
	fake.AddChannel("C0OPS0001", "ops")
	posted := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	fake.Wrap("chat.postMessage", func(h fakeslack.Handler) fakeslack.Handler {
		return func(s *fakeslack.Server, c fakeslack.Call) map[string]any {
			out := h(s, c)
			first := false
			once.Do(func() { first = true })
			if first {
				close(posted)
				<-release // the worker dies waiting for this answer
			}
			return out
		}
	})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock)

	if err := os.MkdirAll(filepath.Join(e.kit.Dir, "channels"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.kit.Dir, "channels", "slack.yaml"), []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.extraEnv = []string{"SLACK_SIGNING_SECRET=" + slackSecret, "SLACK_BOT_TOKEN=xoxb-e2e-deliver-kill", "SLACK_API_URL=" + fake.APIURL()}

	name := scheduleName("deliver-kill")
	e.deleteScheduleAtEnd(name)
	const prompt = "Count the open incidents."
	e.writeSchedule(name+".yaml", schedYAML("0 9 1 1 *", "UTC", prompt)+"deliver: slack:#ops\n") // fires only when triggered
	e.mustReconcile()
	e.kit.Model.EnqueueFor("Count the open incidents", modelserver.Reply{Text: []string{"2 open", " incidents"}})
	w1 := e.startWorkerProcess(t)

	// Channel.Send has no heartbeat: the retry starts when its 2-minute
	// start-to-close timeout has passed.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ex, err := schedules.Trigger(ctx, e.client, name, 0)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-posted:
	case <-ctx.Done():
		t.Fatal("the answer was never posted to Slack")
	}
	w1.kill(t) // Slack posted; the activity has not completed
	unblock()
	e.startWorkerProcess(t)

	rec, err := schedules.Wait(ctx, e.client, ex)
	if err != nil {
		t.Fatalf("fire %s: %v", ex.WorkflowID, err)
	}
	if rec.Outcome != workflows.FireCompleted || rec.Reply != "2 open incidents" ||
		strings.Join(rec.Delivered, ",") != "slack:#ops" || rec.DeliveryError != "" {
		t.Fatalf("fire = %+v, want completed and delivered to slack:#ops", rec)
	}
	msgs := fake.Messages("C0OPS0001")
	if len(msgs) != 1 || msgs[0].Text != "2 open incidents" {
		t.Fatalf("messages in #ops = %+v, want the answer exactly once", msgs)
	}
	if n := len(fake.Calls("chat.postMessage")); n != 1 {
		t.Errorf("chat.postMessage called %d times, want 1", n)
	}
	// The retried attempt looked for the earlier post and found it.
	if n := len(fake.Calls("conversations.history")); n != 2 {
		t.Errorf("conversations.history called %d times, want 2 (one per attempt)", n)
	}
	if n := e.kit.Model.Count(); n != 1 {
		t.Errorf("model called %d times, want 1 (the kill came after the turn)", n)
	}
}
