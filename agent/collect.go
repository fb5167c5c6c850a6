package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"
)

// Result is a successful turn consumed whole.
type Result struct {
	Text string
	Data json.RawMessage
}

// Failure is the error Collect returns for a failed turn or a stream that
// ended without a terminal.
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
	var text strings.Builder
	for ev := range events {
		switch ev.Type {
		case TypeText:
			text.WriteString(ev.Delta)
		case TypeRetrying:
			// Advisory: the partial answer so far is superseded.
			text.Reset()
		case TypeCompleted:
			return Result{Text: text.String(), Data: ev.Data}, nil
		case TypeFailed:
			return Result{}, &Failure{Details: ev.Details, Retryable: ev.Retryable, Code: ev.Code}
		}
	}
	return Result{}, &Failure{Details: ErrNoTerminal.Error(), Retryable: true}
}

// AnswerText is the answer a client keeps from a list of events: the text
// deltas after the last retrying event (which tells clients to drop the
// partial answer before it).
func AnswerText(evs []Event) string {
	var b strings.Builder
	for _, ev := range evs {
		switch ev.Type {
		case TypeRetrying:
			b.Reset()
		case TypeText:
			b.WriteString(ev.Delta)
		}
	}
	return b.String()
}
