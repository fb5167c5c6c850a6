package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// Event types. Callers treat {completed, failed} as a frozen terminal set and
// ignore (relays pass through) types they do not know.
const (
	TypeText        = "text"
	TypeThinking    = "thinking"
	TypeToolStarted = "tool_started"
	TypeToolEnded   = "tool_ended"
	// TypeToolProgress: a running tool call (ID, tool Name) reported how it
	// is getting on (Content is its message; Progress of Total when it
	// counts). Live only, like delegated: it has no Seq, is throttled to
	// about one a second per call, and never enters the turn's record.
	TypeToolProgress = "tool_progress"
	TypeRetrying     = "retrying"
	// TypeApprovalRequested: a tool call waits for a person's decision.
	TypeApprovalRequested = "approval_requested"
	// TypeApprovalResolved: the waiting call was approved, denied or timed out.
	TypeApprovalResolved = "approval_resolved"
	// TypeQuestionAsked: the agent asked the person a question (ask_user)
	// and waits for the answer.
	TypeQuestionAsked = "question_asked"
	// TypeQuestionAnswered: the question was answered, or timed out.
	TypeQuestionAnswered = "question_answered"
	// TypeDelegated carries an event of a sub-agent's turn (Sub) into the
	// stream of the turn that delegated to it: ID is the delegate call,
	// Agent the sub-agent. Live progress only: it has no Seq and is not
	// sent again to a consumer that resumes; the sub-agent's answer is the
	// call's tool_ended.
	TypeDelegated = "delegated"
	// TypeHook: a hook of the agent (hooks/<name>.yaml) ran at an event of
	// the turn and decided (Decision), or failed (Error) and its onError
	// default was applied.
	TypeHook      = "hook"
	TypeCompleted = "completed"
	TypeFailed    = "failed"
)

// Failure codes carried by failed events and control-plane rejections.
const (
	// CodeSessionBusy: the turn never started; replaying it is safe.
	CodeSessionBusy = "session_busy"
	// CodeAborted: a deliberate stop; channels treat it as settled.
	CodeAborted = "aborted"
	// CodeMaxSteps: the turn hit the configured bound on model calls.
	CodeMaxSteps = "max_steps"
	// CodeLimitExceeded: the turn or session hit a budget of the agent's
	// limits (tokens per turn, wall time per turn, tokens per session per
	// day); the details name the limit and its configuration key.
	CodeLimitExceeded = "limit_exceeded"
	// CodeNoActiveRun: a control command found no turn to act on.
	CodeNoActiveRun = "no_active_run"
	// CodeInvalidCommand: a control command was malformed.
	CodeInvalidCommand = "invalid_command"
	// CodeNoSuchSession: the session does not exist.
	CodeNoSuchSession = "no_such_session"
	// CodeUnsupportedCapability: the engine cannot do what was asked.
	CodeUnsupportedCapability = "unsupported_capability"
	// CodeNotFound: a control command named something the session does not
	// have (a tool call waiting for approval, for example).
	CodeNotFound = "not_found"
	// CodeTurnRunning: a control command that needs the session idle (a
	// rewind) found a turn running or waiting.
	CodeTurnRunning = "turn_running"
	// CodeSessionExists: a session to be created (an import) exists.
	CodeSessionExists = "session_exists"
	// CodeNoSuchTurn: no running, queued or recorded turn has that key.
	CodeNoSuchTurn = "no_such_turn"
	// CodeNotApprover: a decision on a waiting tool call came from someone
	// the call's approvers (approvals.approvers, tools.<name>.approvers) do
	// not list; it was not decided and still waits.
	CodeNotApprover = "not_approver"
	// CodeCallChanged: an approval named hashes (of the arguments, of the
	// tool definition) other than the waiting call's — the call is not the
	// one the approver saw; it was not decided and still waits.
	CodeCallChanged = "call_changed"

	// Codes of failed steps, as Temporal application error types (visible
	// in the Web UI) and on failed events.

	// CodeModel: the model provider failed the call.
	CodeModel = "model_error"
	// CodeModelConfig: no usable model is configured (spec, API key).
	CodeModelConfig = "model_config"
	// CodeDefinition: the agent definition could not be loaded.
	CodeDefinition = "definition_error"
	// CodeStore: the session store failed.
	CodeStore = "store_error"
	// CodeHook: a Go hook failed.
	CodeHook = "hook_error"
	// CodeContextOverflow: the conversation no longer fits the model's
	// context window, even after compacting it (or with compaction off).
	CodeContextOverflow = "context_overflow"
	// CodeNoWorker: no worker can run the session's turn (its run is pinned
	// to a build no worker runs any more). The turn stays queued and runs
	// once one does; the details say how to recover.
	CodeNoWorker = "no_worker"
)

