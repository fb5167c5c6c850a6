package agent_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
)

func TestEventWireFormat(t *testing.T) {
	t.Parallel()
	cases := []struct {
		ev   agent.Event
		want string
	}{
		{agent.Text("hi"), `{"type":"text","delta":"hi"}`},
		{agent.Thinking("hm"), `{"type":"thinking","delta":"hm"}`},
		{agent.ToolStarted("c1", "bash", json.RawMessage(`{"command":"ls"}`)), `{"type":"tool_started","id":"c1","name":"bash","args":{"command":"ls"}}`},
		{agent.ToolStarted("c1", "bash", nil), `{"type":"tool_started","id":"c1","name":"bash","args":{}}`},
		{agent.ToolEnded("c1", false, "ok"), `{"type":"tool_ended","id":"c1","isError":false,"content":"ok"}`},
		{agent.ToolProgress("c1", "bash", agent.Progress{Message: "step 2"}), `{"type":"tool_progress","callId":"c1","tool":"bash","message":"step 2"}`},
		{agent.ToolProgress("c1", "fetch", agent.Progress{Message: "rows", Progress: 3, Total: 10}),
			`{"type":"tool_progress","callId":"c1","tool":"fetch","message":"rows","progress":3,"total":10}`},
		{agent.Event{Type: agent.TypeRetrying, Attempt: 2, MaxAttempts: 6, DelayMs: 1500, Reason: "429"}, `{"type":"retrying","attempt":2,"maxAttempts":6,"delayMs":1500,"reason":"429"}`},
		{agent.ApprovalRequested("c1", "deploy", json.RawMessage(`{"env":"prod"}`), "sha256:a", "sha256:d", []string{"alice"},
			time.Date(2026, 12, 2, 17, 0, 0, 0, time.UTC)),
			`{"type":"approval_requested","id":"c1","name":"deploy","args":{"env":"prod"},"argsHash":"sha256:a","definitionHash":"sha256:d","approvers":["alice"],"deadline":"2026-12-02T17:00:00Z"}`},
		{agent.ApprovalResolved("c1", true, "alice", "", false), `{"type":"approval_resolved","id":"c1","approved":true,"by":"alice"}`},
		{agent.ApprovalResolved("c1", false, "", "no decision within 1h0m0s", true),
			`{"type":"approval_resolved","id":"c1","approved":false,"reason":"no decision within 1h0m0s","timedOut":true}`},
		{agent.QuestionAsked("c2", "Which region?", time.Date(2026, 12, 2, 17, 0, 0, 0, time.UTC)),
			`{"type":"question_asked","id":"c2","question":"Which region?","deadline":"2026-12-02T17:00:00Z"}`},
		{agent.QuestionAnswered("c2", "alice", false), `{"type":"question_answered","id":"c2","by":"alice"}`},
		{agent.HookRan("guard", "before_tool", "c1", "deny", "no rm -rf", ""),
			`{"type":"hook","hook":"guard","event":"before_tool","id":"c1","decision":"deny","reason":"no rm -rf"}`},
		{agent.HookRan("ctx", "turn_end", "", "allow", "", "it timed out after 10s"),
			`{"type":"hook","hook":"ctx","event":"turn_end","decision":"allow","error":"it timed out after 10s"}`},
		{agent.Completed(nil), `{"type":"completed"}`},
		{agent.Completed(json.RawMessage(`{"k":1}`)), `{"type":"completed","data":{"k":1}}`},
		{agent.Event{Type: agent.TypeCompleted, Usage: &agent.Usage{Input: 10, Output: 3, CacheRead: 4, Calls: 2}},
			`{"type":"completed","usage":{"input":10,"output":3,"cacheRead":4,"calls":2}}`},
		{agent.Failed("boom", false, ""), `{"type":"failed","details":"boom","retryable":false}`},
		{agent.Failed("busy", true, agent.CodeSessionBusy), `{"type":"failed","details":"busy","retryable":true,"code":"session_busy"}`},
	}
	for _, c := range cases {
		b, err := json.Marshal(c.ev)
		if err != nil {
			t.Fatalf("%s: %v", c.ev.Type, err)
		}
		if string(b) != c.want {
			t.Errorf("marshal %s:\n got %s\nwant %s", c.ev.Type, b, c.want)
		}
		var back agent.Event
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("unmarshal %s: %v", b, err)
		}
		b2, _ := json.Marshal(back)
		if string(b2) != c.want {
			t.Errorf("round trip %s: got %s", c.want, b2)
		}
	}
}

func TestUnknownEventPassesThrough(t *testing.T) {
	t.Parallel()
	in := `{"type":"usage","tokens":12,"model":"x"}`
	var ev agent.Event
	if err := json.Unmarshal([]byte(in), &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Type != "usage" || ev.IsTerminal() {
		t.Fatalf("got %+v", ev)
	}
	out, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	var a, b map[string]any
	_ = json.Unmarshal([]byte(in), &a)
	_ = json.Unmarshal(out, &b)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("relay changed an unknown event: %s -> %s", in, out)
	}
}

