package workflows

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// changeFileHooks versions the hook steps (ActivityHookRun) a turn runs
// when the agent has hook files (hooks/*.yaml): before its first model
// call, around tool calls, at its end and before a compaction. A history
// recorded before it never has one — the model steps that name the hooks
// (Settings.Hooks, Call.BeforeHook, Call.AfterHook) did not exist — and
// the marker is recorded only where a hook step runs, so an agent without
// hooks pays nothing.
const changeFileHooks = "file-hooks"

// hookStepTimeout bounds one Hook.Run: the event's hooks one after the
// other, each at most 60 s (workspace.MaxHookTimeout).
const hookStepTimeout = 5 * time.Minute

// Hook runs a hook step of the loop (before_agent_start, turn_end).
func (r *loopRuntime) Hook(call agentloop.HookCall) agentloop.HookResult {
	if call.Event == agentloop.HookTurnEnd {
		// The turn's last reply is in: steering now could only follow it.
		r.s.closing = true
		defer func() { r.s.closing = false }()
	}
	return r.runHook(r.ctx, call)
}

// runHook runs the hooks of one event as one Hook.Run activity: never
// retried (a hook runs at most once; its decision is recorded, so a replay
// or a retried tool call never runs it again), under an activity ID
// derived from the turn, the step count and the call. A step that cannot
// run (a lost worker, an unloadable definition) applies call.OnError and
// says so on the turn's stream.
func (r *loopRuntime) runHook(ctx workflow.Context, call agentloop.HookCall) agentloop.HookResult {
	allow := agentloop.HookResult{Decision: agentloop.HookAllow}
	if workflow.GetVersion(ctx, changeFileHooks, workflow.DefaultVersion, 1) < 1 {
		return allow
	}
	r.hookSteps++
	id := fmt.Sprintf("hook/%s/%d/%s", hookIDPart(call.Turn), r.hookSteps, call.Event)
	summary := "hook · " + call.Event
	if call.CallID != "" {
		id += "/" + hookIDPart(call.CallID)
		summary += " · " + call.Tool
	}
	set := r.settings()
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		ActivityID:          id,
		TaskQueue:           set.ToolTaskQueue, // "": the session's own
		StartToCloseTimeout: hookStepTimeout,
		HeartbeatTimeout:    orDur(set.Heartbeat, defaultHeartbeat),
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
		Summary:             summary,
	})
	var res agentloop.HookResult
	err := workflow.ExecuteActivity(actx, ActivityHookRun, call).Get(actx, &res)
	if err == nil {
		return res
	}
	if r.aborted() {
		return agentloop.HookResult{Decision: agentloop.HookStop, Reason: "the turn was aborted"}
	}
	onError := call.OnError
	if onError != agentloop.HookDeny {
		onError = agentloop.HookAllow
	}
	reason := fmt.Sprintf("the %s hooks could not run: %s", call.Event, rootCause(err))
	r.publish(ctx, agentloop.ToolCall{Session: call.Session, Turn: call.Turn, Step: agentloop.HookFeedStep(call),
		Call: agentloop.Call{ID: call.CallID, Name: "hook " + call.Event}},
		agent.HookRan("", call.Event, call.CallID, onError, "", reason))
	if onError == agentloop.HookDeny {
		return agentloop.HookResult{Decision: agentloop.HookDeny, Reason: reason + " (onError: deny)"}
	}
	return allow
}

// maxHookIDPart bounds the turn and the call ID in a hook step's activity
// ID: the turn's ID is the caller's idempotency key and the call's the
// model's (or its provider's), of any length, and Temporal refuses an
// activity ID past its limit (1000 bytes by default) — the step could not
// be scheduled and the session's workflow task would fail for good.
const maxHookIDPart = 200

