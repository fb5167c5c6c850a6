package serve

import (
	"context"
	"fmt"
	"iter"
	"strings"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/durable"
	"github.com/fastagent/fastagent/internal/ingress"
	"github.com/fastagent/fastagent/internal/sessionstart"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows"
)

// scopedAgent is one agent of a deployment that serves several over HTTP.
// Its callers name sessions as if the agent were alone; it keeps them apart
// from every other agent's by a prefix: session "s1" of agent reviewer is
// store session "reviewer/s1", workflow "session:reviewer/s1". The main
// agent keeps today's names (no prefix) and refuses names another agent's
// prefix claims, so no two agents ever share a session.
type scopedAgent struct {
	d *durable.Agent
	// name is the agent's name (its task queue); prefix "<name>/" or ""
	// for the main agent.
	name, prefix string
	// reserved are the other agents' prefixes (the main agent's scope).
	reserved []string
}

var (
	_ agent.Agent      = (*scopedAgent)(nil)
	_ ingress.Control  = (*scopedAgent)(nil)
	_ ingress.Answerer = (*scopedAgent)(nil)
	_ ingress.Resender = (*scopedAgent)(nil)
	_ ingress.Attacher = (*scopedAgent)(nil)
	_ ingress.Sessions = (*scopedAgent)(nil)
	_ ingress.Deleter  = (*scopedAgent)(nil)
	_ ingress.Owners   = scopedOwners{}
)

// in is the stored name of the caller's session; a name another agent's
// prefix claims is refused, naming that agent's routes under the prefix
// the request came through (ingress.MountPrefixOf).
func (s *scopedAgent) in(ctx context.Context, session string) (string, error) {
	for _, r := range s.reserved {
		if strings.HasPrefix(session, r) {
			other := strings.TrimSuffix(r, "/")
			return "", agent.NewError(agent.CodeInvalidCommand, fmt.Sprintf(
				"session names starting with %q belong to agent %s: send them to %s/agents/%s/…", r, other, ingress.MountPrefixOf(ctx), other))
		}
	}
	return s.prefix + session, nil
}

// out is the caller's name of a stored session.
func (s *scopedAgent) out(session string) string { return strings.TrimPrefix(session, s.prefix) }

// Invoke implements agent.Agent.
func (s *scopedAgent) Invoke(ctx context.Context, scope agent.Scope, prompt agent.Prompt) iter.Seq[agent.Event] {
	var err error
	if scope.Session, err = s.in(ctx, scope.Session); err == nil && scope.ParentSession != "" {
		scope.ParentSession, err = s.in(ctx, scope.ParentSession)
	}
	if err != nil {
		return func(yield func(agent.Event) bool) {
			yield(agent.Failed(err.Error(), false, agent.CodeOf(err)))
		}
	}
	return s.d.Invoke(ctx, scope, prompt)
}

// Abort implements ingress.Control.
func (s *scopedAgent) Abort(ctx context.Context, session, turn, reason string) (string, error) {
	id, err := s.in(ctx, session)
	if err != nil {
		return "", err
	}
	return s.d.Abort(ctx, id, turn, reason)
}

// Steer implements ingress.Control.
func (s *scopedAgent) Steer(ctx context.Context, session, text string) error {
	return with(ctx, s, session, func(id string) error { return s.d.Steer(ctx, id, text) })
}

// DefaultWhileBusy is the agent's conversation.whileBusy.
func (s *scopedAgent) DefaultWhileBusy() string { return s.d.WhileBusy }

// SteerTurn implements ingress.TurnSteerer.
func (s *scopedAgent) SteerTurn(ctx context.Context, session, turn, text string) error {
	return with(ctx, s, session, func(id string) error { return s.d.SteerTurn(ctx, id, turn, text) })
}

// Approve implements ingress.Control.
func (s *scopedAgent) Approve(ctx context.Context, session string, req workflows.ApproveRequest) error {
	return with(ctx, s, session, func(id string) error { return s.d.Approve(ctx, id, req) })
}

// Answer implements ingress.Answerer.
func (s *scopedAgent) Answer(ctx context.Context, session string, req workflows.AnswerRequest) error {
	return with(ctx, s, session, func(id string) error { return s.d.Answer(ctx, id, req) })
}

// State implements ingress.Control.
func (s *scopedAgent) State(ctx context.Context, session string) (workflows.SessionView, error) {
	id, err := s.in(ctx, session)
	if err != nil {
		return workflows.SessionView{}, err
	}
	v, err := s.d.State(ctx, id)
	v.Session = s.out(v.Session)
	return v, err
}

// Compact implements ingress.Control.
func (s *scopedAgent) Compact(ctx context.Context, session string) (workflows.CompactResult, error) {
	id, err := s.in(ctx, session)
	if err != nil {
		return workflows.CompactResult{}, err
	}
	return s.d.Compact(ctx, id)
}

// Resend implements ingress.Resender.
func (s *scopedAgent) Resend(ctx context.Context, session, turn string) error {
	id, err := s.in(ctx, session)
	if err != nil {
		return err
	}
	return s.d.Resend(ctx, id, turn)
}

// Attach implements ingress.Attacher.
func (s *scopedAgent) Attach(ctx context.Context, session, key string) (iter.Seq[agent.Event], error) {
	id, err := s.in(ctx, session)
	if err != nil {
		return nil, err
	}
	return s.d.Attach(ctx, id, key)
}

