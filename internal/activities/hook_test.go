package activities_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// writeFile writes a file of the env's workspace (scripts executable).
func (e *env) writeFile(rel, content string) {
	e.t.Helper()
	p := filepath.Join(e.kit.Dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) runHooks(call agentloop.HookCall) (agentloop.HookResult, error) {
	e.t.Helper()
	var res agentloop.HookResult
	v, err := e.act.ExecuteActivity(workflows.ActivityHookRun, call)
	if err != nil {
		return res, err
	}
	if err := v.Get(&res); err != nil {
		e.t.Fatalf("decode hook result: %v", err)
	}
	return res, nil
}

// answerHook is a hook that answers what answer.json in the workspace
// holds (nothing when it is empty).
const answerHook = "#!/bin/sh\ncat >/dev/null\ncat answer.json\n"

// Hook.Run applies each answer as its event allows: allow, deny with the
// reason, replaced arguments with their hash, stop, context; an answer
// the event does not take, garbage or a failed hook applies onError.
func TestHookDecisionsApplied(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		event   string
		onError string // the hook file's onError ("" its default)
		answer  string // answer.json
		fails   bool   // the hook exits 3 instead
		want    agentloop.HookResult
		reason  string // a phrase of the result's reason
	}{
		{name: "allow", event: "before_tool", answer: `{"decision":"allow"}`, want: agentloop.HookResult{Decision: "allow"}},
		{name: "no output is allow", event: "before_tool", answer: "", want: agentloop.HookResult{Decision: "allow"}},
		{name: "deny", event: "before_tool", answer: `{"decision":"deny","reason":" no deletes "}`,
			want: agentloop.HookResult{Decision: "deny", Hook: "h", Reason: "no deletes"}},
		{name: "args", event: "before_tool", answer: `{"args": {"command": "ls -la"}}`,
			want: agentloop.HookResult{Decision: "allow", Args: []byte(`{"command":"ls -la"}`), ArgsHash: activities.ArgsHash([]byte(`{"command":"ls -la"}`))}},
		{name: "stop", event: "after_tool", answer: `{"stop":true,"reason":"enough"}`,
			want: agentloop.HookResult{Decision: "stop", Hook: "h", Reason: "enough"}},
		{name: "context", event: "turn_end", answer: `{"context":"run the tests"}`,
			want: agentloop.HookResult{Decision: "allow", Context: "run the tests"}},
		{name: "garbage: before_tool denies", event: "before_tool", answer: "yes please",
			want: agentloop.HookResult{Decision: "deny", Hook: "h"}, reason: "its answer is not usable"},
		{name: "a typo is garbage", event: "before_tool", answer: `{"decison":"allow"}`,
			want: agentloop.HookResult{Decision: "deny", Hook: "h"}, reason: `unknown field "decison"`},
		{name: "context where the event takes none", event: "before_tool", answer: `{"context":"x"}`,
			want: agentloop.HookResult{Decision: "deny", Hook: "h"}, reason: "a before_tool hook cannot add context"},
		{name: "args after the call: allowed by its onError", event: "after_tool", answer: `{"args":{"a":1}}`,
			want: agentloop.HookResult{Decision: "allow"}},
		{name: "args not an object", event: "before_tool", answer: `{"args":"ls"}`,
			want: agentloop.HookResult{Decision: "deny", Hook: "h"}, reason: "args: want a JSON object"},
		{name: "a failed hook, onError allow", event: "before_tool", onError: "allow", fails: true,
			want: agentloop.HookResult{Decision: "allow"}},
		{name: "a failed hook, onError deny", event: "turn_end", onError: "deny", fails: true,
			want: agentloop.HookResult{Decision: "deny", Hook: "h"}, reason: "exit code 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			const session = "s1"
			tc := toolSetup(e, session, "bash", `{"command":"ls"}`)
			script := answerHook
			if tt.fails {
				script = "#!/bin/sh\necho broken >&2\nexit 3\n"
			}
			e.writeFile("hooks/h.sh", script)
			e.writeFile("answer.json", tt.answer)
			file := "event: " + tt.event + "\ncommand: ./hooks/h.sh\n"
			if tt.onError != "" {
				file += "onError: " + tt.onError + "\n"
			}
			e.writeFile("hooks/h.yaml", file)
			call := agentloop.HookCall{Session: session, Turn: "t1", Step: 1, Event: tt.event}
			if tt.event == "before_tool" || tt.event == "after_tool" {
				call.CallID, call.Tool, call.AssistantEntryID = "c1", "bash", tc.AssistantEntryID
			}
			if tt.event == "after_tool" {
				if _, err := e.execute(tc); err != nil {
					t.Fatal(err)
				}
				call.ResultEntryID = tc.ResultEntryID
			}
			got, err := e.runHooks(call)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(got.Reason, tt.reason) {
				t.Errorf("reason %q does not say %q", got.Reason, tt.reason)
			}
			if tt.reason != "" {
				got.Reason = ""
			}
			if got.Decision != tt.want.Decision || got.Hook != tt.want.Hook || got.Reason != tt.want.Reason ||
				string(got.Args) != string(tt.want.Args) || got.ArgsHash != tt.want.ArgsHash || got.Context != tt.want.Context {
				t.Errorf("got %+v (args %s), want %+v (args %s)", got, got.Args, tt.want, tt.want.Args)
			}
		})
	}
}

