package channels

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/fastagent/fastagent/agent"
)

// View is a turn's reply as a chat platform shows it while the turn runs:
// the answer text so far, the tools in use and whether the model is
// thinking. Raw thinking text and tool arguments are never part of it —
// they stay on the worker.
type View struct {
	// steps holds each model step's text; a retried step starts over.
	steps []string
	// Tools are the turn's tool calls in start order.
	Tools []ToolView
	// Thinking is set while the model streams thinking and no text yet.
	Thinking bool
	// Queued is set while the turn waits behind another turn of its
	// session; a renderer may mount its reply early with that state.
	Queued bool
	// Changes counts the changes applied.
	Changes int
}

// ToolView is one tool call as a chat shows it.
type ToolView struct {
	ID string
	// Name is what the chat shows: the tool's name or, while a delegate
	// call's sub-agent answers, "<agent>: <its latest words>".
	Name string
	// Status is "running", "done" or "error".
	Status string
	// Progress is the latest line the running call reported about itself
	// (tool_progress), "" when none; a chat shows it under the call.
	Progress string
}

// Tool statuses.
const (
	ToolRunning = "running"
	ToolDone    = "done"
	ToolError   = "error"
)

// Text is the answer so far: the steps' texts, trimmed, joined by a blank
// line (as the final answer is).
func (v *View) Text() string {
	var parts []string
	for _, s := range v.steps {
		if s = strings.TrimSpace(s); s != "" {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, "\n\n")
}

// Apply folds one relayed event into the view and reports whether it
// changed.
func (v *View) Apply(ev agent.Event) bool {
	v.Queued = false
	switch ev.Type {
	case agent.TypeText:
		if ev.Delta == "" {
			return false
		}
		s := v.step(ev.Step)
		v.steps[s] += ev.Delta
		v.Thinking = false
	case agent.TypeThinking:
		if v.Thinking {
			return false
		}
		v.Thinking = true
	case agent.TypeRetrying:
		s := v.step(ev.Step)
		if v.steps[s] == "" {
			return false
		}
		v.steps[s] = ""
	case agent.TypeToolStarted:
		for _, t := range v.Tools {
			if t.ID == ev.ID {
				return false
			}
		}
		v.Tools = append(v.Tools, ToolView{ID: ev.ID, Name: ev.Name, Status: ToolRunning})
		v.Thinking = false
	case agent.TypeToolEnded:
		st := ToolDone
		if ev.IsError {
			st = ToolError
		}
		found := false
		for i := range v.Tools {
			if v.Tools[i].ID == ev.ID {
				if v.Tools[i].Status == st {
					return false
				}
				v.Tools[i].Status, found = st, true
			}
		}
		if !found {
			v.Tools = append(v.Tools, ToolView{ID: ev.ID, Name: ev.Name, Status: st})
		}
	case agent.TypeToolProgress:
		if !v.progress(ev) {
			return false
		}
	case agent.TypeDelegated:
		if !v.delegated(ev) {
			return false
		}
	default:
		return false
	}
	v.Changes++
	return true
}

// progressLen bounds the sub-agent's words a delegate call's line shows.
const progressLen = 80

// delegated shows a sub-agent's text on its delegate call's line: the
// agent and the end of what it has said so far (of its current line).
func (v *View) delegated(ev agent.Event) bool {
	sub := ev.Sub
	for sub != nil && sub.Type == agent.TypeDelegated {
		sub = sub.Sub
	}
	if sub == nil || sub.Type != agent.TypeText || ev.Agent == "" {
		return false
	}
	for i := range v.Tools {
		t := &v.Tools[i]
		if t.ID != ev.ID || t.Status != ToolRunning {
			continue
		}
		said := ""
		if prefix := ev.Agent + ": "; strings.HasPrefix(t.Name, prefix) {
			said = strings.TrimPrefix(t.Name, prefix)
		}
		said += sub.Delta
		if j := strings.LastIndexByte(strings.TrimRight(said, "\n"), '\n'); j >= 0 {
			said = said[j+1:]
		}
		if r := []rune(said); len(r) > progressLen {
			said = "…" + string(r[len(r)-progressLen:])
		}
		t.Name = ev.Agent + ": " + said
		return true
	}
	return false
}

// progress shows a running call's latest report on its line: the message,
// with "(progress/total)" when it counts.
func (v *View) progress(ev agent.Event) bool {
	line := ev.Content
	if ev.Total > 0 {
		line = strings.TrimSpace(fmt.Sprintf("%s (%g/%g)", line, ev.Progress, ev.Total))
	} else if line == "" && ev.Progress > 0 {
		line = fmt.Sprintf("%g", ev.Progress)
	}
	for i := range v.Tools {
		t := &v.Tools[i]
		if t.ID != ev.ID || t.Status != ToolRunning {
			continue
		}
		if t.Progress == line {
			return false
		}
		t.Progress = line
		return true
	}
	return false
}

// ProgressLine is how a chat shows a running call's progress under it: the
// line, cut to progressLen characters (keeping its end), or "" when there
// is none.
func (t ToolView) ProgressLine() string {
	if t.Status != ToolRunning || t.Progress == "" {
		return ""
	}
	if r := []rune(t.Progress); len(r) > progressLen {
		return "…" + string(r[len(r)-progressLen:])
	}
	return t.Progress
}

// step returns the index of step n (1-based; 0 means the last one),
// growing the list as needed.
func (v *View) step(n int) int {
	if n <= 0 {
		if len(v.steps) == 0 {
			v.steps = append(v.steps, "")
		}
		return len(v.steps) - 1
	}
	for len(v.steps) < n {
		v.steps = append(v.steps, "")
	}
	return n - 1
}

// PrettyJSON indents a tool call's arguments for people to read (as they
// are, when they are not JSON).
func PrettyJSON(raw json.RawMessage) string {
	var out bytes.Buffer
	if json.Indent(&out, raw, "", "  ") != nil {
		return string(raw)
	}
	return out.String()
}
