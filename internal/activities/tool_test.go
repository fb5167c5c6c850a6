package activities_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// unknownOutcome is the kind of result the workflow records for a
// non-idempotent call whose worker was lost (workflows/runtime.go lostResult).
var unknownOutcome = agent.ToolResult{IsError: true, Content: "The outcome of this counter call is unknown: the worker running it stopped or failed mid-call (heartbeat timeout). " +
	"It was not re-run because it may have side effects; check its effect before calling it again."}

// toolSetup stores a turn whose assistant reply calls tool with args and
// returns the call that executes it.
func toolSetup(e *env, session, tool, args string) agentloop.ToolCall {
	e.store(session,
		message("u1", "", transcript.Message{Role: transcript.RoleUser, Text: "count"}),
		message("a1", "u1", transcript.Message{Role: transcript.RoleAssistant, StopReason: transcript.StopToolUse,
			ToolCalls: []transcript.ToolCall{{ID: "c1", Name: tool, Args: json.RawMessage(args)}}}),
	)
	return agentloop.ToolCall{
		Session: session, Turn: "t1", Step: 1,
		Call:             agentloop.Call{ID: "c1", Name: tool, Known: tool == testkit.CounterName},
		AssistantEntryID: "a1", ResultEntryID: "r1", ParentID: "a1",
	}
}

// TestExecute: Tool.Execute runs a call at most once per result entry,
// records synthetic results without running anything, and turns what the
// model can fix into error results.
func TestExecute(t *testing.T) {
	t.Parallel()
	const session = "s1"
	tests := []struct {
		name      string
		tool      string
		args      string
		synthetic *agent.ToolResult
		// stored is a result already stored under the call's ResultEntryID.
		stored   *transcript.Message
		wantRuns int
		wantErr  bool   // the stored result is an error
		wantText string // a phrase of the stored result
	}{
		{
			name:     "runs the tool and stores its result",
			tool:     testkit.CounterName,
			args:     `{"note":"once"}`,
			wantRuns: 1,
			wantText: "count=1",
		},
		{
			name:     "result already stored: the tool is not run again",
			tool:     testkit.CounterName,
			args:     `{"note":"once"}`,
			stored:   &transcript.Message{Role: transcript.RoleToolResult, ToolCallID: "c1", ToolName: testkit.CounterName, Text: "count=7"},
			wantRuns: 0,
			wantText: "count=7",
		},
		{
			name:      "synthetic result: recorded without running the tool",
			tool:      testkit.CounterName,
			args:      `{"note":"once"}`,
			synthetic: &unknownOutcome,
			wantRuns:  0,
			wantErr:   true,
			wantText:  "The outcome of this counter call is unknown",
		},
		{
			name:      "synthetic result after a stored one: the stored result stands",
			tool:      testkit.CounterName,
			args:      `{"note":"once"}`,
			synthetic: &unknownOutcome,
			stored:    &transcript.Message{Role: transcript.RoleToolResult, ToolCallID: "c1", ToolName: testkit.CounterName, Text: "count=1"},
			wantRuns:  0,
			wantText:  "count=1",
		},
		{
			name:     "unknown tool: an error result, nothing runs",
			tool:     "no_such_tool",
			args:     `{}`,
			wantRuns: 0,
			wantErr:  true,
			wantText: "Tool no_such_tool not found",
		},
		{
			name:     "invalid arguments: an error result, the tool does not run",
			tool:     testkit.CounterName,
			args:     `{"note":5}`,
			wantRuns: 0,
			wantErr:  true,
			wantText: "Invalid arguments for counter",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			call := toolSetup(e, session, tt.tool, tt.args)
			call.Synthetic = tt.synthetic
			if tt.stored != nil {
				e.store(session, message("r1", "a1", *tt.stored))
			}
			out, err := e.execute(call)
			if err != nil {
				t.Fatalf("Execute: %v", err)
			}
			if got := e.kit.Counter.Runs(session); got != tt.wantRuns {
				t.Errorf("counter ran %d times, want %d", got, tt.wantRuns)
			}
			res, ok := e.stored(session, "r1")
			if !ok {
				t.Fatal("no result stored under the call's ResultEntryID")
			}
			m := res.Message
			if res.ParentID != "a1" || m.Role != transcript.RoleToolResult || m.ToolCallID != "c1" {
				t.Errorf("stored result = parent %q, %+v; want a tool result for c1 below a1", res.ParentID, m)
			}
			if m.IsError != tt.wantErr || !strings.Contains(m.Text, tt.wantText) {
				t.Errorf("stored result = isError %v %q, want isError %v containing %q", m.IsError, m.Text, tt.wantErr, tt.wantText)
			}
			if out.IsError != tt.wantErr || out.Marker != activities.ToolMarker("t1", "c1") {
				t.Errorf("outcome = %+v, want isError %v and marker %q", out, tt.wantErr, activities.ToolMarker("t1", "c1"))
			}
			var ended *agent.Event
			for _, msg := range e.feedUntil(session, "t1", feed.KindEnd) {
				if msg.Kind == feed.KindEvent && msg.Event.Type == agent.TypeToolEnded {
					ended = msg.Event
				}
			}
			if ended == nil || ended.IsError != tt.wantErr {
				t.Errorf("feed tool_ended = %+v, want one with isError %v", ended, tt.wantErr)
			}
		})
	}
}

