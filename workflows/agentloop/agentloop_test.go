package agentloop_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// clock is the fake runtime's fixed time.
var clock = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// batch is one Tools call the fake runtime received.
type batch struct {
	calls      []agentloop.ToolCall
	sequential bool
}

// fakeRuntime is a scripted agentloop.Runtime that records every step.
type fakeRuntime struct {
	// model answers model steps; the default replies with no tool calls.
	model func(call agentloop.ModelCall) (agentloop.ModelResult, error)
	// tools answers batches; the default returns one plain outcome per call.
	tools func(calls []agentloop.ToolCall, sequential bool) ([]agentloop.ToolOutcome, error)
	// steer is returned by successive Steering calls (nil once exhausted).
	steer [][]string

	ids       int
	models    []agentloop.ModelCall
	batches   []batch
	steerings int
}

func (f *fakeRuntime) Model(call agentloop.ModelCall) (agentloop.ModelResult, error) {
	// Keep a copy: the loop must not rely on the runtime sharing its slices.
	call.Prepend = append([]transcript.Entry(nil), call.Prepend...)
	call.Activated = append([]string(nil), call.Activated...)
	f.models = append(f.models, call)
	if f.model != nil {
		return f.model(call)
	}
	return reply(call), nil
}

func (f *fakeRuntime) Tools(calls []agentloop.ToolCall, sequential bool) ([]agentloop.ToolOutcome, error) {
	f.batches = append(f.batches, batch{calls: append([]agentloop.ToolCall(nil), calls...), sequential: sequential})
	if f.tools != nil {
		return f.tools(calls, sequential)
	}
	return make([]agentloop.ToolOutcome, len(calls)), nil
}

func (f *fakeRuntime) Steering() []string {
	f.steerings++
	if len(f.steer) == 0 {
		return nil
	}
	s := f.steer[0]
	f.steer = f.steer[1:]
	return s
}

func (f *fakeRuntime) NewID() string {
	f.ids++
	return fmt.Sprintf("e%d", f.ids)
}

func (f *fakeRuntime) Now() time.Time { return clock }

// reply answers a model call with a stored reply that calls the given tools.
func reply(call agentloop.ModelCall, calls ...agentloop.Call) agentloop.ModelResult {
	stop := transcript.StopEnd
	if len(calls) > 0 {
		stop = transcript.StopToolUse
	}
	return agentloop.ModelResult{EntryID: call.EntryID, StopReason: stop, Calls: calls, Marker: "m-" + call.EntryID}
}

func known(id, name string) agentloop.Call { return agentloop.Call{ID: id, Name: name, Known: true} }

// toolsThenReply calls the given tools at the steps listed, and answers with
// text at any other step.
func toolsThenReply(byStep map[int][]agentloop.Call) func(agentloop.ModelCall) (agentloop.ModelResult, error) {
	return func(call agentloop.ModelCall) (agentloop.ModelResult, error) {
		return reply(call, byStep[call.Step]...), nil
	}
}

