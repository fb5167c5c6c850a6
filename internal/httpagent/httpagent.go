// Package httpagent is an Agent that runs turns on a remote fastagent over
// the HTTP/SSE wire (POST /invoke). `fastagent invoke` uses it, and the
// conformance suite runs through it to prove the wire keeps the contract.
package httpagent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"net/http"
	"strings"

	"github.com/fastagent/fastagent/agent"
)

// Agent posts turns to BaseURL + "/invoke".
type Agent struct {
	BaseURL string
	Client  *http.Client
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
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(a.BaseURL, "/")+"/invoke", bytes.NewReader(body))
		if err != nil {
			yield(agent.Failed("invalid server address: "+err.Error(), false, ""))
			return
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "text/event-stream")
		if key := agent.IdempotencyKey(ctx); key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		c := a.Client
		if c == nil {
			c = http.DefaultClient
		}
		resp, err := c.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				yield(agent.Failed(fmt.Sprintf("cannot reach %s: %v (is `fastagent dev` running?)", a.BaseURL, err), true, ""))
			}
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			yield(agent.Failed(fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(msg))), resp.StatusCode >= 500, ""))
			return
		}
		for ev, err := range ReadSSE(resp.Body) {
			if err != nil {
				if ctx.Err() == nil {
					yield(agent.Failed("the event stream broke: "+err.Error(), true, ""))
				}
				return
			}
			if !yield(ev) || ev.IsTerminal() {
				return
			}
		}
	}
}

// ReadSSE decodes "data: <json>" frames; comments (": ping") are skipped.
func ReadSSE(r io.Reader) iter.Seq2[agent.Event, error] {
	return func(yield func(agent.Event, error) bool) {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 0, 64*1024), 16<<20)
		var data strings.Builder
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if data.Len() == 0 {
					continue
				}
				var ev agent.Event
				err := json.Unmarshal([]byte(data.String()), &ev)
				data.Reset()
				if !yield(ev, err) || err != nil {
					return
				}
			case strings.HasPrefix(line, ":"):
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
