package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/delivery"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/memory"
	"github.com/fastagent/fastagent/internal/relay"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/toolprogress"
	"github.com/fastagent/fastagent/internal/tools"
	"github.com/fastagent/fastagent/internal/waketools"
	"github.com/fastagent/fastagent/internal/workspace"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows/agentloop"
	"github.com/fastagent/fastagent/workflows/wakes"
)

// RunTool executes one tool call and appends its result under
// call.ResultEntryID, publishing tool_started and tool_ended. If the result
// already exists (an earlier attempt finished), it is returned and the tool
// is not run again. A synthetic call records the given result without
// running anything.
func (a *Activities) RunTool(ctx context.Context, call agentloop.ToolCall) (agentloop.ToolOutcome, error) {
	pub := publisher{bus: a.Feed, session: call.Session, turn: call.Turn}
	marker := ToolMarker(call.Turn, call.Call.ID)
	finish := func(res transcript.Message) agentloop.ToolOutcome {
		ev := agent.ToolEnded(call.Call.ID, res.IsError, res.Text)
		pub.send(ctx, feed.Message{Kind: feed.KindEvent, Step: call.Step, Event: &ev})
		pub.send(ctx, feed.Message{Kind: feed.KindEnd, Marker: marker})
		pub.flush(ctx)
		out := agentloop.ToolOutcome{IsError: res.IsError, Activated: res.AddedToolNames, Marker: marker}
		if d, ok := wakes.ParseDirective(res.Details); ok && !res.IsError {
			out.Wake, out.Unwake = d.Wake, d.Unwake
		}
		return out
	}

	if out, ok, err := a.storedOutcome(ctx, call, finish); err != nil || ok {
		return out, err
	}

	args, err := a.callArgs(ctx, call)
	if err != nil {
		return agentloop.ToolOutcome{}, err
	}
	started := agent.ToolStarted(call.Call.ID, call.Call.Name, args)
	pub.send(ctx, feed.Message{Kind: feed.KindEvent, Step: call.Step, Event: &started})

	var res agent.ToolResult
	switch {
	case call.Answer != nil:
		res, err = a.storedAnswer(ctx, call, attemptOf(ctx))
		if err != nil {
			return agentloop.ToolOutcome{}, err
		}
	case call.Synthetic != nil:
		res = *call.Synthetic
	default:
		// What the tool reports about itself goes on the live feed,
		// throttled; it never enters the workflow's history.
		progress := toolprogress.New(a.ProgressEvery, func(p agent.Progress) {
			ev := agent.ToolProgress(call.Call.ID, call.Call.Name, p)
			pub.send(ctx, feed.Message{Kind: feed.KindEvent, Step: call.Step, Event: &ev})
			if slot := progressSlotOf(ctx); slot != nil {
				slot.Store(&p)
			}
		})
		res, err = a.execute(agent.WithProgress(ctx, progress.Report), call, args)
		progress.Close()
		if err != nil {
			return agentloop.ToolOutcome{}, err
		}
		if call.Edit != nil {
			res.Content = EditNote(call.Edit, args) + "\n\n" + res.Content
		}
	}
	msg := transcript.Message{
		Role:           transcript.RoleToolResult,
		ToolCallID:     call.Call.ID,
		ToolName:       call.Call.Name,
		Text:           res.Content,
		IsError:        res.IsError,
		Details:        res.Details,
		AddedToolNames: activated(call.Call.Name, res.Details),
	}
	entry := transcript.Entry{
		ID:       call.ResultEntryID,
		ParentID: call.ParentID,
		Type:     transcript.TypeMessage,
		Time:     time.Now().UTC(),
		Message:  &msg,
	}
	// The result is stored even if the call was cancelled meanwhile: the
	// side effect happened and the transcript must say so.
	if err := a.Store.Append(context.WithoutCancel(ctx), call.Session, entry); err != nil {
		return agentloop.ToolOutcome{}, storeError(err)
	}
	if stored, err := a.Store.Get(context.WithoutCancel(ctx), call.Session, call.ResultEntryID); err == nil && stored.Message != nil {
		msg = *stored.Message
	}
	return finish(msg), nil
}