// TestRun drives the loop through a fake runtime and checks the outcome,
// the state it leaves and what each step was asked to do.
func TestRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		rt    *fakeRuntime
		state agentloop.State
		turn  agentloop.Turn
		// want* describe the outcome; models and batches count the steps.
		wantStatus   string
		wantCode     string
		wantDetails  string // a phrase of Details
		wantRetry    bool
		wantSteps    int
		wantModels   int
		wantBatches  int
		wantLeftover []string
		check        func(t *testing.T, rt *fakeRuntime, out agentloop.Outcome, st agentloop.State)
	}{
		{
			name:       "plain reply: the user entry goes below the leaf",
			rt:         &fakeRuntime{},
			state:      agentloop.State{Leaf: "root"},
			turn:       agentloop.Turn{ID: "t1", Prompt: agent.Prompt{Text: "hi", Images: []agent.Image{{MimeType: "image/png", Data: "aGk="}}}, Source: "http"},
			wantStatus: agent.TypeCompleted,
			wantSteps:  1,
			wantModels: 1,
			check: func(t *testing.T, rt *fakeRuntime, out agentloop.Outcome, st agentloop.State) {
				m := rt.models[0]
				equal(t, "call.Session", m.Session, "s1")
				equal(t, "call.Turn", m.Turn, "t1")
				equal(t, "call.Step", m.Step, 1)
				equal(t, "call.Leaf", m.Leaf, "root")
				if len(m.Prepend) != 1 {
					t.Fatalf("Prepend = %d entries, want the user entry", len(m.Prepend))
				}
				u := m.Prepend[0]
				equal(t, "user.ParentID", u.ParentID, "root")
				equal(t, "user.Type", u.Type, transcript.TypeMessage)
				equal(t, "user.Time", u.Time, clock)
				equal(t, "user.Role", u.Message.Role, transcript.RoleUser)
				equal(t, "user.Text", u.Message.Text, "hi")
				equal(t, "user.Source", u.Message.Source, "http")
				equal(t, "user.Images", u.Message.Images, []transcript.Image{{MimeType: "image/png", Data: "aGk="}})
				if m.EntryID == u.ID {
					t.Errorf("reply and user entry share ID %q", u.ID)
				}
				equal(t, "out.First", out.First, u.ID)
				equal(t, "out.Leaf", out.Leaf, m.EntryID)
				equal(t, "state.Leaf", st.Leaf, m.EntryID)
				equal(t, "out.Marker", out.Marker, "m-"+m.EntryID)
			},
		},
		{
			name:       "stored user entry: the first call hangs below it and carries no prompt",
			rt:         &fakeRuntime{},
			state:      agentloop.State{Leaf: "root"},
			turn:       agentloop.Turn{ID: "t1", Prompt: agent.Prompt{Text: "hi"}, Entry: &transcript.Entry{ID: "u1", ParentID: "root"}},
			wantStatus: agent.TypeCompleted,
			wantSteps:  1,
			wantModels: 1,
			check: func(t *testing.T, rt *fakeRuntime, out agentloop.Outcome, st agentloop.State) {
				equal(t, "call.Leaf", rt.models[0].Leaf, "u1")
				equal(t, "len(call.Prepend)", len(rt.models[0].Prepend), 0)
				equal(t, "out.First", out.First, "u1")
			},
		},
		{
			name: "parallel batch: results chain in source order below the reply",
			rt: &fakeRuntime{model: toolsThenReply(map[int][]agentloop.Call{
				1: {known("c1", "read"), known("c2", "grep")},
			})},
			state:       agentloop.State{Leaf: "root"},
			turn:        agentloop.Turn{ID: "t1", Prompt: agent.Prompt{Text: "look"}},
			wantStatus:  agent.TypeCompleted,
			wantSteps:   2,
			wantModels:  2,
			wantBatches: 1,
			check: func(t *testing.T, rt *fakeRuntime, out agentloop.Outcome, st agentloop.State) {
				b := rt.batches[0]
				equal(t, "sequential", b.sequential, false)
				if len(b.calls) != 2 {
					t.Fatalf("batch has %d calls, want 2", len(b.calls))
				}
				asst := rt.models[0].EntryID
				for i, c := range b.calls {
					equal(t, "call.Session", c.Session, "s1")
					equal(t, "call.Step", c.Step, 1)
					equal(t, "call.AssistantEntryID", c.AssistantEntryID, asst)
					if c.Synthetic != nil {
						t.Errorf("call %d: Synthetic = %+v, want a real run", i, c.Synthetic)
					}
				}
				equal(t, "c1.ID", b.calls[0].Call.ID, "c1")
				equal(t, "c2.ID", b.calls[1].Call.ID, "c2")
				equal(t, "c1.ParentID", b.calls[0].ParentID, asst)
				equal(t, "c2.ParentID", b.calls[1].ParentID, b.calls[0].ResultEntryID)
				ids := map[string]bool{asst: true, rt.models[1].EntryID: true, out.First: true, b.calls[0].ResultEntryID: true, b.calls[1].ResultEntryID: true}
				if len(ids) != 5 {
					t.Errorf("entry IDs are not unique: %v", ids)
				}
				equal(t, "step2.Leaf", rt.models[1].Leaf, b.calls[1].ResultEntryID)
				equal(t, "len(step2.Prepend)", len(rt.models[1].Prepend), 0)
				equal(t, "out.Leaf", out.Leaf, rt.models[1].EntryID)
			},
		},
		{
			name: "sequential: one sequential call makes the whole batch sequential",
			rt: &fakeRuntime{model: toolsThenReply(map[int][]agentloop.Call{
				1: {known("c1", "read"), {ID: "c2", Name: "edit", Known: true, Sequential: true}},
			})},
			wantStatus:  agent.TypeCompleted,
			wantSteps:   2,
			wantModels:  2,
			wantBatches: 1,
			check: func(t *testing.T, rt *fakeRuntime, _ agentloop.Outcome, _ agentloop.State) {
				equal(t, "sequential", rt.batches[0].sequential, true)
			},
		},
		{
			name: "unknown tool: answered with a synthetic error, known calls run",
			rt: &fakeRuntime{model: toolsThenReply(map[int][]agentloop.Call{
				1: {{ID: "c1", Name: "nope"}, known("c2", "read")},
			})},
			wantStatus:  agent.TypeCompleted,
			wantSteps:   2,
			wantModels:  2,
			wantBatches: 1,
			check: func(t *testing.T, rt *fakeRuntime, _ agentloop.Outcome, _ agentloop.State) {
				calls := rt.batches[0].calls
				if s := calls[0].Synthetic; s == nil || !s.IsError || s.Content != "Tool nope not found" {
					t.Errorf("unknown call: Synthetic = %+v, want error %q", s, "Tool nope not found")
				}
				if calls[1].Synthetic != nil {
					t.Errorf("known call: Synthetic = %+v, want a real run", calls[1].Synthetic)
				}
			},
		},
		{
			name: "truncated reply: every call is answered, none runs",
			rt: &fakeRuntime{model: func(call agentloop.ModelCall) (agentloop.ModelResult, error) {
				res := reply(call)
				if call.Step == 1 {
					res = reply(call, known("c1", "write"), known("c2", "read"))
					res.StopReason = transcript.StopLength
				}
				return res, nil
			}},
			wantStatus:  agent.TypeCompleted,
			wantSteps:   2,
			wantModels:  2,
			wantBatches: 1,
			check: func(t *testing.T, rt *fakeRuntime, _ agentloop.Outcome, _ agentloop.State) {
				for i, c := range rt.batches[0].calls {
					if c.Synthetic == nil || !c.Synthetic.IsError || !strings.Contains(c.Synthetic.Content, "output length limit") {
						t.Errorf("call %d: Synthetic = %+v, want the length-limit error", i, c.Synthetic)
					}
				}
			},
		},
		{
			name: "steering after a batch joins the next model call below the results",
			rt: &fakeRuntime{
				model: toolsThenReply(map[int][]agentloop.Call{1: {known("c1", "read")}}),
				steer: [][]string{{"also check B", "and C"}},
			},
			wantStatus:  agent.TypeCompleted,
			wantSteps:   2,
			wantModels:  2,
			wantBatches: 1,
			check: func(t *testing.T, rt *fakeRuntime, out agentloop.Outcome, _ agentloop.State) {
				res := rt.batches[0].calls[0].ResultEntryID
				m := rt.models[1]
				equal(t, "step2.Leaf", m.Leaf, res)
				if len(m.Prepend) != 2 {
					t.Fatalf("step 2 Prepend = %d entries, want 2 steering entries", len(m.Prepend))
				}
				equal(t, "steer1.ParentID", m.Prepend[0].ParentID, res)
				equal(t, "steer2.ParentID", m.Prepend[1].ParentID, m.Prepend[0].ID)
				for i, want := range []string{"also check B", "and C"} {
					e := m.Prepend[i]
					equal(t, "steer.Role", e.Message.Role, transcript.RoleUser)
					equal(t, "steer.Source", e.Message.Source, "steer")
					equal(t, "steer.Text", e.Message.Text, want)
				}
				equal(t, "out.First", out.First, rt.models[0].Prepend[0].ID)
			},
		},
		{
			name:       "steering after a final answer runs one more step",
			rt:         &fakeRuntime{steer: [][]string{{"one more thing"}}},
			wantStatus: agent.TypeCompleted,
			wantSteps:  2,
			wantModels: 2,
			check: func(t *testing.T, rt *fakeRuntime, out agentloop.Outcome, _ agentloop.State) {
				m := rt.models[1]
				equal(t, "step2.Leaf", m.Leaf, rt.models[0].EntryID)
				if len(m.Prepend) != 1 || m.Prepend[0].Message.Text != "one more thing" {
					t.Fatalf("step 2 Prepend = %+v, want the steering message", m.Prepend)
				}
				equal(t, "out.Leaf", out.Leaf, m.EntryID)
			},
		},
		{
			name:         "steering at the last allowed step is left over, not a failure",
			rt:           &fakeRuntime{steer: [][]string{{"too late"}}},
			state:        agentloop.State{Settings: agentloop.Settings{MaxSteps: 1}},
			wantStatus:   agent.TypeCompleted,
			wantSteps:    1,
			wantModels:   1,
			wantLeftover: []string{"too late"},
		},
		{
			name: "max steps: a model that keeps calling tools is stopped",
			rt: &fakeRuntime{model: func(call agentloop.ModelCall) (agentloop.ModelResult, error) {
				return reply(call, known(fmt.Sprintf("c%d", call.Step), "read")), nil
			}, steer: [][]string{nil, nil, {"pending steer"}}},
			state:        agentloop.State{Leaf: "root", Settings: agentloop.Settings{MaxSteps: 3}},
			wantStatus:   agent.TypeFailed,
			wantCode:     agent.CodeMaxSteps,
			wantDetails:  "after 3 model calls",
			wantSteps:    3,
			wantModels:   3,
			wantBatches:  3,
			wantLeftover: []string{"pending steer"},
			check: func(t *testing.T, rt *fakeRuntime, out agentloop.Outcome, st agentloop.State) {
				last := rt.batches[2].calls[0].ResultEntryID
				equal(t, "state.Leaf", st.Leaf, last)
				equal(t, "out.Leaf", out.Leaf, last)
			},
		},
		{
			name: "max steps read from the model's settings apply to the same turn",
			rt: &fakeRuntime{model: func(call agentloop.ModelCall) (agentloop.ModelResult, error) {
				res := reply(call, known(fmt.Sprintf("c%d", call.Step), "read"))
				res.Settings = agentloop.Settings{MaxSteps: 2, ModelAttempts: 4}
				return res, nil
			}},
			wantStatus:  agent.TypeFailed,
			wantCode:    agent.CodeMaxSteps,
			wantDetails: "after 2 model calls",
			wantSteps:   2,
			wantModels:  2,
			wantBatches: 2,
			check: func(t *testing.T, _ *fakeRuntime, _ agentloop.Outcome, st agentloop.State) {
				equal(t, "state.Settings", st.Settings, agentloop.Settings{MaxSteps: 2, ModelAttempts: 4})
			},
		},
		{
			name: "no max steps set: the default bound applies",
			rt: &fakeRuntime{model: func(call agentloop.ModelCall) (agentloop.ModelResult, error) {
				return reply(call, known(fmt.Sprintf("c%d", call.Step), "read")), nil
			}},
			wantStatus:  agent.TypeFailed,
			wantCode:    agent.CodeMaxSteps,
			wantDetails: fmt.Sprintf("after %d model calls", agentloop.DefaultMaxSteps),
			wantSteps:   agentloop.DefaultMaxSteps,
			wantModels:  agentloop.DefaultMaxSteps,
			wantBatches: agentloop.DefaultMaxSteps,
		},
		{
			name: "a failing first model call leaves the leaf where it was",
			rt: &fakeRuntime{model: func(agentloop.ModelCall) (agentloop.ModelResult, error) {
				return agentloop.ModelResult{}, &agent.Failure{Details: "bad key", Code: "auth"}
			}},
			state:       agentloop.State{Leaf: "root"},
			wantStatus:  agent.TypeFailed,
			wantCode:    "auth",
			wantDetails: "bad key",
			wantSteps:   1,
			wantModels:  1,
			check: func(t *testing.T, rt *fakeRuntime, out agentloop.Outcome, st agentloop.State) {
				equal(t, "state.Leaf", st.Leaf, "root")
				equal(t, "out.Leaf", out.Leaf, "root")
				equal(t, "out.First", out.First, rt.models[0].Prepend[0].ID)
			},
		},
		{
			name: "a plain error from the model is a retryable failure",
			rt: &fakeRuntime{model: func(agentloop.ModelCall) (agentloop.ModelResult, error) {
				return agentloop.ModelResult{}, errors.New("connection refused")
			}},
			wantStatus:  agent.TypeFailed,
			wantDetails: "connection refused",
			wantRetry:   true,
			wantSteps:   1,
			wantModels:  1,
		},
		{
			name: "a reply that stopped with an error fails the turn",
			rt: &fakeRuntime{model: func(call agentloop.ModelCall) (agentloop.ModelResult, error) {
				res := reply(call)
				res.StopReason, res.ErrorMessage = transcript.StopError, "overloaded"
				return res, nil
			}},
			wantStatus:  agent.TypeFailed,
			wantDetails: "model error: overloaded",
			wantRetry:   true,
			wantSteps:   1,
			wantModels:  1,
			check: func(t *testing.T, rt *fakeRuntime, _ agentloop.Outcome, st agentloop.State) {
				equal(t, "state.Leaf", st.Leaf, rt.models[0].EntryID)
			},
		},
		{
			name: "a failing batch ends the turn below its recorded results",
			rt: &fakeRuntime{
				model: toolsThenReply(map[int][]agentloop.Call{1: {known("c1", "read"), known("c2", "read")}}),
				tools: func(calls []agentloop.ToolCall, _ bool) ([]agentloop.ToolOutcome, error) {
					return make([]agentloop.ToolOutcome, len(calls)), &agent.Failure{Details: "aborted", Code: agent.CodeAborted}
				},
			},
			wantStatus:  agent.TypeFailed,
			wantCode:    agent.CodeAborted,
			wantDetails: "aborted",
			wantSteps:   1,
			wantModels:  1,
			wantBatches: 1,
			check: func(t *testing.T, rt *fakeRuntime, out agentloop.Outcome, st agentloop.State) {
				equal(t, "state.Leaf", st.Leaf, rt.batches[0].calls[1].ResultEntryID)
				equal(t, "out.Leaf", out.Leaf, rt.batches[0].calls[1].ResultEntryID)
			},
		},
		{
			name: "activated tools and tool markers carry forward",
			rt: &fakeRuntime{
				model: toolsThenReply(map[int][]agentloop.Call{
					1: {known("c1", "search_tools"), known("c2", "search_tools")},
					2: {known("c3", "web")},
				}),
				tools: func(calls []agentloop.ToolCall, _ bool) ([]agentloop.ToolOutcome, error) {
					outs := make([]agentloop.ToolOutcome, len(calls))
					for i, c := range calls {
						switch c.Call.ID {
						case "c1":
							outs[i].Activated = []string{"web", "mail"}
						case "c2":
							outs[i].Activated = []string{"mail", "calendar"}
						}
						outs[i].Marker = "tm-" + c.Call.ID
					}
					return outs, nil
				},
			},
			state:       agentloop.State{Activated: []string{"web"}},
			wantStatus:  agent.TypeCompleted,
			wantSteps:   3,
			wantModels:  3,
			wantBatches: 2,
			check: func(t *testing.T, rt *fakeRuntime, out agentloop.Outcome, st agentloop.State) {
				equal(t, "step1.Activated", rt.models[0].Activated, []string{"web"})
				want := []string{"web", "mail", "calendar"}
				equal(t, "step2.Activated", rt.models[1].Activated, want)
				equal(t, "state.Activated", st.Activated, want)
				// The last step's reply marker is the last event of the turn.
				equal(t, "out.Marker", out.Marker, "m-"+rt.models[2].EntryID)
			},
		},
		{
			name: "a failed batch keeps the marker of its last tool",
			rt: &fakeRuntime{
				model: toolsThenReply(map[int][]agentloop.Call{1: {known("c1", "read")}}),
				tools: func(calls []agentloop.ToolCall, _ bool) ([]agentloop.ToolOutcome, error) {
					return []agentloop.ToolOutcome{{Marker: "tm-c1"}}, errors.New("worker lost")
				},
			},
			wantStatus:  agent.TypeFailed,
			wantDetails: "worker lost",
			wantRetry:   true,
			wantSteps:   1,
			wantModels:  1,
			wantBatches: 1,
			check: func(t *testing.T, _ *fakeRuntime, out agentloop.Outcome, _ agentloop.State) {
				equal(t, "out.Marker", out.Marker, "tm-c1")
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := tt.state
			turn := tt.turn
			if turn.ID == "" {
				turn = agentloop.Turn{ID: "t1", Prompt: agent.Prompt{Text: "go"}}
			}
			out := agentloop.Run(tt.rt, "s1", &st, turn)
			equal(t, "out.Turn", out.Turn, turn.ID)
			equal(t, "out.Status", out.Status, tt.wantStatus)
			equal(t, "out.Code", out.Code, tt.wantCode)
			equal(t, "out.Retryable", out.Retryable, tt.wantRetry)
			equal(t, "out.Steps", out.Steps, tt.wantSteps)
			equal(t, "out.Leftover", out.Leftover, tt.wantLeftover)
			if tt.wantDetails == "" && out.Details != "" {
				t.Errorf("out.Details = %q, want none", out.Details)
			}
			if !strings.Contains(out.Details, tt.wantDetails) {
				t.Errorf("out.Details = %q, want it to contain %q", out.Details, tt.wantDetails)
			}
			equal(t, "model calls", len(tt.rt.models), tt.wantModels)
			equal(t, "tool batches", len(tt.rt.batches), tt.wantBatches)
			for i, m := range tt.rt.models {
				equal(t, "model call Step", m.Step, i+1)
			}
			if out.Leaf != st.Leaf {
				t.Errorf("out.Leaf = %q, state.Leaf = %q, want them equal", out.Leaf, st.Leaf)
			}
			if tt.check != nil {
				tt.check(t, tt.rt, out, st)
			}
		})
	}
}

