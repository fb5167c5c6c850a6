package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"go.temporal.io/sdk/activity"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/workspace"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// Bounds of what a hook may answer: the arguments it gives a call and the
// text it gives the model travel through workflow history.
const (
	MaxHookArgs    = 64 << 10
	MaxHookContext = 16 << 10
	// MaxHookReason bounds the reason of a denial or a stop (longer is
	// cut): it is recorded with the step's result and the refused call's.
	MaxHookReason = 4 << 10
)

// HookInput is the JSON document a hook reads on stdin.
type HookInput struct {
	Event   string `json:"event"`
	Hook    string `json:"hook"`
	Agent   string `json:"agent"`
	Session string `json:"session"`
	Turn    string `json:"turn"`
	Step    int    `json:"step"`
	// Cwd is the workspace the hook runs in.
	Cwd string `json:"cwd"`
	// Prompt is the turn's prompt (before_agent_start); Reply the model's
	// last reply (turn_end).
	Prompt string `json:"prompt,omitempty"`
	Reply  string `json:"reply,omitempty"`
	// Tool is the call (before_tool, after_tool); Result its result
	// (after_tool).
	Tool   *HookTool   `json:"tool,omitempty"`
	Result *HookResult `json:"result,omitempty"`
	// Reason is why a compaction is about to run (before_compact:
	// threshold, overflow).
	Reason string `json:"reason,omitempty"`
}

