package activities

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/hooks"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/llm"
	"github.com/fastagent/fastagent/internal/models"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/internal/workspace"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// argsPreviewLen bounds the argument preview kept in workflow history.
const argsPreviewLen = 120

// ModelMarker names the feed marker published after a model step's events.
func ModelMarker(turn string, step int) string { return fmt.Sprintf("%s/m%d", turn, step) }

// ToolMarker names the feed marker published after a tool call's events.
func ToolMarker(turn, call string) string { return fmt.Sprintf("%s/t/%s", turn, call) }

// RunModel appends the step's pending entries, calls the model with the
// session's context, streams deltas to the feed and appends the reply under
// call.EntryID. If that entry already exists (an earlier attempt stored it
// and its worker died before reporting), the stored reply is returned and
// the model is not called again.
//
// The step's model is routed by the definition (Config.ModelFor: chatModel,
// toolModel after a tool step) and call.Fallback indexes its fallback chain.
// A fallback's attempts are numbered on the feed after those of the models
// before it, so the relay treats them as restarts of the same step; so are
// the attempts of a call a Step.Run may have begun (call.AttemptBase).
func (a *Activities) RunModel(ctx context.Context, call agentloop.ModelCall, attempt int) (agentloop.ModelResult, error) {
	res, _, err := a.runModel(ctx, call, attempt)
	return res, err
}

