// Package waketools implements the wake and unwake tools (enabled by
// `selfSchedule: true`): they validate a request against the current time
// and the session's pending wake-ups and describe it as a wakes.Directive;
// the session workflow turns it into a durable timer.
package waketools

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/workflows/wakes"
)

// Pending is what the tools know about the session's pending wake-ups; the
// runtime puts it in the tool's context.
type Pending struct {
	IDs []string
	// NextID is the ID a new wake-up gets.
	NextID string
}

type pendingKey struct{}

// WithPending attaches the session's pending wake-ups to ctx.
func WithPending(ctx context.Context, p Pending) context.Context {
	return context.WithValue(ctx, pendingKey{}, p)
}

func pendingFrom(ctx context.Context) (Pending, bool) {
	p, ok := ctx.Value(pendingKey{}).(Pending)
	return p, ok
}

// Options bound self-scheduling; zero values take the defaults.
type Options struct {
	MinOneShot  time.Duration
	MinInterval time.Duration
	MaxPending  int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	if o.MinOneShot <= 0 {
		o.MinOneShot = wakes.DefaultMinOneShot
	}
	if o.MinInterval <= 0 {
		o.MinInterval = wakes.DefaultMinInterval
	}
	if o.MaxPending <= 0 {
		o.MaxPending = wakes.DefaultMaxPending
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Tools returns the wake and unwake tools.
func Tools(opts Options) []agent.Tool {
	o := opts.withDefaults()
	return []agent.Tool{wakeTool{o}, unwakeTool{o}}
}

type wakeTool struct{ o Options }

func (w wakeTool) Spec() agent.ToolSpec {
	return agent.ToolSpec{
		Name: wakes.WakeName,
		Description: "Schedule your own future turn in this session. Give either `in` (a duration like \"30m\" or a number of seconds, " +
			"at least " + w.o.MinOneShot.String() + " ahead) or `cron` (5 fields) with an optional IANA `tz` for a recurring wake-up " +
			"(at least " + w.o.MinInterval.String() + " apart), and the `prompt` you want to receive then. Returns the wake-up's id.",
		Parameters: json.RawMessage(`{"type":"object","properties":{` +
			`"in":{"type":["string","number"],"description":"delay: \"90s\", \"30m\", \"2h\" or seconds"},` +
			`"cron":{"type":"string","description":"recurring: 5-field cron"},` +
			`"tz":{"type":"string","description":"IANA time zone for cron (default UTC)"},` +
			`"prompt":{"type":"string","description":"what your woken turn should do"}},"required":["prompt"]}`),
		Sequential: true,
	}
}

func (w wakeTool) Run(ctx context.Context, call agent.ToolCall) (agent.ToolResult, error) {
	var args struct {
		In     json.RawMessage `json:"in"`
		Cron   string          `json:"cron"`
		TZ     string          `json:"tz"`
		Prompt string          `json:"prompt"`
	}
	if err := json.Unmarshal(call.Args, &args); err != nil {
		return fail("invalid arguments: %v", err), nil
	}
	p, ok := pendingFrom(ctx)
	if !ok {
		return fail("wake-ups are only available inside a durable session"), nil
	}
	if strings.TrimSpace(args.Prompt) == "" {
		return fail("prompt is required: say what your woken turn should do"), nil
	}
	if len(p.IDs) >= w.o.MaxPending {
		return fail("this session already has %d pending wake-ups (the limit); cancel one with unwake first", len(p.IDs)), nil
	}
	hasIn := len(args.In) > 0 && string(args.In) != "null"
	if hasIn == (args.Cron != "") {
		return fail("give exactly one of `in` (one-shot delay) or `cron` (recurring)"), nil
	}
	now := w.o.Now().UTC()
	wk := wakes.Wake{ID: p.NextID, Prompt: args.Prompt}
	if hasIn {
		d, err := parseDelay(args.In)
		if err != nil {
			return fail("%v", err), nil
		}
		if d < w.o.MinOneShot {
			return fail("a one-shot wake-up must be at least %s ahead (got %s)", w.o.MinOneShot, d), nil
		}
		wk.FireAt = now.Add(d)
	} else {
		first, err := wakes.Next(args.Cron, args.TZ, now)
		if err != nil {
			return fail("%v", err), nil
		}
		second, _ := wakes.Next(args.Cron, args.TZ, first)
		if gap := second.Sub(first); gap < w.o.MinInterval {
			return fail("a recurring wake-up must be at least %s between its first two instants (got %s)", w.o.MinInterval, gap), nil
		}
		wk.FireAt, wk.Cron, wk.TZ = first, args.Cron, args.TZ
		if wk.TZ == "" {
			wk.TZ = "UTC"
		}
	}
	details, _ := json.Marshal(wakes.Directive{Wake: &wk})
	msg := fmt.Sprintf("Wake-up %s scheduled for %s", wk.ID, wk.FireAt.Format(time.RFC3339))
	if wk.Recurring() {
		msg += fmt.Sprintf(", then on cron %q (%s)", wk.Cron, wk.TZ)
	}
	return agent.ToolResult{Content: msg + ". Cancel it with unwake {\"id\":\"" + wk.ID + "\"}.", Details: details}, nil
}

type unwakeTool struct{ o Options }

func (unwakeTool) Spec() agent.ToolSpec {
	return agent.ToolSpec{
		Name:        wakes.UnwakeName,
		Description: "Cancel one of your pending wake-ups in this session by id.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}`),
		Sequential:  true,
	}
}

func (unwakeTool) Run(ctx context.Context, call agent.ToolCall) (agent.ToolResult, error) {
	var args struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(call.Args, &args); err != nil {
		return fail("invalid arguments: %v", err), nil
	}
	p, ok := pendingFrom(ctx)
	if !ok {
		return fail("wake-ups are only available inside a durable session"), nil
	}
	for _, id := range p.IDs {
		if id == args.ID {
			details, _ := json.Marshal(wakes.Directive{Unwake: id})
			return agent.ToolResult{Content: "Wake-up " + id + " cancelled.", Details: details}, nil
		}
	}
	return fail("no pending wake-up with id %q in this session (pending: %s)", args.ID, strings.Join(p.IDs, ", ")), nil
}

func fail(format string, args ...any) agent.ToolResult {
	return agent.ToolResult{IsError: true, Content: fmt.Sprintf(format, args...)}
}

// parseDelay accepts "30m", "90s", "1h30m", 90 or "90".
func parseDelay(raw json.RawMessage) (time.Duration, error) {
	var n float64
	if json.Unmarshal(raw, &n) == nil {
		return time.Duration(n * float64(time.Second)), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return 0, fmt.Errorf("`in` must be a duration like \"30m\" or a number of seconds")
	}
	if secs, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil {
		return time.Duration(secs * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("`in`: %q is not a duration like \"30m\" or a number of seconds", s)
	}
	return d, nil
}
