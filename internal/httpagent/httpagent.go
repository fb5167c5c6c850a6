// Package httpagent is an Agent that runs turns on a remote fastagent over
// the HTTP/SSE wire (POST /invoke). `fastagent invoke` uses it, and the
// conformance suite runs through it to prove the wire keeps the contract.
package httpagent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/fastagent/fastagent/agent"
)

// Agent posts turns to BaseURL + "/invoke". When the stream breaks before
// its terminal (the ingress restarted or the network dropped), it resends
// the turn with the same Idempotency-Key and Last-Event-ID — to the next of
// BaseURL and Fallbacks — up to Reconnects times, so the caller still gets
// every event once and one terminal. Such a client asks the server to keep
// the turn running meanwhile (ResumeWithin).
type Agent struct {
	BaseURL string
	// Fallbacks are other ingresses of the same deployment to resume on.
	Fallbacks []string
	// Reconnects bounds the resumes of one turn (0 = none).
	Reconnects int
	// RetryDelay is the pause before a resume (default: the server's SSE
	// retry hint, else 1 s).
	RetryDelay time.Duration
	// ResumeWithin asks the server to keep a turn running this long after
	// the connection drops, so that a resume finds it (the Resume-Within
	// header; the server caps it by its http.detachGrace). Default: 15 s
	// when Reconnects > 0, else none — then leaving the stream (the
	// consumer stops, ctx ends, the connection drops) cancels the turn.
	// Negative: never asked.
	ResumeWithin time.Duration
	Client       *http.Client
	// Token is the API token sent as Authorization: Bearer (none when "").
	Token string
}

var _ agent.Agent = (*Agent)(nil)

// Invoke runs one turn remotely. Transport problems become a failed event;
// a stream that ends without a terminal yields none (Collect reports it).
func (a *Agent) Invoke(ctx context.Context, scope agent.Scope, prompt agent.Prompt) iter.Seq[agent.Event] {
	return func(yield func(agent.Event) bool) {
		body, _ := json.Marshal(map[string]any{
			"session":       scope.Session,
			"text":          prompt.Text,
			"images":        prompt.Images,
			"parentSession": scope.ParentSession,
			"branchHints":   scope.BranchHints,
		})
		key := agent.IdempotencyKey(ctx)
		var last int64
		bases := append([]string{a.BaseURL}, a.Fallbacks...)
		for try := 0; ; try++ {
			base := bases[try%len(bases)]
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(base, "/")+"/invoke", bytes.NewReader(body))
			if err != nil {
				yield(agent.Failed("invalid server address: "+err.Error(), false, ""))
				return
			}
			req.Header.Set("Content-Type", "application/json")
			if d := a.resumeWithin(); d > 0 {
				req.Header.Set("Resume-Within", d.String())
			}
			if key != "" {
				req.Header.Set("Idempotency-Key", key)
			}
			if last > 0 {
				req.Header.Set("Last-Event-ID", fmt.Sprintf("%s.%d", key, last))
			}
			res := a.stream(ctx, req, &key, &last, yield)
			if res.done || try >= a.Reconnects || ctx.Err() != nil || key == "" {
				if !res.done && res.err != nil && ctx.Err() == nil {
					yield(agent.Failed(res.err.Error(), true, ""))
				}
				return
			}
			delay := a.RetryDelay
			if delay <= 0 {
				delay = res.retry
			}
			if delay <= 0 {
				delay = time.Second
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
		}
	}
}

// DefaultResumeWithin is what a resuming Agent asks for by default.
const DefaultResumeWithin = 15 * time.Second

func (a *Agent) resumeWithin() time.Duration {
	switch {
	case a.ResumeWithin != 0:
		return a.ResumeWithin
	case a.Reconnects > 0:
		return DefaultResumeWithin
	}
	return 0
}

