// Package agentloop is the pi agent loop as deterministic code: model call →
// tool batch → steering → repeat until the model stops calling tools. It does
// no I/O itself; a Runtime carries out model and tool steps. The Temporal
// session workflow and the in-process agent run this same loop, so both keep
// the same semantics.
package agentloop

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows/wakes"
)

// DefaultMaxSteps bounds the model calls of one turn when the definition does
// not say otherwise.
const DefaultMaxSteps = 50

// Turn is one unit of work: a prompt from a caller.
type Turn struct {
	ID     string       `json:"id"`
	Prompt agent.Prompt `json:"prompt"`
	// Source says who asked (http, schedule, wake, …); kept on the user entry.
	Source string `json:"source,omitempty"`
	// Entry, when set, is the turn's user entry (built by UserEntry) that the
	// runtime has already stored below the state's leaf: the first model call
	// then starts below it instead of carrying the prompt again.
	Entry *transcript.Entry `json:"entry,omitempty"`
}

// State is what the loop carries from turn to turn.
type State struct {
	// Leaf is the session's current last entry; new entries hang below it.
	Leaf string `json:"leaf"`
	// Activated lists deferred tools switched on by search_tools.
	Activated []string `json:"activated,omitempty"`
	// Settings are the definition's latest runtime settings.
	Settings Settings `json:"settings"`
	// TokenCap, when set, caps every turn's tokens on top of
	// limits.turnTokens: a sub-agent's share of its delegating turn's budget.
	TokenCap int64 `json:"tokenCap,omitempty"`
}

// Settings are runtime bounds read from the agent definition by the model
// step, so that the loop picks up edits on the next step.
type Settings struct {
	MaxSteps int `json:"maxSteps,omitempty"`
	// ModelAttempts bounds attempts of one model call (retryable failures).
	ModelAttempts int `json:"modelAttempts,omitempty"`
	// ModelTimeout bounds one model call attempt.
	ModelTimeout time.Duration `json:"modelTimeout,omitempty"`
	// Heartbeat is how long a silent worker may go before its call is
	// declared lost and retried (model) or reported as unknown (tool).
	Heartbeat time.Duration `json:"heartbeat,omitempty"`
	// Limits are the definition's budgets (fastagent.yaml limits:).
	Limits Limits `json:"limits,omitzero"`
	// IdempotencyWindow is the definition's idempotencyWindow (0: the
	// default): how long the session answers a finished turn's key.
	IdempotencyWindow time.Duration `json:"idempotencyWindow,omitempty"`
	// IdleTTL is the definition's sessions.idleTTL (0: none): how long the
	// session stays idle before it closes itself and deletes its data.
	IdleTTL time.Duration `json:"idleTTL,omitempty"`
	// ToolTaskQueue and ModelTaskQueue are where the session schedules tool
	// calls, and model calls with compactions and rewinds (fastagent.yaml
	// activities.tools.taskQueue, activities.model.taskQueue); "" is the
	// session's own task queue.
	ToolTaskQueue  string `json:"toolTaskQueue,omitempty"`
	ModelTaskQueue string `json:"modelTaskQueue,omitempty"`
	// StepRun says the model workers run Step.Run (a tool step's calls
	// and the next model call as one activity): set by those that do, so
	// a session never schedules it where no worker serves it.
	StepRun bool `json:"stepRun,omitempty"`
	// Hooks names the events the definition has hook files for, comma
	// separated, each with ":deny" when one of its hooks fails closed
	// (HookEntry; "" none): the loop runs a hook step only for those (tool
	// calls say so themselves: Call.BeforeHook, Call.AfterHook).
	Hooks string `json:"hooks,omitempty"`
}

// Limits are budgets the loop and the session enforce; zero means none.
// The loop checks the turn's budgets before each model call after the
// first (where maxSteps is checked too), so a turn stops between steps,
// never inside a model or tool call: it can overrun a budget by at most
// one step, and a tool call is never left without its result.
type Limits struct {
	// TurnTokens bounds the tokens (input + output) of one turn's model calls.
	TurnTokens int64 `json:"turnTokens,omitempty"`
	// TurnTime bounds a turn's wall time, measured from its start.
	TurnTime time.Duration `json:"turnTime,omitempty"`
	// SessionTokensPerDay bounds the tokens of one session per UTC day:
	// once reached, the session refuses further turns until the next day.
	SessionTokensPerDay int64 `json:"sessionTokensPerDay,omitempty"`
}