// Event is one element of a turn's stream. Which fields are meaningful depends
// on Type; MarshalJSON writes exactly the wire fields of that type.
type Event struct {
	Type string

	// text, thinking
	Delta string
	// Step is the model step (1 = first model call of the turn) a text or
	// thinking delta belongs to, or that a retrying event restarts; 0 when
	// the producer does not say.
	Step int

	// tool_started, tool_ended
	ID      string
	Name    string
	Args    json.RawMessage
	IsError bool
	Content string
	// tool_progress: ID, Name, Content (the message) and these; Total 0
	// when unknown.
	Progress float64
	Total    float64

	// approval_requested (ID, Name, Args and these), approval_resolved
	// (ID, Approved, By, Reason, TimedOut).
	//
	// ArgsHash and DefinitionHash are what an approval must carry to be
	// bound to the call shown; Approvers who may decide (empty: the
	// session's owner); Deadline when the call is denied if no one decides.
	ArgsHash       string
	DefinitionHash string
	Approvers      []string
	Deadline       time.Time
	Approved       bool
	By             string
	TimedOut       bool
	// Question is what question_asked asks (ID is its tool call; Deadline
	// when the agent goes on without an answer); question_answered
	// carries ID, By and TimedOut.
	Question string

	// delegated: the sub-agent (ID is the delegate call) and its event.
	// approval_requested, question_asked: the sub-agent whose call waits,
	// when it is not the turn's own (its ID is then "<delegate call>.<call>",
	// the ID it is decided or answered by on this session).
	Agent string
	Sub   *Event

	// hook: the hook (Hook, its file's name), the event it ran at
	// (HookEvent), the tool call (ID) for before_tool and after_tool, what
	// it decided (Decision: allow, deny, args, context, stop) and why
	// (Reason); Error says it failed (then Decision is its onError).
	Hook      string
	HookEvent string
	Decision  string
	Error     string

	// retrying
	Attempt     int
	MaxAttempts int
	DelayMs     int64
	Reason      string

	// completed
	Data json.RawMessage
	// Usage sums the turn's model calls (nil when no provider reported any).
	Usage *Usage

	// failed
	Details   string
	Retryable bool
	Code      string

	// Seq is the event's position in its turn's stream, increasing; relays
	// set it so that a consumer can resume after the last one it has (SSE
	// `id:`). It is not part of the event's JSON.
	Seq int64 `json:"-"`

	// Extra keeps the fields of an event type this version does not know,
	// so that relays pass it through unchanged.
	Extra map[string]json.RawMessage
}

// Text returns a text delta event.
func Text(delta string) Event { return Event{Type: TypeText, Delta: delta} }

// Thinking returns a reasoning delta event.
func Thinking(delta string) Event { return Event{Type: TypeThinking, Delta: delta} }

// ToolStarted returns a tool_started event.
func ToolStarted(id, name string, args json.RawMessage) Event {
	return Event{Type: TypeToolStarted, ID: id, Name: name, Args: args}
}

// ToolEnded returns a tool_ended event.
func ToolEnded(id string, isError bool, content string) Event {
	return Event{Type: TypeToolEnded, ID: id, IsError: isError, Content: content}
}

// ApprovalRequested returns an approval_requested event.
func ApprovalRequested(id, name string, args json.RawMessage, argsHash, definitionHash string, approvers []string, deadline time.Time) Event {
	return Event{Type: TypeApprovalRequested, ID: id, Name: name, Args: args, ArgsHash: argsHash,
		DefinitionHash: definitionHash, Approvers: approvers, Deadline: deadline}
}