// The hooks of one event run in file-name order: a later one sees the
// arguments an earlier one replaced, and reads the call and its result
// from the store.
func TestHooksChain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const session = "s1"
	tc := toolSetup(e, session, "bash", `{"command":"ls"}`)
	e.writeFile("hooks/a.sh", "#!/bin/sh\ncat > a-input.json\necho '{\"args\":{\"command\":\"ls replaced\"}}'\n")
	e.writeFile("hooks/a.yaml", "event: before_tool\nmatch: bash\ncommand: ./hooks/a.sh\n")
	e.writeFile("hooks/b.sh", "#!/bin/sh\nif grep -q 'ls replaced'; then echo '{\"decision\":\"deny\",\"reason\":\"saw the replaced args\"}'; fi\n")
	e.writeFile("hooks/b.yaml", "event: before_tool\nmatch: [ba*]\ncommand: ./hooks/b.sh\n")
	e.writeFile("hooks/c.yaml", "event: before_tool\nmatch: read\ncommand: ./hooks/b.sh\n")
	got, err := e.runHooks(agentloop.HookCall{Session: session, Turn: "t1", Step: 1, Event: "before_tool",
		CallID: "c1", Tool: "bash", AssistantEntryID: tc.AssistantEntryID})
	if err != nil {
		t.Fatal(err)
	}
	if got.Decision != "deny" || got.Hook != "b" || got.Reason != "saw the replaced args" {
		t.Errorf("got %+v, want b's denial", got)
	}
	in, err := os.ReadFile(filepath.Join(e.kit.Dir, "a-input.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"event":"before_tool"`, `"hook":"a"`, `"session":"s1"`, `"turn":"t1"`, `"step":1`,
		`"tool":{"id":"c1","name":"bash","args":{"command":"ls"}}`} {
		if !strings.Contains(string(in), want) {
			t.Errorf("the hook's input %s lacks %s", in, want)
		}
	}
}

// A hook runs in the tool sandbox like a tool, so the Temporal frontend
// of the worker's client is kept from it before it runs, as from a tool
// (Activities.ClientSeen): a hook step may be the first thing of a worker
// to run in the sandbox (before_agent_start, a before_tool hook). When the
// frontend cannot be learned, the hook does not run and its onError applies.
func TestHookLearnsTheFrontendFirst(t *testing.T) {
	t.Parallel()
	kit := testkit.New(t)
	bus := feed.NewInProcess()
	t.Cleanup(func() { _ = bus.Close() })
	acts := kit.Activities(bus)
	var seen atomic.Int32
	acts.ClientSeen = func(context.Context, client.Client) error {
		seen.Add(1)
		return errors.New("the frontend did not answer")
	}
	var suite testsuite.WorkflowTestSuite
	act := suite.NewTestActivityEnvironment()
	acts.Register(act)
	e := &env{t: t, kit: kit, bus: bus, act: act}
	const session = "s1"
	tc := toolSetup(e, session, "bash", `{"command":"ls"}`)
	e.writeFile("hooks/h.sh", "#!/bin/sh\ncat >/dev/null\ntouch hook-ran\n")
	e.writeFile("hooks/h.yaml", "event: before_tool\ncommand: ./hooks/h.sh\nnetwork: on\n")
	got, err := e.runHooks(agentloop.HookCall{Session: session, Turn: "t1", Step: 1, Event: "before_tool",
		CallID: "c1", Tool: "bash", AssistantEntryID: tc.AssistantEntryID})
	if err != nil {
		t.Fatal(err)
	}
	if seen.Load() == 0 {
		t.Errorf("the hook step did not learn the worker's Temporal frontend before the hook ran")
	}
	if _, err := os.Stat(filepath.Join(kit.Dir, "hook-ran")); err == nil {
		t.Errorf("the hook ran although its worker's frontend could not be kept from it")
	}
	if got.Decision != "deny" || !strings.Contains(got.Reason, "the frontend did not answer") {
		t.Errorf("got %+v, want the hook's onError (deny) saying why", got)
	}
}