// Limit config keys, named in limit_exceeded failures.
const (
	KeyTurnTokens          = "limits.turnTokens"
	KeyTurnTime            = "limits.turnTime"
	KeySessionTokensPerDay = "limits.sessionTokensPerDay"
)

// ModelCall asks the runtime for one model step.
type ModelCall struct {
	Session string `json:"session"`
	Turn    string `json:"turn"`
	Step    int    `json:"step"`
	// Leaf is the parent of the first Prepend entry (or of the reply).
	Leaf string `json:"leaf"`
	// Prepend are entries to append before calling the model: steering
	// messages, and the user prompt unless the runtime stored it already
	// (Turn.Entry; the call's Leaf is then that entry).
	Prepend []transcript.Entry `json:"prepend,omitempty"`
	// EntryID is the ID the assistant reply gets.
	EntryID   string   `json:"entryId"`
	Activated []string `json:"activated,omitempty"`
	// MaxAttempts is set by the runtime: how many attempts the call gets.
	MaxAttempts int `json:"maxAttempts,omitempty"`
	// AfterTools says the previous step of the turn ran tools: the step is
	// served by the tool model (dual-model routing), else by the chat model.
	AfterTools bool `json:"afterTools,omitempty"`
	// Fallback indexes the step's model chain (0 = the primary); the
	// runtime raises it when a model hands the step on (ModelFallback).
	Fallback int `json:"fallback,omitempty"`
	// AttemptBase is how many attempts of this step a combined step
	// (Stepper) may already have begun and published: the call's attempts
	// are numbered after them on the live feed.
	AttemptBase int `json:"attemptBase,omitempty"`
	// CheckContext is set by runtimes that can compact: the step measures
	// the context first and, when it is over the compaction threshold,
	// answers ModelResult.Compact instead of calling the model.
	CheckContext bool `json:"checkContext,omitempty"`
	// End, when set, lets the step record the turn: a reply that calls no
	// tools ends the turn (Outcome.Ended), so the step stores that outcome
	// under the turn's key and publishes it, as a separate record would,
	// and says so (ModelResult.Recorded). Steering that arrives meanwhile
	// becomes the next turn (Outcome.Leftover).
	End *TurnEnd `json:"end,omitempty"`
}

// TurnEnd is what a model step needs to record the turn it may end: the
// turn's first entry, its usage before the step and when it began (a
// record of the key older than that is replaced: the key ran again after
// its idempotency window).
type TurnEnd struct {
	First   string       `json:"first,omitempty"`
	Usage   *agent.Usage `json:"usage,omitempty"`
	Started time.Time    `json:"started,omitzero"`
}

// Ended is the outcome of a turn that call's step ended with reply res
// (no tool calls): what the loop returns then, Leftover aside. The step
// records it; the loop computes the same.
func (e TurnEnd) Ended(call ModelCall, res ModelResult) Outcome {
	out := Outcome{Turn: call.Turn, Status: agent.TypeCompleted, Steps: call.Step, First: e.First,
		Leaf: res.EntryID, Marker: res.Marker}
	for _, u := range []*agent.Usage{e.Usage, res.Usage} {
		if u != nil {
			if out.Usage == nil {
				out.Usage = &agent.Usage{}
			}
			out.Usage.Add(*u)
		}
	}
	return out
}

// EndsTurn reports whether res, the reply of a step, ends the turn: it
// calls no tools, did not fail and asks for no compaction.
func (res ModelResult) EndsTurn() bool {
	return len(res.Calls) == 0 && res.Compact == nil && res.EntryID != "" &&
		res.StopReason != transcript.StopError && res.StopReason != transcript.StopAborted
}

// ContextReport sizes a context that is over the compaction threshold.
type ContextReport struct {
	// Leaf is the branch's last entry (the call's pending entries stored).
	Leaf string `json:"leaf"`
	// Tokens is the context's size; Threshold the size that triggers a
	// compaction; Window the model's context window.
	Tokens    int `json:"tokens"`
	Threshold int `json:"threshold"`
	Window    int `json:"window"`
}