// storedOutcome is the outcome of call when its result is stored already
// (ok): an earlier attempt ran it, this one runs nothing. For an aborted
// Step.Run's record (StepModel) it first claims the step's model call: from
// then on no attempt begins it, and the outcome says whether one had.
func (a *Activities) storedOutcome(ctx context.Context, call agentloop.ToolCall, finish func(transcript.Message) agentloop.ToolOutcome) (agentloop.ToolOutcome, bool, error) {
	begun, err := a.claimStepModel(ctx, call.Session, call.StepModel)
	if err != nil {
		return agentloop.ToolOutcome{}, false, err
	}
	prev, err := a.Store.Get(ctx, call.Session, call.ResultEntryID)
	switch {
	case err == nil && prev.Message != nil:
		out := finish(*prev.Message)
		out.Recorded, out.ModelBegun = true, begun
		return out, true, nil
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return agentloop.ToolOutcome{}, false, storeError(err)
	}
	return agentloop.ToolOutcome{}, false, nil
}

// progressSlot holds a running call's last progress report for its
// activity's heartbeats (their details), where the Web UI and describe
// show it.
type progressSlot = atomic.Pointer[agent.Progress]

type progressSlotKey struct{}

func withProgressSlot(ctx context.Context, s *progressSlot) context.Context {
	return context.WithValue(ctx, progressSlotKey{}, s)
}

func progressSlotOf(ctx context.Context) *progressSlot {
	s, _ := ctx.Value(progressSlotKey{}).(*progressSlot)
	return s
}

// AnswerReadAttempts is how many attempts of a delegate call's record try
// to read the sub-agent's stored answer before the call is recorded as
// failed (the record activity retries with backoff, about 15 s in all).
const AnswerReadAttempts = 5

// storedAnswer reads the sub-agent's answer a delegate call records (its
// steps' texts) at the record activity's attempt. An answer without text
// is the call's Synthetic result; a read that fails is retried (a
// retryable store error, nothing recorded) and, on the last attempt, the
// call fails saying where the answer is — the placeholder never stands in
// for an answer that exists.
func (a *Activities) storedAnswer(ctx context.Context, call agentloop.ToolCall, attempt int) (agent.ToolResult, error) {
	ref := call.Answer
	texts, err := relay.StoredSteps(ctx, a.Store, ref.Session, agentloop.Outcome{Turn: agentloop.DelegateTurn, First: ref.First, Leaf: ref.Leaf})
	if err != nil {
		if attempt < AnswerReadAttempts {
			return agent.ToolResult{}, storeError(fmt.Errorf("read the sub-agent's answer (attempt %d of %d): %w", attempt, AnswerReadAttempts, err))
		}
		return agent.ToolResult{IsError: true, Content: fmt.Sprintf("The sub-agent finished, but its answer could not be read after %d attempts (%v). "+
			"It is stored in session %s; do not run the sub-task again for it.", attempt, err, ref.Session)}, nil
	}
	var parts []string
	for _, t := range texts {
		if t = strings.TrimSpace(t); t != "" {
			parts = append(parts, t)
		}
	}
	if len(parts) > 0 {
		return agent.ToolResult{Content: strings.Join(parts, "\n\n")}, nil
	}
	if call.Synthetic != nil {
		return *call.Synthetic, nil
	}
	return agent.ToolResult{Content: "(the sub-agent finished without a text answer)"}, nil
}

// attemptOf is the running activity's attempt (1 outside an activity).
func attemptOf(ctx context.Context) int {
	if !activity.IsActivity(ctx) {
		return 1
	}
	return int(activity.GetInfo(ctx).Attempt)
}

// callArgs reads the call's arguments from the stored assistant reply, so
// that they never travel through workflow history — unless a before_tool
// hook replaced them (call.Args).
func (a *Activities) callArgs(ctx context.Context, call agentloop.ToolCall) (json.RawMessage, error) {
	if len(call.Args) > 0 {
		return call.Args, nil
	}
	e, err := a.Store.Get(ctx, call.Session, call.AssistantEntryID)
	if err != nil {
		return nil, storeError(fmt.Errorf("read tool call %s: %w", call.Call.ID, err))
	}
	if e.Message != nil {
		for _, tc := range e.Message.ToolCalls {
			if tc.ID == call.Call.ID {
				if len(tc.Args) == 0 {
					return json.RawMessage("{}"), nil
				}
				return tc.Args, nil
			}
		}
	}
	return json.RawMessage("{}"), nil
}

