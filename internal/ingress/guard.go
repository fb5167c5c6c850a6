package ingress

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// Codes of the ingress's own refusals (beside the contract's agent.Code*).
const (
	CodeUnauthorized     = "unauthorized"
	CodeForbidden        = "forbidden"
	CodeForbiddenOrigin  = "forbidden_origin"
	CodeMisdirected      = "misdirected_request"
	CodeUnsupportedMedia = "unsupported_media_type"
	CodeLimitExceeded    = agent.CodeLimitExceeded
	CodeTooLarge         = "too_large"
	CodeRateLimited      = "rate_limited"
	// CodeOverloaded: admission control refused a new turn because the
	// system is saturated; retry after the Retry-After header.
	CodeOverloaded = "overloaded"
	// CodeDraining: this ingress is shutting down; send the request to
	// another instance or retry after the Retry-After header.
	CodeDraining = "draining"
	// CodeNoSuchAgent: the path names an agent this deployment does not
	// serve, or one the caller's token is not limited to (404 either way).
	CodeNoSuchAgent = "no_such_agent"
)

// Owners records which principal created each session. Implementations are
// safe for concurrent use; Claim is atomic (of two principals racing for one
// new session, exactly one owns it).
type Owners interface {
	// Owner returns the principal recorded as the owner of session ("" when
	// none is) and whether the session exists at all: a session started by a
	// schedule, a channel or a version without ownership exists and has no
	// owner — only an admin reaches it.
	Owner(ctx context.Context, session string) (owner string, exists bool, err error)
	// Claim records principal as the owner of session unless an owner is
	// recorded, and returns the owner recorded afterwards.
	Claim(ctx context.Context, session, principal string) (string, error)
}

// MemoryOwners is an in-process Owners (tests, a lone ingress without a
// shared store).
type MemoryOwners struct {
	mu sync.Mutex
	m  map[string]string
}

// Owner implements Owners.
func (o *MemoryOwners) Owner(_ context.Context, session string) (string, bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	p, ok := o.m[session]
	return p, ok, nil
}

// Claim implements Owners.
func (o *MemoryOwners) Claim(_ context.Context, session, principal string) (string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[string]string{}
	}
	if p, ok := o.m[session]; ok {
		return p, nil
	}
	o.m[session] = principal
	return principal, nil
}

// Limits bound what one request may ask for; 0 takes the default, a
// negative value switches the limit off.
type Limits struct {
	// SteerBytes bounds one steering message (default 16 KiB).
	SteerBytes int
	// SteersPerTurn bounds the steering messages one turn receives through
	// this server (default 32).
	SteersPerTurn int
	// BranchHints bounds an invoke's branchHints (default 16).
	BranchHints int
	// SessionsPerMinute bounds the sessions one principal creates per minute
	// (default 30).
	SessionsPerMinute int
}

// Default limits.
const (
	DefaultSteerBytes        = 16 << 10
	DefaultSteersPerTurn     = 32
	DefaultBranchHints       = 16
	DefaultSessionsPerMinute = 30
)

func limit(v, def int) int {
	switch {
	case v == 0:
		return def
	case v < 0:
		return int(^uint(0) >> 1)
	}
	return v
}

// loopbackHosts are the Host names always accepted.
var loopbackHosts = []string{"localhost", "127.0.0.1", "::1"}

// IsLoopback reports whether host (a name or an IP, no port) only ever
// reaches this machine.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

const principalKey = "fastagent.principal"

// guard authenticates and authorises a request before its handler: the Host
// must be one this server answers for (DNS rebinding: 421), a browser Origin
// must be allowed (403), a POST body must be JSON (415: no form or
// text/plain "simple request" gets through), the bearer token must be known
// (401) and carry one of rights (403).
func (s *Server) guard(rights ...Right) gin.HandlerFunc { return s.guardOn(true, rights) }

// deploymentGuard is guard for a route of the whole deployment (metrics),
// not of one agent: a token limited to some agents may use it. Without
// rights, any authenticated principal passes.
func (s *Server) deploymentGuard(rights ...Right) gin.HandlerFunc { return s.guardOn(false, rights) }

