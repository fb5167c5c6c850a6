// Package activities is fastagent's activity set as a value: everything
// with side effects that the session, chat and schedule workflows ask for —
// model calls, tool calls, session-store bookkeeping, channel replies,
// schedule fires — registered by group under the names in the workflows
// package (Model.Generate, Tool.Execute, …; the table below).
//
// Most programs never register activities themselves: the fastagent plugin
// (package worker) registers the workflows with every activity they call.
// Register is for a worker of its own for some of them — the tool calls on
// GPU machines, the model calls in the network zone that may reach the
// provider:
//
//	set, err := activities.New(ctx, activities.Options{Dir: "./my-agent", Store: dsn, Feed: natsURL})
//	defer set.Close()
//	w := sdkworker.New(c, "gpu", sdkworker.Options{})
//	if err := activities.Register(w, set, activities.GroupTools); err != nil { … }
//	err = w.Run(sdkworker.InterruptCh())
//
// with fastagent.yaml placing the group on that task queue, so that the
// sessions schedule it there:
//
//	activities:
//	  tools: {taskQueue: gpu}
//	  model: {taskQueue: llm-zone}
//
// (`fastagent worker --activities tools` runs such a worker). Set the
// worker's WorkerStopTimeout (worker.DefaultStopTimeout, as the plugin
// does): the SDK's default cancels a running tool call the moment the
// worker stops, and the model is told its outcome is unknown. With codec
// keys (Options.CodecKeys or the environment), the sessions' payloads are
// encrypted: the set is then also the Temporal plugin that puts the codec
// on a client — make the worker's client with it
// (client.Options.Plugins: set) — and Register refuses a worker whose
// client was not made with it. A worker serving a group needs what the
// group's activities use: the agent's folder (its definition, tools and
// secrets), the session store and the live feed the session's workers use
// (a Postgres store and a NATS feed, once workers run on several
// machines). The feed carries the group's live events and the aborts of
// its running calls, so Register of the model or tools group alone needs
// Options.Feed named: the NATS feed, or "inprocess" when the session's
// workers run in this very process. Only the model and tools groups run
// apart; the others run beside the workflows, on the session's own task
// queue (most of them are local activities).
//
// # Activities, retries and timeouts
//
// The workflows set each activity's options; settings of fastagent.yaml
// change some (retry.modelAttempts, retry.modelTimeout, retry.heartbeat;
// a tool's timeout, maxAttempts and idempotent). Backoff is exponential
// (coefficient 2) from the first interval up to the longest.
//
//	activity          group      kind   start-to-close            heartbeat              attempts (interval)
//	Model.Generate    model      —      retry.modelTimeout (10m)  retry.heartbeat (20s)  retry.modelAttempts (6; 1s…1m)
//	Session.Compact   model      —      retry.modelTimeout (10m)  retry.heartbeat (20s)  retry.modelAttempts (6; 1s…1m)
//	Session.Rewind    model      —      retry.modelTimeout (10m)  retry.heartbeat (20s)  retry.modelAttempts (6; 1s…1m)
//	Step.Run          model      —      the calls' timeout (10m)  retry.heartbeat (20s)  retry.modelAttempts (6; 1s…1m)
//	                                    + 30s + retry.modelTimeout
//	Tool.Execute      tools      —      the tool's timeout (10m)  retry.heartbeat (20s)  1; an idempotent tool maxAttempts (3; 1s…30s)
//	                                    + 30s
//	  (a recorded result: an aborted, denied or lost call's)
//	                  session    —      1m                        5s                     unlimited (1s…30s)
//	Hook.Run          tools      —      5m                        retry.heartbeat (20s)  1 (a failure applies the hooks' onError)
//	Session.Open      session    local  1m                        —                      unlimited (1s…30s)
//	Turn.Begin        session    local  1m                        —                      unlimited (1s…30s)
//	Turn.Record       session    —      1m                        5s                     unlimited (1s…30s)
//	Wake.Next         session    local  10s                       —                      3
//	Feed.Publish      session    local  10s                       —                      3
//	Feed.Stop         session    local  10s                       —                      3
//	Channel.Fetch     channels   —      2m                        —                      5 (1s…10s)
//	Channel.Stream    channels   —      24h                       15s                    10 (1s…10s)
//	Channel.Reply     channels   —      1m                        —                      20 (1s…30s); a resend 3 (1s…10s)
//	Chat.Route        channels   —      30s                       —                      unlimited (200ms…30s)
//	Chat.Drop         channels   local  30s                       —                      5 (200ms…10s)
//	Chat.Stop         channels   local  30s                       —                      5 (200ms…10s)
//	Channel.Send      channels   —      2m                        —                      8 (1s…1m)
//	Chat.Command      channels   local  30s                       —                      5 (200ms…10s)
//	Schedule.Fire     schedules  —      2h                        30s                    10 (1s…1m)
//
// The activities' arguments and results are fastagent's own protocol with
// its workflows, not an API: they change with the workflows that send them
// (behind the workflows' versioning, so running sessions are never
// disturbed), which is why the set exposes no activity as a method to call
// — register it and let the workflows call it.
//
// A tool that is not idempotent runs at most once: a call whose worker was
// lost is reported to the model as "outcome unknown", never run again.
//
// Step.Run runs a tool step's calls and then the turn's next model call in
// one activity (a tool step is then one action, not two). The sessions
// schedule it only when both groups run on the session's own task queue
// and nothing between the calls and the model call needs the workflow
// (approvals, ask_user, delegate, tool hooks); it runs each call at most
// once through the session store — a retried attempt reads a stored
// result, and a non-idempotent call an earlier attempt started without
// storing its result is reported as "outcome unknown". An
// activity stopped by its turn's abort fails with the non-retryable error
// type "stopped". The recorded results of tool calls (Tool.Execute of a
// call the workflow decided: aborted, denied, unknown) stay on the
// session's task queue wherever the tools group runs.
package activities
