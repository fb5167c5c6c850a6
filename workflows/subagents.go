package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/wire"
)

// A sub-agent's calls that wait for a person (an approval, an ask_user
// question) are decided on the session that delegated to it, where the
// person is: its stream, its channel, its HTTP routes and the CLI.
//
//   - The sub-agent (a Delegate workflow) tells its delegating workflow of
//     each wait and of its end (SignalSubAgentWait, in order).
//   - The delegating workflow keeps the wait beside its own, under the ID
//     "<delegate call>.<call>": its state view lists it (with the
//     sub-agent), its turn's feed announces it (approval_requested or
//     question_asked with Agent set), and a sub-agent of a sub-agent passes
//     it up the same way, each level prefixing its delegate call; a
//     sub-agent's question that comes while another question waits there
//     is held, and asked once the questions before it are answered.
//   - A decision or answer for that ID is checked by the delegating
//     workflow with its own rules (the session's owner, the approvers, the
//     channel's asker of the delegating turn, the hashes the decider saw)
//     and handed to the sub-agent (SignalSubAgentDecision), which applies
//     it to the call if it still waits, or says why not. The update that
//     carried it completes once the sub-agent's wait ended with it; a
//     decision that fails after the wait it was for ended (the sub-agent's
//     deadline or another decision won the race, or the sub-agent ended
//     meanwhile) leaves the wait ended.

// subAgentWait is the argument of SignalSubAgentWait: a sub-agent's word
// to its delegating workflow about a wait for a person.
type subAgentWait struct {
	// Child is the sub-agent's workflow ID.
	Child string `json:"child"`
	// Event is an approval_requested, approval_resolved, question_asked
	// or question_answered event of the sub-agent, its ID the call as the
	// sub-agent names it.
	Event *agent.Event `json:"event,omitempty"`
	// Refused says a subAgentDecision could not be applied.
	Refused *decisionRefusal `json:"refused,omitempty"`
}

// decisionRefusal is why a sub-agent did not apply a decision: the
// decision's ID and the error's code and message.
type decisionRefusal struct {
	Decision string `json:"decision"`
	Code     string `json:"code"`
	Message  string `json:"message"`
}

// subAgentDecision is the argument of SignalSubAgentDecision: a decision
// (Approve) or an answer (Answer) on one of the sub-agent's waiting calls,
// made and checked on its delegating session. ID names it in a refusal.
type subAgentDecision struct {
	ID      string          `json:"id"`
	Approve *ApproveRequest `json:"approve,omitempty"`
	Answer  *AnswerRequest  `json:"answer,omitempty"`
}

// subAgent is a running delegation of the running turn: the delegate call
// that started it and where its waits are announced.
type subAgent struct {
	// call started it, agent is its name, session and childTurn its
	// session in the store and its turn there.
	call, agent, session, childTurn string
	// turn and step are the delegating turn and its step.
	turn string
	step int
}

// subWait is a sub-agent's waiting call kept by its delegating session.
type subWait struct {
	// child is the sub-agent's workflow ID, call the call's ID there.
	child, call string
	// decision is the ID of the decision handed to the sub-agent and not
	// yet settled; refusal is the sub-agent's word that it was not applied.
	decision string
	refusal  error
	// settled says the sub-agent's wait ended; gone that the sub-agent did.
	settled, gone bool
	// held says a question is not asked here yet: another waits for its
	// answer (questions are asked one at a time), or its question_asked
	// is being published (announcing).
	held, announcing bool
}

// subCallID is the ID a sub-agent's call is decided by on the delegating
// session: the delegate call, a dot, and the call as the sub-agent names it.
func subCallID(delegateCall, call string) string { return delegateCall + "." + call }

// ambiguousWait refuses a decision or an answer naming call when more than
// one wait has that ID (a call of the turn's own whose ID the model made
// look like a sub-agent's "<delegate call>.<call>"): deciding one could
// decide what the person did not see, so neither is decided by ID; they
// wait for their deadline.
func (s *session) ambiguousWait(call string) error {
	n := 0
	for _, a := range s.approvals {
		if a.view.Call == call && !a.decided {
			n++
		}
	}
	for _, q := range s.questions {
		if q.view.Call == call && !q.answered {
			n++
		}
	}
	if n < 2 {
		return nil
	}
	return temporal.NewApplicationErrorWithOptions(fmt.Sprintf("%d calls wait under the ID %q (the turn's own and a sub-agent's): "+
		"none is decided by it; they are denied at their deadline", n, call), agent.CodeInvalidCommand, temporal.ApplicationErrorOptions{NonRetryable: true})
}

