package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"

	"github.com/fastagent/fastagent/internal/schedules"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
)

// scheduleName returns a schedule name unique on the shared server (schedule
// and session workflow IDs are namespace-wide).
func scheduleName(base string) string {
	return fmt.Sprintf("%s-%d", base, time.Now().UnixNano())
}

// writeSchedule writes schedules/<file> in the env's agent dir.
func (e *env) writeSchedule(file, body string) string {
	e.t.Helper()
	p := filepath.Join(e.kit.Dir, schedules.Dir, file)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// reconcile reconciles the env's schedules onto its task queue.
func (e *env) reconcile() (schedules.Report, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return schedules.Reconcile(ctx, e.client, schedules.Options{AgentDir: e.kit.Dir, TaskQueue: e.queue})
}

func (e *env) mustReconcile() schedules.Report {
	e.t.Helper()
	rep, err := e.reconcile()
	if err != nil {
		e.t.Fatalf("reconcile: %v", err)
	}
	return rep
}

func (e *env) describeSchedule(name string) (*client.ScheduleDescription, error) {
	return e.client.ScheduleClient().GetHandle(context.Background(), workflows.ScheduleID(name)).Describe(context.Background())
}

// deleteScheduleAtEnd removes a schedule the test may leave behind.
func (e *env) deleteScheduleAtEnd(name string) {
	e.t.Cleanup(func() {
		_ = e.client.ScheduleClient().GetHandle(context.Background(), workflows.ScheduleID(name)).Delete(context.Background())
	})
}

func schedYAML(cron, tz, prompt string) string {
	return fmt.Sprintf("cron: %q\ntz: %s\nprompt: %q\n", cron, tz, prompt)
}

// wantNext checks that Temporal's next fire times are the cron's.
func wantNext(t *testing.T, desc *client.ScheduleDescription, cron, tz string) {
	t.Helper()
	sched, err := schedules.ParseCron(cron, tz)
	if err != nil {
		t.Fatal(err)
	}
	next := desc.Info.NextActionTimes
	if len(next) < 3 {
		t.Fatalf("want next action times, got %v", next)
	}
	at := next[0].Add(-time.Second)
	for i, got := range next {
		want := sched.Next(at)
		if !got.Equal(want) {
			t.Fatalf("next[%d] = %v, want %v (%s in %s)", i, got, want, cron, tz)
		}
		at = want
	}
}

// A file becomes schedule:<name> with the file's spec and the policies;
// triggering it runs one turn in session schedule:<name>; the fire is in the
// history; edits update the schedule; *.disabled deletes it.
func TestScheduleLifecycle(t *testing.T) {
	e := newEnv(t)
	e.startWorker()
	name := scheduleName("digest")
	e.deleteScheduleAtEnd(name)
	file := name + ".yaml"
	const prompt = "Summarize the inbox."
	e.writeSchedule(file, schedYAML("0 9 * * 1-5", "Europe/Berlin", prompt))

	rep := e.mustReconcile()
	if strings.Join(rep.Created, ",") != name {
		t.Fatalf("created = %v, want [%s]", rep.Created, name)
	}
	desc, err := e.describeSchedule(name)
	if err != nil {
		t.Fatalf("describe schedule:%s: %v", name, err)
	}
	if desc.Schedule.Spec.TimeZoneName != "Europe/Berlin" {
		t.Errorf("tz = %q", desc.Schedule.Spec.TimeZoneName)
	}
	wantNext(t, desc, "0 9 * * 1-5", "Europe/Berlin")
	if p := desc.Schedule.Policy; p.Overlap != enumspb.SCHEDULE_OVERLAP_POLICY_SKIP || p.CatchupWindow != schedules.CatchupWindow {
		t.Errorf("policies = %+v, want overlap skip and catch-up window %s", p, schedules.CatchupWindow)
	}
	act, ok := desc.Schedule.Action.(*client.ScheduleWorkflowAction)
	if !ok || act.Workflow != workflows.ScheduleFireWorkflowType || act.TaskQueue != e.queue || act.ID != workflows.FireWorkflowID(name) {
		t.Fatalf("action = %+v", desc.Schedule.Action)
	}
	if got := schedules.Owner(desc.Memo); got != e.kit.Dir {
		t.Errorf("owner memo = %q, want %q", got, e.kit.Dir)
	}
	// A brand-new schedule never back-fires.
	if desc.Info.NumActions != 0 || len(desc.Info.RecentActions) != 0 {
		t.Errorf("a new schedule fired: %+v", desc.Info)
	}
	if rep := e.mustReconcile(); strings.Join(rep.Unchanged, ",") != name || len(rep.Updated)+len(rep.Created) != 0 {
		t.Errorf("second reconcile = %+v, want unchanged", rep)
	}

	// A paused schedule stays paused through triggers and updates.
	h := e.client.ScheduleClient().GetHandle(context.Background(), workflows.ScheduleID(name))
	if err := h.Pause(context.Background(), client.SchedulePauseOptions{Note: "paused by the test"}); err != nil {
		t.Fatal(err)
	}

	// Trigger, as `fastagent fire` and `temporal schedule trigger` do.
	e.kit.Model.Enqueue(modelserver.Reply{Text: []string{"inbox", " is empty"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ex, err := schedules.Trigger(ctx, e.client, name, 0)
	if err != nil {
		t.Fatalf("trigger: %v", err)
	}
	if !strings.HasPrefix(ex.WorkflowID, workflows.FireWorkflowID(name)+"-") {
		t.Errorf("fire workflow ID = %q, want prefix %s-", ex.WorkflowID, workflows.FireWorkflowID(name))
	}
	rec, err := schedules.Wait(ctx, e.client, ex)
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	session := workflows.ScheduleSession(name)
	if rec.Outcome != workflows.FireCompleted || rec.Reply != "inbox is empty" || rec.Session != session || rec.Name != name {
		t.Fatalf("record = %+v", rec)
	}
	if d := time.Since(rec.ScheduledFor); d < 0 || d > time.Minute {
		t.Errorf("scheduledFor = %v, want the trigger time", rec.ScheduledFor)
	}
	// The fire reads its nominal time from the search attribute Temporal sets.
	wd, err := e.client.DescribeWorkflowExecution(ctx, ex.WorkflowID, ex.RunID)
	if err != nil {
		t.Fatal(err)
	}
	var got time.Time
	if p := wd.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()[workflows.ScheduledStartTimeAttribute]; p != nil {
		if err := converter.GetDefaultDataConverter().FromPayload(p, &got); err != nil {
			t.Fatal(err)
		}
	}
	if !got.Equal(rec.ScheduledFor) {
		t.Errorf("%s from the search attribute = %v, want %v", workflows.ScheduledStartTimeAttribute, got, rec.ScheduledFor)
	}
	users := userEntries(t, e, session)
	if len(users) != 1 || users[0].Message.Text != prompt || users[0].Message.Source != schedules.Source {
		t.Fatalf("session %s user entries = %+v, want one with the prompt from source schedule", session, users)
	}
	if d, err := e.describeSchedule(name); err != nil || !d.Schedule.State.Paused {
		t.Errorf("trigger changed the schedule's state (%v)", err)
	}

	// The history lists the fire, read back from Temporal.
	var fires []schedules.Fire
	wait.Until(30*time.Second, func() bool { // the check below says what is wrong
		fires, err = schedules.History(ctx, e.client, name, 10)
		if err != nil {
			t.Fatalf("history: %v", err)
		}
		return len(fires) == 1 && fires[0].Record != nil
	})
	if len(fires) != 1 || fires[0].Record == nil || fires[0].Record.Outcome != workflows.FireCompleted ||
		fires[0].Record.Reply != "inbox is empty" || fires[0].WorkflowID != ex.WorkflowID {
		t.Fatalf("history = %+v", fires)
	}

	// Editing the prompt, then the cron, updates the schedule.
	e.writeSchedule(file, schedYAML("0 9 * * 1-5", "Europe/Berlin", "Summarize the inbox and the calendar."))
	if rep := e.mustReconcile(); strings.Join(rep.Updated, ",") != name {
		t.Fatalf("after a prompt edit: %+v, want updated", rep)
	}
	info, err := schedules.Describe(ctx, e.client, name)
	if err != nil || info.Prompt != "Summarize the inbox and the calendar." {
		t.Fatalf("prompt after update = %q (%v)", info.Prompt, err)
	}
	e.writeSchedule(file, schedYAML("30 18 * * *", "America/New_York", "Summarize the inbox and the calendar."))
	if rep := e.mustReconcile(); strings.Join(rep.Updated, ",") != name {
		t.Fatalf("after a cron edit: %+v, want updated", rep)
	}
	desc, err = e.describeSchedule(name)
	if err != nil {
		t.Fatal(err)
	}
	wantNext(t, desc, "30 18 * * *", "America/New_York")
	if !desc.Schedule.State.Paused || desc.Schedule.State.Note != "paused by the test" {
		t.Errorf("an update unpaused the schedule: %+v", desc.Schedule.State)
	}
	if desc.Info.NumActions != 1 {
		t.Errorf("an update back-fired: %d actions, want the 1 trigger", desc.Info.NumActions)
	}

	// Renaming the file *.disabled deletes the schedule.
	if err := os.Rename(filepath.Join(e.kit.Dir, schedules.Dir, file), filepath.Join(e.kit.Dir, schedules.Dir, file+".disabled")); err != nil {
		t.Fatal(err)
	}
	if rep := e.mustReconcile(); strings.Join(rep.Deleted, ",") != name {
		t.Fatalf("after disabling: %+v, want deleted", rep)
	}
	if _, err := e.describeSchedule(name); err == nil {
		t.Fatal("the disabled schedule still exists")
	}
}

// Deleting a file deletes its schedule, and only schedules this workspace
// owns are deleted.
func TestScheduleDeletedFile(t *testing.T) {
	e := newEnv(t)
	name := scheduleName("weekly")
	e.deleteScheduleAtEnd(name)
	path := e.writeSchedule(name+".yaml", schedYAML("0 8 * * MON", "UTC", "Plan the week."))

	// A schedule of another workspace on the same namespace.
	other := newEnv(t)
	otherName := scheduleName("other")
	other.deleteScheduleAtEnd(otherName)
	other.writeSchedule(otherName+".yaml", schedYAML("0 8 * * *", "UTC", "Not yours."))
	other.mustReconcile()

	e.mustReconcile()
	// The listing comes from visibility: wait until it shows the schedule.
	ctx := context.Background()
	waitListed(t, e, name)
	waitListed(t, e, otherName)

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	rep := e.mustReconcile()
	if strings.Join(rep.Deleted, ",") != name {
		t.Fatalf("reconcile after removing the file = %+v, want %s deleted", rep, name)
	}
	if _, err := e.describeSchedule(name); err == nil {
		t.Fatal("the schedule of a removed file still exists")
	}
	if _, err := schedules.Describe(ctx, e.client, otherName); err != nil {
		t.Fatalf("another workspace's schedule was touched: %v", err)
	}
}

func waitListed(t *testing.T, e *env, name string) {
	t.Helper()
	waitFor(t, 30*time.Second, "schedule:"+name+" in the schedule listing", func() bool {
		all, err := schedules.List(context.Background(), e.client, schedules.ListOptions{All: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range all {
			if in.Name == name {
				return true
			}
		}
		return false
	})
}

// A bad cron or an unknown time zone fails the reconcile with an error that
// names the file, and nothing is created.
func TestScheduleBadFiles(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{"six-fields", schedYAML("0 0 9 * * *", "UTC", "x"), "has 6 fields, want 5"},
		{"unknown-tz", schedYAML("0 9 * * *", "Europe/Atlantis", "x"), "not a known IANA time zone"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			good := scheduleName("good")
			e.deleteScheduleAtEnd(good)
			e.writeSchedule(good+".yaml", schedYAML("0 9 * * *", "UTC", "fine"))
			bad := e.writeSchedule(tt.name+".yaml", tt.body)
			_, err := e.reconcile()
			if err == nil {
				t.Fatal("reconcile accepted a bad file")
			}
			if !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q should name %s and say %q", err, bad, tt.want)
			}
			if _, err := e.describeSchedule(good); err == nil {
				t.Error("a schedule was created although the reconcile failed")
			}
		})
	}
}

// Running the Schedule.Fire activity twice with the same key (a retried
// activity) is one turn; an overdue fire that a later fire already covers is
// skipped without a turn.
func TestScheduleRetriedFireIsOneTurn(t *testing.T) {
	e := newEnv(t)
	e.startWorker()
	name := scheduleName("retry")
	e.deleteScheduleAtEnd(name)
	e.writeSchedule(name+".yaml", schedYAML("* * * * *", "UTC", "Count the open issues."))
	e.mustReconcile()

	firer := schedules.NewFirer(e.client, e.bus, e.kit.Store, e.queue, nil)
	var suite testsuite.WorkflowTestSuite
	act := suite.NewTestActivityEnvironment()
	act.RegisterActivityWithOptions(firer.Fire, activity.RegisterOptions{Name: workflows.ActivityScheduleFire})
	fire := func(req wire.FireRequest) workflows.FireRecord {
		t.Helper()
		v, err := act.ExecuteActivity(workflows.ActivityScheduleFire, req)
		if err != nil {
			t.Fatalf("activity: %v", err)
		}
		var rec workflows.FireRecord
		if err := v.Get(&rec); err != nil {
			t.Fatal(err)
		}
		return rec
	}

	now := time.Now().UTC()
	key := workflows.FireWorkflowID(name) + "-" + now.Truncate(time.Minute).Format(time.RFC3339)
	req := wire.FireRequest{
		Name: name, Prompt: "Count the open issues.", Cron: "* * * * *", TZ: "UTC",
		Key:     key,
		Nominal: now.Truncate(time.Minute),
		FiredAt: now,
	}
	e.kit.Model.Enqueue(modelserver.Reply{Text: []string{"7 open", " issues"}})
	before := e.kit.Model.Count()
	first := fire(req)
	second := fire(req)
	if first.Outcome != workflows.FireCompleted || first.Reply != "7 open issues" {
		t.Fatalf("first attempt = %+v", first)
	}
	if second.Outcome != workflows.FireCompleted {
		t.Fatalf("second attempt = %+v, want the same completed turn", second)
	}
	if n := e.kit.Model.Count() - before; n != 1 {
		t.Errorf("model called %d times, want 1", n)
	}
	session := workflows.ScheduleSession(name)
	if n := len(userEntries(t, e, session)); n != 1 {
		t.Errorf("session %s has %d user entries, want 1", session, n)
	}

	// A later fire starts (a trigger); an overdue occurrence is then skipped.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ex, err := schedules.Trigger(ctx, e.client, name, 0)
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := schedules.Wait(ctx, e.client, ex); err != nil || rec.Outcome != workflows.FireCompleted {
		t.Fatalf("triggered fire = %+v, %v", rec, err)
	}
	calls := e.kit.Model.Count()
	old := req
	old.Nominal = now.Add(-10 * time.Minute).Truncate(time.Minute)
	old.Key = workflows.FireWorkflowID(name) + "-" + old.Nominal.Format(time.RFC3339)
	if rec := fire(old); rec.Outcome != workflows.FireSkipped || !strings.Contains(rec.Error, ex.WorkflowID) {
		t.Fatalf("overdue fire = %+v, want skipped, superseded by %s", rec, ex.WorkflowID)
	}
	if n := e.kit.Model.Count() - calls; n != 0 {
		t.Errorf("a skipped fire called the model %d times", n)
	}
}

// The error a reconcile returns for a schedule owned by another workspace
// says what to do.
func TestScheduleOwnedElsewhere(t *testing.T) {
	a, b := newEnv(t), newEnv(t)
	name := scheduleName("shared")
	a.deleteScheduleAtEnd(name)
	a.writeSchedule(name+".yaml", schedYAML("0 9 * * *", "UTC", "a"))
	a.mustReconcile()
	b.writeSchedule(name+".yaml", schedYAML("0 9 * * *", "UTC", "b"))
	_, err := b.reconcile()
	if err == nil || !strings.Contains(err.Error(), "belongs to the agent dir "+a.kit.Dir) || !strings.Contains(err.Error(), "temporal schedule delete") {
		t.Fatalf("error = %v", err)
	}
}

// After downtime Temporal catches up on missed occurrences; with the
// schedule's overlap policy only one of them runs, once. A backfill replays
// that catch-up: five occurrences due at once make one fire and one turn.
func TestScheduleCatchUpRunsOneOverdueFire(t *testing.T) {
	e := newEnv(t)
	e.startWorker()
	name := scheduleName("catchup")
	e.deleteScheduleAtEnd(name)
	// Occurrences in each of the last five minutes, none in the next 55.
	now := time.Now().UTC()
	var minutes []string
	for i := 5; i >= 1; i-- {
		minutes = append(minutes, fmt.Sprint(now.Add(-time.Duration(i)*time.Minute).Minute()))
	}
	cron := strings.Join(minutes, ",") + " * * * *"
	e.writeSchedule(name+".yaml", schedYAML(cron, "UTC", "Catch up."))
	e.mustReconcile()
	before := e.kit.Model.Count()

	h := e.client.ScheduleClient().GetHandle(context.Background(), workflows.ScheduleID(name))
	start := now.Truncate(time.Minute).Add(-5*time.Minute - time.Second)
	if err := h.Backfill(context.Background(), client.ScheduleBackfillOptions{Backfill: []client.ScheduleBackfill{
		{Start: start, End: now},
	}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var fires []schedules.Fire
	if !wait.Until(time.Minute, func() bool {
		var err error
		fires, err = schedules.History(ctx, e.client, name, 10)
		if err != nil {
			t.Fatal(err)
		}
		return len(fires) > 0 && fires[0].Record != nil
	}) {
		t.Fatalf("no fire completed: %+v", fires)
	}
	time.Sleep(2 * time.Second) // deliberate: let any further (wrong) fire start
	fires, err := schedules.History(ctx, e.client, name, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(fires) != 1 || fires[0].Record.Outcome != workflows.FireCompleted {
		t.Fatalf("fires = %+v, want exactly one completed", fires)
	}
	// The one that runs is the oldest overdue occurrence: no later fire
	// covers it, so it is the catch-up, not skipped.
	if oldest := now.Truncate(time.Minute).Add(-5 * time.Minute); !fires[0].Record.ScheduledFor.Equal(oldest) {
		t.Errorf("the catch-up fire was scheduled for %v, want %v", fires[0].Record.ScheduledFor, oldest)
	}
	if n := e.kit.Model.Count() - before; n != 1 {
		t.Errorf("model called %d times, want 1", n)
	}
	desc, err := e.describeSchedule(name)
	if err != nil {
		t.Fatal(err)
	}
	if desc.Info.NumActions != 1 || desc.Info.NumActionsSkippedOverlap != 4 {
		t.Errorf("actions = %d, skipped for overlap = %d; want 1 and 4", desc.Info.NumActions, desc.Info.NumActionsSkippedOverlap)
	}
}
