package lab

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Names of the floor workflow, its update and its activities; they exist
// only in the lab.
const (
	FloorWorkflowType  = "lab.Floor"
	FloorUpdate        = "lab.Floor.turn"
	FloorActivity      = "lab.Floor.empty"
	FloorLocalActivity = "lab.Floor.emptyLocal"
	floorIDPrefix      = "floor:"
)

// FloorShape is what one floor turn does: the Temporal work of a durable
// turn with empty bodies, in the same order and on the same side of the
// update's reply.
type FloorShape struct {
	// Local is the number of local activities run first (a durable turn has
	// one, Turn.Begin).
	Local int `json:"local"`
	// Activities is the number of activities run one after the other before
	// the update replies (a plain durable turn has one, Model.Generate).
	Activities int `json:"activities"`
	// After is the number of activities run once the update has replied and
	// before the next turn starts (a durable turn has one, Turn.Record).
	After int `json:"after"`
}

// Total is the number of activities of the shape.
func (s FloorShape) Total() int { return s.Local + s.Activities + s.After }

// TurnShape is the floor shape of a durable turn with steps sequential tool
// calls: Turn.Begin (local), then one Model.Generate per step plus the last
// one and one Tool.Execute per call, the reply, then Turn.Record.
func TurnShape(steps int) FloorShape {
	return FloorShape{Local: 1, Activities: 1 + 2*steps, After: 1}
}

// floorTurn is a queued floor turn; ran is set once the update may reply.
type floorTurn struct {
	shape FloorShape
	ran   int
	done  bool
	err   error
}

// FloorWorkflow runs FloorUpdate turns one at a time from a queue, as
// SessionWorkflow does: the update handler queues its turn and replies with
// the number of activities run before the reply; the main loop runs each
// turn's activities with empty bodies. It never ends on its own.
func FloorWorkflow(ctx workflow.Context) error {
	var queue []*floorTurn
	err := workflow.SetUpdateHandler(ctx, FloorUpdate, func(ctx workflow.Context, shape FloorShape) (int, error) {
		t := &floorTurn{shape: shape}
		queue = append(queue, t)
		if err := workflow.Await(ctx, func() bool { return t.done }); err != nil {
			return 0, err
		}
		return t.ran, t.err
	})
	if err != nil {
		return fmt.Errorf("register %s: %w", FloorUpdate, err)
	}
	for {
		if err := workflow.Await(ctx, func() bool { return len(queue) > 0 }); err != nil {
			return err
		}
		t := queue[0]
		queue = queue[1:]
		t.ran, t.err = runFloorActivities(ctx, t.shape.Local, t.shape.Activities)
		t.done = true
		if t.err == nil {
			if _, err := runFloorActivities(ctx, 0, t.shape.After); err != nil {
				workflow.GetLogger(ctx).Error("floor activity after the reply failed", "error", err)
			}
		}
	}
}

// runFloorActivities runs local local activities, then n activities, one
// after the other, and returns how many ran.
func runFloorActivities(ctx workflow.Context, local, n int) (int, error) {
	retry := &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second}
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: time.Minute, RetryPolicy: retry})
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute, RetryPolicy: retry})
	ran := 0
	for range local {
		if err := workflow.ExecuteLocalActivity(lctx, FloorLocalActivity).Get(ctx, nil); err != nil {
			return ran, fmt.Errorf("floor local activity: %w", err)
		}
		ran++
	}
	for range n {
		if err := workflow.ExecuteActivity(actx, FloorActivity).Get(ctx, nil); err != nil {
			return ran, fmt.Errorf("floor activity: %w", err)
		}
		ran++
	}
	return ran, nil
}

// emptyActivity is the body of every floor activity: nothing.
func emptyActivity(context.Context) error { return nil }

// FloorRegistry is the part of a worker the floor is registered on.
type FloorRegistry interface {
	RegisterWorkflowWithOptions(w interface{}, options workflow.RegisterOptions)
	RegisterActivityWithOptions(a interface{}, options activity.RegisterOptions)
}

// RegisterFloor registers the floor workflow and its activities on w.
func RegisterFloor(w FloorRegistry) {
	w.RegisterWorkflowWithOptions(FloorWorkflow, workflow.RegisterOptions{Name: FloorWorkflowType})
	w.RegisterActivityWithOptions(emptyActivity, activity.RegisterOptions{Name: FloorActivity})
	w.RegisterActivityWithOptions(emptyActivity, activity.RegisterOptions{Name: FloorLocalActivity})
}

// Floor sends floor turns the way the durable agent sends turns: an
// Update-with-Start (conflict policy use-existing) waited on until it
// completes.
type Floor struct {
	Client    client.Client
	TaskQueue string
	next      atomic.Int64
}

// Turn runs one floor turn of shape in session and returns its latency, up
// to the update's reply (the shape's After activities are not waited for,
// as a durable turn's caller does not wait for Turn.Record).
func (f *Floor) Turn(ctx context.Context, session string, shape FloorShape) (time.Duration, error) {
	start := f.Client.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID:                       floorIDPrefix + session,
		TaskQueue:                f.TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
	}, FloorWorkflowType)
	t0 := time.Now()
	h, err := f.Client.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateID:     fmt.Sprintf("floor-%d-%d", time.Now().UnixNano(), f.next.Add(1)),
			UpdateName:   FloorUpdate,
			Args:         []any{shape},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	var ran int
	if err == nil {
		err = h.Get(ctx, &ran)
	}
	d := time.Since(t0)
	if err != nil {
		return d, fmt.Errorf("floor turn in %s: %w", session, err)
	}
	if want := shape.Local + shape.Activities; ran != want {
		return d, fmt.Errorf("floor turn in %s ran %d activities, want %d", session, ran, want)
	}
	return d, nil
}