// isWaitEvent reports whether ev is a wait for a person or its end.
func isWaitEvent(ev agent.Event) bool {
	switch ev.Type {
	case agent.TypeApprovalRequested, agent.TypeApprovalResolved, agent.TypeQuestionAsked, agent.TypeQuestionAnswered:
		return true
	}
	return false
}

// addSubAgent records a delegation of the running turn before its child
// starts, so that the child's waits are recognised. The run's first one
// starts the listener of those waits: a session that never delegates keeps
// no coroutine (a goroutine with its own stack) for them.
func (s *session) addSubAgent(child string, sa *subAgent) {
	if s.subAgents == nil {
		s.subAgents = map[string]*subAgent{}
	}
	if !s.subListening {
		s.subListening = true
		s.listenSubAgents(s.root)
	}
	s.subAgents[child] = sa
}

// subAgentEnded forgets a delegation whose child closed: its calls that
// still wait here wait no more (a decision on its way is told so).
func (s *session) subAgentEnded(child string) {
	delete(s.subAgents, child)
	for _, a := range s.approvals {
		if a.sub != nil && a.sub.child == child {
			a.sub.gone, a.decided = true, true
		}
	}
	for _, q := range s.questions {
		if q.sub != nil && q.sub.child == child {
			q.sub.gone, q.answered, q.sub.held, q.closed = true, true, false, true
		}
	}
}

// stopSubAgents tells every worker that the running sub-agents' turns must
// stop now (an abort): their model calls and tools stop at once, even
// before each sub-agent's workflow takes its cancellation (or when its
// workers are gone). Best effort, like stopActivities.
func (s *session) stopSubAgents(ctx workflow.Context) {
	for _, child := range workflow.DeterministicKeys(s.subAgents) {
		sa := s.subAgents[child]
		lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
			StartToCloseTimeout: 10 * time.Second,
			RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
			Summary:             "stop · sub-agent " + sa.agent + " · call " + sa.call,
		})
		in := wire.TurnStopInput{Session: sa.session, Turn: sa.childTurn}
		if err := workflow.ExecuteLocalActivity(lctx, ActivityFeedStop, in).Get(lctx, nil); err != nil {
			workflow.GetLogger(ctx).Warn("stop notice of a sub-agent not published; it stops when it takes its cancellation", "child", child, "error", err)
		}
	}
}

// listenSubAgents receives the waits of the running turn's sub-agents for
// the rest of the run (from its first delegation: a child signals only
// after it started).
func (s *session) listenSubAgents(ctx workflow.Context) {
	ch := workflow.GetSignalChannel(ctx, wire.SignalSubAgentWait)
	workflow.Go(ctx, func(gctx workflow.Context) {
		for {
			var w subAgentWait
			if !ch.Receive(gctx, &w) {
				return
			}
			s.onSubAgentWait(gctx, w)
		}
	})
}

// onSubAgentWait keeps, settles or reopens a sub-agent's wait.
func (s *session) onSubAgentWait(ctx workflow.Context, w subAgentWait) {
	sa := s.subAgents[w.Child]
	if sa == nil {
		workflow.GetLogger(ctx).Warn("a wait of a sub-agent this turn is not running ignored", "child", w.Child)
		return
	}
	if w.Refused != nil {
		s.onSubAgentRefusal(ctx, w.Child, w.Refused)
		return
	}
	if w.Event == nil {
		return
	}
	ev := *w.Event
	ev.ID = subCallID(sa.call, w.Event.ID)
	if ev.Agent == "" {
		ev.Agent = sa.agent
	}
	switch ev.Type {
	case agent.TypeApprovalRequested:
		if s.subApproval(w.Child, w.Event.ID) != nil {
			return
		}
		s.approvals = append(s.approvals, &approval{
			view: PendingApproval{Turn: sa.turn, Call: ev.ID, Tool: ev.Name, Args: ev.Args, ArgsHash: ev.ArgsHash,
				DefinitionHash: ev.DefinitionHash, Approvers: ev.Approvers, Deadline: ev.Deadline, Agent: ev.Agent, SubSession: sa.session},
			sub: &subWait{child: w.Child, call: w.Event.ID},
		})
		s.setStatus(ctx, StatusWaiting)
	case agent.TypeApprovalResolved:
		a := s.subApproval(w.Child, w.Event.ID)
		if a == nil || a.sub.settled {
			return
		}
		a.decided, a.approved, a.by, a.reason, a.timedOut = true, ev.Approved, ev.By, ev.Reason, ev.TimedOut
		a.sub.settled = true
	case agent.TypeQuestionAsked:
		if s.subQuestion(w.Child, w.Event.ID) != nil {
			return
		}
		q := &question{
			view: PendingQuestion{Turn: sa.turn, Call: ev.ID, Question: ev.Question, Deadline: ev.Deadline, Agent: ev.Agent, SubSession: sa.session},
			sub:  &subWait{child: w.Child, call: w.Event.ID},
		}
		s.questions = append(s.questions, q)
		hold := !s.asksNext(q)
		s.setStatus(ctx, StatusAsking)
		if hold {
			s.holdQuestion(ctx, sa, q, ev)
			return
		}
	case agent.TypeQuestionAnswered:
		q := s.subQuestion(w.Child, w.Event.ID)
		if q == nil || q.sub.settled {
			return
		}
		q.answered, q.by = true, ev.By
		q.sub.settled = true
		if q.sub.held && !q.sub.announcing {
			// Never asked here: nothing to announce.
			q.sub.held, q.closed = false, true
			if !s.waitingApproval() {
				s.setStatus(ctx, StatusIdle)
			}
			return
		}
		// Its end is published below: a question held behind it waits
		// for that.
		defer func() { q.closed = true }()
	default:
		return
	}
	s.announceWait(ctx, sa, ev)
	if (ev.Type == agent.TypeApprovalResolved || ev.Type == agent.TypeQuestionAnswered) && !s.waitingApproval() {
		s.setStatus(ctx, StatusIdle)
	}
}

