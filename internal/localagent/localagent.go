// Package localagent runs the agent loop in-process, without Temporal: the
// same loop, activities, feed and relay as the durable runtime, with retries
// done by a plain loop and one turn per session at a time (a second one is
// refused with session_busy). It is the baseline the durable runtime is
// measured against and a second implementation of the Agent contract.
//
// It does the same store and definition work per turn as a session
// workflow: a session is opened (store lookup and definition load) once, on
// its first turn, and its loop state (leaf, settings, activated tools) is
// kept in memory for the next; each turn then begins (key lookup, user
// entry), runs its model and tool steps and is recorded. Like the workflow,
// an Agent assumes it is the only writer of its sessions while it holds
// them: turns another Agent adds to a session this one has opened are not
// seen.
package localagent

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"sync"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/relay"
	"github.com/fastagent/fastagent/internal/wire"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// Agent is the in-process agent. Acts.Feed must be a bus this process can
// subscribe to (an in-process feed, typically).
type Agent struct {
	Acts *activities.Activities
	// ModelAttempts bounds model retries (default 6); ToolAttempts bounds
	// retries of idempotent tools (default 3).
	ModelAttempts int
	ToolAttempts  int
	// MaxRetryDelay caps the wait between retries (default 1 minute).
	MaxRetryDelay time.Duration
	// IdempotencyWindow is how long a finished turn's key is answered from
	// the session store rather than run again (default 24 h).
	IdempotencyWindow time.Duration

	mu     sync.Mutex
	busy   map[string]bool
	open   map[string]*agentloop.State
	prefix string
	next   int64
}

var _ agent.Agent = (*Agent)(nil)

// Invoke runs one turn.
func (a *Agent) Invoke(ctx context.Context, scope agent.Scope, prompt agent.Prompt) iter.Seq[agent.Event] {
	return func(yield func(agent.Event) bool) {
		if scope.Session == "" {
			yield(agent.Failed("scope.session is required", false, agent.CodeInvalidCommand))
			return
		}
		if !a.acquire(scope.Session) {
			yield(agent.Failed("session busy: a turn is already running in this session", true, agent.CodeSessionBusy))
			return
		}
		defer a.release(scope.Session)
		turn := agent.IdempotencyKey(ctx)
		if turn == "" {
			turn = a.newID()
		}
		source := agent.Source(ctx)
		opt := relay.StreamOptions{Options: relay.Options{After: agent.ResumeAfter(ctx)}}
		relay.Stream(ctx, a.Acts.Feed, scope.Session, turn, opt, func(ctx context.Context) relay.Terminal {
			out := a.run(ctx, scope, prompt, turn, source)
			return relay.FromOutcome(out, func(ctx context.Context) ([]string, error) {
				return relay.StoredSteps(ctx, a.Acts.Store, scope.Session, out)
			})
		}, yield)
	}
}

func (a *Agent) run(ctx context.Context, scope agent.Scope, prompt agent.Prompt, turn, source string) agentloop.Outcome {
	st, err := a.state(ctx, scope)
	if err != nil {
		return agentloop.Outcome{Turn: turn, Status: agent.TypeFailed, Details: err.Error(), Retryable: true}
	}
	rt := &runtime{a: a, ctx: ctx}
	t := agentloop.Turn{ID: turn, Prompt: prompt, Source: source}
	entry := agentloop.UserEntry(rt, t)
	entry.ParentID = st.Leaf
	var begun wire.BeginTurnResult
	err = rt.retry(rt.attempts(), func(int) error {
		var err error
		begun, err = a.Acts.BeginTurn(ctx, wire.BeginTurnInput{
			Session: scope.Session, Key: turn, Entry: entry, Window: a.idempotencyWindow(),
		})
		return err
	})
	if err != nil {
		return agentloop.Outcome{Turn: turn, Status: agent.TypeFailed, Details: "begin turn: " + err.Error(), Retryable: true}
	}
	if begun.Outcome != nil {
		return *begun.Outcome
	}
	t.Entry = &entry
	out := agentloop.Run(rt, scope.Session, st, t)
	if ctx.Err() != nil && out.Status == agent.TypeFailed {
		out.Details, out.Code, out.Retryable = "the turn was aborted by the caller", agent.CodeAborted, false
	}
	// The caller has gone or not, the record is kept: a redelivered key is
	// then answered, not run again.
	rec := wire.RecordTurnInput{Session: scope.Session, Key: turn, Outcome: out, Finished: time.Now().UTC()}
	if err := a.Acts.RecordTurn(context.WithoutCancel(ctx), rec); err != nil {
		logger := a.Acts.Logger
		if logger == nil {
			logger = slog.Default()
		}
		logger.Error("recording a turn failed", "session", scope.Session, "turn", turn, "error", err)
	}
	return out
}

// state returns the loop state of a session this Agent holds (acquire),
// opening the session on its first turn as SessionWorkflow does once per
// session; a failed open is not kept, so the next turn tries again.
func (a *Agent) state(ctx context.Context, scope agent.Scope) (*agentloop.State, error) {
	a.mu.Lock()
	st, ok := a.open[scope.Session]
	a.mu.Unlock()
	if ok {
		return st, nil
	}
	res, err := a.Acts.OpenSession(ctx, wire.OpenInput{
		Session: scope.Session, ParentSession: scope.ParentSession, BranchHints: scope.BranchHints, IDPrefix: a.prefixOnce(),
	})
	if err != nil {
		return nil, fmt.Errorf("open session %q: %w", scope.Session, err)
	}
	st = &agentloop.State{Leaf: res.Leaf, Settings: res.Settings}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.open == nil {
		a.open = map[string]*agentloop.State{}
	}
	a.open[scope.Session] = st
	return st, nil
}