// guardOn is guard; an agent route (agentRoute) also answers 404
// no_such_agent to a principal limited to other agents.
func (s *Server) guardOn(agentRoute bool, rights []Right) gin.HandlerFunc {
	return func(c *gin.Context) {
		if !s.hostAllowed(c.Request.Host) {
			abort(c, CodeMisdirected, "this server does not answer for host "+fmt.Sprintf("%q", c.Request.Host)+" (configure http.allowedHosts)")
			return
		}
		if o := c.GetHeader("Origin"); o != "" && !slices.Contains(s.AllowedOrigins, strings.TrimRight(o, "/")) &&
			(s.Chat == nil || !sameOrigin(c.Request, o)) {
			abort(c, CodeForbiddenOrigin, "requests from origin "+fmt.Sprintf("%q", o)+" are not allowed (configure http.allowedOrigins)")
			return
		}
		if c.Request.Method == http.MethodPost && c.Request.ContentLength != 0 {
			mt, _, err := mime.ParseMediaType(c.GetHeader("Content-Type"))
			if err != nil || mt != "application/json" {
				abort(c, CodeUnsupportedMedia, "a request body must be sent with Content-Type: application/json")
				return
			}
		}
		p, ok := s.authenticate(c)
		if !ok {
			return
		}
		if agentRoute && !p.Reaches(s.Name) {
			named := ""
			if rest, ok := strings.CutPrefix(c.Request.URL.Path, "/agents/"); ok {
				named, _, _ = strings.Cut(rest, "/")
			}
			abort(c, CodeNoSuchAgent, noSuchAgent(named))
			return
		}
		if len(rights) > 0 && !slices.ContainsFunc(rights, p.Has) {
			abort(c, CodeForbidden, fmt.Sprintf("principal %q lacks the %s right for this route", p.Name, joinRights(rights)))
			return
		}
		c.Set(principalKey, p)
		if prefix := MountPrefix(c.Request); prefix != "" {
			c.Request = c.Request.WithContext(context.WithValue(c.Request.Context(), mountKey{}, prefix))
		}
		c.Next()
	}
}

func joinRights(rs []Right) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = string(r)
	}
	return strings.Join(s, " or ")
}

func (s *Server) authenticate(c *gin.Context) (Principal, bool) {
	if s.NoAuth {
		return Principal{Name: "", Rights: []Right{RightAdmin}}, true
	}
	p, handled, badCookie := s.cookiePrincipal(c)
	if handled {
		return p, !c.IsAborted()
	}
	var auth Authenticator = s.Tokens
	if s.Principals != nil {
		auth = s.Principals
	}
	p, err := auth.Authenticate(c.Request)
	if err != nil && badCookie != nil {
		err = badCookie
	}
	if err == nil && p.Name == "" {
		// Sessions belong to principals by name: a nameless one owns nothing.
		err = errors.New("no principal: the request was not signed in")
	}
	if err != nil {
		challenge := bearerRealm
		var ch interface{ Challenge() string }
		if errors.As(err, &ch) && ch.Challenge() != "" {
			challenge = ch.Challenge()
		}
		c.Header("WWW-Authenticate", challenge)
		abort(c, CodeUnauthorized, err.Error())
		return Principal{}, false
	}
	return p, true
}

// abort ends the request with the error body {"error", "code"} and the
// status the one table gives code: handlers say the code, never the status.
func abort(c *gin.Context, code, msg string) {
	c.AbortWithStatusJSON(StatusOfCode(code), gin.H{"error": msg, "code": code})
}

// abortWith is abort with more fields in the body (e.g. the line of an
// invalid import).
func abortWith(c *gin.Context, code, msg string, extra gin.H) {
	body := gin.H{"error": msg, "code": code}
	for k, v := range extra {
		body[k] = v
	}
	c.AbortWithStatusJSON(StatusOfCode(code), body)
}