// onSubAgentRefusal hands the sub-agent child's refusal r of a decision to
// the update or answer waiting for it; the wait it was for waits again,
// unless it ended meanwhile.
func (s *session) onSubAgentRefusal(ctx workflow.Context, child string, r *decisionRefusal) {
	err := temporal.NewApplicationErrorWithOptions(r.Message, r.Code, temporal.ApplicationErrorOptions{NonRetryable: true})
	for _, a := range s.approvals {
		if a.sub != nil && a.sub.child == child && a.sub.decision == r.Decision {
			a.sub.decision, a.sub.refusal = "", err
			if !endedForGood(a.sub) {
				a.decided = false
			}
		}
	}
	for _, q := range s.questions {
		if q.sub != nil && q.sub.child == child && q.sub.decision == r.Decision {
			q.sub.decision, q.sub.refusal = "", err
			if !endedForGood(q.sub) {
				q.answered = false
			}
		}
	}
}

// endedForGood reports whether w's wait ended in its sub-agent (or the
// sub-agent did), so a refusal that follows cannot reopen it.
func endedForGood(w *subWait) bool {
	return w.settled || w.gone
}

// holdQuestion asks a sub-agent's question q (its event ev) once every
// question before it is answered and its end published, unless it ended
// before.
func (s *session) holdQuestion(ctx workflow.Context, sa *subAgent, q *question, ev agent.Event) {
	q.sub.held = true
	workflow.Go(ctx, func(gctx workflow.Context) {
		_ = workflow.Await(gctx, func() bool { return !q.sub.held || s.asksNext(q) })
		if !q.sub.held {
			return
		}
		// Asked once published: a message that comes meanwhile was not
		// written to it.
		q.sub.announcing = true
		s.announceWait(gctx, sa, ev)
		q.sub.held, q.sub.announcing = false, false
	})
}

// asksNext reports whether q is the next question to ask: every one
// before it answered, its end published.
func (s *session) asksNext(q *question) bool {
	for _, x := range s.questions {
		if x == q {
			return true
		}
		if !x.answered || !x.closed {
			return false
		}
	}
	return false
}

// nextQuestion is the question asked here that waits for its answer (the
// first; questions are asked one at a time), or nil.
func (s *session) nextQuestion() *question {
	for _, q := range s.questions {
		if !q.answered {
			return q
		}
	}
	return nil
}

// subApproval is the approval of a sub-agent (its workflow ID child) for
// its call, not one of an earlier run of the same workflow ID: a named
// sub-session's later task may reuse its earlier task's call ID (a model's
// call IDs need not be unique across turns), and its wait is its own.
func (s *session) subApproval(child, call string) *approval {
	for _, a := range s.approvals {
		if a.sub != nil && a.sub.child == child && a.sub.call == call && !a.sub.gone {
			return a
		}
	}
	return nil
}

func (s *session) subQuestion(child, call string) *question {
	for _, q := range s.questions {
		if q.sub != nil && q.sub.child == child && q.sub.call == call && !q.sub.gone {
			return q
		}
	}
	return nil
}

