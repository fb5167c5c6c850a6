// Package wire holds fastagent's own protocol between its workflows and
// the rest of it: the arguments and results of the activities the
// workflows call (named in package workflows: ActivityTurnBegin, …), the
// chat workflow's messages from the channel doors, the signals the
// workflows send one another, and the names and error types only fastagent
// itself uses. None of it is a contract for callers (that is package
// workflows and docs/temporal-api.md): it changes with the workflows that
// send it, behind their versioning, never in a way that changes what a
// running session or a recorded history decodes (the JSON of every type
// here is pinned by workflows' TestWireShapes).
//
// It imports no fastagent package but the public agent, transcript and
// workflows/agentloop, so that the workflows, the activities and the doors
// all import it; the two payloads it shares with the caller contract
// (Delivery and ReplyTarget) are copies of package workflows' with the
// same JSON (TestWireShapes checks both against one golden).
package wire

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// Signals the workflows send one another (the caller's signals are in
// package workflows).
const (
	// SignalChatMessage hands a chat channel's message (a ChatMessage) to
	// its conversation's chat workflow.
	SignalChatMessage = "message"
	// SignalTurnDone tells a chat workflow how a turn it routed ended.
	SignalTurnDone = "turn-done"
	// SignalSubAgentWait tells a delegating workflow that a call of one of
	// its sub-agents waits for a person, or no longer does.
	SignalSubAgentWait = "sub-agent-wait"
	// SignalSubAgentDecision hands a sub-agent (a Delegate workflow) a
	// decision or an answer on one of its waiting calls, made on the
	// session that delegated to it.
	SignalSubAgentDecision = "sub-agent-decision"
)

// ErrModelFallback is the error type of a model activity that hands its
// step to the next model of the fallback chain (models: in fastagent.yaml);
// the workflow runs the step again with ModelCall.Fallback raised. It never
// reaches a client: a turn that cannot fall back fails with agent.CodeModel.
const ErrModelFallback = "model_fallback"

// PromptIDPrefix starts the entry ID of every prompt Turn.Begin stores
// (changeTurnKeys), so that a prompt left without an answer can be told.
const PromptIDPrefix = "prompt-"

// TraceSpanKey is the workflow context key under which the tracing
// interceptor keeps the current span (the OpenTelemetry interceptor's
// SpanContextKey). A turn's activities run under the span of the update
// that sent the turn, so one trace shows one turn, although the turn runs
// in the workflow's main loop rather than in the update handler.
type TraceSpanKey struct{}

// ReplyRef is the key under which the reply reference of a turn queued at
// at is kept: its own per run of the key, so that a key that runs again
// after the idempotency window gets a reply of its own, and a busy notice
// never stands in for an answer.
func ReplyRef(key string, at time.Time) string {
	return key + "@" + strconv.FormatInt(at.UnixMilli(), 36)
}

// Delivery is workflows.Delivery (the deliver signal's argument) as the
// chat workflow routes it (RouteInput): the same JSON.
type Delivery struct {
	Key    string       `json:"key"`
	Source string       `json:"source,omitempty"`
	Prompt agent.Prompt `json:"prompt"`
	Reply  *ReplyTarget `json:"reply,omitempty"`
	Notify string       `json:"notify,omitempty"`
	Answer string       `json:"answer,omitempty"`
	// WhileBusy is workflows.Delivery.WhileBusy.
	WhileBusy string `json:"whileBusy,omitempty"`
	// Command is workflows.Delivery.Command.
	Command string `json:"command,omitempty"`
}

// ReplyTarget is workflows.ReplyTarget, a platform reply target (the
// channel kind and its opaque data, a Target for the chat channels), as
// the activities read it: the same JSON, and convertible to and from it.
type ReplyTarget struct {
	Kind string          `json:"kind"`
	Data json.RawMessage `json:"data,omitempty"`
}

// Session bookkeeping (Session.Open, Turn.Begin, Turn.Record, Feed.Publish,
// Feed.Stop, Wake.Next).

// OpenInput is the argument of ActivitySessionOpen.
type OpenInput struct {
	Session       string   `json:"session"`
	ParentSession string   `json:"parentSession,omitempty"`
	BranchHints   []string `json:"branchHints,omitempty"`
	// FromEntry is the parent's entry to fork at (SessionInput.FromEntry).
	FromEntry string `json:"fromEntry,omitempty"`
	// IDPrefix prefixes the IDs of entries copied from a parent.
	IDPrefix string `json:"idPrefix"`
}

