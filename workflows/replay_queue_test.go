package workflows_test

import (
	"path/filepath"
	"testing"

	"go.temporal.io/sdk/converter"

	"github.com/fastagent/fastagent/workflows"
)

// TestReplayCoversDeliveryQueue: the delivery_queue chain's first run takes
// nine deliveries (two refused), serves two turns and continues as new with
// the five still waiting in its snapshot; the next runs serve them; every
// run replays.
func TestReplayCoversDeliveryQueue(t *testing.T) {
	for _, file := range []string{"delivery_queue.json", "delivery_queue_run2.json", "delivery_queue_run3.json", "delivery_queue_run4.json"} {
		if err := replay(filepath.Join("testdata", "histories", file)); err != nil {
			t.Error(err)
		}
	}
	h := loadHistory(t, filepath.Join("testdata", "histories", "delivery_queue.json"))
	signals, models := 0, 0
	var carried []string
	for _, ev := range h.GetEvents() {
		if ev.GetWorkflowExecutionSignaledEventAttributes().GetSignalName() == workflows.SignalDeliver {
			signals++
		}
		if ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == workflows.ActivityModelGenerate {
			models++
		}
		if can := ev.GetWorkflowExecutionContinuedAsNewEventAttributes(); can != nil {
			var in workflows.SessionInput
			if err := converter.GetDefaultDataConverter().FromPayloads(can.GetInput(), &in); err != nil {
				t.Fatal(err)
			}
			for _, q := range in.Snapshot.Queue {
				carried = append(carried, q.Delivery.Key)
			}
		}
	}
	equal(t, "deliver signals", signals, 9)
	equal(t, "Model.Generate", models, 2)
	equalSlice(t, "carried to the next run", carried, []string{"q:2", "q:3", "q:4", "q:5", "q:6"})
}