// TestOutcomeEvent: the terminal event mirrors the outcome.
func TestOutcomeEvent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		out  agentloop.Outcome
		want agent.Event
	}{
		{"completed", agentloop.Outcome{Status: agent.TypeCompleted, Data: []byte(`{"a":1}`)}, agent.Completed([]byte(`{"a":1}`))},
		{"failed", agentloop.Outcome{Status: agent.TypeFailed, Details: "boom", Retryable: true, Code: "x"}, agent.Failed("boom", true, "x")},
		{"completed with usage", agentloop.Outcome{Status: agent.TypeCompleted, Usage: &agent.Usage{Input: 5, Calls: 1}},
			agent.Event{Type: agent.TypeCompleted, Usage: &agent.Usage{Input: 5, Calls: 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			equal(t, "Event", tt.out.Event(), tt.want)
		})
	}
}

func equal[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s = %#v, want %#v", what, got, want)
	}
}

// TestRunSumsUsage: the outcome sums the usage of every model step that
// reported one, and has none when no step did.
func TestRunSumsUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		usages []*agent.Usage // per step; the last step ends the turn
		want   *agent.Usage
	}{
		{"none reported", []*agent.Usage{nil, nil}, nil},
		{"one step", []*agent.Usage{{Input: 100, Output: 7, Calls: 1}}, &agent.Usage{Input: 100, Output: 7, Calls: 1}},
		{"tool step then answer", []*agent.Usage{{Input: 100, Output: 7, CacheWrite: 90, Calls: 1}, nil, {Input: 130, Output: 9, CacheRead: 90, Calls: 1}},
			&agent.Usage{Input: 230, Output: 16, CacheRead: 90, CacheWrite: 90, Calls: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rt := &fakeRuntime{model: func(call agentloop.ModelCall) (agentloop.ModelResult, error) {
				var res agentloop.ModelResult
				if call.Step < len(tt.usages) {
					res = reply(call, known(fmt.Sprintf("c%d", call.Step), "bash"))
				} else {
					res = reply(call)
				}
				res.Usage = tt.usages[call.Step-1]
				return res, nil
			}}
			out := agentloop.Run(rt, "s", &agentloop.State{}, agentloop.Turn{ID: "t", Prompt: agent.Prompt{Text: "hi"}})
			if out.Status != agent.TypeCompleted || out.Steps != len(tt.usages) {
				t.Fatalf("outcome %+v", out)
			}
			equal(t, "Usage", out.Usage, tt.want)
		})
	}
}

