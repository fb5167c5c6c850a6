package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/worker"
)

// rolloutCommand is `fastagent rollout`: make a Worker Deployment version
// current and move running sessions onto it at their next idle point.
func rolloutCommand(g *globals) *cobra.Command {
	f := &temporalFlags{}
	var deployment, buildID string
	var moveOnly bool
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "rollout --build-id ID",
		Short: "Make a worker version current and move running sessions onto it (rollout and rollback)",
		Long: "With workers run versioned (FASTAGENT_DEPLOYMENT), every session run is pinned to the version that\n" +
			"started it. rollout sets --build-id as the deployment's current version (new sessions start on it),\n" +
			"then wakes every running session and chat workflow: those on another version continue as new onto\n" +
			"the current one as soon as they are idle, so their next turn runs on it and no history is ever\n" +
			"replayed by other code. Start the new version's workers first; stop the old ones once drained\n" +
			"(`temporal worker deployment describe-version`). Rollback is a rollout of the previous build ID.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if deployment == "" {
				return usageError("rollout needs --deployment (or FASTAGENT_DEPLOYMENT)")
			}
			if buildID == "" && !moveOnly {
				return usageError("rollout needs --build-id (or FASTAGENT_BUILD_ID), or --move-only")
			}
			ctx, c, done, err := f.connect(cmd, g)
			if err != nil {
				return err
			}
			defer done()
			if !moveOnly {
				h := c.WorkerDeploymentClient().GetHandle(deployment)
				if _, err := h.SetCurrentVersion(ctx, client.WorkerDeploymentSetCurrentVersionOptions{BuildID: buildID}); err != nil {
					return failure("set %s:%s current: %w (has a worker of that build polled the task queue yet?)", deployment, buildID, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "current version: %s:%s\n", deployment, buildID)
			}
			res, err := worker.MoveToCurrent(ctx, c, worker.MoveOptions{Deployment: deployment, TaskQueue: f.taskQueue, Wait: wait})
			if err != nil {
				return failure("%w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "moving to %s: %d upgrade signals sent; %d workflows still on another version (busy: they move at their next idle point)\n",
				res.Current, res.Signals, len(res.Behind))
			for _, id := range res.Behind {
				fmt.Fprintf(cmd.OutOrStdout(), "  %s\n", id)
			}
			return nil
		},
	}
	f.bind(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.taskQueue, "task-queue", envOr("FASTAGENT_TASK_QUEUE", "fastagent"), "Temporal task queue [FASTAGENT_TASK_QUEUE]")
	fl.StringVar(&deployment, "deployment", os.Getenv("FASTAGENT_DEPLOYMENT"), "Worker Deployment name [FASTAGENT_DEPLOYMENT]")
	fl.StringVar(&buildID, "build-id", os.Getenv("FASTAGENT_BUILD_ID"), "build ID to make current [FASTAGENT_BUILD_ID]")
	fl.DurationVar(&wait, "wait", time.Minute, "how long to keep waking sessions not yet on the current version")
	fl.BoolVar(&moveOnly, "move-only", false, "only wake running sessions (the current version was set elsewhere)")
	return cmd
}
