// Package wakes holds the workflow-safe part of an agent's self-scheduling:
// the wake-up the session workflow keeps, the directive a wake/unwake call
// returns, the bounds, and the arithmetic of one-shot and recurring (cron +
// time zone) wake-ups. It reads no clock; the tools that do (and validate a
// request against the current time) are in internal/waketools. The workflow
// turns a wake-up into a durable timer, so it survives worker restarts and
// continue-as-new without any poller or side file.
package wakes

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
)

// Tool names.
const (
	WakeName   = "wake"
	UnwakeName = "unwake"
)

// Bounds on self-scheduling (FastAgent's).
const (
	DefaultMinOneShot  = 60 * time.Second
	DefaultMinInterval = 10 * time.Minute
	DefaultMaxPending  = 20
)

// Wake is a pending wake-up as the session workflow keeps it.
type Wake struct {
	ID     string    `json:"id"`
	Prompt string    `json:"prompt"`
	FireAt time.Time `json:"fireAt"`
	// Cron and TZ are set for a recurring wake-up.
	Cron  string `json:"cron,omitempty"`
	TZ    string `json:"tz,omitempty"`
	Fired int    `json:"fired,omitempty"`
}

// Recurring reports whether the wake-up repeats.
func (w Wake) Recurring() bool { return w.Cron != "" }

// Directive is what a wake/unwake call asks the workflow to do; the tools
// put it in ToolResult.Details under "wake" or "unwake".
type Directive struct {
	Wake   *Wake  `json:"wake,omitempty"`
	Unwake string `json:"unwake,omitempty"`
}

// ParseDirective reads a directive from tool result details.
func ParseDirective(details json.RawMessage) (Directive, bool) {
	var d Directive
	if len(details) == 0 || json.Unmarshal(details, &d) != nil {
		return Directive{}, false
	}
	return d, d.Wake != nil || d.Unwake != ""
}

// Envelope wraps a woken prompt so the model knows it is its own wake-up.
func Envelope(id, prompt string) string {
	return fmt.Sprintf("[wake-up %s fired — YOUR self-scheduled turn, not a user message] %s", id, prompt)
}

// Next returns the first instant of cron in tz strictly after t.
func Next(spec, tz string, after time.Time) (time.Time, error) {
	sched, loc, err := parse(spec, tz)
	if err != nil {
		return time.Time{}, err
	}
	return sched.Next(after.In(loc)).UTC(), nil
}

func parse(spec, tz string) (cron.Schedule, *time.Location, error) {
	if tz == "" {
		tz = "UTC"
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, nil, fmt.Errorf("unknown time zone %q (use an IANA name like Europe/Berlin)", tz)
	}
	sched, err := cron.ParseStandard(spec)
	if err != nil {
		return nil, nil, fmt.Errorf("bad cron %q: %w (use 5 fields: minute hour day-of-month month day-of-week)", spec, err)
	}
	return sched, loc, nil
}
