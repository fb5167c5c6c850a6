package workflows

// Names shared by workflows, activities, the worker and the ingress. They are
// part of the wire contract with running sessions: never rename one without a
// versioned migration.
const (
	// TaskQueue is the task queue session workflows and activities use.
	TaskQueue = "fastagent"

	// SessionWorkflowType is the registered name of SessionWorkflow.
	SessionWorkflowType = "Session"
	// ChatWorkflowType is the registered name of ChatWorkflow.
	ChatWorkflowType = "Chat"

	// UpdateTurn queues a turn; the update ID is the caller's idempotency key.
	UpdateTurn = "turn"
	// UpdateAbort stops the running turn (or drops a queued one).
	UpdateAbort = "abort"
	// UpdateSteer adds a message the running turn reads after its next step.
	UpdateSteer = "steer"
	// UpdateApprove answers a tool call waiting for approval.
	UpdateApprove = "approve"
	// UpdateAnswer answers a question the agent asked (ask_user).
	UpdateAnswer = "answer"
	// UpdateCompact compacts the session's context between turns (a
	// CompactRequest; the result is a CompactResult).
	UpdateCompact = "compact"
	// UpdateRewind moves the session's leaf to an earlier entry between
	// turns, summarizing the abandoned branch (a RewindRequest; the result
	// is a RewindResult).
	UpdateRewind = "rewind"
	// UpdateResend sends a channel reply that failed after its retries
	// (SessionView.FailedReplies) once more (a ResendRequest).
	UpdateResend = "resend"
	// SignalDeliver hands a channel delivery (a Delivery) to a session; the
	// channel door sends it with Signal-With-Start and never waits.
	SignalDeliver = "deliver"

	// SignalUpgrade wakes a session or chat workflow so that it notices a
	// new current version of its Worker Deployment and, once idle, continues
	// as new onto it (worker.MoveToCurrent sends it after a rollout). It
	// carries no payload; without a new version it changes nothing.
	SignalUpgrade = "upgrade"

	// QueryState returns a SessionView (a chat workflow answers with its own
	// state, which is no contract).
	QueryState = "state"

	// ActivityModelGenerate runs one model call (streaming to the live feed).
	ActivityModelGenerate = "Model.Generate"
	// ActivityToolExecute runs (or records) one tool call.
	ActivityToolExecute = "Tool.Execute"
	// ActivityStepRun runs a tool step's calls and then the turn's next
	// model call in one activity (model group), when nothing between them
	// needs the workflow; each call runs at most once through the session
	// store.
	ActivityStepRun = "Step.Run"
	// ActivityHookRun runs the agent's hooks (hooks/*.yaml) of one event of
	// a turn, once: its decision is recorded, never run again.
	ActivityHookRun = "Hook.Run"
	// ActivitySessionOpen finds a session's leaf (seeding it from a parent).
	ActivitySessionOpen = "Session.Open"
	// ActivityWakeNext computes a recurring wake-up's next instant (local).
	ActivityWakeNext = "Wake.Next"
	// ActivityTurnBegin (local) answers a turn whose idempotency key the
	// session store has already recorded, or stores the turn's user entry.
	ActivityTurnBegin = "Turn.Begin"
	// ActivityChannelReply posts (or, when one was posted, updates) a channel
	// turn's answer on its platform.
	ActivityChannelReply = "Channel.Reply"
	// ActivityChannelStream renders a channel turn's answer live on its
	// platform while the turn runs (best effort; Channel.Reply settles it).
	ActivityChannelStream = "Channel.Stream"
	// ActivityChannelFetch resolves a channel turn's attachments (images to
	// vision input, other files into the workspace) into its prompt.
	ActivityChannelFetch = "Channel.Fetch"
	// ActivityChannelSend sends a text to named places (a schedule's
	// deliver: targets) exactly once each.
	ActivityChannelSend = "Channel.Send"
	// ActivityChatRoute (local) hands a chat turn to its session workflow
	// with Signal-With-Start.
	ActivityChatRoute = "Chat.Route"
	// ActivityChatDrop (local) drops a routed chat turn whose message was
	// deleted, if it still waits in its session's queue.
	ActivityChatDrop = "Chat.Drop"
	// ActivityChatStop (local) aborts the running turn of a chat's session
	// (a Telegram /stop).
	ActivityChatStop = "Chat.Stop"
	// ActivityChatCommand (local) runs a chat command (/stop, /new,
	// /status, /help) and answers it in the chat.
	ActivityChatCommand = "Chat.Command"
	// ActivityCompact summarizes the older part of a session's branch and
	// appends a compaction entry (Summary "compact · <session>").
	ActivityCompact = "Session.Compact"
	// ActivityRewind summarizes the branch a rewind abandons and appends a
	// branch-summary entry below the target (Summary "rewind · <session>").
	ActivityRewind = "Session.Rewind"
	// ActivityFeedPublish (local) puts an event the workflow itself decided
	// on a turn's live feed: a tool call waiting for approval, the decision.
	ActivityFeedPublish = "Feed.Publish"
	// ActivityFeedStop (local) tells every worker that a turn's running
	// activities must stop now (an abort), ahead of their next heartbeat.
	ActivityFeedStop = "Feed.Stop"
	// ActivitySessionExpire deletes an idle session's stored data once its
	// sessions.idleTTL (re-read from the definition) has passed (an
	// ExpireInput; the result is an ExpireResult).
	ActivitySessionExpire = "Session.Expire"
	// ActivityTurnRecord keeps a finished turn's outcome in the session store
	// under its idempotency key.
	ActivityTurnRecord = "Turn.Record"
)