// ModelResult is the outcome of a model step: a reference to the stored reply
// and what the loop needs to decide its next move (never the whole text).
type ModelResult struct {
	EntryID      string   `json:"entryId"`
	StopReason   string   `json:"stopReason"`
	ErrorMessage string   `json:"errorMessage,omitempty"`
	Calls        []Call   `json:"calls,omitempty"`
	Settings     Settings `json:"settings"`
	// Marker names the feed marker published after the step's last event.
	Marker string `json:"marker,omitempty"`
	// Usage is what the provider reported for the call (nil: nothing).
	Usage *agent.Usage `json:"usage,omitempty"`
	// Compact, when set (only for a ModelCall with CheckContext), means the
	// model was not called: the context must be compacted first. EntryID is
	// then empty.
	Compact *ContextReport `json:"compact,omitempty"`
	// Recorded says the step ended the turn and recorded its outcome
	// (ModelCall.End): the turn ends here, whatever steering came.
	Recorded bool `json:"recorded,omitempty"`
}

// Call is a tool call annotated with what the definition says about its tool.
type Call struct {
	ID               string `json:"id"`
	Name             string `json:"name"`
	ArgsPreview      string `json:"argsPreview,omitempty"`
	Known            bool   `json:"known"`
	Idempotent       bool   `json:"idempotent,omitempty"`
	Sequential       bool   `json:"sequential,omitempty"`
	RequiresApproval bool   `json:"requiresApproval,omitempty"`
	// ApprovalWaived says the tool requires approval but this call matched
	// its requiresApproval.unless condition, so it runs without a person
	// (decided by the model step, which records it).
	ApprovalWaived bool          `json:"approvalWaived,omitempty"`
	Timeout        time.Duration `json:"timeout,omitempty"`
	MaxAttempts    int           `json:"maxAttempts,omitempty"`
	// Args, ArgsHash and DefinitionHash are set for calls that require
	// approval: the full arguments a human approves, their digest, and the
	// digest of the tool's definition (workspace.Definition.ToolHash) when
	// the model asked. The tool activity refuses to run the call if either
	// no longer matches.
	Args           json.RawMessage `json:"args,omitempty"`
	ArgsHash       string          `json:"argsHash,omitempty"`
	DefinitionHash string          `json:"definitionHash,omitempty"`
	// ApprovalTimeout is how long the call waits for a decision before it
	// is denied (0: the runtime's default); Approvers who may decide
	// (empty: the session's owner and admins).
	ApprovalTimeout time.Duration `json:"approvalTimeout,omitempty"`
	Approvers       []string      `json:"approvers,omitempty"`
	// Ask marks a call of the built-in ask_user tool: the session asks the
	// person the question in Args and the answer is the call's result (no
	// activity runs it); ApprovalTimeout bounds the wait.
	Ask bool `json:"ask,omitempty"`
	// Delegate marks a call of the built-in delegate tool: the session runs
	// the task as a child workflow of the turn and the sub-agent's answer
	// is the call's result (no tool activity runs it).
	Delegate *Delegation `json:"delegate,omitempty"`
	// Refused, when set, is recorded as the call's error result instead of
	// running it (for example a call ID used twice in one reply).
	Refused string `json:"refused,omitempty"`
	// Reused, set by the loop, is the error result recorded instead of
	// running a call whose ID an earlier step of the same turn already
	// used: approvals, results and feed markers are keyed by call ID, so
	// a reused ID could let a decision about one call apply to another.
	Reused string `json:"reused,omitempty"`
	// BeforeHook and AfterHook say the definition has before_tool and
	// after_tool hooks matching the call's tool — what they ask for when
	// the hook step cannot run (deny, allow; "" no hook): the runtime runs
	// them (HookRunner) before and after the call.
	BeforeHook string `json:"beforeHook,omitempty"`
	AfterHook  string `json:"afterHook,omitempty"`
}

