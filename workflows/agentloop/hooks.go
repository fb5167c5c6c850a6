package agentloop

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/transcript"
)

// Hook events: where in a turn the definition's hook files run.
const (
	HookBeforeAgentStart = "before_agent_start"
	HookBeforeTool       = "before_tool"
	HookAfterTool        = "after_tool"
	HookTurnEnd          = "turn_end"
	HookBeforeCompact    = "before_compact"
)

// Hook decisions (HookResult.Decision) and onError values.
const (
	HookAllow = "allow"
	HookDeny  = "deny"
	HookStop  = "stop"
)

// HookSource is the Source of the user entries that carry a hook's text to
// the model.
const HookSource = "hook"

// HookCall asks the runtime to run the hooks of one event: every hook file
// of the event (and, for a tool event, matching the tool), in file-name
// order, in one activity.
type HookCall struct {
	Session string `json:"session"`
	Turn    string `json:"turn"`
	Step    int    `json:"step"`
	Event   string `json:"event"`
	// OnError is what the event's hooks ask for when the hook step itself
	// cannot run (deny: any of them says deny).
	OnError string `json:"onError,omitempty"`
	// EntryID is the entry the hooks are told about: the turn's prompt
	// (before_agent_start), the model's last reply (turn_end).
	EntryID string `json:"entryId,omitempty"`
	// CallID and Tool name the tool call (before_tool, after_tool);
	// AssistantEntryID holds its arguments, ResultEntryID its result
	// (after_tool); Args are arguments a before_tool hook replaced.
	CallID           string          `json:"callId,omitempty"`
	Tool             string          `json:"tool,omitempty"`
	AssistantEntryID string          `json:"assistantEntryId,omitempty"`
	ResultEntryID    string          `json:"resultEntryId,omitempty"`
	Args             json.RawMessage `json:"args,omitempty"`
	// Reason is why a compaction is about to run (before_compact:
	// threshold, overflow).
	Reason string `json:"reason,omitempty"`
}

// HookFeedStep is the step a hook step's events are published under on the
// turn's feed: 0 (the turn's own) before the first model step has begun,
// so that a relay does not take them for a step whose start it lost.
func HookFeedStep(call HookCall) int {
	if call.Event == HookBeforeAgentStart {
		return 0
	}
	return call.Step
}

// HookResult is what the hooks of one event decided together.
type HookResult struct {
	// Decision is allow, deny (before_tool: the call is not run; after_tool:
	// the model is told the result was rejected) or stop (the turn ends).
	Decision string `json:"decision"`
	// Hook names the hook that denied or stopped; Reason says why.
	Hook   string `json:"hook,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Args, with ArgsHash their digest, replace the call's arguments
	// (before_tool).
	Args     json.RawMessage `json:"args,omitempty"`
	ArgsHash string          `json:"argsHash,omitempty"`
	// Context is text the model reads (before_agent_start, after_tool,
	// turn_end).
	Context string `json:"context,omitempty"`
}

// Blocks reports whether the result denies or stops.
func (h HookResult) Blocks() bool { return h.Decision == HookDeny || h.Decision == HookStop }

// HookRunner is implemented by runtimes that run the definition's hook
// files; a runtime without it runs none. The runtime applies a hook step
// that cannot run as its OnError says.
type HookRunner interface {
	Hook(call HookCall) HookResult
}

// HookOnError is what the event's hooks ask for when they cannot run, from
// the settings (HookEntry): deny or allow; "" when the event has no hooks.
func (s Settings) HookOnError(event string) string {
	for _, e := range strings.Split(s.Hooks, ",") {
		name, onError, _ := strings.Cut(e, ":")
		if name == event && name != "" {
			if onError == HookDeny {
				return HookDeny
			}
			return HookAllow
		}
	}
	return ""
}

// HookEntry is the entry of Settings.Hooks for event: the event, with
// ":deny" when one of its hooks fails closed.
func HookEntry(event string, deny bool) string {
	if deny {
		return event + ":" + HookDeny
	}
	return event
}

// hookEntry is the user entry that gives the model a hook's text.
func hookEntry(rt Runtime, text string) transcript.Entry {
	return userEntry(rt, text, nil, HookSource)
}

// StopReason is the text a stop decision leaves: the hook and its reason.
func (h HookResult) StopReason() string {
	reason := strings.TrimSpace(h.Reason)
	if reason == "" {
		reason = "no reason given"
	}
	if h.Hook == "" {
		return reason
	}
	return fmt.Sprintf("%s (hook %s)", reason, h.Hook)
}

// runsHook reports whether the runtime runs hooks and the settings name
// event, and gives the runtime's hook runner.
func (r *run) runsHook(event string) (HookRunner, bool) {
	hr, can := r.rt.(HookRunner)
	return hr, can && r.st.Settings.HookOnError(event) != ""
}

// runHook runs the event's hooks when the runtime runs hooks and the
// settings name the event; ok is false when none ran.
func (r *run) runHook(call HookCall) (res HookResult, ok bool) {
	hr, can := r.runsHook(call.Event)
	if !can {
		return HookResult{Decision: HookAllow}, false
	}
	onError := r.st.Settings.HookOnError(call.Event)
	call.Session, call.Turn, call.OnError = r.session, r.turn.ID, onError
	return hr.Hook(call), true
}

// beforeAgentStart runs the before_agent_start hooks; it returns true when
// they ended the turn (r.out is then its outcome: completed, no step run).
func (r *run) beforeAgentStart() bool {
	call := HookCall{Step: 1, Event: HookBeforeAgentStart}
	if r.turn.Entry != nil {
		call.EntryID = r.turn.Entry.ID
	}
	res, ok := r.runHook(call)
	if !ok {
		return false
	}
	if res.Blocks() {
		r.out.Status = agent.TypeCompleted
		r.out.Leftover = texts(r.pending)
		return true
	}
	if strings.TrimSpace(res.Context) != "" {
		r.pending = append(r.pending, hookEntry(r.rt, res.Context))
	}
	return false
}

// turnEnd runs the turn_end hooks after step's reply (entry) ended the
// turn; it returns true when the turn goes on (a hook gave the model
// context to answer, and a step is left).
func (r *run) turnEnd(step int, entry string) bool {
	res, ok := r.runHook(HookCall{Step: step, Event: HookTurnEnd, EntryID: entry})
	limit := r.maxSteps
	if limit <= 0 {
		limit = DefaultMaxSteps
	}
	if !ok || res.Blocks() || strings.TrimSpace(res.Context) == "" || step >= limit {
		return false
	}
	r.pending = append(r.pending, hookEntry(r.rt, res.Context))
	r.afterTools = false
	return true
}

// toolNotes are the entries that give the model what hooks said about the
// calls of a batch, and the reason a hook gave to stop the turn ("" none).
func toolNotes(rt Runtime, outcomes []ToolOutcome) (notes []transcript.Entry, stop string) {
	for _, o := range outcomes {
		if strings.TrimSpace(o.Note) != "" {
			notes = append(notes, hookEntry(rt, o.Note))
		}
		if o.Stop != "" && stop == "" {
			stop = o.Stop
		}
	}
	return notes, stop
}