// TestExecuteLostResultIsRecordedAsUnknown: a non-idempotent call whose
// result is lost after the tool ran fails its activity; the workflow then
// records "outcome unknown" through Tool.Execute, which stores it without
// running the tool a second time.
func TestExecuteLostResultIsRecordedAsUnknown(t *testing.T) {
	t.Parallel()
	const session = "s1"
	e := newEnv(t)
	call := toolSetup(e, session, testkit.CounterName, `{"note":"once"}`)
	e.kit.Faults.LoseToolResult(session, testkit.CounterName)

	if out, err := e.execute(call); err == nil {
		t.Fatalf("Execute with a lost result succeeded with %+v, want a store error", out)
	} else if app := appError(t, err); app.Type() != agent.CodeStore {
		t.Fatalf("error type %q, want %q (%v)", app.Type(), agent.CodeStore, err)
	}
	if got := e.kit.Counter.Runs(session); got != 1 {
		t.Fatalf("counter ran %d times before its result was lost, want 1", got)
	}
	if _, ok := e.stored(session, "r1"); ok {
		t.Fatal("the lost result was stored")
	}

	call.Synthetic = &unknownOutcome
	out, err := e.execute(call)
	if err != nil {
		t.Fatalf("recording the unknown outcome: %v", err)
	}
	if got := e.kit.Counter.Runs(session); got != 1 {
		t.Errorf("counter ran %d times, want 1: recording the outcome re-ran the tool", got)
	}
	res, ok := e.stored(session, "r1")
	if !ok {
		t.Fatal("the unknown outcome was not stored")
	}
	if !res.Message.IsError || res.Message.Text != unknownOutcome.Content || !out.IsError {
		t.Errorf("stored %+v, outcome %+v; want the unknown-outcome error", res.Message, out)
	}
}

