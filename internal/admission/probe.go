package admission

import (
	"context"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
)

// TaskQueueProbe samples the backlog of queue in namespace with
// DescribeTaskQueue (report_stats): the workflow and activity task
// backlogs added up, the older of their oldest tasks' ages. Tasks handed
// to a polling worker at once (sync match, eager activities) never count,
// so the backlog grows only when workers fall behind.
func TaskQueueProbe(c client.Client, namespace, queue string) Probe {
	return func(ctx context.Context) (Backlog, error) {
		var b Backlog
		for _, typ := range []enumspb.TaskQueueType{enumspb.TASK_QUEUE_TYPE_WORKFLOW, enumspb.TASK_QUEUE_TYPE_ACTIVITY} {
			resp, err := c.WorkflowService().DescribeTaskQueue(ctx, &workflowservice.DescribeTaskQueueRequest{
				Namespace:     namespace,
				TaskQueue:     &taskqueuepb.TaskQueue{Name: queue, Kind: enumspb.TASK_QUEUE_KIND_NORMAL},
				TaskQueueType: typ,
				ReportStats:   true,
			})
			if err != nil {
				return Backlog{}, fmt.Errorf("describe task queue %s: %w", queue, err)
			}
			st := resp.GetStats()
			b.Count += st.GetApproximateBacklogCount()
			b.Age = max(b.Age, st.GetApproximateBacklogAge().AsDuration())
		}
		return b, nil
	}
}