// ToolCall asks the runtime to execute (or record) one call of a batch.
type ToolCall struct {
	Session string `json:"session"`
	Turn    string `json:"turn"`
	Step    int    `json:"step"`
	Call    Call   `json:"call"`
	// AssistantEntryID holds the call's arguments.
	AssistantEntryID string `json:"assistantEntryId"`
	ResultEntryID    string `json:"resultEntryId"`
	ParentID         string `json:"parentId"`
	// Synthetic, when set, is recorded as the result without running the tool.
	Synthetic *agent.ToolResult `json:"synthetic,omitempty"`
	// Answer, when set, records a sub-agent's stored answer as the result
	// (read from the session store by reference, so the text never enters
	// workflow history); Synthetic is recorded if it cannot be read.
	Answer *AnswerRef `json:"answer,omitempty"`
	// PendingWakes and NextWakeID tell the wake/unwake tools about the
	// session's self-scheduled wake-ups (set by the runtime just before the call).
	PendingWakes []string `json:"pendingWakes,omitempty"`
	NextWakeID   string   `json:"nextWakeId,omitempty"`
	// Args, when set, are the arguments a before_tool hook gave the call in
	// place of the model's (the tool runs with these).
	Args json.RawMessage `json:"args,omitempty"`
	// Edit, when set, says an approver changed the call's arguments (Args
	// are the edited ones): the result tells the model what changed.
	Edit *ApprovalEdit `json:"edit,omitempty"`
	// StepModel, set on the records of an aborted Step.Run's calls, is the
	// entry ID of that step's model call: the outcome says whether the
	// activity had begun it (ToolOutcome.ModelBegun).
	StepModel string `json:"stepModel,omitempty"`
}

// ApprovalEdit is an approval with edits: who approved and the arguments
// the call had before.
type ApprovalEdit struct {
	By   string          `json:"by,omitempty"`
	From json.RawMessage `json:"from"`
}

// ToolOutcome is what the loop learns from one executed call.
type ToolOutcome struct {
	IsError   bool     `json:"isError"`
	Activated []string `json:"activated,omitempty"`
	Marker    string   `json:"marker,omitempty"`
	// Wake and Unwake are self-scheduling directives from wake/unwake.
	Wake   *wakes.Wake `json:"wake,omitempty"`
	Unwake string      `json:"unwake,omitempty"`
	// Recorded says the result was already stored (an earlier attempt ran
	// the tool): this attempt ran nothing. Metrics count a call once.
	Recorded bool `json:"recorded,omitempty"`
	// Usage is what a delegated call's sub-agents spent: it counts toward
	// the turn's usage and its token budget.
	Usage *agent.Usage `json:"usage,omitempty"`
	// Note is text a hook gave the model about the call (an after_tool
	// hook's context or objection): the next model step reads it.
	Note string `json:"note,omitempty"`
	// Stop is the reason a hook gave to end the turn after this batch.
	Stop string `json:"stop,omitempty"`
	// ModelBegun answers ToolCall.StepModel: a Step.Run attempt reached
	// that model call (it may have streamed, and been charged, before the
	// stop).
	ModelBegun bool `json:"modelBegun,omitempty"`
}