// runModel is RunModel that also says whether the reply was read from the
// store (stored: an earlier attempt made the call).
func (a *Activities) runModel(ctx context.Context, call agentloop.ModelCall, attempt int) (_ agentloop.ModelResult, stored bool, _ error) {
	if call.AttemptBase > 0 {
		// After a Step.Run that failed: when none of its attempts reached
		// the model call, this call's attempts start at 1, so the live
		// feed sees the step begin.
		if _, err := a.Store.Reply(ctx, call.Session, modelStartedKey(call)); errors.Is(err, store.ErrNotFound) {
			call.AttemptBase = 0
		} else if err != nil {
			return agentloop.ModelResult{}, false, storeError(err)
		}
	}
	attempt += call.Fallback*max(call.MaxAttempts, 1) + call.AttemptBase
	pub := publisher{bus: a.Feed, session: call.Session, turn: call.Turn}
	pub.send(ctx, feed.Message{Kind: feed.KindAttempt, Step: call.Step, Attempt: attempt, MaxAttempts: call.MaxAttempts})

	leaf, err := a.appendPending(ctx, call)
	if err != nil {
		return agentloop.ModelResult{}, false, err
	}
	def, err := a.Definitions.Load(ctx)
	if err != nil {
		return agentloop.ModelResult{}, false, temporal.NewApplicationErrorWithOptions(
			"the agent definition could not be loaded: "+err.Error()+" (fix the file and send the turn again)",
			agent.CodeDefinition, temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	step := modelStep{call: call, attempt: attempt, pub: pub, def: def, leaf: leaf,
		settings: a.settingsOf(def), marker: ModelMarker(call.Turn, call.Step)}

	if prev, err := a.Store.Get(ctx, call.Session, call.EntryID); err == nil && prev.Message != nil {
		// This attempt shows the stored reply's text: a relay that saw the
		// attempt's restart discards what an earlier one streamed.
		if prev.Message.Text != "" {
			ev := agent.Text(prev.Message.Text)
			pub.send(ctx, feed.Message{Kind: feed.KindEvent, Step: call.Step, Attempt: attempt, Event: &ev})
		}
		res, err := a.endTurn(ctx, call, step.done(ctx, prev.Message))
		return res, true, err
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		return agentloop.ModelResult{}, false, storeError(err)
	}

	chain := def.Config.ModelFor(call.AfterTools)
	model, err := a.Models.Model(chain[min(call.Fallback, len(chain)-1)])
	if err != nil {
		return agentloop.ModelResult{}, false, temporal.NewApplicationErrorWithOptions(err.Error(), agent.CodeModelConfig,
			temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	branch, req, err := a.modelRequest(ctx, step)
	if err != nil {
		return agentloop.ModelResult{}, false, err
	}
	if call.CheckContext && def.Config.Compaction.On() {
		if over := a.overBudget(def, model.Name(), branch, req); over != nil {
			over.Leaf = leaf
			pub.flush(ctx)
			return agentloop.ModelResult{Compact: over, Settings: step.settings}, false, nil
		}
	}
	msg, streamed, chars, err := a.generate(ctx, step, model, req)
	if stopped(ctx) {
		a.reportStopped(ctx, step, a.requestTokens(branch, req), chars, &msg, err)
	}
	if err != nil {
		return agentloop.ModelResult{}, false, a.modelError(ctx, pub, call, attempt, streamed, err, fallbackOf(def, chain, call.Fallback))
	}
	if err := a.storeReply(ctx, step, &msg); err != nil {
		return agentloop.ModelResult{}, false, err
	}
	res, err := a.endTurn(ctx, call, step.done(ctx, &msg))
	return res, false, err
}

// endTurn records the turn when res, the step's reply, ends it and the
// workflow asked the step to (call.End): the outcome the loop will return
// (agentloop.TurnEnd.Ended) is stored under the turn's key and published
// as the turn's last feed message, exactly as Turn.Record would, which the
// workflow then does not run. Not once the turn was stopped: its workflow
// records what the abort made of it.
func (a *Activities) endTurn(ctx context.Context, call agentloop.ModelCall, res agentloop.ModelResult) (agentloop.ModelResult, error) {
	if call.End == nil || !res.EndsTurn() {
		return res, nil
	}
	if ctx.Err() != nil {
		return res, nil //nolint:nilerr // a stopped turn is recorded by its workflow, from what the abort made of it
	}
	in := wire.RecordTurnInput{Session: call.Session, Key: call.Turn, Outcome: call.End.Ended(call, res),
		Finished: time.Now().UTC(), Started: call.End.Started}
	if err := a.RecordTurn(ctx, in); err != nil {
		return agentloop.ModelResult{}, err
	}
	res.Recorded = true
	return res, nil
}

// modelStep is what RunModel's parts share about the step being run.
type modelStep struct {
	call     agentloop.ModelCall
	attempt  int // counted across the fallback chain
	pub      publisher
	def      *workspace.Definition
	leaf     string // the entry the reply is appended under
	settings agentloop.Settings
	marker   string
}

// done ends the step on the feed with its marker and describes reply msg
// to the loop.
func (s modelStep) done(ctx context.Context, msg *transcript.Message) agentloop.ModelResult {
	s.pub.send(ctx, feed.Message{Kind: feed.KindEnd, Step: s.call.Step, Marker: s.marker})
	s.pub.flush(ctx)
	return resultOf(s.def, s.call.EntryID, msg, s.settings, s.marker)
}

// appendPending appends the step's pending entries (a retried append is a
// no-op) and returns the leaf the reply goes under.
func (a *Activities) appendPending(ctx context.Context, call agentloop.ModelCall) (string, error) {
	if err := a.Store.Append(ctx, call.Session, call.Prepend...); err != nil {
		return "", storeError(err)
	}
	if n := len(call.Prepend); n > 0 {
		return call.Prepend[n-1].ID, nil
	}
	return call.Leaf, nil
}

// modelRequest reads the session's branch up to the step's leaf and builds
// the request from it and the definition, as the model hooks shape it.
func (a *Activities) modelRequest(ctx context.Context, s modelStep) ([]transcript.Entry, llm.Request, error) {
	branch, err := a.Store.Branch(ctx, s.call.Session, s.leaf)
	if err != nil {
		return nil, llm.Request{}, storeError(err)
	}
	req := llm.Request{
		System:   s.def.SystemPrompt(),
		Messages: transcript.Context(branch),
		Tools:    s.def.SessionSpecs(s.call.Session, s.call.Activated),
		Thinking: s.def.Config.ThinkingLevel,
	}
	a.injectMemories(ctx, s, &req)
	if err := a.applyModelHooks(ctx, s.call, &req); err != nil {
		return nil, llm.Request{}, temporal.NewApplicationErrorWithOptions("a hook failed: "+err.Error(), agent.CodeHook,
			temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	return branch, req, nil
}

// generate calls the model, streaming its text and thinking deltas to the
// feed; streamed says whether any delta was sent. The Observer is told what
// the call measured.
func (a *Activities) generate(ctx context.Context, s modelStep, model llm.Model, req llm.Request) (msg transcript.Message, streamed bool, chars int, err error) {
	sent := time.Now()
	var firstToken time.Duration
	msg, err = model.Generate(ctx, req, func(d llm.Delta) {
		if !streamed {
			firstToken = time.Since(sent)
		}
		streamed = true
		chars += utf8.RuneCountInString(d.Text)
		ev := agent.Text(d.Text)
		if d.Kind == "thinking" {
			ev = agent.Thinking(d.Text)
		}
		ev.Step = s.call.Step
		s.pub.send(ctx, feed.Message{Kind: feed.KindEvent, Step: s.call.Step, Attempt: s.attempt, Event: &ev})
	})
	a.observeModel(model.Name(), firstToken, &msg, err)
	return msg, streamed, chars, err
}

// storeReply appends reply msg under the step's leaf with the call's entry
// ID. A concurrent attempt may have stored its reply first: msg becomes the
// stored one, the truth.
func (a *Activities) storeReply(ctx context.Context, s modelStep, msg *transcript.Message) error {
	entry := transcript.Entry{
		ID:       s.call.EntryID,
		ParentID: s.leaf,
		Type:     transcript.TypeMessage,
		Time:     time.Now().UTC(),
		Message:  msg,
	}
	if err := a.Store.Append(ctx, s.call.Session, entry); err != nil {
		return storeError(err)
	}
	if stored, err := a.Store.Get(ctx, s.call.Session, s.call.EntryID); err == nil && stored.Message != nil {
		*msg = *stored.Message
	}
	return nil
}

// observeModel tells the Observer what a model call measured.
func (a *Activities) observeModel(spec string, firstToken time.Duration, msg *transcript.Message, err error) {
	if a.Observer == nil {
		return
	}
	st := ModelStats{Model: spec, FirstToken: firstToken, Failed: err != nil}
	if u := msg.Usage; err == nil && u != nil {
		st.Usage = &agent.Usage{Input: int64(u.Input), Output: int64(u.Output),
			CacheRead: int64(u.CacheRead), CacheWrite: int64(u.CacheWrite), Calls: 1}
	}
	a.Observer.ObserveModel(st)
}

// fallback is the next model of a step's chain and when to hand over to it.
type fallback struct {
	next  string        // "" when the chain is exhausted
	after time.Duration // the longest Retry-After waited for instead
}

func fallbackOf(def *workspace.Definition, chain []string, at int) fallback {
	f := fallback{after: time.Duration(def.Config.Retry.FallbackAfter)}
	if f.after <= 0 {
		f.after = workspace.DefaultFallbackAfter
	}
	if at+1 < len(chain) {
		f.next = chain[at+1]
	}
	return f
}

// modelError classifies a failed model call for Temporal's retry policy and
// tells the client to drop partial text when a retry follows streamed deltas.
// A retryable failure on the model's last attempt, or a rate limit longer
// than fb.after, hands the step to the next model of the chain: the error
// is then wire.ErrModelFallback (the workflow runs the step again with
// the next Fallback) and a retrying event names the fallback model.
func (a *Activities) modelError(ctx context.Context, pub publisher, call agentloop.ModelCall, attempt int, streamed bool, err error, fb fallback) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var le *llm.Error
	if !errors.As(err, &le) {
		le = &llm.Error{Retryable: true, Kind: "unknown", Message: err.Error()}
	}
	if le.Kind == llm.KindContextOverflow {
		return temporal.NewApplicationErrorWithOptions(le.Error(), agent.CodeContextOverflow,
			temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	if !le.Retryable {
		return temporal.NewApplicationErrorWithOptions(le.Error(), agent.CodeModel,
			temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	own := attempt - call.Fallback*max(call.MaxAttempts, 1) - call.AttemptBase // this model's attempt
	exhausted := call.MaxAttempts > 0 && own >= call.MaxAttempts
	throttled := le.Kind == llm.KindRateLimit && le.RetryAfter > fb.after
	if fb.next != "" && (exhausted || throttled) {
		ev := agent.Event{
			Type:        agent.TypeRetrying,
			Step:        call.Step,
			Attempt:     (call.Fallback+1)*max(call.MaxAttempts, 1) + call.AttemptBase + 1,
			MaxAttempts: call.MaxAttempts,
			Reason:      fmt.Sprintf("falling back to %s: %s", fb.next, le.Error()),
		}
		pub.send(ctx, feed.Message{Kind: feed.KindEvent, Step: call.Step, Attempt: attempt, Event: &ev})
		pub.flush(ctx)
		a.log().WarnContext(ctx, "model call failed; falling back", "session", call.Session, "turn", call.Turn, "step", call.Step, "model", le.Model, "fallback", fb.next, "error", le.Error())
		return temporal.NewApplicationErrorWithOptions(ev.Reason, wire.ErrModelFallback,
			temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	if streamed && (call.MaxAttempts == 0 || own < call.MaxAttempts) {
		ev := agent.Event{
			Type:        agent.TypeRetrying,
			Step:        call.Step,
			Attempt:     attempt + 1,
			MaxAttempts: call.MaxAttempts,
			DelayMs:     le.RetryAfter.Milliseconds(),
			Reason:      le.Error(),
		}
		pub.send(ctx, feed.Message{Kind: feed.KindEvent, Step: call.Step, Attempt: attempt, Event: &ev})
		pub.flush(ctx)
	}
	a.log().WarnContext(ctx, "model call failed; Temporal will retry", "session", call.Session, "turn", call.Turn, "step", call.Step, "attempt", attempt, "error", le.Error())
	return temporal.NewApplicationErrorWithOptions(le.Error(), agent.CodeModel, temporal.ApplicationErrorOptions{
		NextRetryDelay: le.RetryAfter,
	})
}

// overBudget sizes the request about to be sent and reports it when it is
// over the compaction threshold (nil when it fits).
func (a *Activities) overBudget(def *workspace.Definition, spec string, branch []transcript.Entry, req llm.Request) *agentloop.ContextReport {
	b := BudgetOf(def, spec)
	tokens := a.requestTokens(branch, req)
	if tokens <= b.Threshold() {
		return nil
	}
	return &agentloop.ContextReport{Tokens: tokens, Threshold: b.Threshold(), Window: b.Window}
}

// requestTokens sizes request req, built from branch: what the provider
// last reported for the branch plus estimates of what came after it.
func (a *Activities) requestTokens(branch []transcript.Entry, req llm.Request) int {
	_, fresh := transcript.ContextOf(branch)
	if a.Hooks.TransformContext != nil {
		// The hook may have reshaped the messages: size them by estimate only.
		fresh = len(req.Messages)
	}
	return models.ContextTokens(req.System, req.Tools, req.Messages, fresh)
}

func storeError(err error) error {
	return temporal.NewApplicationErrorWithOptions("session store: "+err.Error(), agent.CodeStore, temporal.ApplicationErrorOptions{})
}

func (a *Activities) settingsOf(def *workspace.Definition) agentloop.Settings {
	return agentloop.Settings{
		MaxSteps:      def.Config.MaxSteps,
		ModelAttempts: def.Config.Retry.ModelAttempts,
		ModelTimeout:  time.Duration(def.Config.Retry.ModelTimeout),
		Heartbeat:     time.Duration(def.Config.Retry.Heartbeat),
		Limits: agentloop.Limits{
			TurnTokens:          def.Config.Limits.TurnTokens,
			TurnTime:            time.Duration(def.Config.Limits.TurnTime),
			SessionTokensPerDay: def.Config.Limits.SessionTokensPerDay,
		},
		IdempotencyWindow: time.Duration(def.Config.IdempotencyWindow),
		IdleTTL:           time.Duration(def.Config.Sessions.IdleTTL),
		ToolTaskQueue:     def.Config.Activities.Tools.TaskQueue,
		ModelTaskQueue:    def.Config.Activities.Model.TaskQueue,
		Hooks:             hookSettings(def),
		StepRun:           a.stepRun.Load(),
	}
}

// resultOf describes a stored reply to the loop, annotating each tool call
// with what the definition says about its tool.
func resultOf(def *workspace.Definition, id string, msg *transcript.Message, settings agentloop.Settings, marker string) agentloop.ModelResult {
	res := agentloop.ModelResult{
		EntryID:      id,
		StopReason:   msg.StopReason,
		ErrorMessage: msg.ErrorMessage,
		Settings:     settings,
		Marker:       marker,
	}
	if u := msg.Usage; u != nil {
		res.Usage = &agent.Usage{Input: int64(u.Input), Output: int64(u.Output),
			CacheRead: int64(u.CacheRead), CacheWrite: int64(u.CacheWrite), Calls: 1}
	}
	uses := map[string]int{}
	for _, tc := range msg.ToolCalls {
		uses[tc.ID]++
	}
	for _, tc := range msg.ToolCalls {
		c := agentloop.Call{ID: tc.ID, Name: tc.Name, ArgsPreview: preview(tc.Args)}
		if t, ok := def.Tool(tc.Name); ok {
			s := t.Spec()
			c.Known = true
			c.Idempotent = s.Idempotent
			c.Sequential = s.Sequential
			c.RequiresApproval = s.RequiresApproval
			if c.RequiresApproval && def.ApprovalWaived(tc.Name, normArgs(tc.Args)) {
				// tools.<name>.requiresApproval.unless matched: decided
				// here and recorded with the step's result, so a replay
				// never decides again under a changed fastagent.yaml.
				c.RequiresApproval, c.ApprovalWaived = false, true
			}
			c.Timeout = s.Timeout
			c.MaxAttempts = def.MaxAttempts(tc.Name)
			c.BeforeHook = hookOnError(def, agentloop.HookBeforeTool, tc.Name)
			c.AfterHook = hookOnError(def, agentloop.HookAfterTool, tc.Name)
			if def.AskUser(tc.Name) {
				c.Ask, c.Args = true, normArgs(tc.Args)
				c.ApprovalTimeout, _ = def.Config.Approval(tc.Name)
			}
			if def.Delegates(tc.Name) {
				d, refused := def.Config.Delegation.Resolve(normArgs(tc.Args))
				c.Delegate, c.Refused = d, refused
				// A named sub-session's transcript takes one turn at a time.
				c.Sequential = c.Sequential || (d != nil && d.Session != "")
			}
			if c.RequiresApproval {
				c.Args = normArgs(tc.Args)
				c.ArgsHash = ArgsHash(c.Args)
				c.DefinitionHash, _ = def.ToolHash(tc.Name)
				c.ApprovalTimeout, c.Approvers = def.Config.Approval(tc.Name)
			}
		}
		if uses[tc.ID] > 1 {
			c.Refused = fmt.Sprintf("This reply used the tool call ID %q %d times; every call in a reply needs its own ID, "+
				"so none of them was run (an approval could not tell them apart). Re-issue the calls with distinct IDs.", tc.ID, uses[tc.ID])
		}
		res.Calls = append(res.Calls, c)
	}
	return res
}

// normArgs returns the arguments a tool receives for raw ("{}" when empty),
// as RunTool reads them.
func normArgs(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("{}")
	}
	return raw
}

// ArgsHash is the digest an approval binds a call's arguments to.
func ArgsHash(args json.RawMessage) string {
	sum := sha256.Sum256(normArgs(args))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func preview(args json.RawMessage) string {
	s := strings.Join(strings.Fields(string(args)), " ")
	if len(s) > argsPreviewLen {
		s = s[:argsPreviewLen] + "…"
	}
	return s
}

// publisher sends a turn's messages to the live feed. The feed is advisory
// (deltas are not durable), so a failed publish is logged, not fatal.
type publisher struct {
	bus     feed.Bus
	session string
	turn    string
}

func (p publisher) send(ctx context.Context, m feed.Message) {
	if p.bus == nil {
		return
	}
	m.Session, m.Turn = p.session, p.turn
	_ = p.bus.Publish(ctx, m)
}

func (p publisher) flush(ctx context.Context) {
	if p.bus == nil {
		return
	}
	_ = p.bus.Flush(ctx)
}

// applyModelHooks runs BeforeAgentStart (its text joins the system prompt of
// every step of the turn) and TransformContext.
func (a *Activities) applyModelHooks(ctx context.Context, call agentloop.ModelCall, req *llm.Request) error {
	info := hooks.TurnInfo{Session: call.Session, Turn: call.Turn, Step: call.Step}
	if h := a.Hooks.BeforeAgentStart; h != nil {
		extra, err := h(ctx, hooks.TurnInfo{Session: call.Session, Turn: call.Turn, Step: 1})
		if err != nil {
			return fmt.Errorf("before-agent-start: %w", err)
		}
		if extra != "" {
			req.System += "\n" + extra + "\n"
		}
	}
	if h := a.Hooks.TransformContext; h != nil {
		msgs, err := h(ctx, info, req.Messages)
		if err != nil {
			return fmt.Errorf("context transform: %w", err)
		}
		req.Messages = msgs
	}
	return nil
}