// TestApprovalBinding: a call that required approval runs only with the
// arguments and the tool definition the human saw; the model activity
// records both, and refuses reused call IDs.
func TestApprovalBinding(t *testing.T) {
	t.Parallel()
	const session = "s1"
	const args = `{"note":"ship"}`
	tests := []struct {
		name string
		// change runs between the model reply and the execution.
		change   func(t *testing.T, e *env, call *agentloop.ToolCall)
		wantRuns int
		wantText string
	}{
		{name: "unchanged: runs", wantRuns: 1, wantText: "count=1"},
		{
			name: "definition changed: refused",
			change: func(t *testing.T, e *env, _ *agentloop.ToolCall) {
				if err := e.kit.WriteConfig("tools:\n  counter: {requiresApproval: true, timeout: 5m}\n"); err != nil {
					t.Fatal(err)
				}
			},
			wantText: "the tool's definition changed after the call was put up for approval",
		},
		{
			name: "approval switched off meanwhile: refused",
			change: func(t *testing.T, e *env, _ *agentloop.ToolCall) {
				if err := e.kit.WriteConfig("tools:\n  counter: {requiresApproval: false}\n"); err != nil {
					t.Fatal(err)
				}
			},
			wantText: "the tool's definition changed",
		},
		{
			name: "arguments differ from the approved ones: refused",
			change: func(_ *testing.T, _ *env, call *agentloop.ToolCall) {
				call.Call.ArgsHash = activities.ArgsHash(json.RawMessage(`{"note":"other"}`))
			},
			wantText: "its arguments are not the ones that were approved",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			if err := e.kit.WriteConfig("tools:\n  counter: {requiresApproval: true}\n"); err != nil {
				t.Fatal(err)
			}
			call := toolSetup(e, session, testkit.CounterName, args)
			res, err := e.generate(agentloop.ModelCall{Session: session, Turn: "t1", Step: 1, EntryID: "a1", Leaf: "u1"})
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			if len(res.Calls) != 1 {
				t.Fatalf("calls = %+v", res.Calls)
			}
			c := res.Calls[0]
			if !c.RequiresApproval || string(c.Args) != args || c.ArgsHash != activities.ArgsHash(json.RawMessage(args)) ||
				!strings.HasPrefix(c.DefinitionHash, "sha256:") || c.Refused != "" {
				t.Fatalf("call = %+v, want full args and both hashes", c)
			}
			call.Call = c
			if tt.change != nil {
				tt.change(t, e, &call)
			}
			out, err := e.execute(call)
			if err != nil {
				t.Fatalf("Execute: %v", err)
			}
			if got := e.kit.Counter.Runs(session); got != tt.wantRuns {
				t.Errorf("counter ran %d times, want %d", got, tt.wantRuns)
			}
			stored, _ := e.stored(session, "r1")
			if stored.Message == nil || !strings.Contains(stored.Message.Text, tt.wantText) || out.IsError != (tt.wantRuns == 0) {
				t.Errorf("result = %+v, want %q", stored.Message, tt.wantText)
			}
		})
	}
}

func TestGenerateRefusesDuplicateCallIDs(t *testing.T) {
	t.Parallel()
	const session = "s1"
	e := newEnv(t)
	e.store(session,
		message("u1", "", transcript.Message{Role: transcript.RoleUser, Text: "count"}),
		message("a1", "u1", transcript.Message{Role: transcript.RoleAssistant, StopReason: transcript.StopToolUse,
			ToolCalls: []transcript.ToolCall{
				{ID: "c1", Name: testkit.CounterName, Args: json.RawMessage(`{}`)},
				{ID: "c1", Name: testkit.CounterName, Args: json.RawMessage(`{"note":"2"}`)},
				{ID: "c2", Name: testkit.CounterName, Args: json.RawMessage(`{}`)},
			}}),
	)
	res, err := e.generate(agentloop.ModelCall{Session: session, Turn: "t1", Step: 1, EntryID: "a1", Leaf: "u1"})
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	for i, want := range []bool{true, true, false} {
		if got := res.Calls[i].Refused != ""; got != want {
			t.Errorf("call %d (%s) refused = %v (%q), want %v", i, res.Calls[i].ID, got, res.Calls[i].Refused, want)
		}
	}
	if !strings.Contains(res.Calls[0].Refused, `tool call ID "c1" 2 times`) {
		t.Errorf("refusal %q does not name the ID", res.Calls[0].Refused)
	}
}

// A call matching its tool's requiresApproval.unless is recorded by the
// model step as needing no person; one that chains a command still waits.
func TestGenerateWaivesApprovalUnless(t *testing.T) {
	t.Parallel()
	const session = "s1"
	e := newEnv(t)
	if err := e.kit.WriteConfig("tools:\n  bash:\n    requiresApproval: {unless: {command: \"^(git status|ls)( |$)\"}}\n  counter:\n    requiresApproval: {unless: {command: \"^(git status|ls)( |$)\"}}\n"); err != nil {
		t.Fatal(err)
	}
	e.store(session,
		message("u1", "", transcript.Message{Role: transcript.RoleUser, Text: "count"}),
		message("a1", "u1", transcript.Message{Role: transcript.RoleAssistant, StopReason: transcript.StopToolUse,
			ToolCalls: []transcript.ToolCall{
				{ID: "c1", Name: "bash", Args: json.RawMessage(`{"command":"git status"}`)},
				{ID: "c2", Name: "bash", Args: json.RawMessage(`{"command":"ls; rm x"}`)},
				{ID: "c3", Name: "bash", Args: json.RawMessage(`{"command":"rm x"}`)},
				// The counter takes no command: one beside its arguments
				// does not waive it.
				{ID: "c4", Name: testkit.CounterName, Args: json.RawMessage(`{"note":"x","command":"git status"}`)},
			}}),
	)
	res, err := e.generate(agentloop.ModelCall{Session: session, Turn: "t1", Step: 1, EntryID: "a1", Leaf: "u1"})
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	for i, waived := range []bool{true, false, false, false} {
		c := res.Calls[i]
		if c.ApprovalWaived != waived || c.RequiresApproval == waived || (c.ArgsHash != "") == waived {
			t.Errorf("%s: waived %v, requiresApproval %v, argsHash %q; want waived %v", c.ID, c.ApprovalWaived, c.RequiresApproval, c.ArgsHash, waived)
		}
	}
}

