package agentloop

import (
	"time"

	"github.com/fastagent/fastagent/agent"
)

// StepCall asks the runtime to run a tool batch and then the turn's next
// model call in one go (Stepper.Step): nothing between them needs the
// loop's decisions.
type StepCall struct {
	// Tools is the batch, in the model's order; Sequential says its calls
	// run one at a time.
	Tools      []ToolCall `json:"tools"`
	Sequential bool       `json:"sequential,omitempty"`
	// Model is the next model call. Its Leaf is the batch's last result;
	// the deferred tools the batch activates (search_tools) are added to
	// its Activated before it runs.
	Model ModelCall `json:"model"`
	// Deadline, when set, is when the turn's time budget
	// (limits.turnTime) runs out: past it the model is not called, and
	// the loop ends the turn as it would before any model call.
	Deadline time.Time `json:"deadline,omitzero"`
}

// StepResult is what a combined step did: every call's outcome, in the
// batch's order, and the model call's result — nil when the model was not
// called (the deadline passed, or the context must be compacted first:
// the loop then calls the model itself).
type StepResult struct {
	Tools []ToolOutcome `json:"tools"`
	Model *ModelResult  `json:"model,omitempty"`
	// ModelAttempts is how many attempts of the model call may have begun
	// (and published their start on the live feed): a model call the
	// workflow makes for the same step numbers its attempts after them.
	ModelAttempts int `json:"modelAttempts,omitempty"`
}

// StepOutcome is what Stepper.Step gives the loop: the calls' outcomes
// (all recorded, even on error: ToolsErr ends the turn, as an error from
// Runtime.Tools does) and the model call's result or error (both nil: the
// model was not called, and the loop calls it).
type StepOutcome struct {
	Tools    []ToolOutcome
	ToolsErr error
	Model    *ModelResult
	ModelErr error
	// ModelBegun, with ToolsErr, says the step's model call may have
	// begun (every call's result was stored before the step was stopped):
	// it counts among the turn's steps (Outcome.Steps), as a model call
	// the abort stopped does, so that what it used is found and charged.
	ModelBegun bool
}

// Stepper is a Runtime that can run a tool batch and the next model call
// as one step (one activity in a workflow), when nothing between them
// needs the workflow: no approval, question, delegation or tool hook, no
// separate place for the calls. The loop offers it only batches of plain
// calls (PlainCall), with the next step within maxSteps and the turn
// within its budgets.
type Stepper interface {
	// CanStep reports whether the runtime can run this batch and the next
	// model call as one step now; when not, the loop runs Tools, then
	// Model, as for any batch.
	CanStep(calls []ToolCall, sequential bool) bool
	// Step runs them.
	Step(call StepCall) StepOutcome
}

// PlainCall reports whether c runs as it is, with no decision between the
// model's reply and its result: a known tool, not refused or reused, no
// approval, not ask_user nor a delegation, no before_tool or after_tool
// hook, nothing recorded in its place.
func PlainCall(c ToolCall) bool {
	k := c.Call
	return c.Synthetic == nil && c.Answer == nil && len(c.Args) == 0 && c.Edit == nil &&
		k.Known && k.Refused == "" && k.Reused == "" && !k.RequiresApproval && !k.Ask && k.Delegate == nil &&
		k.BeforeHook == "" && k.AfterHook == ""
}

// ready is a model call's result a combined step brought: the next step
// takes it in instead of calling the model.
type ready struct {
	res *ModelResult
	err error
}

// combine runs step's batch and the next model call as one step when the
// runtime can; handled says it did (the turn may then have ended: done).
func (r *run) combine(step int, batch []ToolCall, sequential bool) (handled, done bool) {
	sr, ok := r.rt.(Stepper)
	limit := r.maxSteps
	if limit <= 0 {
		limit = DefaultMaxSteps
	}
	if !ok || len(batch) == 0 || step+1 > limit || r.overBudget() != nil {
		return false, false
	}
	for _, c := range batch {
		if !PlainCall(c) {
			return false, false
		}
	}
	if !sr.CanStep(batch, sequential) {
		return false, false
	}
	parent := batch[len(batch)-1].ResultEntryID
	next := ModelCall{
		Session:    r.session,
		Turn:       r.turn.ID,
		Step:       step + 1,
		Leaf:       parent,
		EntryID:    r.rt.NewID(),
		Activated:  r.st.Activated,
		AfterTools: true,
		End:        r.turnEndCall(),
	}
	call := StepCall{Tools: batch, Sequential: sequential, Model: next}
	if lim := r.st.Settings.Limits.TurnTime; lim > 0 {
		call.Deadline = r.started.Add(lim)
	}
	out := sr.Step(call)
	r.st.Leaf, r.leaf = parent, parent
	for _, o := range out.Tools {
		r.st.Activated = addNames(r.st.Activated, o.Activated)
		if o.Marker != "" {
			r.out.Marker = o.Marker
		}
		r.addUsage(o.Usage)
	}
	notes, stop := toolNotes(r.rt, out.Tools)
	if out.ToolsErr != nil {
		if out.ModelBegun {
			r.out.Steps = step + 1
		}
		return true, r.fail(out.ToolsErr)
	}
	if stop != "" {
		r.out.Status = agent.TypeCompleted
		r.out.Leftover = r.rt.Steering()
		return true, true
	}
	r.afterTools = true
	if out.Model == nil && out.ModelErr == nil {
		// The model was not called: the next step calls it, as after any
		// batch (its budgets checked first).
		r.pending = append(notes, steeringEntries(r.rt, r.rt.Steering())...)
		return true, false
	}
	r.pending = notes
	r.ready = &ready{res: out.Model, err: out.ModelErr}
	return true, false
}

// turnEndCall is what a model call needs to record the turn it may end
// (nil when turn_end hooks must hear of its end first: they may give the
// model more to do).
func (r *run) turnEndCall() *TurnEnd {
	if _, ok := r.runsHook(HookTurnEnd); ok {
		return nil
	}
	end := &TurnEnd{First: r.out.First}
	if r.out.Usage != nil {
		u := *r.out.Usage
		end.Usage = &u
	}
	return end
}