// ListSessions implements ingress.Sessions: this agent's sessions only.
func (s *scopedAgent) ListSessions(ctx context.Context, q store.SessionQuery) (store.SessionPage, error) {
	q.Prefix, q.Exclude = s.prefix, s.reserved
	p, err := s.d.ListSessions(ctx, q)
	for i := range p.Sessions {
		p.Sessions[i].Session = s.out(p.Sessions[i].Session)
	}
	return p, err
}

// SearchSessions implements ingress.Sessions: this agent's sessions only
// (FastAgentAgent is the agent's name).
func (s *scopedAgent) SearchSessions(ctx context.Context, f sessionstart.Filter, limit int, cursor string) (sessionstart.Page, error) {
	if f.Agent != "" && f.Agent != s.name {
		return sessionstart.Page{Sessions: []sessionstart.Hit{}}, nil
	}
	f.Agent = s.name
	p, err := s.d.SearchSessions(ctx, f, limit, cursor)
	for i := range p.Sessions {
		p.Sessions[i].Session = s.out(p.Sessions[i].Session)
		p.Sessions[i].Parent = s.out(p.Sessions[i].Parent)
	}
	return p, err
}

// Status implements ingress.Sessions.
func (s *scopedAgent) Status(ctx context.Context, session string) (string, error) {
	id, err := s.in(ctx, session)
	if err != nil {
		return "", err
	}
	return s.d.Status(ctx, id)
}

// Transcript implements ingress.Sessions.
func (s *scopedAgent) Transcript(ctx context.Context, session string, tree bool) (string, []transcript.Entry, error) {
	id, err := s.in(ctx, session)
	if err != nil {
		return "", nil, err
	}
	return s.d.Transcript(ctx, id, tree)
}

// HasEntry implements ingress.Sessions.
func (s *scopedAgent) HasEntry(ctx context.Context, session, entry string) (bool, error) {
	id, err := s.in(ctx, session)
	if err != nil {
		return false, err
	}
	return s.d.HasEntry(ctx, id, entry)
}

// Import implements ingress.Sessions.
func (s *scopedAgent) Import(ctx context.Context, session string, entries []transcript.Entry) error {
	return with(ctx, s, session, func(id string) error { return s.d.Import(ctx, id, entries) })
}

// Rewind implements ingress.Sessions.
func (s *scopedAgent) Rewind(ctx context.Context, session, entry string) (workflows.RewindResult, error) {
	id, err := s.in(ctx, session)
	if err != nil {
		return workflows.RewindResult{}, err
	}
	return s.d.Rewind(ctx, id, entry)
}

// FollowUp implements ingress.Sessions.
func (s *scopedAgent) FollowUp(ctx context.Context, session, key, text string) error {
	return with(ctx, s, session, func(id string) error { return s.d.FollowUp(ctx, id, key, text) })
}

// DeleteSession implements ingress.Deleter: the session, its running
// sub-agents and its stored data (another agent's sessions are kept).
func (s *scopedAgent) DeleteSession(ctx context.Context, session string, force bool) (ingress.DeletedSession, error) {
	id, err := s.in(ctx, session)
	if err != nil {
		return ingress.DeletedSession{}, err
	}
	d, err := s.d.Delete(ctx, id, durable.DeleteOptions{Force: force, Keep: s.reserved})
	return deletedSession(d, s.out), err
}

// durableDeleter is ingress.Deleter over a durable agent served alone.
type durableDeleter struct{ d *durable.Agent }

// DeleteSession implements ingress.Deleter.
func (dd durableDeleter) DeleteSession(ctx context.Context, session string, force bool) (ingress.DeletedSession, error) {
	d, err := dd.d.Delete(ctx, session, durable.DeleteOptions{Force: force})
	return deletedSession(d, func(s string) string { return s }), err
}

// deletedSession is d as the ingress answers it, sessions named by out.
func deletedSession(d durable.Deleted, out func(string) string) ingress.DeletedSession {
	res := ingress.DeletedSession{Session: out(d.Session), Workflows: d.Workflows, Entries: d.Entries, Running: d.Running,
		SubSessions: make([]string, len(d.SubSessions))}
	for i, sub := range d.SubSessions {
		res.SubSessions[i] = out(sub)
	}
	return res
}

// with runs f on the stored name of session.
func with(ctx context.Context, s *scopedAgent, session string, f func(id string) error) error {
	id, err := s.in(ctx, session)
	if err != nil {
		return err
	}
	return f(id)
}

// scopedOwners keeps an agent's session owners under its stored names.
type scopedOwners struct {
	owners ingress.Owners
	scope  *scopedAgent
}

// Owner implements ingress.Owners.
func (o scopedOwners) Owner(ctx context.Context, session string) (string, bool, error) {
	id, err := o.scope.in(ctx, session)
	if err != nil {
		return "", false, err
	}
	return o.owners.Owner(ctx, id)
}

// Claim implements ingress.Owners.
func (o scopedOwners) Claim(ctx context.Context, session, principal string) (string, error) {
	id, err := o.scope.in(ctx, session)
	if err != nil {
		return "", err
	}
	return o.owners.Claim(ctx, id, principal)
}