// HookTool is a tool call as a hook sees it.
type HookTool struct {
	ID   string          `json:"id"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

// HookResult is a tool call's result as an after_tool hook sees it.
type HookResult struct {
	Content string `json:"content"`
	IsError bool   `json:"isError"`
}

// hookAnswer is what a hook prints on stdout (nothing at all is allow).
type hookAnswer struct {
	Decision string          `json:"decision"`
	Reason   string          `json:"reason"`
	Args     json.RawMessage `json:"args"`
	Context  *string         `json:"context"`
	Stop     bool            `json:"stop"`
}

// Hook is the Hook.Run activity: the hooks of one event of a turn, run
// once — never retried (a hook's failure applies its onError), its
// decision recorded in the workflow's history, so a replay or a retried
// tool call never runs it again.
func (a *Activities) Hook(ctx context.Context, call agentloop.HookCall) (agentloop.HookResult, error) {
	stop := a.heartbeat(ctx)
	defer stop()
	ctx, done := stoppable(ctx, a.Feed, call.Session, call.Turn)
	defer done()
	res, err := a.RunHooks(ctx, call)
	return res, stoppedError(ctx, err)
}

// RunHooks runs the hooks of call's event (matching its tool), in
// file-name order, and decides: the first deny or stop ends the run; args
// one hook gives are what the next one sees; the hooks' context texts are
// joined. A hook that fails, times out or answers what its event does not
// take applies its onError; every hook run is a hook event on the turn's
// feed.
func (a *Activities) RunHooks(ctx context.Context, call agentloop.HookCall) (agentloop.HookResult, error) {
	allow := agentloop.HookResult{Decision: agentloop.HookAllow}
	def, err := a.Definitions.Load(ctx)
	if err != nil {
		return agentloop.HookResult{}, fmt.Errorf("the agent definition could not be loaded: %w", err)
	}
	hooks := def.HooksFor(call.Event, call.Tool)
	if len(hooks) == 0 {
		return allow, nil
	}
	in, err := a.hookInput(ctx, def, call)
	if err != nil {
		return agentloop.HookResult{}, err
	}
	// A hook runs in the tool sandbox like a tool: the frontend of the
	// client this worker runs on is kept from it first, as from a tool
	// (a hook step may be the first thing of this worker to run there).
	// When it cannot be, no hook runs; each applies its onError.
	unconfined := ""
	if a.ClientSeen != nil && activity.IsActivity(ctx) {
		if err := a.ClientSeen(ctx, activity.GetClient(ctx)); err != nil {
			unconfined = "it was not run: " + err.Error()
		}
	}
	pub := publisher{bus: a.Feed, session: call.Session, turn: call.Turn}
	defer pub.flush(ctx)
	out := allow
	var contexts []string
	for _, h := range hooks {
		in.Hook = h.Name
		var (
			ans     hookAnswer
			failure = unconfined
		)
		if failure == "" {
			ans, failure, err = a.runHook(ctx, def, call, h, in)
			if err != nil {
				return agentloop.HookResult{}, err
			}
		}
		decision := agentloop.HookAllow
		switch {
		case failure != "":
			decision = h.OnError
		case ans.Stop:
			decision = agentloop.HookStop
		case ans.Decision == agentloop.HookDeny:
			decision = agentloop.HookDeny
		case len(ans.Args) > 0:
			decision = "args"
		case ans.Context != nil && strings.TrimSpace(*ans.Context) != "":
			decision = "context"
		}
		reason := hookReason(ans.Reason)
		ev := agent.HookRan(h.Name, call.Event, call.CallID, decision, reason, failure)
		pub.send(ctx, feed.Message{Kind: feed.KindEvent, Step: agentloop.HookFeedStep(call), Event: &ev})
		if failure != "" {
			a.log().WarnContext(ctx, "a hook failed; its onError applies", "session", call.Session, "turn", call.Turn,
				"hook", h.File, "event", call.Event, "onError", h.OnError, "error", failure)
			if h.OnError == agentloop.HookDeny {
				return agentloop.HookResult{Decision: agentloop.HookDeny, Hook: h.Name,
					Reason: fmt.Sprintf("the hook %s failed (%s) and its onError is deny", h.Name, failure)}, nil
			}
			continue
		}
		switch decision {
		case agentloop.HookStop, agentloop.HookDeny:
			return agentloop.HookResult{Decision: decision, Hook: h.Name, Reason: reason, Context: strings.Join(contexts, "\n\n")}, nil
		}
		if len(ans.Args) > 0 {
			out.Args, out.ArgsHash = ans.Args, ArgsHash(ans.Args)
			in.Tool.Args = ans.Args
		}
		if ans.Context != nil && strings.TrimSpace(*ans.Context) != "" {
			contexts = append(contexts, strings.TrimSpace(*ans.Context))
		}
	}
	out.Context = strings.Join(contexts, "\n\n")
	return out, nil
}

// runHook runs one hook and reads its answer; failure says why the answer
// cannot be used (the hook failed, timed out or answered garbage).
func (a *Activities) runHook(ctx context.Context, def *workspace.Definition, call agentloop.HookCall, h workspace.Hook, in HookInput) (hookAnswer, string, error) {
	stdin, err := json.Marshal(in)
	if err != nil {
		return hookAnswer{}, "", err
	}
	id := call.CallID
	if id == "" {
		id = fmt.Sprintf("%s/%s/%d", call.Turn, call.Event, call.Step)
	}
	run, err := h.Run(ctx, def.Workspace.Dir, call.Session, id, stdin)
	if err != nil {
		return hookAnswer{}, "", err
	}
	if ctx.Err() != nil {
		return hookAnswer{}, "", ctx.Err()
	}
	if run.Failed != "" {
		return hookAnswer{}, run.Failed, nil
	}
	ans, perr := parseHookAnswer(call.Event, run.Stdout)
	if perr != nil {
		// The hook's failure, applied by its onError; not the activity's.
		return hookAnswer{}, "its answer is not usable: " + perr.Error(), nil //nolint:nilerr // the hook's failure, which its onError settles
	}
	if len(ans.Args) > 0 && (def.Delegates(call.Tool) || def.AskUser(call.Tool)) {
		return hookAnswer{}, fmt.Sprintf("its answer is not usable: the arguments of %s cannot be replaced by a hook", call.Tool), nil
	}
	return ans, "", nil
}

// hookReason is a hook's reason as recorded: trimmed, cut to MaxHookReason
// bytes (at a character's boundary) with an ellipsis.
func hookReason(s string) string {
	s = strings.TrimSpace(s)
	if len(s) <= MaxHookReason {
		return s
	}
	cut := MaxHookReason
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// parseHookAnswer reads a hook's stdout: empty is allow; otherwise one
// JSON object whose fields the event takes.
func parseHookAnswer(event, stdout string) (hookAnswer, error) {
	var ans hookAnswer
	s := strings.TrimSpace(stdout)
	if s == "" {
		return ans, nil
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ans); err != nil {
		return ans, fmt.Errorf(`want one JSON object like {"decision":"allow"}: %w (output: %.200q)`, err, s)
	}
	if dec.More() {
		return ans, fmt.Errorf("want one JSON object, got more after it (output: %.200q)", s)
	}
	switch ans.Decision {
	case "", agentloop.HookAllow, agentloop.HookDeny:
	default:
		return ans, fmt.Errorf("decision: %q is not allow or deny (end the turn with {\"stop\": true, \"reason\": \"…\"})", ans.Decision)
	}
	if len(ans.Args) > 0 && string(ans.Args) != "null" {
		if event != agentloop.HookBeforeTool {
			return ans, fmt.Errorf("args: only a before_tool hook replaces a call's arguments")
		}
		if ans.Stop || ans.Decision == agentloop.HookDeny {
			return ans, fmt.Errorf("args: a hook that denies or stops does not give arguments")
		}
		if b := bytes.TrimSpace(ans.Args); len(b) == 0 || b[0] != '{' {
			return ans, fmt.Errorf("args: want a JSON object (the call's arguments)")
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, ans.Args); err != nil {
			return ans, fmt.Errorf("args: %w", err)
		}
		if buf.Len() > MaxHookArgs {
			return ans, fmt.Errorf("args: %d bytes, more than %d", buf.Len(), MaxHookArgs)
		}
		ans.Args = buf.Bytes()
	} else {
		ans.Args = nil
	}
	if ans.Context != nil && strings.TrimSpace(*ans.Context) != "" {
		switch event {
		case agentloop.HookBeforeAgentStart, agentloop.HookAfterTool, agentloop.HookTurnEnd:
		default:
			return ans, fmt.Errorf("context: a %s hook cannot add context (before_agent_start, after_tool and turn_end hooks can)", event)
		}
		if len(*ans.Context) > MaxHookContext {
			return ans, fmt.Errorf("context: %d bytes, more than %d", len(*ans.Context), MaxHookContext)
		}
	}
	return ans, nil
}

// hookInput builds what the hooks of call read on stdin; the arguments and
// the result are read from the store, never from workflow history.
func (a *Activities) hookInput(ctx context.Context, def *workspace.Definition, call agentloop.HookCall) (HookInput, error) {
	in := HookInput{Event: call.Event, Agent: a.AgentName(), Session: call.Session, Turn: call.Turn, Step: call.Step,
		Cwd: def.Workspace.Dir, Reason: call.Reason}
	text := func(id string) (string, error) {
		if id == "" {
			return "", nil
		}
		e, err := a.Store.Get(ctx, call.Session, id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return "", nil
		case err != nil:
			return "", storeError(err)
		case e.Message == nil:
			return "", nil
		}
		return e.Message.Text, nil
	}
	var err error
	switch call.Event {
	case agentloop.HookBeforeAgentStart:
		in.Prompt, err = text(call.EntryID)
	case agentloop.HookTurnEnd:
		in.Reply, err = text(call.EntryID)
	case agentloop.HookBeforeTool, agentloop.HookAfterTool:
		args := call.Args
		if len(args) == 0 {
			args, err = a.callArgs(ctx, agentloop.ToolCall{Session: call.Session, AssistantEntryID: call.AssistantEntryID,
				Call: agentloop.Call{ID: call.CallID}})
			if err != nil {
				return in, err
			}
		}
		in.Tool = &HookTool{ID: call.CallID, Name: call.Tool, Args: args}
		if call.Event == agentloop.HookAfterTool {
			e, gerr := a.Store.Get(ctx, call.Session, call.ResultEntryID)
			if gerr != nil {
				return in, storeError(fmt.Errorf("read the result of tool call %s: %w", call.CallID, gerr))
			}
			if e.Message != nil {
				in.Result = &HookResult{Content: e.Message.Text, IsError: e.Message.IsError}
			}
		}
	}
	return in, err
}

// hookSettings names the events def has hooks for (agentloop.Settings.Hooks).
func hookSettings(def *workspace.Definition) string {
	var parts []string
	for _, ev := range workspace.HookEvents {
		has, deny := false, false
		for _, h := range def.Hooks {
			if h.Event == ev {
				has, deny = true, deny || h.OnError == workspace.HookDeny
			}
		}
		if has {
			parts = append(parts, agentloop.HookEntry(ev, deny))
		}
	}
	return strings.Join(parts, ",")
}

// hookOnError is what the hooks of event matching tool ask for when they
// cannot run (deny when one of them does; "" when none matches).
func hookOnError(def *workspace.Definition, event, tool string) string {
	hooks := def.HooksFor(event, tool)
	if len(hooks) == 0 {
		return ""
	}
	for _, h := range hooks {
		if h.OnError == workspace.HookDeny {
			return agentloop.HookDeny
		}
	}
	return agentloop.HookAllow
}
