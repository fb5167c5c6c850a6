package agentloop_test

import (
	"strings"
	"testing"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// hookRuntime is a fakeRuntime that runs hooks: answer decides each hook
// step, and every step is recorded.
type hookRuntime struct {
	fakeRuntime
	answer func(call agentloop.HookCall) agentloop.HookResult
	hooks  []agentloop.HookCall
}

func (h *hookRuntime) Hook(call agentloop.HookCall) agentloop.HookResult {
	h.hooks = append(h.hooks, call)
	if h.answer != nil {
		return h.answer(call)
	}
	return agentloop.HookResult{Decision: agentloop.HookAllow}
}

func hookEvents(calls []agentloop.HookCall) string {
	var s []string
	for _, c := range calls {
		s = append(s, c.Event)
	}
	return strings.Join(s, ",")
}

// hookTexts are the texts of the hook entries a model call carries.
func hookTexts(call agentloop.ModelCall) []string {
	var out []string
	for _, e := range call.Prepend {
		if e.Message != nil && e.Message.Source == agentloop.HookSource {
			out = append(out, e.Message.Text)
		}
	}
	return out
}

func withHooks(hooks string) agentloop.State {
	return agentloop.State{Leaf: "root", Settings: agentloop.Settings{Hooks: hooks}}
}

// The loop runs a hook step only for the events the settings name, and
// applies each decision: before_agent_start context joins the first
// step's entries, its stop ends the turn before any model call; turn_end
// context makes the model go on (bounded by maxSteps); tool outcomes'
// notes reach the next step and a stop ends the turn after the batch.
func TestHookDecisions(t *testing.T) {
	t.Parallel()
	turn := agentloop.Turn{ID: "t1", Prompt: agent.Prompt{Text: "hi"}}

	t.Run("no hooks in the settings: no hook step", func(t *testing.T) {
		t.Parallel()
		rt := &hookRuntime{}
		st := withHooks("")
		out := agentloop.Run(rt, "s", &st, turn)
		if out.Status != agent.TypeCompleted || len(rt.hooks) != 0 {
			t.Fatalf("status %s, hook steps %q; want completed with none", out.Status, hookEvents(rt.hooks))
		}
		if rt.models[0].End == nil {
			t.Errorf("the step cannot end the turn (End nil) though no turn_end hook runs")
		}
	})

	t.Run("before_agent_start context", func(t *testing.T) {
		t.Parallel()
		rt := &hookRuntime{answer: func(agentloop.HookCall) agentloop.HookResult {
			return agentloop.HookResult{Decision: agentloop.HookAllow, Context: "The user is on call this week."}
		}}
		st := withHooks("before_agent_start:deny")
		out := agentloop.Run(rt, "s", &st, turn)
		if out.Status != agent.TypeCompleted || hookEvents(rt.hooks) != "before_agent_start" {
			t.Fatalf("status %s, hook steps %q", out.Status, hookEvents(rt.hooks))
		}
		if c := rt.hooks[0]; c.Session != "s" || c.Turn != "t1" || c.Step != 1 || c.OnError != agentloop.HookDeny {
			t.Errorf("hook call %+v", c)
		}
		got := hookTexts(rt.models[0])
		if len(got) != 1 || got[0] != "The user is on call this week." {
			t.Errorf("first step's hook entries %q", got)
		}
		if p := rt.models[0].Prepend; len(p) != 2 || p[0].Message.Role != transcript.RoleUser || p[0].Message.Text != "hi" || p[1].ParentID != p[0].ID {
			t.Errorf("the prompt then the hook's text, chained: %+v", p)
		}
	})

	t.Run("before_agent_start stop", func(t *testing.T) {
		t.Parallel()
		rt := &hookRuntime{answer: func(agentloop.HookCall) agentloop.HookResult {
			return agentloop.HookResult{Decision: agentloop.HookStop, Hook: "gate", Reason: "outside office hours"}
		}}
		st := withHooks("before_agent_start")
		out := agentloop.Run(rt, "s", &st, turn)
		if out.Status != agent.TypeCompleted || out.Steps != 0 || len(rt.models) != 0 {
			t.Fatalf("status %s, steps %d, model calls %d; want completed without a model call", out.Status, out.Steps, len(rt.models))
		}
		if st.Leaf != "root" || out.Leaf != "root" {
			t.Errorf("leaf %q / %q, want it unchanged", st.Leaf, out.Leaf)
		}
	})

	t.Run("turn_end context continues, bounded by maxSteps", func(t *testing.T) {
		t.Parallel()
		rt := &hookRuntime{answer: func(c agentloop.HookCall) agentloop.HookResult {
			return agentloop.HookResult{Decision: agentloop.HookAllow, Context: "Run the tests before you finish."}
		}}
		st := withHooks("turn_end")
		st.Settings.MaxSteps = 3
		out := agentloop.Run(rt, "s", &st, turn)
		if out.Status != agent.TypeCompleted || out.Steps != 3 || len(rt.models) != 3 {
			t.Fatalf("status %s %s, steps %d, model calls %d; want completed after 3", out.Status, out.Details, out.Steps, len(rt.models))
		}
		if hookEvents(rt.hooks) != "turn_end,turn_end,turn_end" {
			t.Errorf("hook steps %q", hookEvents(rt.hooks))
		}
		for i, m := range rt.models {
			if m.End != nil {
				t.Errorf("step %d may end the turn (End %+v): its turn_end hooks must hear of the end first", i+1, m.End)
			}
		}
		if rt.hooks[0].EntryID != rt.models[0].EntryID {
			t.Errorf("turn_end told about %q, want the reply %q", rt.hooks[0].EntryID, rt.models[0].EntryID)
		}
		if got := hookTexts(rt.models[1]); len(got) != 1 || got[0] != "Run the tests before you finish." {
			t.Errorf("second step's hook entries %q", got)
		}
	})

	t.Run("turn_end allow ends the turn", func(t *testing.T) {
		t.Parallel()
		rt := &hookRuntime{}
		st := withHooks("turn_end")
		out := agentloop.Run(rt, "s", &st, turn)
		if out.Status != agent.TypeCompleted || len(rt.models) != 1 || hookEvents(rt.hooks) != "turn_end" {
			t.Fatalf("status %s, model calls %d, hook steps %q", out.Status, len(rt.models), hookEvents(rt.hooks))
		}
	})

	t.Run("tool notes reach the next step, a stop ends the turn", func(t *testing.T) {
		t.Parallel()
		rt := &hookRuntime{}
		rt.model = toolsThenReply(map[int][]agentloop.Call{1: {known("c1", "bash")}, 2: {known("c2", "bash")}})
		rt.tools = func(calls []agentloop.ToolCall, _ bool) ([]agentloop.ToolOutcome, error) {
			if calls[0].Call.ID == "c1" {
				return []agentloop.ToolOutcome{{Note: "The hook lint rejected the result."}}, nil
			}
			return []agentloop.ToolOutcome{{Stop: "budget spent (hook meter)"}}, nil
		}
		st := withHooks("")
		out := agentloop.Run(rt, "s", &st, turn)
		if out.Status != agent.TypeCompleted || len(rt.models) != 2 || len(rt.batches) != 2 {
			t.Fatalf("status %s, model calls %d, batches %d; want completed after the second batch", out.Status, len(rt.models), len(rt.batches))
		}
		if got := hookTexts(rt.models[1]); len(got) != 1 || got[0] != "The hook lint rejected the result." {
			t.Errorf("second step's hook entries %q", got)
		}
		if want := rt.batches[1].calls[0].ResultEntryID; st.Leaf != want {
			t.Errorf("leaf %q, want the stopped batch's last result %q", st.Leaf, want)
		}
	})

	t.Run("a runtime without hooks runs none", func(t *testing.T) {
		t.Parallel()
		rt := &fakeRuntime{}
		st := withHooks("before_agent_start,turn_end")
		if out := agentloop.Run(rt, "s", &st, turn); out.Status != agent.TypeCompleted || len(rt.models) != 1 {
			t.Fatalf("status %s, model calls %d", out.Status, len(rt.models))
		}
	})
}

func TestHookOnError(t *testing.T) {
	t.Parallel()
	s := agentloop.Settings{Hooks: "before_agent_start:deny,turn_end"}
	for ev, want := range map[string]string{"before_agent_start": "deny", "turn_end": "allow", "before_compact": "", "": ""} {
		if got := s.HookOnError(ev); got != want {
			t.Errorf("HookOnError(%q) = %q, want %q", ev, got, want)
		}
	}
}