// A call an approver edited runs the edited arguments, and its result
// starts with what changed.
func TestExecuteEditedCall(t *testing.T) {
	t.Parallel()
	const session = "s1"
	e := newEnv(t)
	call := toolSetup(e, session, testkit.CounterName, `{"note":"from the model"}`)
	call.Args = json.RawMessage(`{"note":"from the approver"}`)
	call.Call.ArgsHash = activities.ArgsHash(call.Args)
	call.Edit = &agentloop.ApprovalEdit{By: "alice", From: json.RawMessage(`{"note":"from the model"}`)}
	if _, err := e.execute(call); err != nil {
		t.Fatalf("Execute: %v", err)
	}
	if got := e.kit.Counter.Runs(session); got != 1 {
		t.Errorf("counter ran %d times, want 1", got)
	}
	stored, _ := e.stored(session, "r1")
	want := `[Approved with edits by alice: note changed from "from the model" to "from the approver". The call ran with the edited arguments.]`
	if stored.Message == nil || !strings.HasPrefix(stored.Message.Text, want) || !strings.Contains(stored.Message.Text, "count=1") {
		t.Errorf("result = %+v, want it to start with %q", stored.Message, want)
	}
}

func TestEditNote(t *testing.T) {
	t.Parallel()
	e := &agentloop.ApprovalEdit{From: json.RawMessage(`{"command":"rm -rf x","timeout":5,"keep":1}`)}
	got := activities.EditNote(e, json.RawMessage(`{"command":"rm x","keep":1.0,"dir":"a"}`))
	want := `[Approved with edits: command changed from "rm -rf x" to "rm x"; dir set to "a"; timeout removed. The call ran with the edited arguments.]`
	if got != want {
		t.Errorf("note = %s\nwant   %s", got, want)
	}
}

// A call the model step let through under requiresApproval.unless is judged
// again where it runs: a symlink made on its path since (by a call run in
// between) must not carry a waived write outside the glob (here to the
// workspace's top, where fastagent.yaml and .git/ are).
func TestExecuteRechecksWaivedPath(t *testing.T) {
	t.Parallel()
	const session = "s1"
	e := newEnv(t)
	if err := e.kit.WriteConfig("tools:\n  write:\n    requiresApproval: {unless: {path: [\"notes/**\"]}}\n"); err != nil {
		t.Fatal(err)
	}
	outside := e.kit.Dir
	if err := os.MkdirAll(filepath.Join(e.kit.Dir, "notes"), 0o755); err != nil {
		t.Fatal(err)
	}
	call := toolSetup(e, session, "write", `{"path":"notes/link/x.txt","content":"pwned"}`)
	call.Call.Known, call.Call.ApprovalWaived = true, true
	// The model step saw notes/link as nothing yet; now it leads to the top.
	if err := os.Symlink(outside, filepath.Join(e.kit.Dir, "notes", "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.execute(call); err != nil {
		t.Fatalf("Execute: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "x.txt")); err == nil {
		t.Error("the waived write went through the symlink, outside notes/")
	}
	stored, _ := e.stored(session, "r1")
	if stored.Message == nil || !stored.Message.IsError || !strings.Contains(stored.Message.Text, "requiresApproval") {
		t.Errorf("result = %+v, want an error saying the call needs approval now", stored.Message)
	}
}