// execute runs the tool. Problems the model can fix (unknown tool, invalid
// arguments, a tool error, a panic) become error results; only cancellation
// is returned as an error.
func (a *Activities) execute(ctx context.Context, call agentloop.ToolCall, args json.RawMessage) (res agent.ToolResult, err error) {
	def, err := a.Definitions.Load(ctx)
	if err != nil {
		return agent.ToolResult{IsError: true, Content: "The agent definition could not be loaded: " + err.Error()}, nil
	}
	tool, ok := def.Tool(call.Call.Name)
	if !ok {
		return agent.ToolResult{IsError: true, Content: fmt.Sprintf("Tool %s not found", call.Call.Name)}, nil
	}
	spec := tool.Spec()
	if res, refused := bindingRefusal(def, call.Call, args); refused {
		return res, nil
	}
	if res, refused := unhookedRefusal(def, call.Call); refused {
		return res, nil
	}
	if call.Call.ApprovalWaived && spec.RequiresApproval && !def.ApprovalWaived(call.Call.Name, args) {
		// requiresApproval.unless is judged again where the call runs: a
		// symlink made on its path since the model step (or a model step
		// that could not see this workspace) must not carry it elsewhere.
		return agent.ToolResult{IsError: true, Content: fmt.Sprintf(
			"The %s call was not run: it went without approval because it matched tools.%s.requiresApproval.unless "+
				"when it was asked for, but it no longer does (its path now leads elsewhere, or the condition changed). "+
				"Ask for it again: it will wait for a human's approval.", spec.Name, spec.Name)}, nil
	}
	if err := tools.ValidateArgs(spec, args); err != nil {
		return agent.ToolResult{IsError: true, Content: fmt.Sprintf("Invalid arguments for %s: %s", spec.Name, err.Error())}, nil
	}
	defer func() {
		if p := recover(); p != nil {
			a.log().Error("tool panicked", "tool", spec.Name, "panic", p, "stack", string(debug.Stack()))
			res, err = agent.ToolResult{IsError: true, Content: fmt.Sprintf("Tool %s crashed: %v", spec.Name, p)}, nil
		}
	}()
	tc := agent.ToolCall{
		ID:      call.Call.ID,
		Name:    spec.Name,
		Args:    args,
		Session: call.Session,
		Dir:     def.Workspace.Dir,
	}
	if h := a.Hooks.BeforeToolCall; h != nil {
		if block, reason := h(ctx, tc); block {
			if reason == "" {
				reason = "blocked by policy"
			}
			return agent.ToolResult{IsError: true, Content: fmt.Sprintf("The %s call was blocked: %s", spec.Name, reason)}, nil
		}
	}
	if a.ClientSeen != nil && activity.IsActivity(ctx) {
		// The frontend of the client this worker runs on is kept from
		// the tools before one runs, however the client was made.
		if err := a.ClientSeen(ctx, activity.GetClient(ctx)); err != nil {
			if ctx.Err() != nil {
				// Stopped (an abort, the turn's stop notice) before it ran:
				// the workflow records the interruption, not this.
				return agent.ToolResult{}, ctx.Err()
			}
			return agent.ToolResult{IsError: true, Content: fmt.Sprintf("The %s call was not run: %s", spec.Name, err.Error())}, nil
		}
	}
	runCtx := waketools.WithPending(ctx, waketools.Pending{IDs: call.PendingWakes, NextID: call.NextWakeID})
	// A memory write is keyed by the call's result entry: a retried call
	// stores nothing twice.
	runCtx = memory.WithEnv(runCtx, memory.Env{Store: a.Store, Agent: a.AgentName(), Session: call.Session, Key: call.Session + "/" + call.ResultEntryID})
	// A send (send_message, send_file) is keyed by the call's result entry
	// too: a retried call sends nothing twice.
	runCtx = delivery.WithEnv(runCtx, delivery.Env{Senders: a.Senders, Refs: a.Store, Session: call.Session, Key: "send/" + call.ResultEntryID})
	res, err = tool.Run(runCtx, tc)
	if ctx.Err() != nil && err != nil {
		return res, ctx.Err()
	}
	if err != nil && spec.Idempotent && delivery.IsRetryable(err) {
		// The activity fails and its retry policy runs the call again.
		return res, err
	}
	if err != nil {
		res = agent.ToolResult{IsError: true, Content: err.Error()}
	}
	if h := a.Hooks.AfterToolCall; h != nil {
		res = h(ctx, tc, res)
	}
	return res, nil
}

