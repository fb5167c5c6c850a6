package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/httpagent"
)

// Received is an event as an SSE client read it, with its arrival time.
type Received struct {
	agent.Event
	At time.Time
}

// Events returns the events without their times.
func Events(rs []Received) []agent.Event {
	out := make([]agent.Event, len(rs))
	for i, r := range rs {
		out[i] = r.Event
	}
	return out
}

// httpClient keeps connections alive between invokes (no pooling limit
// surprises under concurrency).
var httpClient = &http.Client{Transport: &http.Transport{
	MaxIdleConns:        1024,
	MaxIdleConnsPerHost: 1024,
	IdleConnTimeout:     90 * time.Second,
}}

// Token is the API token InvokeHTTP sends (none when "").
var Token string

// InvokeHTTP posts a turn to base+"/invoke" and reads the SSE stream to its
// end, calling each (when not nil) as every event arrives. key, when not
// empty, is sent as the Idempotency-Key. A stream cut before a terminal
// returns the events read so far and an error.
func InvokeHTTP(ctx context.Context, base, session, text, key string, each func(Received)) ([]Received, error) {
	body, _ := json.Marshal(map[string]string{"session": session, "text": text})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/invoke", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if Token != "" {
		req.Header.Set("Authorization", "Bearer "+Token)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, &StatusError{Status: resp.StatusCode, Text: resp.Status, Body: strings.TrimSpace(string(b)), RetryAfter: resp.Header.Get("Retry-After")}
	}
	var out []Received
	for ev, err := range httpagent.ReadSSE(resp.Body) {
		if err != nil {
			return out, err
		}
		r := Received{Event: ev, At: time.Now()}
		out = append(out, r)
		if each != nil {
			each(r)
		}
	}
	if n := len(out); n == 0 || !out[n-1].IsTerminal() {
		return out, errors.New("stream ended without a terminal event")
	}
	return out, nil
}

// StatusError is a POST /invoke answered with a status other than 200.
type StatusError struct {
	Status     int    // the HTTP status code
	Text       string // the status line ("429 Too Many Requests")
	Body       string // the start of the body
	RetryAfter string // the Retry-After header, if any
}

func (e *StatusError) Error() string { return fmt.Sprintf("POST /invoke: %s: %s", e.Text, e.Body) }

// InvokeAgent runs one turn through a in process, timing each event.
func InvokeAgent(ctx context.Context, a agent.Agent, session, text, key string, each func(Received)) []Received {
	if key != "" {
		ctx = agent.WithIdempotencyKey(ctx, key)
	}
	var out []Received
	for ev := range a.Invoke(ctx, agent.Scope{Session: session}, agent.Prompt{Text: text}) {
		r := Received{Event: ev, At: time.Now()}
		out = append(out, r)
		if each != nil {
			each(r)
		}
	}
	return out
}

// Terminal checks the contract's ending: exactly one terminal event, and it
// is the last. It returns the terminal (zero when there is none), how many
// terminals there were, and whether the stream is well-formed.
func Terminal(evs []agent.Event) (agent.Event, int, bool) {
	n := 0
	var term agent.Event
	for _, ev := range evs {
		if ev.IsTerminal() {
			n++
			term = ev
		}
	}
	return term, n, n == 1 && evs[len(evs)-1].IsTerminal()
}

// Describe renders events compactly for a report.
func Describe(evs []agent.Event) string {
	var parts []string
	for _, ev := range evs {
		switch ev.Type {
		case agent.TypeText:
			parts = append(parts, "text:"+ev.Delta)
		case agent.TypeToolStarted:
			parts = append(parts, "tool_started:"+ev.Name)
		case agent.TypeToolEnded:
			parts = append(parts, fmt.Sprintf("tool_ended(err=%v):%.50s", ev.IsError, ev.Content))
		case agent.TypeRetrying:
			parts = append(parts, fmt.Sprintf("retrying:%d", ev.Attempt))
		case agent.TypeFailed:
			parts = append(parts, fmt.Sprintf("failed(%s,retryable=%v):%.80s", ev.Code, ev.Retryable, ev.Details))
		default:
			parts = append(parts, ev.Type)
		}
	}
	return strings.Join(parts, " | ")
}
