package ingress

import (
	"net/http"
	"slices"

	iingress "github.com/fastagent/fastagent/internal/ingress"
)

// Principals says who a request acts for: the seam where your own
// authentication sits in front of the ingress. It is called for every
// route but /health and the channels' webhook endpoints (which
// authenticate by the platform's signature, never by Principals).
//
// A non-nil error refuses the request: 401, the JSON body {"error": <the
// error's message>, "code": "unauthorized"}, and a WWW-Authenticate
// header — the error's Challenge() string when it has that method, else
// Bearer realm="fastagent" — and nothing reaches a session. A Principal
// without a Name is refused the same way: sessions belong to principals by
// name.
//
// Principal runs on every request, concurrently: make it cheap (verify a
// signed cookie or a JWT, or read what a middleware in front of the
// handler put in the request's context).
type Principals interface {
	Principal(r *http.Request) (Principal, error)
}

// PrincipalsFunc is a function used as Principals.
type PrincipalsFunc func(r *http.Request) (Principal, error)

// Principal implements Principals.
func (f PrincipalsFunc) Principal(r *http.Request) (Principal, error) { return f(r) }

// Principal is who a request acts for. The sessions a principal creates
// are its own: another principal (not an admin) gets 404 for them, as for
// a session that does not exist.
type Principal struct {
	// Name identifies the principal; sessions are owned by name.
	Name string
	// Rights are what it may do (RightInvoke, …).
	Rights []Right
	// Admin holds every right on every session, any principal's.
	Admin bool
	// Agents, when set, are the only agents (by name, as served under
	// /agents/<name>/) the principal reaches; any other agent's routes
	// answer 404. Empty: every agent.
	Agents []string
}

// Right is a permission of a principal.
type Right string

// The rights a principal can hold.
const (
	// RightInvoke runs turns (POST /invoke, follow-ups, imports, answers to
	// the agent's questions) in the principal's own sessions.
	RightInvoke Right = Right(iingress.RightInvoke)
	// RightControl aborts, steers, compacts, rewinds, reads, exports and
	// re-attaches to the principal's own sessions.
	RightControl Right = Right(iingress.RightControl)
	// RightApprove decides approval requests (and reads the state, to see
	// what is being approved).
	RightApprove Right = Right(iingress.RightApprove)
	// RightCodec calls the codec server (POST /codec/encode|decode): it
	// reads every session's history, so it is granted apart.
	RightCodec Right = Right(iingress.RightCodec)
	// RightMetrics scrapes GET /metrics.
	RightMetrics Right = Right(iingress.RightMetrics)
)

// Tokens returns the built-in Principals, the one New uses when
// Options.Principals is nil: API tokens sent as "Authorization: Bearer
// <token>". adminToken ("" for none) is one admin principal named
// "admin"; lines are tokens lines "principal:rights:sha256hex[:agents]",
// one per line or separated by ";" (rights: invoke, control, approve,
// codec, metrics, admin; the SHA-256 of the token in hex, so the file
// holds no token; agents: the agents the token reaches). `fastagent
// token` prints a token and its line. Tokens are compared by hash in
// constant time.
func Tokens(adminToken, lines string) (Principals, error) {
	t, err := tokens(adminToken, lines, "")
	if err != nil {
		return nil, err
	}
	return tokenPrincipals{t}, nil
}

// tokenPrincipals is the API tokens as Principals.
type tokenPrincipals struct{ t *iingress.Tokens }

func (p tokenPrincipals) Principal(r *http.Request) (Principal, error) {
	ip, err := p.t.Authenticate(r)
	if err != nil {
		return Principal{}, err
	}
	return fromInternal(ip), nil
}

// resolver is Principals as the routes' Authenticator.
type resolver struct{ p Principals }

func (r resolver) Authenticate(req *http.Request) (iingress.Principal, error) {
	p, err := r.p.Principal(req)
	if err != nil {
		return iingress.Principal{}, err
	}
	return p.toInternal(), nil
}

func (p Principal) toInternal() iingress.Principal {
	out := iingress.Principal{Name: p.Name, Agents: slices.Clone(p.Agents)}
	for _, r := range p.Rights {
		out.Rights = append(out.Rights, iingress.Right(r))
	}
	if p.Admin {
		out.Rights = append(out.Rights, iingress.RightAdmin)
	}
	return out
}

func fromInternal(ip iingress.Principal) Principal {
	p := Principal{Name: ip.Name, Admin: ip.Admin(), Agents: slices.Clone(ip.Agents)}
	for _, r := range ip.Rights {
		if r != iingress.RightAdmin {
			p.Rights = append(p.Rights, Right(r))
		}
	}
	return p
}
