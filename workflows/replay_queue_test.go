package workflows_test

import (
	"testing"

	"go.temporal.io/sdk/converter"

	"github.com/fastagent/fastagent/workflows"
)

// TestReplayCoversDeliveryQueue: the "delivery-queue" change replays in both
// versions — histories recorded before it lack its marker (channel
// deliveries queued and drained before continue-as-new), and the
// delivery_queue chain carries it: its first run takes nine deliveries
// (two refused), serves two turns and continues as new with the five still
// waiting in its snapshot; the next runs serve them.
func TestReplayCoversDeliveryQueue(t *testing.T) {
	const change = "delivery-queue"
	for file, want := range map[string]bool{"channel_deliveries.json": false, "plain_turn.json": false, "delivery_queue.json": true,
		"delivery_queue_run2.json": true, "delivery_queue_run4.json": true} {
		f, _, marked := markedHistory(t, file, change)
		if marked != want {
			t.Errorf("%s: %q marker %v, want %v", file, change, marked, want)
		}
		if err := replay(f); err != nil {
			t.Error(err)
		}
	}
	_, h, _ := markedHistory(t, "delivery_queue.json", change)
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
