package serve

import (
	"context"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/internal/schedules"
)

// reconcileSchedules makes the Temporal Schedules match schedules/*.yaml.
// Bad files fail at once, naming the file; talking to Temporal happens in
// the background, so the worker and ingress are not held up while a freshly
// restarted server warms up. warn receives what a user should read.
// agent names the schedules of an agent served beside the main one ("" for
// the main agent).
func (p *Parts) reconcileSchedules(ctx context.Context, c client.Client, warn func(string), agent string) error {
	def, err := p.Loader.Load(ctx)
	if err != nil {
		return err
	}
	dir := def.Workspace.AgentDir
	if dir == "" {
		dir = def.Workspace.Dir
	}
	if _, err := schedules.LoadDir(dir); err != nil {
		return err
	}
	log := p.Config.Logger
	go func() {
		// Generous: an embedded Temporal server answers schedule calls only
		// some seconds after a restart (Reconcile retries until then).
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		rep, err := schedules.Reconcile(rctx, c, schedules.Options{AgentDir: dir, TaskQueue: p.Config.TaskQueue, Agent: agent, Logger: log})
		if err != nil {
			if ctx.Err() == nil {
				log.Error("schedules were not reconciled; fix the problem and restart", "error", err)
			}
			return
		}
		for _, w := range rep.Warnings {
			warn(w)
		}
		if len(rep.Created)+len(rep.Updated)+len(rep.Deleted) == 0 && len(rep.Unchanged) > 0 {
			log.Info("schedules unchanged", "schedules", rep.Unchanged)
		}
	}()
	return nil
}