// ApprovalResolved returns an approval_resolved event.
func ApprovalResolved(id string, approved bool, by, reason string, timedOut bool) Event {
	return Event{Type: TypeApprovalResolved, ID: id, Approved: approved, By: by, Reason: reason, TimedOut: timedOut}
}

// QuestionAsked returns a question_asked event.
func QuestionAsked(id, question string, deadline time.Time) Event {
	return Event{Type: TypeQuestionAsked, ID: id, Question: question, Deadline: deadline}
}

// QuestionAnswered returns a question_answered event.
func QuestionAnswered(id, by string, timedOut bool) Event {
	return Event{Type: TypeQuestionAnswered, ID: id, By: by, TimedOut: timedOut}
}

// Delegated wraps a sub-agent's event for the stream of the turn whose
// delegate call (id) started it.
func Delegated(id, agentName string, sub Event) Event {
	sub.Seq = 0
	return Event{Type: TypeDelegated, ID: id, Agent: agentName, Sub: &sub}
}

// HookRan returns a hook event: hook ran at event (for call id, "" when
// not about a tool call) and decided; failure, when set, says what went
// wrong (decision is then the hook's onError).
func HookRan(hook, event, id, decision, reason, failure string) Event {
	return Event{Type: TypeHook, Hook: hook, HookEvent: event, ID: id, Decision: decision, Reason: reason, Error: failure}
}

// Completed returns a completed terminal; data may be nil.
func Completed(data json.RawMessage) Event { return Event{Type: TypeCompleted, Data: data} }

// Failed returns a failed terminal.
func Failed(details string, retryable bool, code string) Event {
	return Event{Type: TypeFailed, Details: details, Retryable: retryable, Code: code}
}

// IsTerminal reports whether the event ends the stream.
func (e Event) IsTerminal() bool { return e.Type == TypeCompleted || e.Type == TypeFailed }

type wireText struct {
	Type  string `json:"type"`
	Delta string `json:"delta"`
	Step  int    `json:"step,omitempty"`
}