// bindingRefusal checks an approved call against what was approved: the
// arguments must be the ones shown to the human and the tool's definition
// must not have changed since the model asked (a changed fastagent.yaml,
// tools/ manifest or MCP server). Calls without a recorded hash (no
// approval, or recorded before approvals were bound) pass.
func bindingRefusal(def *workspace.Definition, c agentloop.Call, args json.RawMessage) (agent.ToolResult, bool) {
	if c.ArgsHash != "" && ArgsHash(args) != c.ArgsHash {
		return agent.ToolResult{IsError: true, Content: fmt.Sprintf(
			"The %s call was not run: its arguments are not the ones that were approved (approved %s, now %s).",
			c.Name, c.ArgsHash, ArgsHash(args))}, true
	}
	if c.DefinitionHash == "" {
		return agent.ToolResult{}, false
	}
	now, ok := def.ToolHash(c.Name)
	if !ok || now != c.DefinitionHash {
		if !ok {
			now = "no such tool"
		}
		return agent.ToolResult{IsError: true, Content: fmt.Sprintf(
			"The %s call was not run: the tool's definition changed after the call was put up for approval "+
				"(approved definition %s, now %s). Ask for the call again so a human can approve the current definition.",
			c.Name, c.DefinitionHash, now)}, true
	}
	return agent.ToolResult{}, false
}

// unhookedRefusal refuses a call that before_tool hooks of def match but
// that was not flagged for them (Call.BeforeHook): the model step ran on a
// definition without those hooks (a hook file added since, a model worker
// with another copy of the agent), so no hook step saw the call. Run, it
// would pass the guard unchecked.
func unhookedRefusal(def *workspace.Definition, c agentloop.Call) (agent.ToolResult, bool) {
	if c.BeforeHook != "" {
		return agent.ToolResult{}, false
	}
	hooks := def.HooksFor(workspace.HookBeforeTool, c.Name)
	if len(hooks) == 0 {
		return agent.ToolResult{}, false
	}
	return agent.ToolResult{IsError: true, Content: fmt.Sprintf(
		"The %s call was not run: the before_tool hook %s did not see it (the hook is newer than the call). "+
			"Ask for the call again so the hook can check it.", c.Name, hooks[0].File)}, true
}

// activated reads the deferred tools a search_tools call switched on (its
// result details carry {"activated": [...]}); other tools' details never
// activate anything.
func activated(tool string, details json.RawMessage) []string {
	if tool != workspace.SearchToolsName || len(details) == 0 {
		return nil
	}
	var d struct {
		Activated []string `json:"activated"`
	}
	if json.Unmarshal(details, &d) != nil {
		return nil
	}
	return d.Activated
}

// editValueLen bounds each value an edit note quotes.
const editValueLen = 200

// EditNote tells the model how an approver changed its call's arguments:
// "Approved with edits by alice: command changed from "rm -rf x" to "rm x"."
func EditNote(e *agentloop.ApprovalEdit, args json.RawMessage) string {
	var from, to map[string]json.RawMessage
	_ = json.Unmarshal(e.From, &from)
	_ = json.Unmarshal(args, &to)
	show := func(v json.RawMessage) string {
		s := strings.Join(strings.Fields(string(v)), " ")
		if len(s) > editValueLen {
			s = s[:editValueLen] + "…"
		}
		return s
	}
	var changes []string
	for _, k := range slices.Sorted(maps.Keys(to)) {
		old, had := from[k]
		switch {
		case !had:
			changes = append(changes, fmt.Sprintf("%s set to %s", k, show(to[k])))
		case !jsonEqual(old, to[k]):
			changes = append(changes, fmt.Sprintf("%s changed from %s to %s", k, show(old), show(to[k])))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(from)) {
		if _, kept := to[k]; !kept {
			changes = append(changes, k+" removed")
		}
	}
	by := ""
	if e.By != "" {
		by = " by " + e.By
	}
	if len(changes) == 0 {
		return fmt.Sprintf("[Approved with edits%s: the arguments were rewritten with the same values.]", by)
	}
	return fmt.Sprintf("[Approved with edits%s: %s. The call ran with the edited arguments.]", by, strings.Join(changes, "; "))
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return string(a) == string(b)
	}
	return reflect.DeepEqual(x, y)
}
