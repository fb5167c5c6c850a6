// Package workflows holds fastagent's workflows — the session workflow that
// serializes a session's turns and runs the agent loop through activities,
// the chat workflow of a platform conversation, a sub-agent's Delegate
// workflow and a schedule's fire — and what callers of them use, nothing
// more:
//
//   - names: the task queue (TaskQueue), the workflow types
//     (SessionWorkflowType, …) and IDs (WorkflowID, ChatWorkflowID,
//     ScheduleID, …), the updates (UpdateTurn, UpdateAbort, UpdateSteer,
//     UpdateApprove, UpdateAnswer, UpdateCompact, UpdateRewind,
//     UpdateResend), the signals (SignalDeliver, SignalUpgrade), the query
//     (QueryState), the search attributes (AttrAgent, …, the Status values)
//     and the activities (ActivityModelGenerate, …: for task queues,
//     metrics and interceptors);
//   - payloads: each update's request and result (TurnRequest and
//     agentloop.Outcome, AbortRequest and AbortResult, …), the deliver
//     signal's Delivery, the state query's SessionView and what it holds,
//     SessionInput, and the other workflows' inputs and results;
//   - the bounds a caller meets (MaxQueuedTurns, MaxKeyBytes, …) and the
//     metrics a session reports.
//
// The contract, with the JSON of every payload for any Temporal client
// (the temporal CLI, tctl, another SDK), is docs/temporal-api.md. Error
// codes are the agent package's: an update that fails or is rejected
// returns a Temporal application error whose type is the code
// (agent.CodeSessionBusy, …).
//
// The rest is fastagent's own and not exported: the activities' arguments
// and results, the chat doors' messages and the workflows' signals to one
// another (internal/wire), and the state a run hands to the next when it
// continues as new (SessionInput.Snapshot, ChatInput.State). It changes with
// the workflows, behind workflow.GetVersion, never under a running session.
//
// Nothing here does I/O, reads the clock or draws random numbers; see
// DESIGN.md, "Rules that keep it durable".
package workflows