// announceWait puts a sub-agent's wait event (its ID already this
// session's) on the feed of the turn that delegated, and passes it up
// when this session is itself a sub-agent.
func (s *session) announceWait(ctx workflow.Context, sa *subAgent, ev agent.Event) {
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
		Summary:             ev.Type + " · " + sa.agent + " · " + ev.ID,
	})
	in := wire.PublishInput{Session: s.in.Session, Turn: sa.turn, Step: sa.step, Event: ev}
	if err := workflow.ExecuteLocalActivity(lctx, ActivityFeedPublish, in).Get(lctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("publishing a sub-agent's wait failed", "call", ev.ID, "event", ev.Type, "error", err)
	}
	s.tellParent(ctx, subAgentWait{Event: &ev})
}

// tellParent sends w to the workflow that delegated to this one, when this
// is a sub-agent (nothing otherwise). Sent in order: each waits for the
// server.
func (s *session) tellParent(ctx workflow.Context, w subAgentWait) {
	if s.depth == 0 {
		return
	}
	info := workflow.GetInfo(ctx)
	parent := info.ParentWorkflowExecution
	if parent == nil {
		return
	}
	w.Child = info.WorkflowExecution.ID
	// Disconnected: the end of a wait is told after the turn was aborted too.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	if err := workflow.SignalExternalWorkflow(dctx, parent.ID, "", wire.SignalSubAgentWait, w).Get(dctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("the delegating session was not told of a wait", "parent", parent.ID, "error", err)
	}
}