// OpenResult is the result of ActivitySessionOpen.
type OpenResult struct {
	Leaf string `json:"leaf"`
	// Settings are the definition's runtime settings, so that the session's
	// very first model call already honours fastagent.yaml.
	Settings agentloop.Settings `json:"settings"`
}

// ExpireInput is the argument of ActivitySessionExpire: the session, and
// since when it has been idle, on the workflow's clock (Now: when the
// workflow asked; the activity measures the idle time with it, not with
// the worker's wall clock, which may lag the server's timers).
type ExpireInput struct {
	Session   string    `json:"session"`
	IdleSince time.Time `json:"idleSince"`
	Now       time.Time `json:"now,omitzero"`
}

// ExpireResult says what ActivitySessionExpire did: Deleted with what it
// removed, or (not Deleted) the definition's current sessions.idleTTL,
// which no longer makes the session due (0: sessions no longer expire).
type ExpireResult struct {
	Deleted     bool          `json:"deleted"`
	Entries     int64         `json:"entries,omitempty"`
	SubSessions []string      `json:"subSessions,omitempty"`
	IdleTTL     time.Duration `json:"idleTTL,omitempty"`
}

// BeginTurnInput is the argument of ActivityTurnBegin.
type BeginTurnInput struct {
	Session string `json:"session"`
	// Key is the turn's idempotency key; "" (a wake-up) skips the lookup.
	Key string `json:"key,omitempty"`
	// Entry is the turn's user entry, appended (idempotently, by ID) when
	// the key is new.
	Entry transcript.Entry `json:"entry"`
	// Window is the idempotency window; 0 leaves it to the worker's
	// configuration (idempotencyWindow, default 24 h).
	Window time.Duration `json:"window"`
}

// BeginTurnResult is the result of ActivityTurnBegin: the recorded outcome
// of the key, or nil when the turn is new and its user entry is stored.
type BeginTurnResult struct {
	Outcome *agentloop.Outcome `json:"outcome,omitempty"`
	// Extends is set with Outcome when the recorded turn was begun from
	// the leaf this turn would extend (its prompt's parent is
	// Entry.ParentID): the session's leaf then moves to the turn's end.
	Extends bool `json:"extends,omitempty"`
}

// RecordTurnInput is the argument of ActivityTurnRecord.
type RecordTurnInput struct {
	Session  string            `json:"session"`
	Key      string            `json:"key"`
	Outcome  agentloop.Outcome `json:"outcome"`
	Finished time.Time         `json:"finished"`
	// Started, when set, is when the turn began: a record of the key that
	// finished before it (outside the idempotency window, or the turn
	// would not have run) is replaced, not kept.
	Started time.Time `json:"started,omitempty"`
	// Override replaces whatever this turn's own model steps recorded of
	// the key (a step that ended the turn may have recorded it just as the
	// turn was aborted): the workflow's outcome is the truth.
	Override bool `json:"override,omitempty"`
}

// overrideSlack is how much later than a record's Finished a record of the
// same key by one of the turn's steps may say it finished (the worker's
// clock against the workflow's).
const overrideSlack = time.Hour

// Replaces is the instant before which a stored record of the key gives
// way to this one (zero: none does; see store.TurnRecord.Replaces).
func (in RecordTurnInput) Replaces() time.Time {
	if in.Override {
		return in.Finished.Add(overrideSlack)
	}
	return in.Started
}

// PublishInput is the argument of ActivityFeedPublish: an event of a
// turn's step that the workflow decided.
type PublishInput struct {
	Session string      `json:"session"`
	Turn    string      `json:"turn"`
	Step    int         `json:"step"`
	Event   agent.Event `json:"event"`
}

// TurnStopInput is the argument of ActivityFeedStop: the turn whose running
// activities must stop.
type TurnStopInput struct {
	Session string `json:"session"`
	Turn    string `json:"turn"`
}

// NextWakeInput is the argument of ActivityWakeNext.
type NextWakeInput struct {
	Cron  string    `json:"cron"`
	TZ    string    `json:"tz"`
	After time.Time `json:"after"`
}

// Compaction and rewind (Session.Compact, Session.Rewind; their results are
// workflows.CompactResult and workflows.RewindResult, the updates' too).