// hookIDPart is how a hook step's activity ID names a turn or a call ID:
// as it is (every history recorded so far has such IDs), or by its digest
// when long.
func hookIDPart(id string) string {
	if len(id) <= maxHookIDPart {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "sha256-" + hex.EncodeToString(sum[:16])
}

// beforeTool runs the call's before_tool hooks: a denial or a stop becomes
// the call's recorded result (stop also ends the turn after the batch:
// its reason is returned), replaced arguments become the call's — and what
// an approval binds, so a person approves what will run.
func (r *loopRuntime) beforeTool(ctx workflow.Context, c *agentloop.ToolCall) (stop string) {
	res := r.runHook(ctx, agentloop.HookCall{Session: c.Session, Turn: c.Turn, Step: c.Step, Event: agentloop.HookBeforeTool,
		OnError: c.Call.BeforeHook, CallID: c.Call.ID, Tool: c.Call.Name, AssistantEntryID: c.AssistantEntryID})
	switch res.Decision {
	case agentloop.HookDeny:
		reason := strings.TrimSpace(res.Reason)
		if reason == "" {
			reason = "no reason given"
		}
		by := "a hook"
		if res.Hook != "" {
			by = "the hook " + res.Hook
		}
		c.Synthetic = &agent.ToolResult{IsError: true, Content: fmt.Sprintf("This %s call was not run: %s denied it: %s", c.Call.Name, by, reason)}
		return ""
	case agentloop.HookStop:
		c.Synthetic = &agent.ToolResult{IsError: true, Content: "This call was not run: the turn was ended: " + res.StopReason()}
		return res.StopReason()
	}
	if len(res.Args) > 0 {
		c.Args = res.Args
		c.Call.ArgsPreview = argsPreview(string(res.Args))
		if c.Call.RequiresApproval {
			c.Call.Args, c.Call.ArgsHash = res.Args, res.ArgsHash
		}
	}
	return ""
}

// afterTool runs the call's after_tool hooks: what they say about the
// result (context, a rejection) is given to the model with the next step;
// a stop ends the turn after the batch.
func (r *loopRuntime) afterTool(ctx workflow.Context, c agentloop.ToolCall, out *agentloop.ToolOutcome) {
	res := r.runHook(ctx, agentloop.HookCall{Session: c.Session, Turn: c.Turn, Step: c.Step, Event: agentloop.HookAfterTool,
		OnError: c.Call.AfterHook, CallID: c.Call.ID, Tool: c.Call.Name, AssistantEntryID: c.AssistantEntryID,
		ResultEntryID: c.ResultEntryID, Args: c.Args})
	var notes []string
	if ctxText := strings.TrimSpace(res.Context); ctxText != "" {
		notes = append(notes, fmt.Sprintf("Hook note on the %s call %s:\n%s", c.Call.Name, c.Call.ID, ctxText))
	}
	switch res.Decision {
	case agentloop.HookDeny:
		by := "A hook"
		if res.Hook != "" {
			by = "The hook " + res.Hook
		}
		reason := strings.TrimSpace(res.Reason)
		if reason == "" {
			reason = "no reason given"
		}
		notes = append(notes, fmt.Sprintf("%s rejected the result of the %s call %s: %s", by, c.Call.Name, c.Call.ID, reason))
	case agentloop.HookStop:
		out.Stop = res.StopReason()
	}
	out.Note = strings.Join(notes, "\n\n")
}

// beforeCompact runs the before_compact hooks ahead of a compaction in a
// turn; deny (or stop) skips that compaction, and why says who refused.
func (r *loopRuntime) beforeCompact(call agentloop.ModelCall, reason string) (skip bool, why string) {
	on := r.settings().HookOnError(agentloop.HookBeforeCompact)
	if on == "" {
		return false, ""
	}
	res := r.runHook(r.ctx, agentloop.HookCall{Session: call.Session, Turn: call.Turn, Step: call.Step,
		Event: agentloop.HookBeforeCompact, OnError: on, Reason: reason})
	if !res.Blocks() {
		return false, ""
	}
	return true, res.StopReason()
}

// argsPreview is a call's arguments as its activity summary shows them.
func argsPreview(args string) string {
	s := strings.Join(strings.Fields(args), " ")
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}