// hostAllowed checks the request's Host against the loopback names and
// AllowedHosts (any Host when AnyHost).
func (s *Server) hostAllowed(hostport string) bool {
	if s.AnyHost {
		return true
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if slices.Contains(loopbackHosts, strings.ToLower(host)) {
		return true
	}
	return slices.ContainsFunc(s.AllowedHosts, func(a string) bool { return strings.EqualFold(a, host) })
}

func principalOf(c *gin.Context) Principal {
	p, _ := c.Get(principalKey)
	pr, _ := p.(Principal)
	return pr
}

func (s *Server) owners() Owners {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Owners == nil {
		s.Owners = &MemoryOwners{}
	}
	return s.Owners
}

// access lets the request's principal at session, answering 404
// no_such_session (and false) when the session is another principal's —
// the same answer as for a session that does not exist, so nobody learns
// which sessions others have. create claims a session nobody has yet, within
// the principal's sessions-per-minute limit.
// ownsOrAdmin reports whether the request's principal owns session or is
// an admin (always, without authentication).
func (s *Server) ownsOrAdmin(c *gin.Context, session string) (bool, error) {
	p := principalOf(c)
	if s.NoAuth || p.Admin() {
		return true, nil
	}
	owner, _, err := s.owners().Owner(c.Request.Context(), session)
	if err != nil {
		return false, fmt.Errorf("ingress: session owner: %w", err)
	}
	return owner != "" && owner == p.Name, nil
}

func (s *Server) access(c *gin.Context, session string, create bool) bool {
	if s.NoAuth {
		return true
	}
	p := principalOf(c)
	ctx := c.Request.Context()
	owners := s.owners()
	owner, exists, err := owners.Owner(ctx, session)
	if err != nil {
		s.fail(c, fmt.Errorf("ingress: session owner: %w", err))
		return false
	}
	if owner == p.Name && owner != "" {
		return true
	}
	if exists || !create {
		if p.Admin() {
			return true
		}
		s.fail(c, agent.NewError(agent.CodeNoSuchSession, fmt.Sprintf("no such session %q", session)))
		return false
	}
	if prefix := reservedPrefix(session); prefix != "" && !p.Admin() {
		abort(c, CodeForbidden, fmt.Sprintf(
			"session IDs starting with %q belong to a channel or a schedule; choose another session ID", prefix))
		return false
	}
	if !s.allowNewSession(p.Name) {
		c.Header("Retry-After", "60")
		abort(c, CodeRateLimited, fmt.Sprintf("principal %q created too many sessions in the last minute; retry later", p.Name))
		return false
	}
	got, err := owners.Claim(ctx, session, p.Name)
	if err != nil {
		s.fail(c, fmt.Errorf("ingress: claim session: %w", err))
		return false
	}
	if got != p.Name && !p.Admin() {
		s.fail(c, agent.NewError(agent.CodeNoSuchSession, fmt.Sprintf("no such session %q", session)))
		return false
	}
	return true
}

// ReservedPrefixes start the session IDs that channels and schedules create
// (slack:<team>:<channel>:<ts>, schedule:<name>, …). A principal other than
// an admin cannot create such a session over HTTP, so it cannot pre-empt a
// conversation a channel will route into it.
var ReservedPrefixes = []string{"slack:", "feishu:", "lark:", "github:", "telegram:", "hook:", "schedule:"}

// subAgentSession answers 403 (and true) when session is a sub-agent's:
// it belongs to the session that delegated to it and takes no turn, fork
// or import from a client, an admin's included.
func subAgentSession(c *gin.Context, session string) bool {
	if !agentloop.IsSubAgentSession(session) {
		return false
	}
	abort(c, CodeForbidden, fmt.Sprintf("session %q has the ID of a sub-agent's session (it ends in /delegate-<hex> or /<agent>:<name>): "+
		"it belongs to the session that delegated to it and takes no turns from clients; choose another session ID "+
		"(a sub-agent's waiting calls are answered on the delegating session)", session))
	return true
}

func reservedPrefix(session string) string {
	for _, p := range ReservedPrefixes {
		if strings.HasPrefix(session, p) {
			return p
		}
	}
	return ""
}

// allowNewSession counts a session created by principal against
// Limits.SessionsPerMinute.
func (s *Server) allowNewSession(principal string) bool {
	max := limit(s.Limits.SessionsPerMinute, DefaultSessionsPerMinute)
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.created == nil {
		s.created = map[string][]time.Time{}
	}
	recent := s.created[principal][:0]
	for _, t := range s.created[principal] {
		if now.Sub(t) < time.Minute {
			recent = append(recent, t)
		}
	}
	if len(recent) >= max {
		s.created[principal] = recent
		return false
	}
	s.created[principal] = append(recent, now)
	return true
}

// steerTurn tracks the steering messages of a session's running turn.
type steerTurn struct {
	turn string
	n    int
}

// reserveSteer counts one steering message for session's running turn
// against Limits.SteersPerTurn; release undoes it when the steer failed.
func (s *Server) reserveSteer(ctx context.Context, session string) (release func(), ok bool, err error) {
	v, err := s.Control.State(ctx, session)
	if err != nil {
		return nil, false, err
	}
	if v.Running == "" {
		return func() {}, true, nil // the workflow answers no_active_run
	}
	max := limit(s.Limits.SteersPerTurn, DefaultSteersPerTurn)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.steers == nil || len(s.steers) > 10000 {
		s.steers = map[string]*steerTurn{}
	}
	st := s.steers[session]
	if st == nil || st.turn != v.Running {
		st = &steerTurn{turn: v.Running}
		s.steers[session] = st
	}
	if st.n >= max {
		return nil, false, nil
	}
	st.n++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if st.n > 0 {
			st.n--
		}
	}, true, nil
}