// WorkflowID is the workflow ID of a session.
func WorkflowID(session string) string { return "session:" + session }

// MaxQueuedTurns bounds the turns waiting behind the running one that a
// caller waits for (turn updates, compactions, rewinds). Temporal admits at
// most 10 in-flight updates per workflow, the running turn's included; the
// bound stays under it so rejections are ours, with a clear message, rather
// than the server's. Delivered turns (SignalDeliver) are bounded by
// MaxQueuedBytes and MaxQueuedDeliveries instead.
const MaxQueuedTurns = 8

// MaxQueuedBytes bounds the delivered turns waiting in one session (their
// keys, prompts and reply targets): they are kept in the session's state
// and carried across continue-as-new, so the bound keeps that state well
// under Temporal's 2 MB payload limit. A delivery past it is refused
// visibly (a busy reply, the key recorded as refused, a metric).
const MaxQueuedBytes = 768 << 10

// MaxQueuedDeliveries bounds how many delivered turns wait in one session.
const MaxQueuedDeliveries = 1000

// MaxKeyBytes bounds a delivered turn's key; a longer one is refused.
const MaxKeyBytes = 512

// MetricTurnsRefused counts turns a session refused, tagged "reason"
// (queue_full, window_full, too_large, no_key, internal_key, bad_key,
// no_prompt, busy: whileBusy reject) and
// "via" (deliver: a SignalDeliver; update: a turn update).
const MetricTurnsRefused = "fastagent_turns_refused_total"

// MetricRepliesFailed counts channel replies (answers, busy notices,
// webhook callbacks) that still failed after their retries, tagged
// "channel" (the channel kind).
const MetricRepliesFailed = "fastagent_channel_replies_failed_total"

// RefusedContinuing is the detail of a session_busy refusal of a turn that
// reached a run about to continue as new, with no turn waiting and none
// running but one whose model step may have ended it (and published its
// answer): the turn never started, and sent again (same key) it reaches the
// next run. A refusal without it means turns are waiting or running.
const RefusedContinuing = "continuing-as-new"

// RefusedSteerLate is the detail of the refusal of a steering message
// that came while the running turn may be ending (a model step that may
// end it in flight, or its turn_end hooks running): sent as a turn of its
// own, it is answered on its own.
const RefusedSteerLate = "turn-ending"

// ErrStopped is the error type of an activity stopped by its turn's stop
// notice (ActivityFeedStop); never retried.
const ErrStopped = "stopped"

// MetricTurnQueueDepth is the metric a session workflow reports its queue
// length to (through workflow.GetMetricsHandler, as a gauge tagged
// MetricSessionTag): summed over every session, it is the number of turns
// waiting behind a running one.
const MetricTurnQueueDepth = "fastagent_turn_queue_depth"

// MetricSessionTag is the tag carrying the session's workflow ID on the
// gauges a session reports; metrics handlers sum over it rather than
// export it (one series per session would be unbounded).
const MetricSessionTag = "session"