type wireToolStarted struct {
	Type string          `json:"type"`
	ID   string          `json:"id"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

type wireToolEnded struct {
	Type    string `json:"type"`
	ID      string `json:"id"`
	IsError bool   `json:"isError"`
	Content string `json:"content"`
}

type wireToolProgress struct {
	Type     string  `json:"type"`
	CallID   string  `json:"callId"`
	Tool     string  `json:"tool"`
	Message  string  `json:"message"`
	Progress float64 `json:"progress,omitempty"`
	Total    float64 `json:"total,omitempty"`
}

type wireApprovalRequested struct {
	Type           string          `json:"type"`
	ID             string          `json:"id"`
	Name           string          `json:"name"`
	Args           json.RawMessage `json:"args"`
	ArgsHash       string          `json:"argsHash,omitempty"`
	DefinitionHash string          `json:"definitionHash,omitempty"`
	Approvers      []string        `json:"approvers,omitempty"`
	Deadline       time.Time       `json:"deadline,omitzero"`
	Agent          string          `json:"agent,omitempty"`
}

type wireApprovalResolved struct {
	Type     string `json:"type"`
	ID       string `json:"id"`
	Approved bool   `json:"approved"`
	By       string `json:"by,omitempty"`
	Reason   string `json:"reason,omitempty"`
	TimedOut bool   `json:"timedOut,omitempty"`
}

type wireQuestionAsked struct {
	Type     string    `json:"type"`
	ID       string    `json:"id"`
	Question string    `json:"question"`
	Deadline time.Time `json:"deadline,omitzero"`
	Agent    string    `json:"agent,omitempty"`
}

type wireQuestionAnswered struct {
	Type     string `json:"type"`
	ID       string `json:"id"`
	By       string `json:"by,omitempty"`
	TimedOut bool   `json:"timedOut,omitempty"`
}

type wireDelegated struct {
	Type  string `json:"type"`
	ID    string `json:"id"`
	Agent string `json:"agent"`
	Event *Event `json:"event"`
}

type wireHook struct {
	Type     string `json:"type"`
	Hook     string `json:"hook"`
	Event    string `json:"event"`
	ID       string `json:"id,omitempty"`
	Decision string `json:"decision"`
	Reason   string `json:"reason,omitempty"`
	Error    string `json:"error,omitempty"`
}

type wireRetrying struct {
	Type        string `json:"type"`
	Step        int    `json:"step,omitempty"`
	Attempt     int    `json:"attempt"`
	MaxAttempts int    `json:"maxAttempts"`
	DelayMs     int64  `json:"delayMs"`
	Reason      string `json:"reason"`
}

type wireCompleted struct {
	Type  string          `json:"type"`
	Data  json.RawMessage `json:"data,omitempty"`
	Usage *Usage          `json:"usage,omitempty"`
}

// Usage counts model tokens as the providers reported them: Input are the
// prompt tokens (OpenAI counts cached ones in them, Anthropic does not),
// CacheRead those served from the provider's prompt cache, CacheWrite those
// written to it (Anthropic), Calls the model calls counted.
type Usage struct {
	Input      int64 `json:"input"`
	Output     int64 `json:"output"`
	CacheRead  int64 `json:"cacheRead,omitempty"`
	CacheWrite int64 `json:"cacheWrite,omitempty"`
	Calls      int64 `json:"calls"`
}

// Tokens is what budgets count: input plus output tokens, as the provider
// reported them.
func (u Usage) Tokens() int64 { return u.Input + u.Output }

// Add adds o to u.
func (u *Usage) Add(o Usage) {
	u.Input += o.Input
	u.Output += o.Output
	u.CacheRead += o.CacheRead
	u.CacheWrite += o.CacheWrite
	u.Calls += o.Calls
}

type wireFailed struct {
	Type      string `json:"type"`
	Details   string `json:"details"`
	Retryable bool   `json:"retryable"`
	Code      string `json:"code,omitempty"`
}

// MarshalJSON writes the wire form of the event.
func (e Event) MarshalJSON() ([]byte, error) {
	switch e.Type {
	case TypeText, TypeThinking:
		return marshal(wireText{e.Type, e.Delta, e.Step})
	case TypeToolStarted:
		args := e.Args
		if len(args) == 0 {
			args = json.RawMessage("{}")
		}
		return marshal(wireToolStarted{e.Type, e.ID, e.Name, args})
	case TypeToolEnded:
		return marshal(wireToolEnded{e.Type, e.ID, e.IsError, e.Content})
	case TypeToolProgress:
		return marshal(wireToolProgress{e.Type, e.ID, e.Name, e.Content, e.Progress, e.Total})
	case TypeApprovalRequested:
		args := e.Args
		if len(args) == 0 {
			args = json.RawMessage("{}")
		}
		return marshal(wireApprovalRequested{e.Type, e.ID, e.Name, args, e.ArgsHash, e.DefinitionHash, e.Approvers, e.Deadline, e.Agent})
	case TypeApprovalResolved:
		return marshal(wireApprovalResolved{e.Type, e.ID, e.Approved, e.By, e.Reason, e.TimedOut})
	case TypeQuestionAsked:
		return marshal(wireQuestionAsked{e.Type, e.ID, e.Question, e.Deadline, e.Agent})
	case TypeQuestionAnswered:
		return marshal(wireQuestionAnswered{e.Type, e.ID, e.By, e.TimedOut})
	case TypeDelegated:
		return marshal(wireDelegated{e.Type, e.ID, e.Agent, e.Sub})
	case TypeHook:
		return marshal(wireHook{e.Type, e.Hook, e.HookEvent, e.ID, e.Decision, e.Reason, e.Error})
	case TypeRetrying:
		return marshal(wireRetrying{e.Type, e.Step, e.Attempt, e.MaxAttempts, e.DelayMs, e.Reason})
	case TypeCompleted:
		return marshal(wireCompleted{e.Type, e.Data, e.Usage})
	case TypeFailed:
		return marshal(wireFailed{e.Type, e.Details, e.Retryable, e.Code})
	case "":
		return nil, fmt.Errorf("agent: event without type")
	default:
		m := make(map[string]json.RawMessage, len(e.Extra)+1)
		for k, v := range e.Extra {
			m[k] = v
		}
		t, _ := marshal(e.Type)
		m["type"] = t
		return marshal(m)
	}
}

// UnmarshalJSON reads the wire form; unknown types keep their fields in Extra.
func (e *Event) UnmarshalJSON(b []byte) error {
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return fmt.Errorf("agent: decode event: %w", err)
	}
	*e = Event{Type: head.Type}
	var err error
	switch head.Type {
	case TypeText, TypeThinking:
		var w wireText
		err = json.Unmarshal(b, &w)
		e.Delta, e.Step = w.Delta, w.Step
	case TypeToolStarted:
		var w wireToolStarted
		err = json.Unmarshal(b, &w)
		e.ID, e.Name, e.Args = w.ID, w.Name, w.Args
	case TypeToolEnded:
		var w wireToolEnded
		err = json.Unmarshal(b, &w)
		e.ID, e.IsError, e.Content = w.ID, w.IsError, w.Content
	case TypeToolProgress:
		var w wireToolProgress
		err = json.Unmarshal(b, &w)
		e.ID, e.Name, e.Content, e.Progress, e.Total = w.CallID, w.Tool, w.Message, w.Progress, w.Total
	case TypeApprovalRequested, TypeApprovalResolved, TypeQuestionAsked, TypeQuestionAnswered:
		err = e.decodeWait(b)
	case TypeDelegated:
		var w wireDelegated
		err = json.Unmarshal(b, &w)
		e.ID, e.Agent, e.Sub = w.ID, w.Agent, w.Event
	case TypeHook:
		var w wireHook
		err = json.Unmarshal(b, &w)
		e.Hook, e.HookEvent, e.ID, e.Decision, e.Reason, e.Error = w.Hook, w.Event, w.ID, w.Decision, w.Reason, w.Error
	case TypeRetrying:
		var w wireRetrying
		err = json.Unmarshal(b, &w)
		e.Step, e.Attempt, e.MaxAttempts, e.DelayMs, e.Reason = w.Step, w.Attempt, w.MaxAttempts, w.DelayMs, w.Reason
	case TypeCompleted:
		var w wireCompleted
		err = json.Unmarshal(b, &w)
		e.Data, e.Usage = w.Data, w.Usage
	case TypeFailed:
		var w wireFailed
		err = json.Unmarshal(b, &w)
		e.Details, e.Retryable, e.Code = w.Details, w.Retryable, w.Code
	case "":
		return fmt.Errorf("agent: decode event: missing type")
	default:
		var m map[string]json.RawMessage
		err = json.Unmarshal(b, &m)
		delete(m, "type")
		e.Extra = m
	}
	if err != nil {
		return fmt.Errorf("agent: decode %s event: %w", head.Type, err)
	}
	return nil
}

// decodeWait reads the events of a wait for a person (approvals and
// questions) into e, whose Type is set.
func (e *Event) decodeWait(b []byte) error {
	var err error
	switch e.Type {
	case TypeApprovalRequested:
		var w wireApprovalRequested
		err = json.Unmarshal(b, &w)
		e.ID, e.Name, e.Args, e.ArgsHash, e.DefinitionHash, e.Approvers, e.Deadline, e.Agent = w.ID, w.Name, w.Args, w.ArgsHash, w.DefinitionHash, w.Approvers, w.Deadline, w.Agent
	case TypeApprovalResolved:
		var w wireApprovalResolved
		err = json.Unmarshal(b, &w)
		e.ID, e.Approved, e.By, e.Reason, e.TimedOut = w.ID, w.Approved, w.By, w.Reason, w.TimedOut
	case TypeQuestionAsked:
		var w wireQuestionAsked
		err = json.Unmarshal(b, &w)
		e.ID, e.Question, e.Deadline, e.Agent = w.ID, w.Question, w.Deadline, w.Agent
	case TypeQuestionAnswered:
		var w wireQuestionAnswered
		err = json.Unmarshal(b, &w)
		e.ID, e.By, e.TimedOut = w.ID, w.By, w.TimedOut
	}
	return err
}

// marshal encodes without HTML escaping: events carry text for people and
// terminals, and "<" should stay "<".
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}