func TestDecodeErrors(t *testing.T) {
	t.Parallel()
	for _, in := range []string{`{}`, `[]`, `{"type":"text","delta":5}`, `not json`} {
		var ev agent.Event
		if err := json.Unmarshal([]byte(in), &ev); err == nil {
			t.Errorf("%s: want an error", in)
		}
	}
	if _, err := json.Marshal(agent.Event{}); err == nil {
		t.Error("marshal of an event without type: want an error")
	}
}

func seq(evs ...agent.Event) func(func(agent.Event) bool) {
	return func(yield func(agent.Event) bool) {
		for _, ev := range evs {
			if !yield(ev) {
				return
			}
		}
	}
}

func TestCollect(t *testing.T) {
	t.Parallel()
	res, err := agent.Collect(seq(agent.Text("par"), agent.Event{Type: agent.TypeRetrying, Attempt: 2}, agent.Text("hello "), agent.Text("world"), agent.Completed(json.RawMessage(`1`))))
	if err != nil || res.Text != "hello world" || string(res.Data) != "1" {
		t.Fatalf("Collect = %+v, %v", res, err)
	}
	_, err = agent.Collect(seq(agent.Text("x"), agent.Failed("nope", true, agent.CodeSessionBusy)))
	var f *agent.Failure
	if !errors.As(err, &f) || f.Details != "nope" || !f.Retryable || f.Code != agent.CodeSessionBusy {
		t.Fatalf("failed: %v", err)
	}
	_, err = agent.Collect(seq(agent.Text("x")))
	if !errors.As(err, &f) || f.Details == "" {
		t.Fatalf("no terminal: want a Failure, got %v", err)
	}
}

func TestAnswerKeepsFinishedSteps(t *testing.T) {
	evs := []agent.Event{
		{Type: agent.TypeText, Delta: "I'll check ", Step: 1},
		{Type: agent.TypeText, Delta: "the file.", Step: 1},
		agent.ToolStarted("c1", "read", nil),
		agent.ToolEnded("c1", false, "ok"),
		{Type: agent.TypeText, Delta: "The file sa", Step: 2},
		{Type: agent.TypeRetrying, Step: 2, Attempt: 2},
		{Type: agent.TypeText, Delta: "The file says hi.", Step: 2},
	}
	if got, want := agent.AnswerText(evs), "I'll check the file.The file says hi."; got != want {
		t.Fatalf("agent.AnswerText = %q, want %q", got, want)
	}
	// A retrying event without a step (older producers) drops everything.
	evs = append(evs, agent.Event{Type: agent.TypeRetrying}, agent.Event{Type: agent.TypeText, Delta: "again", Step: 2})
	if got := agent.AnswerText(evs); got != "again" {
		t.Fatalf("after a step-less retrying: %q, want %q", got, "again")
	}
	// agent.Collect keeps the same text.
	res, err := agent.Collect(func(yield func(agent.Event) bool) {
		for _, ev := range evs[:7] {
			if !yield(ev) {
				return
			}
		}
		yield(agent.Completed(nil))
	})
	if err != nil || res.Text != "I'll check the file.The file says hi." {
		t.Fatalf("agent.Collect = %q, %v", res.Text, err)
	}
}

func TestStepOnTheWire(t *testing.T) {
	for _, ev := range []agent.Event{
		{Type: agent.TypeText, Delta: "x", Step: 3},
		{Type: agent.TypeRetrying, Step: 2, Attempt: 2, MaxAttempts: 6, Reason: "cut"},
	} {
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"step":`) {
			t.Errorf("%s: no step in %s", ev.Type, b)
		}
		var back agent.Event
		if err := json.Unmarshal(b, &back); err != nil || back.Step != ev.Step {
			t.Errorf("%s: round trip step = %d (%v), want %d", ev.Type, back.Step, err, ev.Step)
		}
	}
	b, _ := json.Marshal(agent.Event{Type: agent.TypeText, Delta: "x", Seq: 9})
	if string(b) != `{"type":"text","delta":"x"}` {
		t.Errorf("text without step or seq on the wire: %s", b)
	}
}

func TestReportProgress(t *testing.T) {
	t.Parallel()
	agent.ReportProgress(t.Context(), agent.Progress{Message: "nobody listens"}) // no-op
	var got []agent.Progress
	ctx := agent.WithProgress(t.Context(), func(p agent.Progress) { got = append(got, p) })
	agent.ReportProgress(ctx, agent.Progress{Message: "half", Progress: 1, Total: 2})
	if len(got) != 1 || got[0].Message != "half" || got[0].Total != 2 {
		t.Fatalf("reported %+v", got)
	}
}
