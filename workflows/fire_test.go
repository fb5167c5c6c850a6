package workflows_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows"
)

func fireEnv(t *testing.T, id string, fire func(context.Context, wire.FireRequest) (workflows.FireRecord, error)) *testsuite.TestWorkflowEnvironment {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(workflows.ScheduleFireWorkflow, workflow.RegisterOptions{Name: workflows.ScheduleFireWorkflowType})
	env.RegisterActivityWithOptions(fire, activity.RegisterOptions{Name: workflows.ActivityScheduleFire})
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: id})
	return env
}

func TestScheduleFireWorkflow(t *testing.T) {
	nominal := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	in := workflows.FireInput{Name: "daily", Prompt: "Summarize.", Cron: "0 9 * * *", TZ: "UTC"}

	tests := []struct {
		name        string
		id          string
		attrs       map[string]any
		fire        func(context.Context, wire.FireRequest) (workflows.FireRecord, error)
		wantNominal time.Time
		wantOutcome string
		wantError   string
	}{
		{
			name:        "nominal time from the search attribute",
			id:          "schedule-fire:daily",
			attrs:       map[string]any{workflows.ScheduledStartTimeAttribute: nominal},
			wantNominal: nominal,
			wantOutcome: workflows.FireCompleted,
		},
		{
			name:        "nominal time from the workflow ID",
			id:          "schedule-fire:daily-2026-03-02T09:00:00Z",
			wantNominal: nominal,
			wantOutcome: workflows.FireCompleted,
		},
		{
			name:        "started by hand",
			id:          "adhoc",
			wantOutcome: workflows.FireCompleted,
		},
		{
			name: "an activity that gives up is a failed record",
			id:   "schedule-fire:daily-2026-03-02T09:00:00Z",
			fire: func(context.Context, wire.FireRequest) (workflows.FireRecord, error) {
				return workflows.FireRecord{}, temporal.NewNonRetryableApplicationError("session store unreachable", "boom", nil)
			},
			wantNominal: nominal,
			wantOutcome: workflows.FireFailed,
			wantError:   "session store unreachable",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []wire.FireRequest
			fire := tt.fire
			if fire == nil {
				fire = func(_ context.Context, req wire.FireRequest) (workflows.FireRecord, error) {
					return workflows.FireRecord{Name: req.Name, Session: workflows.ScheduleSession(req.Name), FiredAt: req.FiredAt,
						Outcome: workflows.FireCompleted, Reply: "ok", ScheduledFor: req.Nominal}, nil
				}
			}
			record := func(ctx context.Context, req wire.FireRequest) (workflows.FireRecord, error) {
				got = append(got, req)
				return fire(ctx, req)
			}
			env := fireEnv(t, tt.id, record)
			if tt.attrs != nil {
				if err := env.SetSearchAttributesOnStart(tt.attrs); err != nil {
					t.Fatal(err)
				}
			}
			env.ExecuteWorkflow(workflows.ScheduleFireWorkflowType, in)
			if !env.IsWorkflowCompleted() {
				t.Fatal("workflow did not complete")
			}
			if err := env.GetWorkflowError(); err != nil {
				t.Fatalf("workflow failed: %v", err)
			}
			var rec workflows.FireRecord
			if err := env.GetWorkflowResult(&rec); err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 {
				t.Fatal("the fire activity did not run")
			}
			req := got[0]
			if req.Key != tt.id {
				t.Errorf("idempotency key = %q, want the workflow ID %q", req.Key, tt.id)
			}
			if !req.Nominal.Equal(tt.wantNominal) {
				t.Errorf("nominal = %v, want %v", req.Nominal, tt.wantNominal)
			}
			if got := (workflows.FireInput{Name: req.Name, Prompt: req.Prompt, Cron: req.Cron, TZ: req.TZ}); !reflect.DeepEqual(got, in) {
				t.Errorf("input = %+v, want %+v", got, in)
			}
			if rec.Outcome != tt.wantOutcome || rec.Name != "daily" || rec.Session != "schedule:daily" {
				t.Errorf("record = %+v, want outcome %s in session schedule:daily", rec, tt.wantOutcome)
			}
			if tt.wantError != "" && !strings.Contains(rec.Error, tt.wantError) {
				t.Errorf("record error = %q, want it to contain %q", rec.Error, tt.wantError)
			}
		})
	}
}

