package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
)

// Result is a successful turn consumed whole.
type Result struct {
	Text string
	Data json.RawMessage
}

// Failure is a failed turn as an error: what Collect returns for a failed
// terminal (or a stream that ended without one), and what a loop step
// returns when it cannot complete (the loop turns it into the failed
// terminal's details, code and retryability).
type Failure struct {
	Details   string
	Retryable bool
	Code      string
}

func (f *Failure) Error() string {
	if f.Code != "" {
		return fmt.Sprintf("agent: turn failed (%s): %s", f.Code, f.Details)
	}
	return "agent: turn failed: " + f.Details
}

// ErrNoTerminal is wrapped by the Failure Collect returns when the stream
// ended without completed or failed.
var ErrNoTerminal = errors.New("stream ended without a terminal event")

// Collect consumes a stream and returns its answer text, or a *Failure.
func Collect(events iter.Seq[Event]) (Result, error) {
	var text Answer
	for ev := range events {
		switch ev.Type {
		case TypeCompleted:
			return Result{Text: text.String(), Data: ev.Data}, nil
		case TypeFailed:
			return Result{}, &Failure{Details: ev.Details, Retryable: ev.Retryable, Code: ev.Code}
		default:
			text.Add(ev)
		}
	}
	return Result{}, &Failure{Details: ErrNoTerminal.Error(), Retryable: true}
}

// AnswerText is the answer a client keeps from a list of events: the text
// deltas of every step, where a retrying event drops the partial text of the
// step it restarts (see Answer).
func AnswerText(evs []Event) string {
	var a Answer
	for _, ev := range evs {
		a.Add(ev)
	}
	return a.String()
}

// Answer accumulates a turn's answer text from its events, step by step: a
// retrying event drops only the text of the step it names (all text when it
// names none, as older producers send it), so text that finished steps
// streamed before a tool call survives a later step's retry. Text is kept in
// step order, so a step re-sent after a later one (filled in from the store)
// still lands in its place.
type Answer struct {
	steps map[int]*strings.Builder
}

// Add takes one event; only text and retrying events matter.
func (a *Answer) Add(ev Event) {
	switch ev.Type {
	case TypeText:
		if a.steps == nil {
			a.steps = map[int]*strings.Builder{}
		}
		b := a.steps[ev.Step]
		if b == nil {
			b = &strings.Builder{}
			a.steps[ev.Step] = b
		}
		b.WriteString(ev.Delta)
	case TypeRetrying:
		if ev.Step == 0 {
			a.steps = nil
			return
		}
		delete(a.steps, ev.Step)
	}
}

// String returns the text kept so far, in step order.
func (a *Answer) String() string {
	keys := make([]int, 0, len(a.steps))
	for k := range a.steps {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(a.steps[k].String())
	}
	return b.String()
}
