package lab

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
)

// A floor turn runs exactly its shape's activities, local ones first, and
// answers the update with the count run before the reply.
func TestFloorWorkflow(t *testing.T) {
	tests := []struct {
		name  string
		shape FloorShape
	}{
		{"plain turn", TurnShape(0)},
		{"three tool steps", TurnShape(3)},
		{"activities only", FloorShape{Activities: 2}},
		{"two after the reply", FloorShape{Activities: 1, After: 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var s testsuite.WorkflowTestSuite
			env := s.NewTestWorkflowEnvironment()
			RegisterFloor(env)
			var mu sync.Mutex
			var order []string
			env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
				mu.Lock()
				defer mu.Unlock()
				order = append(order, info.ActivityType.Name)
			})
			env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, _ []interface{}) {
				mu.Lock()
				defer mu.Unlock()
				order = append(order, info.ActivityType.Name)
			})
			// The workflow serves turns forever: end it once the shape's
			// last activity completed (a timer would race the test clock,
			// which jumps ahead while a local activity runs on a busy machine).
			completed := 0
			done := func() {
				mu.Lock()
				completed++
				last := completed == tc.shape.Total()
				mu.Unlock()
				if last {
					env.RegisterDelayedCallback(env.CancelWorkflow, time.Millisecond)
				}
			}
			env.SetOnActivityCompletedListener(func(*activity.Info, converter.EncodedValue, error) { done() })
			env.SetOnLocalActivityCompletedListener(func(*activity.Info, converter.EncodedValue, error) { done() })
			var ran int
			var updErr error
			env.RegisterDelayedCallback(func() {
				env.UpdateWorkflow(FloorUpdate, "u1", &testsuite.TestUpdateCallback{
					OnAccept: func() {},
					OnReject: func(err error) { updErr = err },
					OnComplete: func(res interface{}, err error) {
						updErr = err
						if err == nil {
							ran = res.(int)
						}
					},
				}, tc.shape)
			}, time.Second)
			env.SetTestTimeout(time.Minute)
			// A busy machine (the unit tests compile beside this one) can
			// hold a workflow task past the default 1 s deadlock detection.
			env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: 30 * time.Second})
			env.ExecuteWorkflow(FloorWorkflowType)
			if err := env.GetWorkflowError(); err != nil && !temporal.IsCanceledError(err) {
				t.Fatalf("floor workflow: %v", err)
			}
			if updErr != nil {
				t.Fatalf("update: %v", updErr)
			}
			if want := tc.shape.Local + tc.shape.Activities; ran != want {
				t.Errorf("update answered %d, want %d", ran, want)
			}
			want := tc.shape.Total()
			if len(order) != want {
				t.Fatalf("%d activities started (%v), want %d", len(order), order, want)
			}
			for i, name := range order {
				wantName := FloorActivity
				if i < tc.shape.Local {
					wantName = FloorLocalActivity
				}
				if name != wantName {
					t.Errorf("activity %d is %s, want %s", i, name, wantName)
				}
			}
		})
	}
}