// Outcome ends a turn.
type Outcome struct {
	Turn      string          `json:"turn"`
	Status    string          `json:"status"` // agent.TypeCompleted or agent.TypeFailed
	Details   string          `json:"details,omitempty"`
	Retryable bool            `json:"retryable,omitempty"`
	Code      string          `json:"code,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
	Steps     int             `json:"steps"`
	// First is the ID of the turn's user entry and Leaf the turn's last
	// stored entry: the stored answer is the assistant text between them.
	First string `json:"first,omitempty"`
	Leaf  string `json:"leaf,omitempty"`
	// Marker names the last feed marker the turn's events lead up to; a relay
	// forwards the feed up to it before emitting the terminal.
	Marker string `json:"marker,omitempty"`
	// Leftover are steering messages that arrived too late for this turn
	// (after its last step); the session runs them as a follow-up turn.
	Leftover []string `json:"leftover,omitempty"`
	// Usage sums the tokens of the turn's model calls.
	Usage *agent.Usage `json:"usage,omitempty"`
}

// Event returns the terminal event for the outcome.
func (o Outcome) Event() agent.Event {
	if o.Status == agent.TypeCompleted {
		ev := agent.Completed(o.Data)
		ev.Usage = o.Usage
		return ev
	}
	return agent.Failed(o.Details, o.Retryable, o.Code)
}

// Runtime carries out the loop's steps.
type Runtime interface {
	// Model runs one model step; an *agent.Failure (or any error) ends the
	// turn with its details, code and retryability.
	Model(call ModelCall) (ModelResult, error)
	// Tools runs a batch and returns outcomes in the batch's order. All calls
	// must have a stored result when it returns, even on error.
	Tools(calls []ToolCall, sequential bool) ([]ToolOutcome, error)
	// Steering drains messages sent while the turn runs.
	Steering() []string
	// NewID returns a fresh entry ID, unique within the session.
	NewID() string
	// Now is the current time (workflow time in a workflow).
	Now() time.Time
}

// Run executes one turn and returns its outcome; st is updated in place.
func Run(rt Runtime, session string, st *State, t Turn) (out Outcome) {
	// st.Leaf moves only once a step succeeded, so a turn whose first
	// call fails leaves it unchanged.
	r := &run{rt: rt, session: session, st: st, turn: t, leaf: st.Leaf, used: map[string]bool{}, started: rt.Now()}
	r.out = Outcome{Turn: t.ID}
	if t.Entry != nil {
		r.out.First, r.leaf = t.Entry.ID, t.Entry.ID
	} else {
		r.pending = []transcript.Entry{UserEntry(rt, t)}
		r.out.First = r.pending[0].ID
	}
	defer func() { out.Leaf = st.Leaf }()
	r.maxSteps = st.Settings.MaxSteps
	if r.maxSteps <= 0 {
		r.maxSteps = DefaultMaxSteps
	}
	if r.beforeAgentStart() {
		return r.out
	}
	for step := 1; ; step++ {
		if done := r.step(step); done {
			return r.out
		}
	}
}

// run is one turn in progress.
type run struct {
	rt      Runtime
	session string
	st      *State
	turn    Turn
	out     Outcome
	// leaf is where the next model call hangs; pending are the entries to
	// store before it.
	leaf     string
	pending  []transcript.Entry
	maxSteps int
	// started is when the turn began (Limits.TurnTime).
	started time.Time
	// afterTools says the previous step ran tools.
	afterTools bool
	// used holds the tool call IDs of the turn's earlier steps (lookups
	// only: never ranged over, so the loop stays deterministic).
	used map[string]bool
	// ready is the next step's model result, brought by a combined step
	// (Stepper): that step takes it in instead of calling the model.
	ready *ready
}

// step runs one model call and the tool batch it asks for; it returns true
// once the turn has ended (r.out is then its outcome).
func (r *run) step(step int) bool {
	if r.maxSteps <= 0 {
		r.maxSteps = DefaultMaxSteps
	}
	if step > r.maxSteps {
		r.out.Leftover = texts(r.pending)
		return r.fail(&agent.Failure{
			Details: fmt.Sprintf("the turn stopped after %d model calls (maxSteps); raise maxSteps in fastagent.yaml or ask for less per turn", r.maxSteps),
			Code:    agent.CodeMaxSteps,
		})
	}
	if step > 1 && r.ready == nil {
		if f := r.overBudget(); f != nil {
			r.out.Leftover = texts(r.pending)
			return r.fail(f)
		}
	}
	r.out.Steps = step
	res, err := r.model(step)
	if err != nil {
		return r.fail(err)
	}
	switch res.StopReason {
	case transcript.StopError, transcript.StopAborted:
		return r.fail(&agent.Failure{Details: "model error: " + res.ErrorMessage, Retryable: true})
	}
	if len(res.Calls) == 0 {
		steer := r.rt.Steering()
		if len(steer) > 0 && step < r.maxSteps && !res.Recorded {
			r.pending = steeringEntries(r.rt, steer)
			r.afterTools = false
			return false
		}
		if len(steer) == 0 && r.turnEnd(step, res.EntryID) {
			return false
		}
		r.out.Status = agent.TypeCompleted
		r.out.Leftover = steer
		return true
	}
	batch, sequential := toolBatch(r.rt, r.session, r.turn.ID, step, res, r.used)
	if handled, done := r.combine(step, batch, sequential); handled {
		return done
	}
	notes, stop, err := r.tools(res, batch, sequential)
	if err != nil {
		return r.fail(err)
	}
	if stop != "" {
		// A hook ended the turn: it is complete, the calls recorded.
		r.out.Status = agent.TypeCompleted
		r.out.Leftover = r.rt.Steering()
		return true
	}
	r.afterTools = true
	r.pending = append(notes, steeringEntries(r.rt, r.rt.Steering())...)
	return false
}

// model runs the step's model call and takes in its result: usage, the new
// leaf, the feed marker and the definition's latest settings.
func (r *run) model(step int) (ModelResult, error) {
	var res ModelResult
	var err error
	if rd := r.ready; rd != nil {
		// A combined step ran this call with the batch before it.
		r.ready = nil
		if rd.res != nil {
			res = *rd.res
		}
		err = rd.err
	} else {
		chain(r.pending, r.leaf)
		// A step may end and record the turn itself, unless turn_end hooks
		// must hear of its end first (they may give the model more to do).
		res, err = r.rt.Model(ModelCall{
			Session:    r.session,
			Turn:       r.turn.ID,
			Step:       step,
			Leaf:       r.leaf,
			Prepend:    r.pending,
			EntryID:    r.rt.NewID(),
			Activated:  r.st.Activated,
			AfterTools: r.afterTools,
			End:        r.turnEndCall(),
		})
	}
	if err != nil {
		return res, err
	}
	r.addUsage(res.Usage)
	r.st.Leaf, r.leaf = res.EntryID, res.EntryID
	r.out.Marker = res.Marker
	if res.Settings != (Settings{}) {
		r.st.Settings = res.Settings
		r.maxSteps = res.Settings.MaxSteps
	}
	return res, nil
}

// tools runs the tool batch of a model step (made by toolBatch); notes are what hooks said
// about its calls, stop a hook's reason to end the turn.
func (r *run) tools(res ModelResult, batch []ToolCall, sequential bool) (notes []transcript.Entry, stop string, err error) {
	parent := res.EntryID
	if len(batch) > 0 {
		parent = batch[len(batch)-1].ResultEntryID
	}
	outcomes, err := r.rt.Tools(batch, sequential)
	r.st.Leaf, r.leaf = parent, parent
	for _, o := range outcomes {
		r.st.Activated = addNames(r.st.Activated, o.Activated)
		if o.Marker != "" {
			r.out.Marker = o.Marker
		}
		r.addUsage(o.Usage)
	}
	notes, stop = toolNotes(r.rt, outcomes)
	return notes, stop, err
}

// addUsage counts u (nil: nothing) toward the turn's usage.
func (r *run) addUsage(u *agent.Usage) {
	if u == nil {
		return
	}
	if r.out.Usage == nil {
		r.out.Usage = &agent.Usage{}
	}
	r.out.Usage.Add(*u)
}

// TurnTokens is the token budget of the state's turns: limits.turnTokens,
// lowered to TokenCap when that is set (0: none).
func (st *State) TurnTokens() int64 {
	lim := st.Settings.Limits.TurnTokens
	if st.TokenCap > 0 && (lim <= 0 || st.TokenCap < lim) {
		return st.TokenCap
	}
	return lim
}

// overBudget returns the failure of a turn past one of its budgets, or nil.
func (r *run) overBudget() *agent.Failure {
	lim := r.st.Settings.Limits
	if budget := r.st.TurnTokens(); budget > 0 && r.out.Usage != nil && r.out.Usage.Tokens() >= budget {
		what := fmt.Sprintf("the turn used %d tokens, reaching its budget of %d", r.out.Usage.Tokens(), budget)
		if budget != lim.TurnTokens {
			what += " (its share of the delegating turn's budget)"
		}
		return LimitFailure(what, KeyTurnTokens)
	}
	if took := r.rt.Now().Sub(r.started); lim.TurnTime > 0 && took >= lim.TurnTime {
		return LimitFailure(fmt.Sprintf("the turn ran for %s, reaching its budget of %s", took.Round(time.Second), lim.TurnTime), KeyTurnTime)
	}
	return nil
}

// LimitFailure is the limit_exceeded failure of a budget: what happened and
// the fastagent.yaml key that sets the budget.
func LimitFailure(what, key string) *agent.Failure {
	return &agent.Failure{
		Details: fmt.Sprintf("limit exceeded: %s (%s in fastagent.yaml); raise it or ask for less", what, key),
		Code:    agent.CodeLimitExceeded,
	}
}

// fail ends the turn with err; it always returns true.
func (r *run) fail(err error) bool {
	r.out = fail(r.out, err)
	return true
}

// toolBatch makes the step's tool calls, each result hung below the one
// before it: a call cut by the length limit or naming an unknown tool gets
// a synthetic error result, a call ID the turn used before is marked. The
// IDs are recorded in used; sequential says a call asked to run alone.
func toolBatch(rt Runtime, session, turn string, step int, res ModelResult, used map[string]bool) (batch []ToolCall, sequential bool) {
	batch = make([]ToolCall, len(res.Calls))
	parent := res.EntryID
	for i, c := range res.Calls {
		tc := ToolCall{
			Session:          session,
			Turn:             turn,
			Step:             step,
			Call:             c,
			AssistantEntryID: res.EntryID,
			ResultEntryID:    rt.NewID(),
			ParentID:         parent,
		}
		switch {
		case res.StopReason == transcript.StopLength:
			tc.Synthetic = &agent.ToolResult{IsError: true, Content: "The reply hit the output length limit before this tool call was complete; re-issue the tool call."}
		case !c.Known:
			tc.Synthetic = &agent.ToolResult{IsError: true, Content: fmt.Sprintf("Tool %s not found", c.Name)}
		}
		if used[c.ID] {
			tc.Call.Reused = reusedMessage(c.ID)
		}
		sequential = sequential || c.Sequential
		parent = tc.ResultEntryID
		batch[i] = tc
	}
	for _, c := range res.Calls {
		used[c.ID] = true
	}
	return batch, sequential
}

// reusedMessage is the error result of a call whose ID an earlier step of
// the turn used.
func reusedMessage(id string) string {
	return fmt.Sprintf("The tool call ID %q was already used in this turn, so this call was not run; "+
		"re-issue it with a new ID (every tool call of a turn needs its own ID).", id)
}

func fail(out Outcome, err error) Outcome {
	out.Status = agent.TypeFailed
	var f *agent.Failure
	if errors.As(err, &f) {
		out.Details, out.Retryable, out.Code = f.Details, f.Retryable, f.Code
		return out
	}
	out.Details, out.Retryable = err.Error(), true
	return out
}

// chain links entries one below the other, the first below leaf.
func chain(entries []transcript.Entry, leaf string) {
	for i := range entries {
		entries[i].ParentID = leaf
		leaf = entries[i].ID
	}
}

// UserEntry builds the user entry of a turn with a fresh ID (no parent yet).
func UserEntry(rt Runtime, t Turn) transcript.Entry {
	return userEntry(rt, t.Prompt.Text, t.Prompt.Images, t.Source)
}

func userEntry(rt Runtime, text string, images []agent.Image, source string) transcript.Entry {
	msg := &transcript.Message{Role: transcript.RoleUser, Text: text, Source: source}
	for _, im := range images {
		msg.Images = append(msg.Images, transcript.Image{MimeType: im.MimeType, Data: im.Data})
	}
	return transcript.Entry{ID: rt.NewID(), Type: transcript.TypeMessage, Time: rt.Now(), Message: msg}
}

func steeringEntries(rt Runtime, texts []string) []transcript.Entry {
	var out []transcript.Entry
	for _, s := range texts {
		out = append(out, userEntry(rt, s, nil, "steer"))
	}
	return out
}

func texts(entries []transcript.Entry) []string {
	var out []string
	for _, e := range entries {
		if e.Message != nil && e.Message.Source == "steer" {
			out = append(out, e.Message.Text)
		}
	}
	return out
}

func addNames(have, add []string) []string {
	for _, n := range add {
		found := false
		for _, h := range have {
			if h == n {
				found = true
				break
			}
		}
		if !found {
			have = append(have, n)
		}
	}
	return have
}
