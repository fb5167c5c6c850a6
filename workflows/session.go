package workflows

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows/agentloop"
	"github.com/fastagent/fastagent/workflows/wakes"
)

// SessionInput starts (or continues) a session workflow. A caller starting
// a session sets Session (its ID without the "session:" of the workflow
// ID), and ParentSession, BranchHints or FromEntry to fork another one; the
// rest is for fastagent itself and its tests.
type SessionInput struct {
	Session string `json:"session"`
	// ParentSession seeds a new session from another one's transcript.
	ParentSession string   `json:"parentSession,omitempty"`
	BranchHints   []string `json:"branchHints,omitempty"`
	// FromEntry forks the parent at this entry (instead of its leaf or a
	// branch hint).
	FromEntry string `json:"fromEntry,omitempty"`
	// TurnsPerRun overrides how many turns one run serves before it
	// continues as new (default 200; tests use small values).
	TurnsPerRun int `json:"turnsPerRun,omitempty"`
	// IdempotencyWindow is how long a finished turn's key is answered from
	// the session store rather than run again (default 24 h).
	IdempotencyWindow time.Duration `json:"idempotencyWindow,omitempty"`
	// RecentBytes overrides how many bytes of keys the session keeps within
	// the idempotency window before it refuses new ones (tests use small
	// values; default 512 KiB).
	RecentBytes int `json:"recentBytes,omitempty"`
	// Snapshot is the state a run hands to the next when it continues as
	// new. The workflow fills it; callers leave it out (its shape is the
	// workflow's own and changes with it).
	Snapshot *snapshot `json:"snapshot,omitempty"`
}

// defaultApprovalTimeout bounds an approval wait whose call names none.
const defaultApprovalTimeout = time.Hour

// InternalKeyPrefix starts the IDs of the turns a session queues itself
// (late-steering follow-ups, wake-ups); a caller's key may not start with it.
const InternalKeyPrefix = "@"

// defaultIdempotencyWindow is SessionInput.IdempotencyWindow's default.
const defaultIdempotencyWindow = 24 * time.Hour

// snapshot is the whole durable state of a session workflow. It stays small:
// the transcript lives in the session store.
type snapshot struct {
	Opened bool            `json:"opened"`
	Loop   agentloop.State `json:"loop"`
	// NextID numbers entries; IDPrefix makes IDs unique per workflow chain.
	NextID   int64  `json:"nextId"`
	IDPrefix string `json:"idPrefix"`
	// Recent keeps the keys of the turns within the idempotency window,
	// oldest first (with the outcomes of the last ones), so a redelivered
	// key is answered, not run, even after continue-as-new.
	Recent []recentTurn `json:"recent,omitempty"`
	// Queue holds the delivered turns still waiting, in order, carried
	// across continue-as-new.
	Queue []queuedTurn `json:"queue,omitempty"`
	// FailedReplies are the last channel replies that failed after their
	// retries (the answer is in the session; see SessionView).
	FailedReplies []failedReplyEntry `json:"failedReplies,omitempty"`
	// Refusals are deliveries refused while the previous run rolled over,
	// whose record and busy reply the next run does.
	Refusals []carriedRefusal `json:"refusals,omitempty"`
	Turns    int64            `json:"turns"`
	// Wakes are pending self-scheduled wake-ups; WakeSeq numbers them and
	// WakeLog records the last ones that fired.
	Wakes   []wakes.Wake `json:"wakes,omitempty"`
	WakeSeq int          `json:"wakeSeq,omitempty"`
	WakeLog []WakeRecord `json:"wakeLog,omitempty"`
	// Usage sums the tokens of every turn's model calls (compactions'
	// summaries excluded), carried across continue-as-new.
	Usage agent.Usage `json:"usage"`
	// Today sums them for the current UTC day (limits.sessionTokensPerDay).
	Today DayUsage `json:"today,omitzero"`
	// IdleSince is when the session last finished a turn, while the
	// definition sets sessions.idleTTL (see idle.go).
	IdleSince time.Time `json:"idleSince,omitzero"`
	// DrainOnDemand says the run drains SignalDeliver from its main loop's
	// waits (changeDrainDeliveries); carried, so later runs need no
	// version marker for it.
	DrainOnDemand bool `json:"drainOnDemand,omitempty"`
	// StepRun says the chain may run a tool step's calls and the next
	// model call as one Step.Run activity (changeStepRun); carried, so
	// later runs need no version marker for it.
	StepRun bool `json:"stepRun,omitempty"`
}

// recentTurn is one remembered key: when it was answered and, for the
// last recentOutcomes keys, its outcome (older keys are answered from the
// session store's record).
type recentTurn struct {
	Key     string            `json:"key"`
	Outcome agentloop.Outcome `json:"outcome,omitzero"`
	At      time.Time         `json:"at,omitzero"`
}

// queuedTurn is a delivered turn waiting in the session's queue: the
// delivery, when it was queued and the key its reply's reference is kept
// under.
type queuedTurn struct {
	Delivery Delivery  `json:"delivery"`
	At       time.Time `json:"at"`
	Ref      string    `json:"ref,omitempty"`
}

// FailedReply is a channel reply that failed after its retries: its turn,
// channel kind, whether it was a busy notice, the last error and when.
type FailedReply struct {
	Turn  string    `json:"turn"`
	Kind  string    `json:"kind"`
	Busy  bool      `json:"busy,omitempty"`
	Error string    `json:"error"`
	At    time.Time `json:"at"`
}

// failedReplyEntry is a FailedReply as the session keeps it, with the
// reply, kept for UpdateResend (not shown in the view).
type failedReplyEntry struct {
	FailedReply
	Input *wire.ReplyInput `json:"input,omitempty"`
}

// carriedRefusal is a refused delivery (its key and the refusal) whose
// record and busy reply (nil: none) are left to the next run.
type carriedRefusal struct {
	Key     string            `json:"key"`
	Outcome agentloop.Outcome `json:"outcome"`
	Reply   *wire.ReplyInput  `json:"reply,omitempty"`
}

// ResendRequest is the argument of UpdateResend: the turn whose failed
// reply to send again.
type ResendRequest struct {
	Turn string `json:"turn"`
}

// recentOutcomes is how many of the newest Recent keys keep their outcome
// (older keys are answered from the session store's record).
const recentOutcomes = 64

// recentBytes bounds the bytes of the keys Recent keeps within the
// idempotency window: past it new keys are refused,
// never older ones forgotten. With MaxQueuedBytes it keeps the snapshot
// under about 1.3 MB.
const recentBytes = 512 << 10

// maxFailedReplies bounds snapshot.FailedReplies (the oldest go first).
const maxFailedReplies = 20

// turnsPerRun bounds the turns of one run before continue-as-new, far below
// Temporal's 2,000 updates per run, so replays stay short.
const turnsPerRun = 200