// A retryable failure is retried with the same request: the same key, so the
// same turn.
// A fire whose input names deliver: targets sends a completed turn's
// answer with Channel.Send under the fire's key, and records where it went;
// a send that still fails after its retries is recorded, not dropped; a
// failed turn or an answer without text sends nothing.
func TestScheduleFireDelivers(t *testing.T) {
	in := workflows.FireInput{Name: "daily", Prompt: "Summarize.", Cron: "0 9 * * *", TZ: "UTC", Deliver: []string{"slack:#ops", "telegram:42"}}
	const id = "schedule-fire:daily-2026-03-02T09:00:00Z"
	tests := []struct {
		name          string
		outcome       string
		reply         string
		sendErr       error
		wantSends     int
		wantDelivered []string
		wantError     string
	}{
		{name: "delivered", outcome: workflows.FireCompleted, reply: "7 open issues", wantSends: 1, wantDelivered: in.Deliver},
		{name: "retried then reported", outcome: workflows.FireCompleted, reply: "7 open issues",
			sendErr: errors.New("delivery failed: slack:#ops: internal_error"), wantSends: 8, wantError: "internal_error"},
		{name: "partly delivered", outcome: workflows.FireCompleted, reply: "7 open issues",
			sendErr: temporal.NewNonRetryableApplicationError("delivery failed: telegram:42: no telegram channel is configured", "invalid_command", nil,
				wire.SendResult{Delivered: []string{"slack:#ops"}}),
			wantSends: 1, wantDelivered: []string{"slack:#ops"}, wantError: "telegram:42"},
		{name: "failed turn", outcome: workflows.FireFailed},
		{name: "no text", outcome: workflows.FireCompleted, reply: "  ", wantError: "no text"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := fireEnv(t, id, func(_ context.Context, req wire.FireRequest) (workflows.FireRecord, error) {
				return workflows.FireRecord{Name: req.Name, Session: workflows.ScheduleSession(req.Name), Outcome: tt.outcome, Reply: tt.reply}, nil
			})
			var sends []wire.SendInput
			env.RegisterActivityWithOptions(func(_ context.Context, s wire.SendInput) (wire.SendResult, error) {
				sends = append(sends, s)
				if tt.sendErr != nil {
					return wire.SendResult{}, tt.sendErr
				}
				return wire.SendResult{Delivered: s.Targets}, nil
			}, activity.RegisterOptions{Name: workflows.ActivityChannelSend})
			env.ExecuteWorkflow(workflows.ScheduleFireWorkflowType, in)
			if !env.IsWorkflowCompleted() || env.GetWorkflowError() != nil {
				t.Fatalf("workflow: %v", env.GetWorkflowError())
			}
			var rec workflows.FireRecord
			if err := env.GetWorkflowResult(&rec); err != nil {
				t.Fatal(err)
			}
			if len(sends) != tt.wantSends {
				t.Fatalf("Channel.Send ran %d times, want %d", len(sends), tt.wantSends)
			}
			if len(sends) > 0 {
				if s := sends[0]; s.Key != "deliver/"+id || s.Session != "schedule:daily" || s.Text != tt.reply || !reflect.DeepEqual(s.Targets, in.Deliver) {
					t.Errorf("send = %+v", s)
				}
			}
			if !reflect.DeepEqual(rec.Delivered, tt.wantDelivered) || !strings.Contains(rec.DeliveryError, tt.wantError) ||
				(tt.wantError == "") != (rec.DeliveryError == "") {
				t.Errorf("record delivered %v, error %q; want %v, %q", rec.Delivered, rec.DeliveryError, tt.wantDelivered, tt.wantError)
			}
		})
	}
}

func TestScheduleFireRetriesWithSameKey(t *testing.T) {
	var keys []string
	env := fireEnv(t, "schedule-fire:daily-2026-03-02T09:00:00Z", func(_ context.Context, req wire.FireRequest) (workflows.FireRecord, error) {
		keys = append(keys, req.Key)
		if len(keys) < 3 {
			return workflows.FireRecord{}, errors.New("worker lost")
		}
		return workflows.FireRecord{Name: req.Name, Outcome: workflows.FireCompleted}, nil
	})
	env.ExecuteWorkflow(workflows.ScheduleFireWorkflowType, workflows.FireInput{Name: "daily", Prompt: "p", Cron: "0 9 * * *"})
	var rec workflows.FireRecord
	if err := env.GetWorkflowResult(&rec); err != nil || rec.Outcome != workflows.FireCompleted {
		t.Fatalf("want completed, got %+v, %v", rec, err)
	}
	if len(keys) != 3 || keys[0] != keys[1] || keys[1] != keys[2] {
		t.Fatalf("attempt keys = %v, want 3 equal keys", keys)
	}
}

func TestNominalTime(t *testing.T) {
	want := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	for id, w := range map[string]time.Time{
		"schedule-fire:daily-2026-03-02T09:00:00Z":     want,
		"schedule-fire:a-b-c-2026-03-02T09:00:00Z":     want,
		"schedule-fire:daily":                          {},
		"schedule-fire:daily-2026-13-02T09:00:00Z":     {},
		"schedule-fire:daily2026-03-02T09:00:00Z":      {},
		"schedule-fire:daily-x-2026-03-02T09:00:00+01": {},
	} {
		if got := workflows.NominalTime(id, nil); !got.Equal(w) {
			t.Errorf("NominalTime(%q) = %v, want %v", id, got, w)
		}
	}
}

// A schedule's session: the main agent's as always, another agent's under
// that agent's prefix.
func TestScheduleSession(t *testing.T) {
	for name, want := range map[string]string{"daily": "schedule:daily", "support/daily": "support/schedule:daily"} {
		if got := workflows.ScheduleSession(name); got != want {
			t.Errorf("ScheduleSession(%q) = %q, want %q", name, got, want)
		}
	}
}
