package plugin

import (
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/fastagent/fastagent/internal/activities"
)

// Split returns two workers of task queue tq that together serve what one
// worker with the plugin of set serves: wf takes the workflow tasks (and
// their local activities), act the activities. Either can then be stopped
// alone — a workflow worker lost while its activities still run, or the
// reverse. Neither is started.
func Split(c client.Client, tq string, set activities.Set) (wf, act sdkworker.Worker, err error) {
	p, err := New(Options{TaskQueue: tq, Activities: set})
	if err != nil {
		return nil, nil, err
	}
	plugins := []sdkworker.Plugin{p}
	wf = sdkworker.New(c, tq, sdkworker.Options{LocalActivityWorkerOnly: true, Plugins: plugins})
	act = sdkworker.New(c, tq, sdkworker.Options{DisableWorkflowWorker: true, Plugins: plugins})
	return wf, act, nil
}