// Attach follows turn key of session on BaseURL (GET
// /sessions/{id}/turns/{key}/events), after the event with Seq after.
func (a *Agent) Attach(ctx context.Context, session, key string, after int64) iter.Seq[agent.Event] {
	return func(yield func(agent.Event) bool) {
		u := strings.TrimRight(a.BaseURL, "/") + "/sessions/" + url.PathEscape(session) + "/turns/" + url.PathEscape(key) + "/events"
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			yield(agent.Failed("invalid server address: "+err.Error(), false, ""))
			return
		}
		if after > 0 {
			req.Header.Set("Last-Event-ID", fmt.Sprintf("%s.%d", key, after))
		}
		last := after
		res := a.stream(ctx, req, &key, &last, yield)
		if !res.done && res.err != nil && ctx.Err() == nil {
			yield(agent.Failed(res.err.Error(), true, ""))
		}
	}
}

type streamResult struct {
	done  bool          // a terminal was delivered, or the consumer stopped
	err   error         // why the stream ended early
	retry time.Duration // the server's SSE retry hint
}

// stream sends req and relays its SSE events, tracking the turn's key (from
// the response header) and the last event's Seq.
func (a *Agent) stream(ctx context.Context, req *http.Request, key *string, last *int64, yield func(agent.Event) bool) streamResult {
	req.Header.Set("Accept", "text/event-stream")
	if a.Token != "" {
		req.Header.Set("Authorization", "Bearer "+a.Token)
	}
	c := a.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return streamResult{err: fmt.Errorf("cannot reach %s: %w (is `fastagent dev` running?)", req.URL.Host, err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, code := refusal(resp)
		if resp.StatusCode == http.StatusServiceUnavailable {
			return streamResult{err: fmt.Errorf("%s: %s", resp.Status, msg)}
		}
		yield(agent.Failed(fmt.Sprintf("%s: %s", resp.Status, msg), resp.StatusCode >= 500, code))
		return streamResult{done: true}
	}
	if k := resp.Header.Get("Idempotency-Key"); k != "" {
		*key = k
	}
	var res streamResult
	for ev, err := range readSSE(resp.Body, &res.retry) {
		if err != nil {
			res.err = fmt.Errorf("the event stream broke: %w", err)
			return res
		}
		if ev.Seq > 0 {
			if ev.Seq <= *last && !ev.IsTerminal() {
				continue // already delivered before a resume
			}
			*last = ev.Seq
		}
		if !yield(ev) || ev.IsTerminal() {
			return streamResult{done: true}
		}
	}
	res.err = errors.New("the event stream ended without a terminal event")
	return res
}

// ReadSSE decodes "data: <json>" frames; comments (": ping") are skipped,
// and an "id: <key>.<seq>" line sets the event's Seq.
func ReadSSE(r io.Reader) iter.Seq2[agent.Event, error] {
	var retry time.Duration
	return readSSE(r, &retry)
}

func readSSE(r io.Reader, retry *time.Duration) iter.Seq2[agent.Event, error] {
	return func(yield func(agent.Event, error) bool) {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 0, 64*1024), 16<<20)
		var data strings.Builder
		var seq int64
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if data.Len() == 0 {
					continue
				}
				var ev agent.Event
				err := json.Unmarshal([]byte(data.String()), &ev)
				ev.Seq, seq = seq, 0
				data.Reset()
				if !yield(ev, err) || err != nil {
					return
				}
			case strings.HasPrefix(line, ":"):
			case strings.HasPrefix(line, "id:"):
				id := strings.TrimSpace(strings.TrimPrefix(line, "id:"))
				if i := strings.LastIndexByte(id, '.'); i >= 0 {
					seq, _ = strconv.ParseInt(id[i+1:], 10, 64)
				}
			case strings.HasPrefix(line, "retry:"):
				if ms, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "retry:"))); err == nil {
					*retry = time.Duration(ms) * time.Millisecond
				}
			case strings.HasPrefix(line, "data:"):
				if data.Len() > 0 {
					data.WriteByte('\n')
				}
				data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
			}
		}
		if err := sc.Err(); err != nil {
			yield(agent.Event{}, err)
		}
	}
}

// refusal reads a refused request's answer: the server's JSON body
// {"error", "code"}, or its text when it is not JSON.
func refusal(resp *http.Response) (msg, code string) {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var e struct{ Error, Code string }
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		return e.Error, e.Code
	}
	return strings.TrimSpace(string(b)), ""
}