// A hook's reason travels through workflow history (the step's result,
// the refused call's recorded result), like its arguments and context,
// so it is bounded too: a denial with a reason of megabytes (a hook that
// echoes a tool's output) stays a denial with a cut reason, instead of a
// result too large for the history — which would fail the step and let
// its onError (allow, say) decide in the hook's place.
func TestHookReasonBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const session = "s1"
	tc := toolSetup(e, session, "bash", `{"command":"ls"}`)
	e.writeFile("hooks/h.sh", "#!/bin/sh\ncat >/dev/null\nprintf '{\"decision\":\"deny\",\"reason\":\"'\nhead -c 3000000 /dev/zero | tr '\\0' x\nprintf '\"}'\n")
	e.writeFile("hooks/h.yaml", "event: before_tool\ncommand: ./hooks/h.sh\nonError: allow\n")
	got, err := e.runHooks(agentloop.HookCall{Session: session, Turn: "t1", Step: 1, Event: "before_tool",
		CallID: "c1", Tool: "bash", AssistantEntryID: tc.AssistantEntryID})
	if err != nil {
		t.Fatal(err)
	}
	if got.Decision != "deny" || !strings.HasPrefix(got.Reason, "xxxx") {
		t.Fatalf("got %s with a reason of %d bytes, want the hook's denial", got.Decision, len(got.Reason))
	}
	if len(got.Reason) > activities.MaxHookReason+len("…") {
		t.Errorf("the reason is %d bytes, more than %d", len(got.Reason), activities.MaxHookReason)
	}
}

// Tool.Execute does not run a call its definition's before_tool hooks
// should have seen but did not: the model step that flags calls for their
// hooks (Call.BeforeHook) ran on a definition without the hook — a hook
// file added while the call waited for its approval, or a model worker
// with a stale copy of the agent. The call is refused, not run unchecked.
func TestExecuteRefusesCallsTheirHookDidNotSee(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const session = "s1"
	tc := toolSetup(e, session, "bash", `{"command":"touch ran"}`)
	tc.Call.Known = true
	e.writeFile("hooks/guard.sh", "#!/bin/sh\ncat >/dev/null\necho '{\"decision\":\"deny\",\"reason\":\"no\"}'\n")
	e.writeFile("hooks/guard.yaml", "event: before_tool\nmatch: bash\ncommand: ./hooks/guard.sh\n")
	out, err := e.execute(tc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(e.kit.Dir, "ran")); err == nil {
		t.Fatalf("the call ran without its before_tool hook (result %+v)", out)
	}
	got, ok := e.stored(session, tc.ResultEntryID)
	if !ok || got.Message == nil || !got.Message.IsError || !strings.Contains(got.Message.Text, "hooks/guard.yaml") {
		t.Errorf("the recorded result does not say the call was refused for its hook: %+v", got.Message)
	}
	// Flagged, as the model step does for the current definition (the
	// hook step ran and allowed it), the call runs.
	tc2 := toolSetup(e, "s2", "bash", `{"command":"touch ran"}`)
	tc2.Call.Known, tc2.Call.BeforeHook = true, "deny"
	if _, err := e.execute(tc2); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(e.kit.Dir, "ran")); err != nil {
		t.Errorf("a call flagged for its hook did not run: %v", err)
	}
}