// TurnRequest is the argument of UpdateTurn.
type TurnRequest struct {
	Prompt agent.Prompt `json:"prompt"`
	Source string       `json:"source,omitempty"`
	// WhileBusy is what the turn does when it finds the session busy:
	// WhileBusyQueue ("", the default), WhileBusyInterrupt or
	// WhileBusyReject (WhileBusySteer is refused: send UpdateSteer).
	WhileBusy string `json:"whileBusy,omitempty"`
}

// AbortRequest is the argument of UpdateAbort. An empty Turn means "the
// running turn".
type AbortRequest struct {
	Turn   string `json:"turn,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Queued aborts Turn only while it waits in the queue: a running or
	// finished turn is left as it is (the update is rejected with
	// CodeNoActiveRun).
	Queued bool `json:"queued,omitempty"`
}

// AbortResult says which turn was stopped.
type AbortResult struct {
	Turn string `json:"turn"`
	// Reply is the key the stopped turn's reply reference is kept under
	// ("": the turn's own key), so a reply mounted for it can be settled.
	Reply string `json:"reply,omitempty"`
}

// SteerRequest is the argument of UpdateSteer.
type SteerRequest struct {
	Text string `json:"text"`
	// Turn, when set, steers only that turn: the update is rejected with
	// agent.CodeNoActiveRun unless it is the one running.
	Turn string `json:"turn,omitempty"`
}

// SessionView is the result of QueryState.
type SessionView struct {
	Session   string             `json:"session"`
	Leaf      string             `json:"leaf"`
	Running   string             `json:"running,omitempty"`
	Queued    []string           `json:"queued,omitempty"`
	Turns     int64              `json:"turns"`
	Activated []string           `json:"activated,omitempty"`
	Approvals []PendingApproval  `json:"approvals,omitempty"`
	Questions []PendingQuestion  `json:"questions,omitempty"`
	Settings  agentloop.Settings `json:"settings"`
	Wakes     []wakes.Wake       `json:"wakes,omitempty"`
	WakeLog   []WakeRecord       `json:"wakeLog,omitempty"`
	// Usage sums the session's model tokens, turn by turn.
	Usage agent.Usage `json:"usage"`
	// Today sums them for the current UTC day, which
	// limits.sessionTokensPerDay bounds.
	Today DayUsage `json:"today,omitzero"`
	// FailedReplies are the last channel replies (answers, busy notices,
	// webhook callbacks) that failed after their retries; each turn's
	// outcome stays readable by re-attaching to it.
	FailedReplies []FailedReply `json:"failedReplies,omitempty"`
	// Steering counts the messages folded into the running turn that it
	// has not read yet (UpdateSteer, WhileBusySteer).
	Steering int `json:"steering,omitempty"`
}

// PendingApproval is a tool call waiting for a human: the full arguments
// it will run with and the digest of the tool definition it will run; the
// tool activity refuses the call if either differs at execution.
type PendingApproval struct {
	Turn string `json:"turn"`
	Call string `json:"call"`
	Tool string `json:"tool"`
	// Args are the call's full arguments (a JSON object). Calls recorded
	// before approvals were bound carry only a preview, as a JSON string.
	Args           json.RawMessage `json:"args,omitempty"`
	ArgsHash       string          `json:"argsHash,omitempty"`
	DefinitionHash string          `json:"definitionHash,omitempty"`
	// Approvers may decide (empty: the session's owner and admins);
	// Deadline is when the call is denied if no one has.
	Approvers []string  `json:"approvers,omitempty"`
	Deadline  time.Time `json:"deadline,omitzero"`
	// Agent and SubSession name the sub-agent whose call this is, when it
	// is not the session's own (Call is then "<delegate call>.<call>").
	Agent      string `json:"agent,omitempty"`
	SubSession string `json:"subSession,omitempty"`
}

// ApproveRequest answers a pending approval. ArgsHash and DefinitionHash,
// when set, must equal the pending call's (so a decision made on what a
// client displayed cannot apply to anything else).
type ApproveRequest struct {
	Call           string `json:"call"`
	Approve        bool   `json:"approve"`
	Reason         string `json:"reason,omitempty"`
	ArgsHash       string `json:"argsHash,omitempty"`
	DefinitionHash string `json:"definitionHash,omitempty"`
	// By names who decides, as the door authenticated them (a token's
	// principal, a channel user); when the call lists approvers, By must
	// be one of them.
	By string `json:"by,omitempty"`
	// Listed says the door let the decision through only because By may
	// be one of the call's approvers (By does not own the session): the
	// workflow refuses it unless the call lists By.
	Listed bool `json:"listed,omitempty"`
	// Door is the channel kind whose platform carried the decision (a
	// Slack button, …); "" for the HTTP API. By is then "<kind>:<user>",
	// and a call without approvers may be decided only by the person whose
	// message started the turn.
	Door string `json:"door,omitempty"`
	// Vetted says the door applied its platform's own rule of who may
	// decide (GitHub: the comment author's association), which then
	// replaces the asker-only rule for calls without approvers.
	Vetted bool `json:"vetted,omitempty"`
	// Role is an approvers entry naming a group of people on the door's
	// platform ("slack:admins": the Slack workspace's admins and owners)
	// that the door checked By belongs to: a call listing the role may be
	// decided by By. Only a role of the door's own kind counts.
	Role string `json:"role,omitempty"`
	// Args, with Approve, are the arguments the call runs with in place of
	// the model's (approve with edits): a JSON object the tool's schema
	// must accept. The decision then binds these arguments, the tool runs
	// them once, and the model is told what changed.
	Args json.RawMessage `json:"args,omitempty"`
}

// maxEditedArgsBytes bounds the arguments an approver may send.
const maxEditedArgsBytes = 256 << 10

// checkEdit refuses edited arguments that cannot apply: given with a
// denial, not one JSON object, too large, or for a call recorded before
// approvals carried full arguments.
func checkEdit(req ApproveRequest, a *approval) error {
	if len(req.Args) == 0 {
		return nil
	}
	bad := func(msg string) error {
		return temporal.NewApplicationErrorWithOptions(fmt.Sprintf("tool call %q: %s; it was not decided and still waits", req.Call, msg),
			agent.CodeInvalidCommand, temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	if !req.Approve {
		return bad("edited arguments go with an approval, not a denial")
	}
	if len(req.Args) > maxEditedArgsBytes {
		return bad(fmt.Sprintf("the edited arguments are %d bytes, more than %d", len(req.Args), maxEditedArgsBytes))
	}
	if !isJSONObject(req.Args) {
		return bad("the edited arguments must be one JSON object (the tool's arguments)")
	}
	if a.view.ArgsHash == "" {
		return bad("this call was put up for approval without its full arguments, so it cannot be edited")
	}
	if a.noEdit != "" {
		return bad("its arguments cannot be edited: " + a.noEdit)
	}
	return nil
}

// isJSONObject reports whether b is one JSON object.
func isJSONObject(b json.RawMessage) bool {
	var m map[string]json.RawMessage
	// Deterministic: decoding bytes the update carried (workflowcheck
	// flags the decoder's type cache, not the result).
	return json.Unmarshal(b, &m) == nil && m != nil //workflowcheck:ignore
}

// approverListed reports whether req's decider is one of approvers: by
// name, or through a role of the door's platform the door checked.
func approverListed(approvers []string, req ApproveRequest) bool {
	if slices.Contains(approvers, req.By) {
		return true
	}
	return req.Role != "" && req.Door != "" && strings.HasPrefix(req.Role, req.Door+":") && slices.Contains(approvers, req.Role)
}

// PendingQuestion is a question the agent asked (ask_user) that waits for
// the person's answer until Deadline.
type PendingQuestion struct {
	Turn     string    `json:"turn"`
	Call     string    `json:"call"`
	Question string    `json:"question"`
	Deadline time.Time `json:"deadline,omitzero"`
	// Agent and SubSession name the sub-agent that asked, when it is not
	// the session itself (Call is then "<delegate call>.<call>").
	Agent      string `json:"agent,omitempty"`
	SubSession string `json:"subSession,omitempty"`
}

// AnswerRequest answers a pending question; Text becomes the ask_user
// call's result. By names who answered, as the door authenticated them.
type AnswerRequest struct {
	Call string `json:"call"`
	Text string `json:"text"`
	By   string `json:"by,omitempty"`
}

// maxAnswerBytes bounds an answer: it is recorded in workflow history.
const maxAnswerBytes = 16 << 10

type pendingTurn struct {
	id      string
	req     TurnRequest
	outcome *agentloop.Outcome
	// wake is the ID of the wake-up that queued this turn, if any.
	wake string
	// recorded is set when the outcome came from the session store's record.
	recorded bool
	// reply is where a channel turn's answer goes (nil: nowhere).
	reply *wire.ReplyTarget
	// notify is the chat workflow to tell how the turn ended.
	notify string
	// live is the running Channel.Stream of a channel turn; stopLive
	// cancels it.
	live     workflow.Future
	stopLive workflow.CancelFunc
	// compact, when set, makes this queue item a manual compaction.
	compact *compactJob
	// rewind, when set, makes this queue item a rewind.
	rewind *rewindJob
	// span is the tracing span of the update that sent the turn (nil:
	// none), under which the turn's activities are traced.
	span any
	// delivery is set for a turn that can be carried across
	// continue-as-new (a delivered turn, a follow-up): nobody waits on a
	// handler for it. at is when it was queued, ref the key its reply's
	// reference is kept under, size its bytes encoded (see weigh).
	delivery *Delivery
	at       time.Time
	ref      string
	size     int
}

type question struct {
	view     PendingQuestion
	answered bool
	text     string
	by       string
	// sub is set for a sub-agent's question (see subagents.go).
	sub *subWait
	// closed says its end (question_answered) was published, or needs
	// none: the next question (its own or a sub-agent's held behind it)
	// is asked only after that, one at a time on the stream too.
	closed bool
}

type approval struct {
	view     PendingApproval
	decided  bool
	approved bool
	reason   string
	by       string
	timedOut bool
	// edited are the arguments the approver gave the call (nil: none);
	// noEdit, when set, is why the call's arguments cannot be edited.
	edited json.RawMessage
	noEdit string
	// sub is set for a sub-agent's call (see subagents.go).
	sub *subWait
}

// session is the runtime state of one workflow run; snap is its durable part.
type session struct {
	in           SessionInput
	snap         snapshot
	queue        []*pendingTurn
	running      *pendingTurn
	cancelTurn   workflow.CancelFunc
	abortReason  string
	steering     []string
	approvals    []*approval
	questions    []*question
	turnsThisRun int
	// settled is the outcome of a turn whose answer is out and whose
	// channel reply still settles, before the turn is counted: the state
	// query counts it already (a query reads it, no command depends on it).
	settled *agentloop.Outcome
	// rollover is set once continue-as-new is due: new turns are refused
	// (session_busy) until the queue drains.
	rollover bool
	// ending says the running turn's model step that may end and record
	// it (agentloop.ModelCall.End) is in flight: its answer may already be
	// out, the workflow not yet knowing.
	ending bool
	// closing says the running turn's turn_end hooks run: its last reply
	// is in (see lateToSteer).
	closing bool
	// stepping says a Step.Run activity whose model call may end the
	// running turn is in flight: for a turn arriving while the run rolls
	// over, the turn may be over (as with ending), but a steering message
	// is still taken (the step's tools may be running).
	stepping bool
	// stepRun is the Step.Run in flight (nil: none).
	stepRun *stepFlight
	// moved latches that the Worker Deployment's current version is no
	// longer this run's (see targetMoved).
	moved bool
	// root is the workflow's own context; wake timers hang off it.
	root       workflow.Context
	wakeCancel map[string]workflow.CancelFunc
	// nonce is the running turn's ID part (turnNonce).
	nonce string
	// deliveries is the SignalDeliver channel; replies counts busy replies
	// still running, records refusals still being recorded (continue-as-new
	// waits for all to settle).
	deliveries workflow.ReceiveChannel
	replies    int
	records    int
	// draining says a drainDeliveries coroutine runs.
	draining bool
	// refusalBytes weighs snapshot.Refusals, encoded.
	refusalBytes int
	// answeredAt is when this run first took a turn update; windowDue is
	// set shortly before that leaves the idempotency window: the run then
	// continues as new (see endRunWithinWindow).
	answeredAt  time.Time
	windowDue   bool
	windowTimer workflow.Future
	// resending are the turns whose failed reply UpdateResend is sending.
	resending map[string]bool
	// status is the session's AttrStatus as last set; searchable says the
	// run was started with the search attributes and keeps it up to date.
	status     string
	searchable bool
	// depth is how deep a sub-agent's session is (0: not a sub-agent).
	depth int
	// subAgents are the running turn's delegations by child workflow ID;
	// deciding counts the decisions a sub-agent is applying.
	subAgents map[string]*subAgent
	deciding  int
	// steerReply is where the follow-up of steering that came too late
	// for its turn is answered: the reply target of the last delivery
	// folded into the running turn (WhileBusySteer); nil: nowhere.
	steerReply *ReplyTarget
	// subListening says the sub-agent waits' listener runs (addSubAgent).
	subListening bool
	// queueReporting turns noteDepth on; queueReported and queueLive are
	// what it last reported, and whether live.
	queueReporting bool
	queueReported  int
	queueLive      bool
	// runStart is when this run began; idleTimer is the armed idle timer
	// (sessions.idleTTL) and expiring says Session.Expire runs.
	runStart  time.Time
	idleTimer workflow.Future
	expiring  bool
}

// SessionWorkflow is the long-lived workflow of one session (ID
// "session:<id>"). It accepts turns through UpdateTurn and runs them one at a
// time, in arrival order, each as the pi agent loop over activities.
func SessionWorkflow(ctx workflow.Context, in SessionInput) error {
	s := &session{in: in, root: ctx, runStart: workflow.Now(ctx)}
	if in.Snapshot != nil {
		s.snap = *in.Snapshot
	}
	if err := s.start(ctx); err != nil {
		return err
	}
	if s.snap.IDPrefix == "" {
		// Once per chain: a reset replays it and a session started
		// again after a terminate derives a new one.
		s.snap.IDPrefix = chainPrefix(ctx)
	}
	if !s.snap.Opened {
		if err := s.open(ctx); err != nil {
			return err
		}
	}
	s.armWakes(ctx)
	for {
		// A new current deployment version ends an idle run at once: the
		// session's next turn then runs on the new version's workers.
		s.armWindow()
		s.armIdle(ctx)
		if err := workflow.Await(ctx, func() bool {
			s.noteDepth(ctx)
			return len(s.queue) > 0 || s.targetMoved(ctx) || s.windowReached() || s.idleReached() || s.deliveryWaiting()
		}); err != nil {
			return err
		}
		if s.deliveryWaiting() {
			s.drainDeliveries()
			continue
		}
		if done, err := s.step(ctx); done {
			return err
		}

		if s.runDone(ctx) {
			// Admit no new turns until the queue drains, so that a busy
			// session still reaches continue-as-new.
			s.rollover = true
		}
		if s.rollover && (len(s.queue) == 0 || s.carriesAll()) {
			// Only between turns, with every handler finished: the turn's own
			// update handler still has to return its outcome. Delivered
			// turns still waiting go along in the snapshot, their live
			// replies stopped first (none may write after the next run's).
			s.stopCarriedLive(ctx)
			if err := s.awaitRollover(ctx); err != nil {
				return err
			}
			if len(s.queue) == 0 || s.carriesAll() {
				s.carryQueue()
				s.fitSnapshot(ctx)
				drainUpgrade(ctx)
				return workflow.NewContinueAsNewErrorWithOptions(ctx, upgradeOnContinue, SessionWorkflowType, SessionInput{
					Session:           in.Session,
					TurnsPerRun:       in.TurnsPerRun,
					IdempotencyWindow: in.IdempotencyWindow,
					RecentBytes:       in.RecentBytes,
					Snapshot:          &s.snap,
				})
			}
		}
	}
}

// awaitRollover waits until the run can continue as new — every handler
// finished, no delivery waiting or being handled, no busy reply or refusal
// record running — or a turn came that cannot be carried. In a run that
// drains deliveries on demand it drains those that come meanwhile.
func (s *session) awaitRollover(ctx workflow.Context) error {
	return s.awaitQuiet(ctx, func() bool { return len(s.queue) > 0 && !s.carriesAll() })
}

// step runs the next queued turn or, with nothing to run and the idle
// timer fired, the session's expiry (idle.go); done says the run ends
// with err.
func (s *session) step(ctx workflow.Context) (done bool, err error) {
	// Once the run is rolling over, turns that can be carried wait for
	// the next run.
	if len(s.queue) > 0 && (!s.rollover || !s.carriesAll()) {
		t := s.queue[0]
		s.queue = s.queue[1:]
		s.noteDepth(ctx)
		s.runApart(ctx, t)
		s.noteActive(ctx)
		if len(s.queue) == 0 {
			s.setStatus(ctx, StatusIdle)
		}
		return false, nil
	}
	if s.idleReached() && !s.rollover {
		return s.expireIdle(ctx)
	}
	return false, nil
}

// start restores what the previous run carried, then registers the
// handlers and listeners. The order matters: registering an update handler
// runs, at once, the updates that reached the run with its first workflow
// task (the SDK's priority update handling) — a run just continued as new,
// or started by Update-with-Start, gets its next turn there — and that
// turn must queue behind the turns the previous run carried.
func (s *session) start(ctx workflow.Context) error {
	s.restoreQueue(ctx)
	if err := s.register(ctx); err != nil {
		return err
	}
	s.listenDeliveries(ctx)
	s.reportQueueDepth(ctx)
	s.initStatus(ctx)
	return nil
}

// runDone reports whether the run should continue as new once its queue
// allows: Temporal suggests it, it served its turns, its deployment
// target moved, or a turn update it took nears the end of the idempotency
// window.
func (s *session) runDone(ctx workflow.Context) bool {
	return workflow.GetInfo(ctx).GetContinueAsNewSuggested() || s.turnsThisRun >= s.limit() || s.targetMoved(ctx) || s.windowReached()
}

// serve runs one queued turn and settles it: recorded, remembered, followed
// up, replied to. limit is the run's turns-per-run bound.
func (s *session) serve(ctx workflow.Context, t *pendingTurn, limit int) {
	started := workflow.Now(ctx)
	s.prepareChannelTurn(ctx, t)
	out, refused := s.refuseOverDay(ctx, t)
	// Every turn is recorded, wake-ups included, so any turn can be
	// attached to and a redelivered key is answered for a day: by the
	// model step that ended it (the usual case: no action of its own),
	// else here, over anything its steps recorded.
	record, override := true, false
	if !refused {
		var stepRecorded bool
		out, stepRecorded = s.runTurn(ctx, t, started)
		// A step may have recorded it only if one ran.
		record, override = !t.recorded && !stepRecorded, !t.recorded && out.Steps > 0
	}
	if record && (s.rollover || workflow.GetInfo(ctx).GetContinueAsNewSuggested() || s.turnsThisRun+1 >= limit || s.targetMoved(ctx)) {
		// The run ends after this turn: record first, so that the
		// outcome and continue-as-new share one workflow task and no
		// turn is refused as busy in between.
		s.recordTurn(ctx, t.id, out, started, override)
		record = false
	}
	t.outcome = &out
	if t.wake != "" {
		s.logWake(t, out, started)
	} else {
		s.remember(ctx, t.id, out)
	}
	if record {
		// The update handler returns the outcome in this same
		// workflow task; the record follows, and the next turn
		// (or continue-as-new) waits for it.
		s.recordTurn(ctx, t.id, out, started, override)
	}
	// The answer is out while its channel reply settles: the state shows
	// the turn counted already (settled), so a /status sent right after the
	// answer does not say Turns: 0.
	s.settled = &out
	s.followUp(t, out)
	s.replyTurn(ctx, t, out)
	s.settled = nil
	s.turnsThisRun++
	s.snap.Turns++
	if out.Usage != nil {
		s.snap.Usage.Add(*out.Usage)
		s.addDayUsage(ctx, *out.Usage)
	}
}

func (s *session) register(ctx workflow.Context) error {
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateTurn, s.onTurn, workflow.UpdateHandlerOptions{
		Validator: s.validateTurn,
	}); err != nil {
		return fmt.Errorf("register %s: %w", UpdateTurn, err)
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateAbort, s.onAbort, workflow.UpdateHandlerOptions{
		Validator: s.validateAbort,
	}); err != nil {
		return fmt.Errorf("register %s: %w", UpdateAbort, err)
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateSteer, s.onSteer, workflow.UpdateHandlerOptions{
		Validator: s.validateSteer,
	}); err != nil {
		return fmt.Errorf("register %s: %w", UpdateSteer, err)
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateAnswer, s.onAnswer, workflow.UpdateHandlerOptions{
		Validator: s.validateAnswer,
	}); err != nil {
		return fmt.Errorf("register %s: %w", UpdateAnswer, err)
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateApprove, s.onApprove, workflow.UpdateHandlerOptions{
		Validator: s.validateApprove,
	}); err != nil {
		return fmt.Errorf("register %s: %w", UpdateApprove, err)
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateCompact, s.onCompact, workflow.UpdateHandlerOptions{
		Validator: s.validateCompact,
	}); err != nil {
		return fmt.Errorf("register %s: %w", UpdateCompact, err)
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateRewind, s.onRewind, workflow.UpdateHandlerOptions{
		Validator: s.validateRewind,
	}); err != nil {
		return fmt.Errorf("register %s: %w", UpdateRewind, err)
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateResend, s.onResend, workflow.UpdateHandlerOptions{
		Validator: s.validateResend,
	}); err != nil {
		return fmt.Errorf("register %s: %w", UpdateResend, err)
	}
	if err := workflow.SetQueryHandler(ctx, QueryState, s.view); err != nil {
		return fmt.Errorf("register %s: %w", QueryState, err)
	}
	return nil
}

func (s *session) open(ctx workflow.Context) error {
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second},
	})
	var res wire.OpenResult
	err := workflow.ExecuteLocalActivity(lctx, ActivitySessionOpen, wire.OpenInput{
		Session:       s.in.Session,
		ParentSession: s.in.ParentSession,
		BranchHints:   s.in.BranchHints,
		FromEntry:     s.in.FromEntry,
		IDPrefix:      s.snap.IDPrefix,
	}).Get(ctx, &res)
	if err != nil {
		return fmt.Errorf("open session %q: %w", s.in.Session, err)
	}
	s.snap.Loop.Leaf = res.Leaf
	s.snap.Loop.Settings = res.Settings
	s.snap.Opened = true
	return nil
}

func (s *session) validateTurn(ctx workflow.Context, req TurnRequest) error {
	if strings.TrimSpace(req.Prompt.Text) == "" && len(req.Prompt.Images) == 0 {
		return temporal.NewApplicationErrorWithOptions("a turn needs text or images", agent.CodeInvalidCommand,
			temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	if s.depth > 0 {
		return temporal.NewApplicationErrorWithOptions("this is a sub-agent's session: it runs only the task it was delegated; "+
			"send turns to the delegating session", agent.CodeInvalidCommand, temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	if err := badWhileBusy(req.WhileBusy); err != nil {
		return err
	}
	if info := workflow.GetCurrentUpdateInfo(ctx); info != nil {
		if _, has, _ := s.recentKey(ctx, info.ID); has {
			return nil
		}
		if strings.HasPrefix(info.ID, InternalKeyPrefix) {
			return temporal.NewApplicationErrorWithOptions(
				fmt.Sprintf("idempotency key %q: keys starting with %q name the session's own turns (follow-ups, wake-ups); choose another key",
					info.ID, InternalKeyPrefix), agent.CodeInvalidCommand, temporal.ApplicationErrorOptions{NonRetryable: true})
		}
		if s.recentFull(ctx, info.ID) {
			s.countRefusal(ctx, refusedWindowFull, "update")
			return temporal.NewApplicationErrorWithOptions(s.windowFullText(), agent.CodeSessionBusy, temporal.ApplicationErrorOptions{})
		}
	}
	if err := s.refuseExpiring(); err != nil {
		return err
	}
	if s.rollover && (s.running == nil || s.ending || s.stepping) && len(s.queue) == 0 {
		// Nothing waits, and nothing runs, or only a turn whose model step
		// may have ended it: the run continues as new as soon as its
		// handlers are done, often in this very workflow task. Its last
		// turn has answered (a client has the answer from the live feed
		// before the update completes; the step that ends a turn records
		// it and publishes the answer before the workflow hears of that
		// step), so a client's next turn lands here; sent again, the next
		// run takes it.
		return temporal.NewApplicationErrorWithOptions(
			"session busy: it is moving to a fresh workflow history; send the turn again",
			agent.CodeSessionBusy, temporal.ApplicationErrorOptions{Details: []any{RefusedContinuing}})
	}
	if s.rollover {
		return temporal.NewApplicationErrorWithOptions(
			"session busy: it is moving to a fresh workflow history after its queued turns; retry in a moment",
			agent.CodeSessionBusy, temporal.ApplicationErrorOptions{})
	}
	if err := s.rejectTurnWhileBusy(ctx, req); err != nil {
		return err
	}
	if n := s.waitingCallers(); n >= MaxQueuedTurns {
		s.countRefusal(ctx, refusedQueueFull, "update")
		return temporal.NewApplicationErrorWithOptions(
			fmt.Sprintf("session busy: %d turns are already waiting, the most a session keeps for callers; this turn was not started — send it again once one has answered", n),
			agent.CodeSessionBusy, temporal.ApplicationErrorOptions{})
	}
	return nil
}

func (s *session) onTurn(ctx workflow.Context, req TurnRequest) (agentloop.Outcome, error) {
	id := workflow.GetCurrentUpdateInfo(ctx).ID
	s.endRunWithinWindow(ctx)
	if out, has, _ := s.recentKey(ctx, id); has {
		return out, nil
	}
	t := &pendingTurn{id: id, req: req, span: ctx.Value(wire.TraceSpanKey{})}
	interrupt := req.WhileBusy == WhileBusyInterrupt && s.running != nil
	s.enqueue(t, interrupt)
	s.noteDepth(ctx)
	if interrupt {
		s.interruptFor(ctx, id)
	}
	if err := workflow.Await(ctx, func() bool { return t.outcome != nil }); err != nil {
		return agentloop.Outcome{}, err
	}
	return *t.outcome, nil
}

func (s *session) validateAbort(ctx workflow.Context, req AbortRequest) error {
	if _, ok := s.abortSeen(ctx); ok {
		return nil // a retried abort: answered with what the first one did
	}
	if req.Queued {
		// Only a waiting turn: the check and the handler run in one
		// workflow task, so the turn cannot start in between.
		for _, t := range s.queue {
			if req.Turn != "" && t.id == req.Turn {
				return nil
			}
		}
		return temporal.NewApplicationErrorWithOptions(fmt.Sprintf("turn %q is not waiting (it runs, finished or is unknown)", req.Turn),
			agent.CodeNoActiveRun, temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	if s.running == nil && len(s.queue) == 0 {
		return temporal.NewApplicationErrorWithOptions("no turn is running or waiting in this session",
			agent.CodeNoActiveRun, temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	if s.running != nil && (req.Turn == "" || req.Turn == s.running.id) && s.abortReason != "" {
		// Already stopping (a second stop, a double click): it aborts
		// nothing more.
		return temporal.NewApplicationErrorWithOptions(fmt.Sprintf("turn %q is already stopping; nothing more to abort", s.running.id),
			agent.CodeNoActiveRun, temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	if req.Turn == "" {
		if s.running == nil {
			return temporal.NewApplicationErrorWithOptions("no turn is running in this session",
				agent.CodeNoActiveRun, temporal.ApplicationErrorOptions{NonRetryable: true})
		}
		return nil
	}
	if s.running != nil && s.running.id == req.Turn {
		return nil
	}
	for _, t := range s.queue {
		if t.id == req.Turn {
			return nil
		}
	}
	return temporal.NewApplicationErrorWithOptions(fmt.Sprintf("turn %q is not running or waiting", req.Turn),
		agent.CodeNoActiveRun, temporal.ApplicationErrorOptions{NonRetryable: true})
}

func (s *session) onAbort(ctx workflow.Context, req AbortRequest) (AbortResult, error) {
	if res, ok := s.abortSeen(ctx); ok {
		return res, nil
	}
	res, err := s.abort(ctx, req)
	if err == nil {
		s.rememberAbort(ctx, res)
	}
	return res, err
}

// abort stops the running turn, or drops a queued one.
func (s *session) abort(ctx workflow.Context, req AbortRequest) (AbortResult, error) {
	reason := req.Reason
	if reason == "" {
		reason = "the turn was aborted by the caller"
	}
	if s.running != nil && (req.Turn == "" || req.Turn == s.running.id) {
		s.abortReason = reason
		id := s.running.id
		s.cancelTurn()
		s.stopActivities(ctx, id)
		s.stopSubAgents(ctx)
		return AbortResult{Turn: id}, nil
	}
	for i, t := range s.queue {
		if t.id == req.Turn {
			s.queue = append(s.queue[:i:i], s.queue[i+1:]...)
			s.noteDepth(ctx)
			if t.rewind != nil {
				t.rewind.err = temporal.NewApplicationErrorWithOptions("the rewind was aborted: "+reason, agent.CodeAborted,
					temporal.ApplicationErrorOptions{NonRetryable: true})
				t.rewind.done = true
				return AbortResult{Turn: t.id}, nil
			}
			if t.compact != nil {
				t.compact.err = temporal.NewApplicationErrorWithOptions("the compaction was aborted: "+reason, agent.CodeAborted,
					temporal.ApplicationErrorOptions{NonRetryable: true})
				t.compact.done = true
				return AbortResult{Turn: t.id}, nil
			}
			out := agentloop.Outcome{Turn: t.id, Status: agent.TypeFailed, Details: reason, Code: agent.CodeAborted}
			t.outcome = &out
			s.remember(ctx, t.id, out)
			if t.stopLive != nil {
				t.stopLive() // its reply was waiting for the turn
				s.stopActivities(ctx, t.id)
			}
			// Recorded like any finished turn: the key is answered
			// "aborted" after continue-as-new too, and attaching to it
			// gets this terminal. Continue-as-new waits for this handler,
			// so the record is never lost.
			s.recordTurn(ctx, t.id, out, time.Time{}, false)
			return AbortResult{Turn: t.id, Reply: t.ref}, nil
		}
	}
	return AbortResult{}, temporal.NewApplicationErrorWithOptions("nothing to abort", agent.CodeNoActiveRun,
		temporal.ApplicationErrorOptions{NonRetryable: true})
}

// stopActivities tells the workers that turn's running activities (model
// stream, tools, live reply), whose cancellation the workflow has just
// requested, must stop now: a cancellation otherwise reaches an activity
// only with the response to its next heartbeat, and heartbeats are as rare
// as crash detection allows (each is a billable action). Best effort: a
// lost notice leaves that heartbeat to deliver it. The local activity adds
// at most one action, to the workflow task that cancels.
func (s *session) stopActivities(ctx workflow.Context, turn string) {
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
		Summary:             "stop · turn " + turn,
	})
	in := wire.TurnStopInput{Session: s.in.Session, Turn: turn}
	if err := workflow.ExecuteLocalActivity(lctx, ActivityFeedStop, in).Get(lctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("stop notice not published; running activities stop at their next heartbeat", "turn", turn, "error", err)
	}
}

func (s *session) validateSteer(_ workflow.Context, req SteerRequest) error {
	if req.Turn != "" && (s.running == nil || s.running.id != req.Turn) {
		return temporal.NewApplicationErrorWithOptions(fmt.Sprintf("turn %q is not running; send a new turn instead", req.Turn),
			agent.CodeNoActiveRun, temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	if strings.TrimSpace(req.Text) == "" {
		return temporal.NewApplicationErrorWithOptions("a steering message needs text", agent.CodeInvalidCommand,
			temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	if s.running == nil {
		return temporal.NewApplicationErrorWithOptions("no turn is running to steer; send a new turn instead",
			agent.CodeNoActiveRun, temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	if s.lateToSteer() {
		return temporal.NewApplicationErrorWithOptions("the running turn may be ending (its model step is answering); send the message as a new turn instead",
			agent.CodeNoActiveRun, temporal.ApplicationErrorOptions{NonRetryable: true, Details: []any{RefusedSteerLate}})
	}
	return nil
}

// lateToSteer says a steering message could no longer fold into the
// running turn: a model step that may end it is in flight (its answer may
// be out already), or its turn_end hooks run. The message is then a turn
// of its own, so its sender gets its own answer; a message steers only
// while the turn is between steps (its tools run, it waits for a person).
func (s *session) lateToSteer() bool {
	return s.ending || s.closing
}

func (s *session) onSteer(ctx workflow.Context, req SteerRequest) error {
	s.steering = append(s.steering, req.Text)
	s.yieldStep(ctx)
	return nil
}

func (s *session) validateApprove(_ workflow.Context, req ApproveRequest) error {
	if err := s.ambiguousWait(req.Call); err != nil {
		return err
	}
	for _, a := range s.approvals {
		if a.view.Call == req.Call && !a.decided {
			if req.Listed && !slices.Contains(a.view.Approvers, req.By) {
				break // someone else's session: as if nothing waited
			}
			if req.Door != "" && !req.Vetted && len(a.view.Approvers) == 0 {
				if asker := s.requester(req.Door); asker == "" || req.By != asker {
					return temporal.NewApplicationErrorWithOptions(fmt.Sprintf("%q may not decide tool call %q: without approvers configured only the person who asked (%s) may",
						req.By, req.Call, orText(asker, "nobody on "+req.Door)), agent.CodeNotApprover, temporal.ApplicationErrorOptions{NonRetryable: true})
				}
			}
			if len(a.view.Approvers) > 0 && !approverListed(a.view.Approvers, req) {
				who := strings.Join(a.view.Approvers, ", ")
				return temporal.NewApplicationErrorWithOptions(fmt.Sprintf("%q may not decide tool call %q: its approvers are %s; it was not decided and still waits",
					req.By, req.Call, who), agent.CodeNotApprover, temporal.ApplicationErrorOptions{NonRetryable: true})
			}
			if (req.ArgsHash != "" && req.ArgsHash != a.view.ArgsHash) || (req.DefinitionHash != "" && req.DefinitionHash != a.view.DefinitionHash) {
				return temporal.NewApplicationErrorWithOptions(fmt.Sprintf("tool call %q changed: it waits with other arguments or another tool definition "+
					"than the ones sent (argsHash %s, definitionHash %s); it was not decided — look at it again and decide on what it is now",
					req.Call, a.view.ArgsHash, a.view.DefinitionHash), agent.CodeCallChanged, temporal.ApplicationErrorOptions{NonRetryable: true})
			}
			return checkEdit(req, a)
		}
	}
	return temporal.NewApplicationErrorWithOptions(fmt.Sprintf("no tool call %q is waiting for approval", req.Call),
		agent.CodeNotFound, temporal.ApplicationErrorOptions{NonRetryable: true})
}

func (s *session) validateAnswer(_ workflow.Context, req AnswerRequest) error {
	if strings.TrimSpace(req.Text) == "" || len(req.Text) > maxAnswerBytes {
		return temporal.NewApplicationErrorWithOptions(fmt.Sprintf("an answer needs text, at most %d bytes", maxAnswerBytes),
			agent.CodeInvalidCommand, temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	if err := s.ambiguousWait(req.Call); err != nil {
		return err
	}
	for _, q := range s.questions {
		if q.view.Call == req.Call && !q.answered {
			return nil
		}
	}
	return temporal.NewApplicationErrorWithOptions(fmt.Sprintf("no question %q waits for an answer", req.Call),
		agent.CodeNotFound, temporal.ApplicationErrorOptions{NonRetryable: true})
}

func (s *session) onAnswer(ctx workflow.Context, req AnswerRequest) error {
	for _, q := range s.questions {
		if q.view.Call == req.Call && !q.answered {
			if q.sub != nil {
				return s.forwardAnswer(ctx, q, req, workflow.GetCurrentUpdateInfo(ctx).ID)
			}
			q.answered, q.text, q.by = true, req.Text, req.By
		}
	}
	return nil
}

// requester is "<kind>:<user>" of the person whose message on channel
// kind started the running turn ("" when it came from elsewhere).
func (s *session) requester(kind string) string {
	if s.running == nil || s.running.reply == nil || s.running.reply.Kind != kind {
		return ""
	}
	var t wire.Target
	// Deterministic: decoding recorded bytes (workflowcheck flags the
	// decoder's type cache, not the result).
	err := json.Unmarshal(s.running.reply.Data, &t) //workflowcheck:ignore
	if err != nil || t.User == "" {
		return ""
	}
	return kind + ":" + t.User
}

func orText(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

func (s *session) onApprove(ctx workflow.Context, req ApproveRequest) error {
	for _, a := range s.approvals {
		if a.view.Call == req.Call && !a.decided {
			if a.sub != nil {
				return s.forwardApproval(ctx, a, req, workflow.GetCurrentUpdateInfo(ctx).ID)
			}
			a.decided, a.approved, a.reason, a.by = true, req.Approve, req.Reason, req.By
			a.edited = editedArgs(req)
		}
	}
	return nil
}

// editedArgs are the arguments an approval replaces the call's with (nil:
// none).
func editedArgs(req ApproveRequest) json.RawMessage {
	if !req.Approve || len(req.Args) == 0 {
		return nil
	}
	return req.Args
}

func (s *session) view() (SessionView, error) {
	v := SessionView{
		Session:   s.in.Session,
		Leaf:      s.snap.Loop.Leaf,
		Turns:     s.snap.Turns,
		Activated: s.snap.Loop.Activated,
		Settings:  s.snap.Loop.Settings,
		Wakes:     s.snap.Wakes,
		WakeLog:   s.snap.WakeLog,
		Usage:     s.snap.Usage,
		Today:     s.snap.Today,
	}
	if s.settled != nil {
		v.Turns++
		if u := s.settled.Usage; u != nil {
			v.Usage.Add(*u)
			if v.Today.Day != "" {
				v.Today.Usage.Add(*u)
			}
		}
	}
	for _, f := range s.snap.FailedReplies {
		v.FailedReplies = append(v.FailedReplies, f.FailedReply)
	}
	if s.running != nil {
		v.Running = s.running.id
		v.Steering = len(s.steering)
	}
	for _, t := range s.queue {
		v.Queued = append(v.Queued, t.id)
	}
	for _, a := range s.approvals {
		if !a.decided {
			v.Approvals = append(v.Approvals, a.view)
		}
	}
	for _, q := range s.questions {
		if !q.answered && (q.sub == nil || !q.sub.held) {
			v.Questions = append(v.Questions, q.view)
		}
	}
	return v, nil
}

// recentKey reports whether key is remembered (known) and, when its
// outcome is kept too, the outcome (has). Only keys within the idempotency
// window count.
func (s *session) recentKey(ctx workflow.Context, key string) (out agentloop.Outcome, has, known bool) {
	horizon := workflow.Now(ctx).Add(-s.window())
	for i := len(s.snap.Recent) - 1; i >= 0; i-- {
		r := s.snap.Recent[i]
		if r.Key == key && !r.At.Before(horizon) {
			return r.Outcome, r.Outcome.Status != "", true
		}
	}
	return agentloop.Outcome{}, false, false
}

// remember keeps key's outcome: every key for the idempotency window (new
// keys are refused past recentBytes, see recentFull), the outcome only for
// the newest recentOutcomes.
func (s *session) remember(ctx workflow.Context, key string, out agentloop.Outcome) {
	now := workflow.Now(ctx)
	s.pruneRecent(now)
	out.Leftover = nil
	if len(out.Details) > maxRecentDetails {
		out.Details = out.Details[:maxRecentDetails] + "…"
	}
	s.snap.Recent = append(s.snap.Recent, recentTurn{Key: key, Outcome: out, At: now})
	if n := len(s.snap.Recent) - recentOutcomes; n > 0 {
		s.snap.Recent[n-1].Outcome = agentloop.Outcome{}
	}
}

// runTurn runs one turn, begun at started, through the agent loop with a
// cancellable context, so that an abort stops in-flight activities;
// recorded says the turn's last model step recorded its outcome.
func (s *session) runTurn(ctx workflow.Context, t *pendingTurn, started time.Time) (out agentloop.Outcome, recorded bool) {
	s.running = t
	s.abortReason = ""
	tctx, cancel := workflow.WithCancel(ctx)
	s.cancelTurn = cancel
	defer func() {
		cancel()
		s.running = nil
		s.cancelTurn = nil
		s.steering = nil
		s.approvals = nil
		s.questions = nil
	}()
	rt := &loopRuntime{s: s, ctx: tctx, root: ctx, started: started}
	turn := agentloop.Turn{ID: t.id, Prompt: t.req.Prompt, Source: t.req.Source}
	s.nonce = turnNonce(ctx, s.snap.IDPrefix)
	entry := agentloop.UserEntry(rt, turn)
	entry.ParentID = s.snap.Loop.Leaf
	entry.ID = promptID(t.id, entry)
	s.askStepRun(ctx)
	res, err := s.beginTurn(tctx, t, entry)
	rec := res.Outcome
	switch {
	case err != nil:
		out := agentloop.Outcome{Turn: t.id, Status: agent.TypeFailed, Details: "begin turn: " + err.Error(), Retryable: true}
		if s.abortReason != "" {
			out.Details, out.Code, out.Retryable = s.abortReason, agent.CodeAborted, false
		}
		return out, false
	case rec != nil:
		// Its follow-up (late steering) was queued when it first ran.
		t.recorded = true
		rec.Leftover = nil
		if res.Extends && rec.Leaf != "" {
			// The turn ran from this very leaf (a reset replayed the
			// session to before it): the next turn must see it.
			s.snap.Loop.Leaf = rec.Leaf
		}
		return *rec, false
	}
	turn.Entry = &entry
	out = agentloop.Run(rt, s.in.Session, &s.snap.Loop, turn)
	if s.abortReason != "" && out.Status == agent.TypeFailed {
		out.Details, out.Code, out.Retryable = s.abortReason, agent.CodeAborted, false
		out.Leftover = nil
	} else {
		out.Leftover = append(out.Leftover, s.steering...)
	}
	// The step's record is this outcome only if the turn ended with it.
	return out, rt.recorded && out.Status == agent.TypeCompleted
}

// followUp runs steering messages that arrived too late for their turn as
// the next turn, so an accepted message is never dropped silently (an abort
// drops them: the caller asked to stop).
func (s *session) followUp(t *pendingTurn, out agentloop.Outcome) {
	steerReply := s.steerReply
	s.steerReply = nil
	if len(out.Leftover) == 0 {
		return
	}
	id := InternalKeyPrefix + "steer:" + strings.TrimPrefix(t.id, InternalKeyPrefix)
	next := &pendingTurn{
		id:  id,
		req: TurnRequest{Prompt: agent.Prompt{Text: strings.Join(out.Leftover, "\n\n")}, Source: "steer"},
	}
	// Nobody waits on it: it can wait for the next run.
	next.delivery = &Delivery{Key: id, Source: next.req.Source, Prompt: next.req.Prompt}
	if steerReply != nil {
		// A channel message folded into the turn (WhileBusySteer) came
		// too late: its follow-up answers where it came from.
		next.delivery.Reply = steerReply
		next.reply = next.delivery.wireReply()
	}
	next.size = s.weigh(queuedTurn{Delivery: *next.delivery})
	s.queue = append([]*pendingTurn{next}, s.queue...) // noted by the main loop's wait
}

func (s *session) nextID() string {
	s.snap.NextID++
	if s.nonce != "" {
		return fmt.Sprintf("%s-%s-%d", s.snap.IDPrefix, s.nonce, s.snap.NextID)
	}
	return fmt.Sprintf("%s-%d", s.snap.IDPrefix, s.snap.NextID)
}

// promptID is the entry ID of a turn's prompt: a digest of the turn key,
// the leaf it extends and the prompt itself, and nothing drawn at random, so
// that Turn.Begin retried in a new workflow task (its worker died after the
// store took the prompt, before the task completed — even the session's
// very first task, which also draws the chain prefix) stores nothing twice;
// a key run again from another leaf, or with another prompt, stores a new
// entry.
func promptID(key string, e transcript.Entry) string {
	h := sha256.New()
	part := func(s string) { h.Write([]byte(s)); h.Write([]byte{0}) }
	part(key)
	part(e.ParentID)
	if m := e.Message; m != nil {
		part(m.Source)
		part(m.Text)
		for _, im := range m.Images {
			part(im.MimeType)
			part(im.Data)
		}
	}
	return wire.PromptIDPrefix + hex.EncodeToString(h.Sum(nil)[:12])
}

// beginTurn runs ActivityTurnBegin until the store answers: the recorded
// outcome of the turn's key, or nil once the user entry is stored.
func (s *session) beginTurn(ctx workflow.Context, t *pendingTurn, entry transcript.Entry) (wire.BeginTurnResult, error) {
	key := t.id
	if t.wake != "" {
		key = ""
	}
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second},
	})
	var res wire.BeginTurnResult
	err := workflow.ExecuteLocalActivity(lctx, ActivityTurnBegin, wire.BeginTurnInput{
		Session: s.in.Session, Key: key, Entry: entry, Window: s.in.IdempotencyWindow,
	}).Get(ctx, &res)
	if err != nil {
		return wire.BeginTurnResult{}, fmt.Errorf("turn %q: %w", t.id, err)
	}
	return res, nil
}

// recordTurn keeps a finished turn in the session store, retrying until it
// is stored, so the key is answered long after this run has ended.
// override replaces what the turn's own steps recorded (see
// wire.RecordTurnInput.Override).
func (s *session) recordTurn(ctx workflow.Context, key string, out agentloop.Outcome, started time.Time, override bool) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: recordResultTimeout,
		HeartbeatTimeout:    recordHeartbeat,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second},
		Summary:             "record · turn " + key,
	})
	in := wire.RecordTurnInput{Session: s.in.Session, Key: key, Outcome: out, Started: started, Finished: workflow.Now(ctx), Override: override}
	if err := workflow.ExecuteActivity(actx, ActivityTurnRecord, in).Get(actx, nil); err != nil {
		workflow.GetLogger(ctx).Error("recording a turn failed", "turn", key, "error", err)
	}
}

// errAborted is what the loop runtime reports once the turn was cancelled.
var errAborted = errors.New("aborted")

// runApart runs queued turn t (a turn, a rewind or a compaction) on a
// coroutine of its own and waits for it. The turn's deep calls (the agent
// loop, encoding, scheduling) grow that coroutine's stack, which goes with
// it; the main loop's stays small for as long as the session sits idle in
// the worker's cache (a parked goroutine's stack shrinks only down to four
// times what it uses). The wait ignores cancellation, as running the turn
// inline did: the turn handles it.
func (s *session) runApart(ctx workflow.Context, t *pendingTurn) {
	done := false
	workflow.Go(ctx, func(ctx workflow.Context) {
		defer func() { done = true }()
		switch {
		case t.rewind != nil:
			s.runRewind(ctx, t)
		case t.compact != nil:
			s.runCompaction(ctx, t)
		default:
			s.serve(traced(ctx, t.span), t, s.limit())
		}
	})
	wait, _ := workflow.NewDisconnectedContext(ctx)
	for {
		_ = workflow.Await(wait, func() bool { return done || s.deliveryWaiting() })
		if done {
			return
		}
		s.drainDeliveries()
	}
}