// Reasons for a compaction (CompactInput.Reason).
const (
	// CompactThreshold: the context grew over contextWindow − reserveTokens.
	CompactThreshold = "threshold"
	// CompactOverflow: the provider refused the context as too long.
	CompactOverflow = "overflow"
	// CompactManual: asked for through UpdateCompact; it runs even when
	// automatic compaction is off.
	CompactManual = "manual"
)

// CompactInput is the argument of ActivityCompact.
type CompactInput struct {
	Session string `json:"session"`
	// Leaf is the end of the branch to compact; the compaction entry gets
	// ID EntryID and hangs below it.
	Leaf    string `json:"leaf"`
	EntryID string `json:"entryId"`
	Reason  string `json:"reason"`
	// Force keeps a quarter of the usual recent tokens (the second level).
	Force bool `json:"force,omitempty"`
	// Turn is the turn a compaction inside a turn belongs to: the turn's
	// stop notice stops it ("" for a manual compaction).
	Turn string `json:"turn,omitempty"`
}

// RewindInput is the argument of ActivityRewind.
type RewindInput struct {
	Session string `json:"session"`
	// Leaf is the current leaf; Entry the target; EntryID the ID of the
	// branch-summary entry, appended below Entry.
	Leaf    string `json:"leaf"`
	Entry   string `json:"entry"`
	EntryID string `json:"entryId"`
}

// Channel replies (Channel.Reply, Channel.Stream, Channel.Fetch).

// ReplyInput is the argument of ActivityChannelReply.
type ReplyInput struct {
	Session string      `json:"session"`
	Turn    string      `json:"turn"`
	Reply   ReplyTarget `json:"reply"`
	// Outcome is the finished turn; the reply posts its stored answer.
	Outcome agentloop.Outcome `json:"outcome"`
	// Busy asks for a "busy" notice instead: the turn was not queued (since
	// changeDeliveryQueue Outcome says why).
	Busy bool `json:"busy,omitempty"`
	// Ref is the key the reply's reference is kept under ("": Turn): one of
	// this run of the turn (ReplyRef).
	Ref string `json:"ref,omitempty"`
	// Notice, when set, is posted instead (once, under Turn#notice): the
	// answer to a delivered chat command.
	Notice string `json:"notice,omitempty"`
}

// StreamInput is the argument of ActivityChannelStream.
type StreamInput struct {
	Session string      `json:"session"`
	Turn    string      `json:"turn"`
	Reply   ReplyTarget `json:"reply"`
	// Queued is set when the turn waits behind another: the reply may show
	// that until the turn starts.
	Queued bool `json:"queued,omitempty"`
	// Ref is the key the reply's reference is kept under ("": Turn).
	Ref string `json:"ref,omitempty"`
}

// FetchInput is the argument of ActivityChannelFetch: resolve a chat
// turn's attachments into its prompt.
type FetchInput struct {
	Session string       `json:"session"`
	Turn    string       `json:"turn"`
	Reply   ReplyTarget  `json:"reply"`
	Prompt  agent.Prompt `json:"prompt"`
}

// Schedules (Schedule.Fire; its result is workflows.FireRecord, the fire
// workflow's too).

// FireRequest is the argument of ActivityScheduleFire: the fire
// workflow's input (workflows.FireInput: Name, Prompt, Cron, TZ) and the
// fire's key and times.
type FireRequest struct {
	Name   string `json:"name"`
	Prompt string `json:"prompt"`
	Cron   string `json:"cron"`
	TZ     string `json:"tz,omitempty"`
	// Key is the turn's idempotency key: the fire workflow's ID, so a retried
	// activity is the same turn.
	Key string `json:"key"`
	// Nominal is the occurrence's scheduled time (zero when the workflow was
	// not started by a schedule).
	Nominal time.Time `json:"nominal,omitzero"`
	// FiredAt is when the fire workflow started.
	FiredAt time.Time `json:"firedAt"`
}

// SendInput is the argument of ActivityChannelSend: a text to send to
// targets ("slack:#ops"…, delivery.ParseTarget) exactly once each — the
// platform references are kept in the session store under (Session,
// Key + "/" + target), so a retried activity sends only what is still
// unsent.
type SendInput struct {
	Session string   `json:"session"`
	Key     string   `json:"key"`
	Targets []string `json:"targets"`
	Text    string   `json:"text"`
}

// SendResult is ActivityChannelSend's result: the targets sent to.
type SendResult struct {
	Delivered []string `json:"delivered"`
}