// forwardApproval hands a decision on a sub-agent's call, checked here,
// to the sub-agent, and returns once its wait ended: nil when it ended
// with this decision, else why not (it ended otherwise, the sub-agent
// refused the decision or is gone).
func (s *session) forwardApproval(ctx workflow.Context, a *approval, req ApproveRequest, id string) error {
	fwd := req
	fwd.Call = a.sub.call
	a.decided = true
	if err := s.forward(ctx, a.sub, subAgentDecision{ID: id, Approve: &fwd}); err != nil {
		if !endedForGood(a.sub) {
			a.decided = false
		}
		return err
	}
	if err := s.settledBySubAgent(ctx, a.view.Call, a.sub); err != nil {
		return err
	}
	if a.timedOut || a.approved != req.Approve || a.by != req.By {
		return temporal.NewApplicationErrorWithOptions(fmt.Sprintf("tool call %q was not decided by you: %s", a.view.Call, decidedText(a)),
			agent.CodeNotFound, temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	return nil
}

func decidedText(a *approval) string {
	switch {
	case a.timedOut:
		return "it was denied at its deadline first"
	case a.approved:
		return "it was approved by " + orText(a.by, "someone else") + " first"
	}
	return "it was denied by " + orText(a.by, "someone else") + " first"
}

// forwardAnswer hands an answer to a sub-agent's question to the
// sub-agent and returns once its wait ended.
func (s *session) forwardAnswer(ctx workflow.Context, q *question, req AnswerRequest, id string) error {
	fwd := req
	fwd.Call = q.sub.call
	q.answered = true
	if err := s.forward(ctx, q.sub, subAgentDecision{ID: id, Answer: &fwd}); err != nil {
		if !endedForGood(q.sub) {
			q.answered = false
		}
		return err
	}
	if err := s.settledBySubAgent(ctx, q.view.Call, q.sub); err != nil {
		return err
	}
	if q.by != req.By {
		return temporal.NewApplicationErrorWithOptions(fmt.Sprintf("question %q was not answered by you: it was answered first or timed out", q.view.Call),
			agent.CodeNotFound, temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	return nil
}

// forward signals a decision to the sub-agent of w.
func (s *session) forward(ctx workflow.Context, w *subWait, d subAgentDecision) error {
	w.decision, w.refusal = d.ID, nil
	if err := workflow.SignalExternalWorkflow(ctx, w.child, "", wire.SignalSubAgentDecision, d).Get(ctx, nil); err != nil {
		w.decision = ""
		return temporal.NewApplicationErrorWithOptions("the sub-agent whose call this is could not be reached: "+err.Error(),
			agent.CodeNotFound, temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	return nil
}

// settledBySubAgent waits until the sub-agent's wait of call ended, the
// sub-agent refused the decision or it is gone.
func (s *session) settledBySubAgent(ctx workflow.Context, call string, w *subWait) error {
	if err := workflow.Await(ctx, func() bool { return w.settled || w.refusal != nil || w.gone }); err != nil {
		return err
	}
	switch {
	case w.settled:
		return nil
	case w.refusal != nil:
		return w.refusal
	}
	return temporal.NewApplicationErrorWithOptions(fmt.Sprintf("%q no longer waits: its sub-agent ended first", call),
		agent.CodeNotFound, temporal.ApplicationErrorOptions{NonRetryable: true})
}

// takeAnswer makes text (from by) the answer to q: set at once for the
// session's own question, handed to the sub-agent for one of its (in the
// background: a channel message does not wait for it; if the sub-agent
// refuses, the question waits again).
func (s *session) takeAnswer(ctx workflow.Context, q *question, text, by, id string) {
	if q.sub == nil {
		q.answered, q.text, q.by = true, text, by
		return
	}
	q.answered = true
	workflow.Go(ctx, func(gctx workflow.Context) {
		if err := s.forwardAnswer(gctx, q, AnswerRequest{Call: q.view.Call, Text: text, By: by}, id); err != nil {
			workflow.GetLogger(gctx).Warn("an answer to a sub-agent's question was not applied", "call", q.view.Call, "error", err)
		}
	})
}

// listenDecisions receives, in a sub-agent, the decisions and answers its
// delegating session made on its waiting calls.
func (s *session) listenDecisions(ctx workflow.Context) workflow.ReceiveChannel {
	ch := workflow.GetSignalChannel(ctx, wire.SignalSubAgentDecision)
	workflow.Go(ctx, func(gctx workflow.Context) {
		for {
			var d subAgentDecision
			if !ch.Receive(gctx, &d) {
				return
			}
			s.deciding++
			workflow.Go(gctx, func(dctx workflow.Context) {
				defer func() { s.deciding-- }()
				s.onSubAgentDecision(dctx, d)
			})
		}
	})
	return ch
}

// onSubAgentDecision applies a decision made on the delegating session to
// the call it names (handing it further down for a call of this
// sub-agent's own sub-agent), or tells the delegating session why not.
func (s *session) onSubAgentDecision(ctx workflow.Context, d subAgentDecision) {
	var err error
	switch {
	case d.Approve != nil:
		err = s.applyDecision(ctx, *d.Approve, d.ID)
	case d.Answer != nil:
		err = s.applyAnswer(ctx, *d.Answer, d.ID)
	default:
		return
	}
	if err != nil {
		s.refuseDecision(ctx, d.ID, err)
	}
}

// refuseDecision tells the delegating session why decision id was not
// applied.
func (s *session) refuseDecision(ctx workflow.Context, id string, err error) {
	r := &decisionRefusal{Decision: id, Code: agent.CodeNotFound, Message: err.Error()}
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		r.Code, r.Message = orStr(app.Type(), agent.CodeNotFound), app.Message()
	}
	s.tellParent(ctx, subAgentWait{Refused: r})
}

// applyDecision decides the waiting call req names. Who may decide was
// checked where the decision was made; the hashes are checked again.
func (s *session) applyDecision(ctx workflow.Context, req ApproveRequest, id string) error {
	for _, a := range s.approvals {
		if a.view.Call != req.Call || a.decided {
			continue
		}
		if (req.ArgsHash != "" && req.ArgsHash != a.view.ArgsHash) || (req.DefinitionHash != "" && req.DefinitionHash != a.view.DefinitionHash) {
			return temporal.NewApplicationErrorWithOptions(fmt.Sprintf("tool call %q changed: it waits with other arguments or another tool definition "+
				"than the ones sent (argsHash %s, definitionHash %s); it was not decided", req.Call, a.view.ArgsHash, a.view.DefinitionHash),
				agent.CodeCallChanged, temporal.ApplicationErrorOptions{NonRetryable: true})
		}
		if err := checkEdit(req, a); err != nil {
			return err
		}
		if a.sub != nil {
			return s.forwardApproval(ctx, a, req, id)
		}
		a.decided, a.approved, a.reason, a.by = true, req.Approve, req.Reason, req.By
		a.edited = editedArgs(req)
		return nil
	}
	return temporal.NewApplicationErrorWithOptions(fmt.Sprintf("no tool call %q is waiting for approval", req.Call),
		agent.CodeNotFound, temporal.ApplicationErrorOptions{NonRetryable: true})
}

// applyAnswer answers the waiting question req names.
func (s *session) applyAnswer(ctx workflow.Context, req AnswerRequest, id string) error {
	for _, q := range s.questions {
		if q.view.Call != req.Call || q.answered {
			continue
		}
		if q.sub != nil {
			return s.forwardAnswer(ctx, q, req, id)
		}
		q.answered, q.text, q.by = true, req.Text, req.By
		return nil
	}
	return temporal.NewApplicationErrorWithOptions(fmt.Sprintf("no question %q waits for an answer", req.Call),
		agent.CodeNotFound, temporal.ApplicationErrorOptions{NonRetryable: true})
}