func (a *Agent) idempotencyWindow() time.Duration {
	if a.IdempotencyWindow > 0 {
		return a.IdempotencyWindow
	}
	return 24 * time.Hour
}

func (a *Agent) acquire(session string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.busy == nil {
		a.busy = map[string]bool{}
	}
	if a.busy[session] {
		return false
	}
	a.busy[session] = true
	return true
}

func (a *Agent) release(session string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.busy, session)
}

func (a *Agent) prefixOnce() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.prefix == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		a.prefix = "l" + hex.EncodeToString(b[:])
	}
	return a.prefix
}

func (a *Agent) newID() string {
	p := a.prefixOnce()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.next++
	return fmt.Sprintf("%s-%d", p, a.next)
}

// runtime carries out loop steps by calling the activities directly.
type runtime struct {
	a   *Agent
	ctx context.Context
}

func (r *runtime) NewID() string      { return r.a.newID() }
func (r *runtime) Now() time.Time     { return time.Now().UTC() }
func (r *runtime) Steering() []string { return nil }

func (r *runtime) attempts() int {
	if r.a.ModelAttempts <= 0 {
		return 6
	}
	return r.a.ModelAttempts
}

func (r *runtime) Model(call agentloop.ModelCall) (agentloop.ModelResult, error) {
	attempts := r.attempts()
	call.MaxAttempts = attempts
	// This agent records its turns itself, once it has their outcome.
	call.End = nil
	var res agentloop.ModelResult
	err := r.retry(attempts, func(attempt int) error {
		var err error
		res, err = r.a.Acts.RunModel(r.ctx, call, attempt)
		return err
	})
	if err != nil {
		return res, failure(r.ctx, err, attempts)
	}
	return res, nil
}

func (r *runtime) Tools(calls []agentloop.ToolCall, sequential bool) ([]agentloop.ToolOutcome, error) {
	outs := make([]agentloop.ToolOutcome, len(calls))
	one := func(i int) {
		c := calls[i]
		if c.Synthetic == nil {
			// As the workflow: a refused or reused call is recorded, never run.
			if refusal := cmp.Or(c.Call.Refused, c.Call.Reused); refusal != "" {
				c.Synthetic = &agent.ToolResult{IsError: true, Content: refusal}
			}
		}
		attempts := 1
		if c.Call.Idempotent && c.Synthetic == nil {
			attempts = r.a.ToolAttempts
			if attempts <= 0 {
				attempts = 3
			}
		}
		var out agentloop.ToolOutcome
		err := r.retry(attempts, func(int) error {
			var err error
			out, err = r.a.Acts.RunTool(r.ctx, c)
			return err
		})
		if err != nil {
			msg := "Tool call interrupted: the turn was aborted."
			if r.ctx.Err() == nil {
				msg = fmt.Sprintf("The %s call failed: %v", c.Call.Name, err)
			}
			c.Synthetic = &agent.ToolResult{IsError: true, Content: msg}
			out, _ = r.a.Acts.RunTool(context.WithoutCancel(r.ctx), c)
			out.IsError = true
		}
		outs[i] = out
	}
	if sequential {
		for i := range calls {
			one(i)
		}
	} else {
		var wg sync.WaitGroup
		for i := range calls {
			wg.Add(1)
			go func() { defer wg.Done(); one(i) }()
		}
		wg.Wait()
	}
	if r.ctx.Err() != nil {
		return outs, &agent.Failure{Details: "aborted", Code: agent.CodeAborted}
	}
	return outs, nil
}

// retry calls fn until it succeeds, fails non-retryably, runs out of
// attempts or the turn is cancelled, waiting as Temporal would (1 s doubling,
// or the error's NextRetryDelay such as a Retry-After).
func (r *runtime) retry(attempts int, fn func(attempt int) error) error {
	delay := time.Second
	maxDelay := r.a.MaxRetryDelay
	if maxDelay <= 0 {
		maxDelay = time.Minute
	}
	var err error
	for attempt := 1; attempt <= attempts; attempt++ {
		if err = fn(attempt); err == nil {
			return nil
		}
		var app *temporal.ApplicationError
		if r.ctx.Err() != nil || (errors.As(err, &app) && app.NonRetryable()) || attempt == attempts {
			return err
		}
		wait := delay
		if app != nil && app.NextRetryDelay() > 0 {
			wait = app.NextRetryDelay()
		}
		if wait > maxDelay {
			wait = maxDelay
		}
		select {
		case <-r.ctx.Done():
			return r.ctx.Err()
		case <-time.After(wait):
		}
		delay *= 2
	}
	return err
}

func failure(ctx context.Context, err error, attempts int) error {
	if ctx.Err() != nil {
		return &agent.Failure{Details: "aborted", Code: agent.CodeAborted}
	}
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		if app.NonRetryable() {
			return &agent.Failure{Details: app.Message()}
		}
		return &agent.Failure{Details: fmt.Sprintf("the model call failed %d times; last error: %s", attempts, app.Message()), Retryable: true}
	}
	return &agent.Failure{Details: err.Error(), Retryable: true}
}