// TestRunAfterTools: only a step that follows a tool batch is AfterTools; a
// step that follows steering after a plain answer is a chat step.
func TestRunAfterTools(t *testing.T) {
	t.Parallel()
	rt := &fakeRuntime{
		model: toolsThenReply(map[int][]agentloop.Call{1: {known("c1", "bash")}}),
		steer: [][]string{nil, {"one more thing"}},
	}
	out := agentloop.Run(rt, "s", &agentloop.State{}, agentloop.Turn{ID: "t", Prompt: agent.Prompt{Text: "hi"}})
	if out.Status != agent.TypeCompleted || len(rt.models) != 3 {
		t.Fatalf("outcome %+v after %d model calls", out, len(rt.models))
	}
	var got []bool
	for _, m := range rt.models {
		got = append(got, m.AfterTools)
	}
	equal(t, "AfterTools", got, []bool{false, true, false})
}

// TestRunRefusesReusedCallIDs: a call whose ID an earlier step of the same
// turn used (run, refused or unknown) is marked Reused, with a message
// naming the ID, so the runtime records an error result instead of running
// it; fresh IDs of the same step run, and the next turn starts afresh.
func TestRunRefusesReusedCallIDs(t *testing.T) {
	t.Parallel()
	dup := known("d1", "bash")
	dup.Refused = "used twice"
	rt := &fakeRuntime{model: toolsThenReply(map[int][]agentloop.Call{
		1: {known("c1", "bash"), {ID: "u1", Name: "nope"}, dup, dup},
		2: {known("c2", "bash"), known("c1", "write")},
		3: {known("u1", "bash"), known("d1", "bash"), known("c3", "bash"), known("c2", "bash")},
	})}
	st := &agentloop.State{}
	out := agentloop.Run(rt, "s", st, agentloop.Turn{ID: "t", Prompt: agent.Prompt{Text: "hi"}})
	if out.Status != agent.TypeCompleted || len(rt.batches) != 3 {
		t.Fatalf("outcome %+v after %d batches", out, len(rt.batches))
	}
	reused := func(b int) []string {
		var ids []string
		for _, c := range rt.batches[b].calls {
			if c.Call.Reused != "" {
				ids = append(ids, c.Call.ID)
				if !strings.Contains(c.Call.Reused, `"`+c.Call.ID+`"`) || !strings.Contains(c.Call.Reused, "already used") {
					t.Errorf("call %s: Reused %q does not name the ID", c.Call.ID, c.Call.Reused)
				}
			}
		}
		return ids
	}
	equal(t, "reused in step 1", reused(0), []string(nil))
	equal(t, "reused in step 2", reused(1), []string{"c1"})
	equal(t, "reused in step 3", reused(2), []string{"u1", "d1", "c2"})
	// Another turn may use the IDs again.
	rt.batches, rt.models = nil, nil
	rt.model = toolsThenReply(map[int][]agentloop.Call{1: {known("c1", "bash")}})
	agentloop.Run(rt, "s", st, agentloop.Turn{ID: "t2", Prompt: agent.Prompt{Text: "again"}})
	equal(t, "reused in the next turn", reused(0), []string(nil))
}
