// Package worker installs fastagent on Temporal workers: a Temporal plugin
// (go.temporal.io/sdk client.Plugin and worker.Plugin, like Temporal's own
// integrations) for one file-defined agent, and Run for the common case.
//
// On your own worker — your client, your Temporal Cloud credentials, your
// interceptors, your workflows beside the agent's:
//
//	p, err := worker.New(ctx, worker.Options{Dir: "./my-agent", Store: "postgres://…", Feed: "nats://…"})
//	defer p.Close()
//	c, err := client.Dial(client.Options{
//		HostPort:    "my-ns.a1b2c.tmprl.cloud:7233",
//		Namespace:   "my-ns.a1b2c",
//		Credentials: client.NewAPIKeyStaticCredentials(apiKey),
//		Plugins:     []client.Plugin{p}, // the codec, tracing, and every worker of c
//	})
//	w := sdkworker.New(c, "fastagent", sdkworker.Options{})
//	w.RegisterWorkflow(MyOwnWorkflow)
//	err = w.Run(sdkworker.InterruptCh())
//
// The plugin registers, on a worker of the agent's task queue (Options.TaskQueue,
// default "fastagent"), the Session, Delegate, Chat and ScheduleFire
// workflows with every activity they call; on a task queue fastagent.yaml
// places a group of activities on (activities: {tools: {taskQueue: gpu}}),
// that group's activities (see the activities package). It adds the metrics
// interceptor and, on a worker that sets none, a stop timeout
// (DefaultStopTimeout: running calls finish on stop), and on its clients
// the payload codec (Options.CodecKeys) and the tracing interceptor. Put it on the client (every worker made from it
// gets it) or on the workers you choose (sdkworker.Options.Plugins); with
// codec keys it must be on the client, and a worker whose client lacks the
// codec refuses to start, so nothing is written unencrypted.
//
// Run is `fastagent worker` in a call: the plugin, the Temporal schedules
// of the definition's schedules/ files, and an SDK worker tuned for
// latency (eager activities, autoscaled pollers, a short sticky timeout,
// running calls finishing on stop, Worker Deployment versioning) until ctx
// ends:
//
//	err := worker.Run(ctx, c, worker.Options{Dir: "./my-agent"})
//
// Plugin.Agent invokes the agent's turns from the same program; an HTTP
// door is the ingress package's. MoveToCurrent moves running sessions onto
// a Worker Deployment's new current version after a rollout.
package worker
