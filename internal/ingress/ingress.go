// Package ingress is the HTTP door into sessions (gin): POST /invoke streams
// one turn as server-sent events per the Agent contract's wire format, GET
// /health answers probes, and /sessions/{id}/… carries the control plane
// (abort, steer, approvals, state) and re-attaching to a turn
// (/sessions/{id}/turns/{key}/events). Every event has an SSE id
// "<turn key>.<seq>": a client that lost its connection resends the same
// request with Last-Event-ID and receives what it missed, then the rest.
// Every request is validated for size and shape before any workflow is
// touched.
package ingress

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/turnusage"
	"github.com/fastagent/fastagent/workflows"
)

// MaxBody is the largest request body accepted (1 MiB).
const MaxBody = 1 << 20

// PingEvery is the SSE keep-alive interval.
const PingEvery = 30 * time.Second

// Control is the session control plane.
type Control interface {
	Abort(ctx context.Context, session, turn, reason string) (string, error)
	Steer(ctx context.Context, session, text string) error
	// Approve decides a tool call waiting for approval; hashes in req that
	// differ from the call's refuse it with agent.CodeCallChanged.
	Approve(ctx context.Context, session string, req workflows.ApproveRequest) error
	State(ctx context.Context, session string) (workflows.SessionView, error)
	// Compact compacts the session's context between turns.
	Compact(ctx context.Context, session string) (workflows.CompactResult, error)
}

// Resender sends a channel reply that failed after its retries once more
// (a session's failedReplies); a Control may implement it.
type Resender interface {
	Resend(ctx context.Context, session, turn string) error
}

// Attacher follows a turn that is running, queued or finished, without
// sending it; it fails before streaming when the turn is unknown.
type Attacher interface {
	Attach(ctx context.Context, session, key string) (iter.Seq[agent.Event], error)
}

// Server holds the HTTP handlers.
type Server struct {
	Agent   agent.Agent
	Control Control
	Logger  *slog.Logger
	// Attacher serves GET /sessions/{id}/turns/{key}/events (nil: 501).
	Attacher Attacher
	// Sessions serves the session list, transcripts, export/import,
	// rewind and follow-ups (nil: 501).
	Sessions Sessions
	// Deleter serves DELETE /sessions/{id} (nil: 501).
	Deleter Deleter
	// Memories serves GET /memories and DELETE /memories/{id}, the
	// agent's long-term memories (nil: 501).
	Memories Memories
	// PingEvery overrides PingEvery (tests).
	PingEvery time.Duration

	// Tokens are the API tokens accepted (Authorization: Bearer). Without
	// any, every route but /health answers 401 — unless NoAuth is set.
	Tokens *Tokens
	// Principals, when set, says who each request acts for instead of
	// Tokens: an embedder's own authentication in front of the routes.
	Principals Authenticator
	// NoAuth serves every route without a token, as an anonymous admin, and
	// does not record session owners. It exists for in-process tests and
	// tools; the serving commands never set it.
	NoAuth bool
	// Owners records who owns each session (nil: an in-process MemoryOwners).
	Owners Owners
	// AllowedOrigins are the browser origins ("https://app.example.com")
	// whose requests are served; a request with any other Origin is 403.
	AllowedOrigins []string
	// AllowedHosts are the Host names served beside the loopback names
	// (DNS rebinding defence); another Host is 421. AnyHost switches the
	// check off.
	AllowedHosts []string
	AnyHost      bool
	// Limits bound steering, branch hints and session creation.
	Limits Limits
	// Waiting lists the long connections (channel kinds) not connected yet;
	// until it is empty GET /health answers 503
	// {"status":"connecting","waiting":[…]}. nil: none.
	Waiting func() []string
	// Codec serves Temporal's remote codec protocol under /codec (nil: not
	// mounted) for the Web UI and `temporal --codec-endpoint`; callers need
	// a token with RightCodec. CodecOrigins are the browser origins (the
	// Web UI's) allowed to call it besides AllowedOrigins.
	Codec        http.Handler
	CodecOrigins []string
	// DevUIOrigin is the embedded Web UI's origin in `fastagent dev`: it may
	// call the codec from the browser (CORS).
	DevUIOrigin string
	// DevCodecKey is a per-run secret of `fastagent dev`: the embedded Web
	// UI cannot send a bearer token, so its codec endpoint carries this key
	// in its path (POST /codec/dev/<key>/decode) and the key is checked in
	// constant time instead. Empty: those routes are not mounted.
	DevCodecKey string
	// Metrics serves GET /metrics (nil: not mounted); callers need a token
	// with RightMetrics.
	Metrics http.Handler
	// Admission refuses new turns with 429 and Retry-After while the system
	// is saturated (nil: every turn is accepted). A request resuming a turn
	// (Last-Event-ID) is never refused.
	Admission Admitter
	// PrincipalLimiter refuses a principal's new turns past
	// limits.perPrincipal with 429 principal_limit (nil: no such limit).
	PrincipalLimiter *PrincipalLimiter
	// Details adds facts to GET /health?details (as JSON): the worker's tool
	// sandbox, for one. nil: none. Plain GET /health is public; ?details
	// needs a valid token (any right).
	Details func() map[string]any

	// Chat, when set, serves the web chat (GET /chat/, its one-time login
	// links and session cookies; see ChatGate) and accepts its session
	// cookie on every route. Handler gives the main agent's gate to its
	// Agents.
	Chat *ChatGate

	// InvokeOff, when set, switches POST /invoke off — at the root and
	// under /agents/<Name>/ alike, and POST /sessions/import with it (an
	// imported session takes follow-ups): it answers 404 not_found with
	// this reason (an agent with channels, say).
	InvokeOff string

	// Name is the agent this server serves (its task queue); its routes are
	// also under /agents/<Name>/. A token limited to other agents gets 404
	// here. "": unnamed, every token reaches it.
	Name string
	// Agents are the other agents of the deployment, each served under
	// /agents/<name>/ by its own Server (whose Name Handler sets). Drain
	// drains them too.
	Agents map[string]*Server

	ready   atomic.Bool
	created map[string][]time.Time
	steers  map[string]*steerTurn

	drainOnce sync.Once
	draining  chan struct{}
	mu        sync.Mutex
}

// Drain tells every open stream to reconnect elsewhere (the turns keep
// running; clients resume with Last-Event-ID), answers new turns with 503
// and GET /health with 503 "draining". Call it before shutting the server
// down; it is idempotent.
func (s *Server) Drain() {
	s.drainCh()
	s.drainOnce.Do(func() { close(s.draining) })
	for _, o := range s.Agents {
		o.Drain()
	}
}

func (s *Server) drainCh() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining == nil {
		s.draining = make(chan struct{})
	}
	return s.draining
}

func (s *Server) isDraining() bool {
	select {
	case <-s.drainCh():
		return true
	default:
		return false
	}
}

// SetReady flips GET /health from 503 "starting" to 200 "ok".
func (s *Server) SetReady(ok bool) { s.ready.Store(ok) }

// Handler returns the routes.
func (s *Server) Handler() http.Handler {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.HandleMethodNotAllowed = true
	// A redirect would name a path without the prefix the handler may be
	// mounted under (MountPrefix): a path that is not a route is a 404.
	r.RedirectTrailingSlash = false
	r.Use(gin.Recovery())
	r.GET("/health", s.health)
	s.agentRoutes(r)
	if s.Name != "" {
		s.agentRoutes(r.Group("/agents/" + s.Name))
	}
	if s.Chat != nil {
		s.chatRoutes(r)
	}
	for name, o := range s.Agents {
		o.Name = name
		if o.Chat == nil {
			o.Chat = s.Chat
		}
		o.agentRoutes(r.Group("/agents/" + name))
	}
	s.codecRoutes(r)
	if s.Metrics != nil {
		r.GET("/metrics", s.deploymentGuard(RightMetrics), gin.WrapH(s.Metrics))
	}
	r.NoMethod(func(c *gin.Context) {
		c.String(http.StatusMethodNotAllowed, "method not allowed")
	})
	r.NoRoute(func(c *gin.Context) {
		if name, ok := strings.CutPrefix(c.Request.URL.Path, "/agents/"); ok {
			name, _, _ = strings.Cut(name, "/")
			abort(c, CodeNoSuchAgent, noSuchAgent(name))
			return
		}
		c.String(http.StatusNotFound, "not found")
	})
	return r
}

// agentRoutes are the routes of one agent's sessions, at the root for the
// main agent and under /agents/<name> for each.
func (s *Server) agentRoutes(r gin.IRoutes) {
	r.POST("/invoke", s.invokeSwitch, s.guard(RightInvoke), s.invoke)
	r.GET("/sessions/:id", s.guard(RightControl, RightApprove), s.state)
	r.POST("/sessions/:id/abort", s.guard(RightControl), s.abort)
	r.POST("/sessions/:id/steer", s.guard(RightControl), s.steer)
	r.POST("/sessions/:id/compact", s.guard(RightControl), s.compact)
	r.POST("/sessions/:id/approvals/:call", s.guard(RightApprove), s.approve)
	r.POST("/sessions/:id/answers/:call", s.guard(RightInvoke), s.answer)
	r.GET("/sessions/:id/turns/:key/events", s.guard(RightControl), s.attach)
	r.POST("/sessions/:id/turns/:key/resend", s.guard(RightControl), s.resend)
	s.sessionRoutes(r)
	s.memoryRoutes(r)
}

// MountPrefix is the path the handler is mounted under: the request's
// original path (RequestURI) less the path the handler routes on, as
// http.StripPrefix (or a router doing the same) leaves them; "" at the
// root. Paths the ingress writes into its answers start with it.
func MountPrefix(r *http.Request) string {
	if r.RequestURI == "" || r.URL == nil {
		return ""
	}
	u, err := url.ParseRequestURI(r.RequestURI)
	if err != nil {
		return ""
	}
	full, inner := u.Path, r.URL.Path
	if len(full) <= len(inner) || !strings.HasSuffix(full, inner) {
		return ""
	}
	prefix := strings.TrimRight(full[:len(full)-len(inner)], "/")
	return (&url.URL{Path: prefix}).EscapedPath()
}

type mountKey struct{}

// MountPrefixOf is the MountPrefix of the request whose context ctx is,
// for what the routes call to say where a route is ("" outside one).
func MountPrefixOf(ctx context.Context) string {
	p, _ := ctx.Value(mountKey{}).(string)
	return p
}

// basePath is where the routes of the request's agent start, as the
// client reached them: the mount prefix, then /agents/<name> when the
// request came through the agent's named routes.
func (s *Server) basePath(c *gin.Context) string {
	base := MountPrefix(c.Request)
	if s.Name != "" && strings.HasPrefix(c.FullPath(), "/agents/"+s.Name+"/") {
		base += "/agents/" + url.PathEscape(s.Name)
	}
	return base
}

// EventsPath is the route following turn key of session: GET
// <base>/sessions/{id}/turns/{key}/events.
func EventsPath(base, session, key string) string {
	return base + "/sessions/" + url.PathEscape(session) + "/turns/" + url.PathEscape(key) + "/events"
}

// noSuchAgent is the message of a route of an agent that is not served, or
// that the caller's token does not reach: the same answer, so a token
// learns nothing about agents it cannot use. name is the agent the path
// names ("" at the root, where the main agent is unnamed).
func noSuchAgent(name string) string {
	if name == "" {
		return "this token reaches no agent at these routes; send the request to /agents/<name>/… of an agent it is limited to"
	}
	return fmt.Sprintf("no agent %q is served here for this token (is the name right? a token may be limited to some agents)", name)
}

// invokeSwitch answers 404 for POST /invoke (and POST /sessions/import)
// while InvokeOff says it is off.
func (s *Server) invokeSwitch(c *gin.Context) {
	if s.InvokeOff != "" {
		abort(c, agent.CodeNotFound, s.InvokeOff)
	}
}

func (s *Server) health(c *gin.Context) {
	if s.isDraining() {
		c.String(http.StatusServiceUnavailable, "draining")
		return
	}
	if !s.ready.Load() {
		c.String(http.StatusServiceUnavailable, "starting")
		return
	}
	if s.Waiting != nil {
		if w := s.Waiting(); len(w) > 0 {
			c.JSON(http.StatusServiceUnavailable, gin.H{"status": "connecting", "waiting": w})
			return
		}
	}
	if _, ok := c.GetQuery("details"); ok {
		// The details (the tool sandbox's mechanism, why tools cannot
		// run) are for the deployment's principals, not for anyone who
		// can reach a probe: any valid token, whatever its rights.
		if s.deploymentGuard()(c); c.IsAborted() {
			return
		}
		body := gin.H{"status": "ok"}
		if s.Details != nil {
			for k, v := range s.Details() {
				body[k] = v
			}
		}
		c.JSON(http.StatusOK, body)
		return
	}
	c.String(http.StatusOK, "ok")
}

// InvokeRequest is the body of POST /invoke.
type InvokeRequest struct {
	Session       *string       `json:"session"`
	Text          *string       `json:"text"`
	Images        []agent.Image `json:"images,omitempty"`
	ParentSession string        `json:"parentSession,omitempty"`
	BranchHints   []string      `json:"branchHints,omitempty"`
	// FromEntry forks parentSession at this entry (any entry of its tree).
	FromEntry string `json:"fromEntry,omitempty"`
	// WhileBusy is what the turn does when the session is busy: queue,
	// steer, interrupt or reject ("": the agent's conversation.whileBusy,
	// else queue).
	WhileBusy string `json:"whileBusy,omitempty"`
}

// errNeedFields is the contract's message for a body without session/text.
const errNeedFields = `need { "session": string, "text": string }`

// ParseInvoke validates a POST /invoke body; a bad one is an
// *agent.Error with code invalid_command and a message for the caller.
func ParseInvoke(body []byte) (agent.Scope, agent.Prompt, error) {
	bad := func(msg string) (agent.Scope, agent.Prompt, error) {
		return agent.Scope{}, agent.Prompt{}, agent.NewError(agent.CodeInvalidCommand, msg)
	}
	var req InvokeRequest
	dec := json.NewDecoder(strings.NewReader(string(body)))
	if err := dec.Decode(&req); err != nil || dec.More() {
		return bad("invalid json")
	}
	if req.Session == nil || req.Text == nil || *req.Session == "" {
		return bad(errNeedFields)
	}
	for _, im := range req.Images {
		if im.MimeType == "" || im.Data == "" {
			return bad("each image needs mimeType and data (base64)")
		}
	}
	if req.FromEntry != "" && req.ParentSession == "" {
		return bad("fromEntry needs parentSession (the session to fork)")
	}
	return agent.Scope{Session: *req.Session, ParentSession: req.ParentSession, BranchHints: req.BranchHints, FromEntry: req.FromEntry},
		agent.Prompt{Text: *req.Text, Images: req.Images}, nil
}

// readBody reads at most MaxBody bytes; more is a 413.
func readBody(c *gin.Context) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, MaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			abort(c, CodeTooLarge, "request body exceeds 1 MiB")
			return nil, false
		}
		abort(c, agent.CodeInvalidCommand, "could not read the request body")
		return nil, false
	}
	return body, true
}

func (s *Server) invoke(c *gin.Context) {
	if s.refuseWhileDraining(c) {
		return
	}
	body, ok := readBody(c)
	if !ok {
		return
	}
	scope, prompt, err := ParseInvoke(body)
	if err != nil {
		s.fail(c, err)
		return
	}
	whileBusy, err := parseWhileBusy(body)
	if err != nil {
		s.fail(c, err)
		return
	}
	if max := limit(s.Limits.BranchHints, DefaultBranchHints); len(scope.BranchHints) > max {
		abort(c, agent.CodeInvalidCommand, fmt.Sprintf("at most %d branchHints", max))
		return
	}
	key, lastKey, after, ok := turnKeys(c)
	if !ok {
		return
	}
	if subAgentSession(c, scope.Session) {
		return
	}
	if scope.ParentSession != "" && !s.access(c, scope.ParentSession, false) {
		return
	}
	if scope.FromEntry != "" && !s.checkForkEntry(c, scope) {
		return
	}
	if !s.access(c, scope.Session, true) {
		return
	}
	within, err := ParseResumeWithin(c.GetHeader("Resume-Within"))
	if err != nil {
		abort(c, agent.CodeInvalidCommand, err.Error())
		return
	}
	ctx := agent.WithSource(c.Request.Context(), "http")
	ctx = agent.WithPrincipal(ctx, principalOf(c).Name)
	ctx = agent.WithIdempotencyKey(ctx, key)
	ctx = agent.WithResumeAfter(ctx, after)
	ctx = agent.WithResumeWithin(ctx, within)
	ctx = s.withCharge(c, ctx)
	if lastKey == "" {
		// Over its daily tokens the principal may not steer either.
		if s.refuseOverTokens(c) {
			return
		}
		var answered bool
		if ctx, answered = s.applyWhileBusy(c, ctx, scope.Session, key, prompt, whileBusy); answered {
			return
		}
	}
	// Only a resume of a turn that exists passes the limits: a made-up
	// Last-Event-ID starts a new turn, counted like any other.
	if lastKey == "" || !s.turnKnown(ctx, scope.Session, lastKey) {
		release, ok := s.admitTurn(c)
		if !ok {
			return
		}
		if release == nil {
			release = func() {}
		}
		// The places are held until the turn ends, which may be after this
		// stream (a turn kept running for its client to come back).
		var taken func() bool
		ctx, taken = agent.WithTurnEnd(ctx, release)
		defer func() {
			if !taken() {
				release()
			}
		}()
	}
	s.stream(c, ctx, key, func(ctx context.Context) iter.Seq[agent.Event] { return s.Agent.Invoke(ctx, scope, prompt) })
}

// turnKeys reads the turn a request names: its Idempotency-Key (a new one
// when it names none) and, for a resume, the Last-Event-ID's turn and the
// event it saw last. Not ok: the request was answered with the error.
func turnKeys(c *gin.Context) (key, lastKey string, after int64, ok bool) {
	key = c.GetHeader("Idempotency-Key")
	lastKey, after, err := ParseLastEventID(c.GetHeader("Last-Event-ID"))
	if err != nil {
		abort(c, agent.CodeInvalidCommand, err.Error())
		return "", "", 0, false
	}
	switch {
	case key == "" && lastKey != "":
		key = lastKey
	case key != "" && lastKey != "" && lastKey != key:
		abort(c, agent.CodeInvalidCommand, "Last-Event-ID belongs to turn "+strconv.Quote(lastKey)+", not to Idempotency-Key "+strconv.Quote(key))
		return "", "", 0, false
	case key == "":
		key = NewKey()
	}
	return key, lastKey, after, true
}

// applyWhileBusy carries a new turn's whileBusy mode (the request's, else
// the agent's) on ctx; answered says the request was already answered:
// steered into the running turn, or refused because one runs.
func (s *Server) applyWhileBusy(c *gin.Context, ctx context.Context, session, key string, prompt agent.Prompt, mode string) (context.Context, bool) {
	if mode == "" {
		mode = s.defaultWhileBusy()
	}
	ctx = agent.WithWhileBusy(ctx, mode)
	switch mode {
	case workflows.WhileBusySteer:
		return ctx, s.steerInstead(c, ctx, session, key, prompt)
	case workflows.WhileBusyReject:
		return ctx, s.refuseBusy(c, ctx, session)
	}
	return ctx, false
}

// MaxResumeWithin bounds the Resume-Within a request may ask for; the
// engine caps it further (http.detachGrace).
const MaxResumeWithin = time.Hour

// ParseResumeWithin reads a Resume-Within header: how long the client asks
// the turn to keep running after its connection drops, so that it can resume
// with Last-Event-ID. A Go duration ("15s") or whole seconds ("15"); "" is 0
// (a client that goes away cancels its turn).
func ParseResumeWithin(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		n, nerr := strconv.Atoi(v)
		if nerr != nil {
			return 0, fmt.Errorf("Resume-Within %q: want a duration such as 15s", v)
		}
		d = time.Duration(n) * time.Second
	}
	if d < 0 {
		return 0, fmt.Errorf("Resume-Within %q must not be negative", v)
	}
	return min(d, MaxResumeWithin), nil
}

// Admitter is admission control: Admit takes a place for a new turn, or
// refuses it with an error saying why; an error with a RetryDelay()
// method says how long to wait. release gives the place back.
type Admitter interface {
	Admit() (release func(), refusal error)
}

// admitTurn takes the places a new turn needs — admission control's
// (429 overloaded), then its principal's (limits.perPrincipal, 429
// principal_limit) — before anything is started. release (nil when
// nothing was taken) gives them back once the turn has ended; a refusal
// is answered and ok is false, and nothing is held.
// turnKnown reports whether key is a running, queued or finished turn of
// session (Attach looks it up and starts nothing until its stream is read).
func (s *Server) turnKnown(ctx context.Context, session, key string) bool {
	if s.Attacher == nil || session == "" {
		return false
	}
	_, err := s.Attacher.Attach(ctx, session, key)
	return err == nil
}

func (s *Server) admitTurn(c *gin.Context) (release func(), ok bool) {
	var parts []func()
	if s.Admission != nil {
		r, refusal := s.Admission.Admit()
		if refusal != nil {
			refuseOverloaded(c, refusal)
			return nil, false
		}
		parts = append(parts, r)
	}
	if s.PrincipalLimiter != nil {
		p := principalOf(c)
		done, refusal := s.PrincipalLimiter.Take(p.Name, s.NoAuth || p.Admin())
		if refusal != nil {
			for _, r := range parts {
				r()
			}
			refuseWith(c, CodePrincipalLimit, "this turn was not started: ", refusal)
			return nil, false
		}
		parts = append(parts, done)
	}
	if len(parts) == 0 {
		return nil, true
	}
	return func() {
		for _, r := range parts {
			r()
		}
	}, true
}

// withCharge returns ctx carrying the charge of the turn's tokens to the
// caller's principal (limits.perPrincipal.tokensPerDay), made by the
// engine when the turn ends — also when its client has gone.
func (s *Server) withCharge(c *gin.Context, ctx context.Context) context.Context {
	if s.PrincipalLimiter == nil || s.PrincipalLimiter.limits.TokensPerDay <= 0 {
		return ctx
	}
	p := principalOf(c)
	admin, lim := s.NoAuth || p.Admin(), s.PrincipalLimiter
	return turnusage.WithSink(ctx, func(r turnusage.Report) { lim.Charge(p.Name, admin, r) })
}

// chargeSummary charges the caller's principal what the summary call of a
// manual compaction or a rewind (what) used (u nil: nothing), once per
// summary entry.
func (s *Server) chargeSummary(c *gin.Context, session, what, entry string, u *agent.Usage) {
	if s.PrincipalLimiter == nil || u == nil || entry == "" {
		return
	}
	p := principalOf(c)
	s.PrincipalLimiter.Charge(p.Name, s.NoAuth || p.Admin(),
		turnusage.Report{Session: session, Turn: "\x00" + what, First: entry, Leaf: entry, Usage: *u})
}

// summaryWait bounds how long a manual compaction or a rewind is waited
// for once its client has left.
const summaryWait = 10 * time.Minute

// summaryContext is the context a manual compaction or rewind is waited
// for with: not cancelled when the client disconnects (the model call
// runs on in the session, and its usage must still be charged), bounded
// by summaryWait.
func summaryContext(c *gin.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(c.Request.Context()), summaryWait)
}

// refuseOverTokens answers 429 principal_limit when the caller's
// principal used its limits.perPrincipal.tokensPerDay today; it reports
// whether it did. Nothing is started or steered.
func (s *Server) refuseOverTokens(c *gin.Context) bool {
	return s.refuseOverTokensFor(c, "this turn was not started: ")
}

// refuseOverTokensFor is refuseOverTokens for a request that is no turn
// but calls the model (a manual compaction, a rewind's branch summary);
// prefix says what was not done.
func (s *Server) refuseOverTokensFor(c *gin.Context, prefix string) bool {
	if s.PrincipalLimiter == nil {
		return false
	}
	p := principalOf(c)
	if err := s.PrincipalLimiter.CheckTokens(p.Name, s.NoAuth || p.Admin()); err != nil {
		refuseWith(c, CodePrincipalLimit, prefix, err)
		return true
	}
	return false
}

// refuseOverloaded answers a turn admission control refused: 429, a
// Retry-After in whole seconds, and a JSON body saying why. Nothing was
// sent to any workflow.
func refuseOverloaded(c *gin.Context, refusal error) {
	refuseWith(c, CodeOverloaded, "the agent did not accept this turn: ", refusal)
}

// refuseWith answers 429 with code, a Retry-After in whole seconds (the
// refusal's RetryDelay, else 1 s) and a message saying why and when to
// retry.
func refuseWith(c *gin.Context, code, prefix string, refusal error) {
	wait := time.Second
	var d interface{ RetryDelay() time.Duration }
	if errors.As(refusal, &d) && d.RetryDelay() > 0 {
		wait = d.RetryDelay()
	}
	secs := strconv.Itoa(int((wait + time.Second - 1) / time.Second))
	c.Header("Retry-After", secs)
	abort(c, code, prefix+refusal.Error()+"; retry after "+secs+" s")
}

// attach serves GET /sessions/{id}/turns/{key}/events: the turn's events
// from its start (or after Last-Event-ID), live until its terminal.
func (s *Server) attach(c *gin.Context) {
	if s.refuseWhileDraining(c) {
		return
	}
	if s.Attacher == nil {
		abort(c, agent.CodeUnsupportedCapability, "re-attaching is not available")
		return
	}
	key := c.Param("key")
	lastKey, after, err := ParseLastEventID(c.GetHeader("Last-Event-ID"))
	if err != nil || (lastKey != "" && lastKey != key) {
		abort(c, agent.CodeInvalidCommand, "Last-Event-ID must be an id this turn's stream sent (\"<key>.<seq>\")")
		return
	}
	if !s.access(c, c.Param("id"), false) {
		return
	}
	ctx := agent.WithResumeAfter(c.Request.Context(), after)
	events, err := s.Attacher.Attach(ctx, c.Param("id"), key)
	if err != nil {
		s.fail(c, err)
		return
	}
	s.stream(c, ctx, key, func(context.Context) iter.Seq[agent.Event] { return events })
}

func (s *Server) refuseWhileDraining(c *gin.Context) bool {
	if !s.isDraining() {
		return false
	}
	c.Header("Retry-After", "1")
	abort(c, CodeDraining, "this server is restarting; send the request to another instance or retry in a moment")
	return true
}

// ParseLastEventID splits an SSE id "<key>.<seq>" as this server writes
// them; "" yields ("", 0).
func ParseLastEventID(id string) (string, int64, error) {
	if id == "" {
		return "", 0, nil
	}
	i := strings.LastIndexByte(id, '.')
	if i <= 0 {
		return "", 0, fmt.Errorf("Last-Event-ID %q is not an id this server sent (want \"<key>.<seq>\")", id)
	}
	seq, err := strconv.ParseInt(id[i+1:], 10, 64)
	if err != nil || seq < 0 {
		return "", 0, fmt.Errorf("Last-Event-ID %q is not an id this server sent (want \"<key>.<seq>\")", id)
	}
	return id[:i], seq, nil
}

// stream writes a turn's events as SSE until its terminal, the client going
// away (the engine detaches the turn) or a drain (the client is told to
// reconnect and the turn is handed off, not aborted).
func (s *Server) stream(c *gin.Context, ctx context.Context, key string, open func(context.Context) iter.Seq[agent.Event]) {
	w := c.Writer
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	h.Set("Idempotency-Key", key)
	// The request is read: the server's ReadTimeout must not end the stream.
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	w.WriteHeader(http.StatusOK)
	w.Flush()

	ping := s.PingEvery
	if ping <= 0 {
		ping = PingEvery
	}
	events := make(chan agent.Event)
	done := make(chan struct{})
	ictx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		defer close(events)
		for ev := range open(ictx) {
			select {
			case events <- ev:
			case <-done:
				return
			}
		}
	}()
	defer close(done)
	ticker := time.NewTicker(ping)
	defer ticker.Stop()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return
			}
			if err := WriteEventID(w, key, ev); err != nil {
				return // client gone: the engine detaches the turn
			}
			w.Flush()
		case <-ticker.C:
			if _, err := io.WriteString(w, ": ping\n\n"); err != nil {
				return
			}
			w.Flush()
		case <-s.drainCh():
			_, _ = io.WriteString(w, "retry: 1000\n: this server is restarting; resend the request with Last-Event-ID to resume\n\n")
			w.Flush()
			cancel(agent.ErrHandOff)
			return
		case <-ctx.Done():
			return
		}
	}
}

// NewKey returns a random idempotency key for a turn whose caller chose none.
func NewKey() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (s *Server) control(c *gin.Context) bool {
	if s.Control == nil {
		abort(c, agent.CodeUnsupportedCapability, "session control is not available")
		return false
	}
	return true
}

// statusOf is the one table from codes — the contract's and the door's own
// refusals — to HTTP statuses.
var statusOf = map[string]int{
	CodeNoSuchAgent:      http.StatusNotFound,
	CodeUnauthorized:     http.StatusUnauthorized,
	CodeForbidden:        http.StatusForbidden,
	CodeForbiddenOrigin:  http.StatusForbidden,
	CodeMisdirected:      http.StatusMisdirectedRequest,
	CodeUnsupportedMedia: http.StatusUnsupportedMediaType,
	CodeLimitExceeded:    http.StatusTooManyRequests,
	CodeTooLarge:         http.StatusRequestEntityTooLarge,
	CodeRateLimited:      http.StatusTooManyRequests,
	CodeOverloaded:       http.StatusTooManyRequests,
	CodePrincipalLimit:   http.StatusTooManyRequests,
	CodeDraining:         http.StatusServiceUnavailable,

	agent.CodeNoSuchSession:         http.StatusNotFound,
	agent.CodeNoSuchTurn:            http.StatusNotFound,
	agent.CodeNotFound:              http.StatusNotFound,
	agent.CodeNoActiveRun:           http.StatusConflict,
	agent.CodeInvalidCommand:        http.StatusBadRequest,
	agent.CodeSessionBusy:           http.StatusTooManyRequests,
	agent.CodeUnsupportedCapability: http.StatusNotImplemented,
	agent.CodeTurnRunning:           http.StatusConflict,
	agent.CodeSessionExists:         http.StatusConflict,
	agent.CodeCallChanged:           http.StatusConflict,
	agent.CodeNotApprover:           http.StatusForbidden,
}

// StatusOf maps an error's contract code (agent.CodeOf) to its HTTP status;
// an error without a known code is the upstream's failure, 502.
func StatusOf(err error) int {
	return StatusOfCode(agent.CodeOf(err))
}

// StatusOfCode is the HTTP status of code; an unknown code is the
// upstream's failure, 502.
func StatusOfCode(code string) int {
	if st, ok := statusOf[code]; ok {
		return st
	}
	return http.StatusBadGateway
}

func (s *Server) fail(c *gin.Context, err error) {
	abort(c, agent.CodeOf(err), err.Error())
}

func (s *Server) state(c *gin.Context) {
	if !s.control(c) || !s.access(c, c.Param("id"), false) {
		return
	}
	v, err := s.Control.State(c.Request.Context(), c.Param("id"))
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, v)
}

func (s *Server) abort(c *gin.Context) {
	if !s.control(c) {
		return
	}
	var req struct {
		Turn   string `json:"turn"`
		Reason string `json:"reason"`
	}
	if !bindOptional(c, &req) || !s.access(c, c.Param("id"), false) {
		return
	}
	turn, err := s.Control.Abort(c.Request.Context(), c.Param("id"), req.Turn, req.Reason)
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"aborted": turn})
}

func (s *Server) steer(c *gin.Context) {
	if !s.control(c) {
		return
	}
	var req struct {
		Text string `json:"text"`
	}
	if !bindOptional(c, &req) {
		return
	}
	if strings.TrimSpace(req.Text) == "" {
		abort(c, agent.CodeInvalidCommand, `need { "text": string }`)
		return
	}
	if max := limit(s.Limits.SteerBytes, DefaultSteerBytes); len(req.Text) > max {
		abort(c, CodeTooLarge, fmt.Sprintf("a steering message holds at most %d bytes", max))
		return
	}
	if !s.access(c, c.Param("id"), false) {
		return
	}
	if s.refuseOverTokens(c) {
		return
	}
	release, ok, err := s.reserveSteer(c.Request.Context(), c.Param("id"))
	if err != nil {
		s.fail(c, err)
		return
	}
	if !ok {
		abort(c, CodeLimitExceeded, fmt.Sprintf("the running turn has received the most steering messages allowed (%d)", limit(s.Limits.SteersPerTurn, DefaultSteersPerTurn)))
		return
	}
	if err := s.Control.Steer(c.Request.Context(), c.Param("id"), req.Text); err != nil {
		release()
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"queued": true})
}

// compact serves POST /sessions/{id}/compact: a manual compaction, run
// between turns; the answer says what was summarized or why nothing was.
func (s *Server) compact(c *gin.Context) {
	if !s.control(c) {
		return
	}
	var req struct{}
	if !bindOptional(c, &req) || !s.access(c, c.Param("id"), false) {
		return
	}
	// The summary is a model call: checked against the principal's
	// tokensPerDay, and charged to it.
	if s.refuseOverTokensFor(c, "nothing was compacted: ") {
		return
	}
	// Waited for even when the client leaves: the summary runs anyway, and
	// is charged when it ends.
	ctx, cancel := summaryContext(c)
	defer cancel()
	res, err := s.Control.Compact(ctx, c.Param("id"))
	if err != nil {
		s.fail(c, err)
		return
	}
	s.chargeSummary(c, c.Param("id"), "compact", res.EntryID, res.Usage)
	c.JSON(http.StatusOK, gin.H{"compacted": res.EntryID != "", "result": res})
}

// resend serves POST /sessions/{id}/turns/{key}/resend: the turn's channel
// reply, which failed after its retries, is sent once more (404 when it
// has no failed reply; 502 when it fails again, still listed).
func (s *Server) resend(c *gin.Context) {
	if !s.control(c) {
		return
	}
	var req struct{}
	if !bindOptional(c, &req) || !s.access(c, c.Param("id"), false) {
		return
	}
	r, ok := s.Control.(Resender)
	if !ok {
		abort(c, agent.CodeUnsupportedCapability, "sending a reply again is not available")
		return
	}
	if err := r.Resend(c.Request.Context(), c.Param("id"), c.Param("key")); err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"resent": c.Param("key")})
}

// approve serves POST /sessions/{id}/approvals/{call}. argsHash and
// definitionHash, as GET /sessions/{id} showed them, bind the decision to
// that call: when the waiting call has others, the answer is 409
// call_changed and nothing is decided.
func (s *Server) approve(c *gin.Context) {
	if !s.control(c) {
		return
	}
	var req struct {
		Approve        *bool           `json:"approve"`
		Decision       string          `json:"decision"`
		Reason         string          `json:"reason"`
		ArgsHash       string          `json:"argsHash"`
		DefinitionHash string          `json:"definitionHash"`
		Args           json.RawMessage `json:"args"`
	}
	if !bindOptional(c, &req) {
		return
	}
	const usage = `need { "approve": true|false (or "decision": "approve"|"deny"), "reason"?: string, "argsHash"?: string, "definitionHash"?: string, "args"?: {…} }`
	switch req.Decision {
	case "":
	case "approve", "deny":
		yes := req.Decision == "approve"
		if req.Approve != nil && *req.Approve != yes {
			abort(c, agent.CodeInvalidCommand, `"approve" and "decision" disagree; `+usage)
			return
		}
		req.Approve = &yes
	default:
		abort(c, agent.CodeInvalidCommand, fmt.Sprintf("decision %q is not approve or deny; %s", req.Decision, usage))
		return
	}
	if req.Approve == nil {
		abort(c, agent.CodeInvalidCommand, usage)
		return
	}
	if string(req.Args) == "null" {
		req.Args = nil
	}
	if len(req.Args) > 0 {
		// Edited arguments: one JSON object, sent with an approval.
		var obj map[string]json.RawMessage
		if !*req.Approve || json.Unmarshal(req.Args, &obj) != nil || obj == nil {
			abort(c, agent.CodeInvalidCommand, `"args" are the call's edited arguments, one JSON object, sent with an approval; `+usage)
			return
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, req.Args); err == nil {
			req.Args = buf.Bytes()
		}
	}
	// The session's owner and admins decide; another principal (with the
	// approve right) only a call that lists them as an approver — anything
	// else of another's session does not exist for them.
	p := principalOf(c)
	owns, err := s.ownsOrAdmin(c, c.Param("id"))
	if err != nil {
		s.fail(c, err)
		return
	}
	if !owns && !s.listedApprover(c, c.Param("id"), c.Param("call"), p.Name) {
		s.fail(c, agent.NewError(agent.CodeNoSuchSession, fmt.Sprintf("no such session %q", c.Param("id"))))
		return
	}
	if err := s.Control.Approve(c.Request.Context(), c.Param("id"), workflows.ApproveRequest{Call: c.Param("call"), Approve: *req.Approve,
		Reason: req.Reason, ArgsHash: req.ArgsHash, DefinitionHash: req.DefinitionHash, By: p.Name, Listed: !owns, Args: req.Args}); err != nil {
		s.fail(c, err)
		return
	}
	out := gin.H{"call": c.Param("call"), "approved": *req.Approve}
	if len(req.Args) > 0 {
		out["edited"] = true
	}
	c.JSON(http.StatusOK, out)
}

// Answerer answers questions the agent asked (ask_user); the durable agent
// is one.
type Answerer interface {
	Answer(ctx context.Context, session string, req workflows.AnswerRequest) error
}

// answer serves POST /sessions/{id}/answers/{call} {text}: the answer to a
// question the agent asked in the session's running turn; it becomes the
// ask_user call's result. The session's owner (or an admin) answers.
func (s *Server) answer(c *gin.Context) {
	ans, ok := s.Control.(Answerer)
	if !ok {
		abort(c, agent.CodeUnsupportedCapability, "answering questions is not available")
		return
	}
	var req struct {
		Text string `json:"text"`
	}
	if !bindOptional(c, &req) {
		return
	}
	if strings.TrimSpace(req.Text) == "" {
		abort(c, agent.CodeInvalidCommand, `need { "text": string }: the answer`)
		return
	}
	if !s.access(c, c.Param("id"), false) {
		return
	}
	if err := ans.Answer(c.Request.Context(), c.Param("id"), workflows.AnswerRequest{Call: c.Param("call"), Text: req.Text,
		By: principalOf(c).Name}); err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"call": c.Param("call"), "answered": true})
}

// listedApprover reports whether call waits in session with principal
// among its approvers.
func (s *Server) listedApprover(c *gin.Context, session, call, principal string) bool {
	v, err := s.Control.State(c.Request.Context(), session)
	if err != nil {
		return false
	}
	for _, a := range v.Approvals {
		if a.Call == call && slices.Contains(a.Approvers, principal) {
			return true
		}
	}
	return false
}

// bindOptional decodes a JSON body when there is one.
func bindOptional(c *gin.Context, v any) bool {
	body, ok := readBody(c)
	if !ok {
		return false
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return true
	}
	if err := json.Unmarshal(body, v); err != nil {
		abort(c, agent.CodeInvalidCommand, "invalid json")
		return false
	}
	return true
}

// TurnSteerer is implemented by a Control that can steer one given turn:
// SteerTurn adds text to turn only while turn runs (else an error coded
// agent.CodeNoActiveRun). POST /invoke with whileBusy steer uses it.
type TurnSteerer interface {
	SteerTurn(ctx context.Context, session, turn, text string) error
}

// parseWhileBusy reads the whileBusy of a POST /invoke body (ParseInvoke
// has checked the rest): "" or one of workflows.WhileBusyModes.
func parseWhileBusy(body []byte) (string, error) {
	var req struct {
		WhileBusy string `json:"whileBusy"`
	}
	_ = json.Unmarshal(body, &req)
	if !workflows.ValidWhileBusy(req.WhileBusy) {
		return "", agent.NewError(agent.CodeInvalidCommand, fmt.Sprintf("whileBusy %q is not one of %s", req.WhileBusy, strings.Join(workflows.WhileBusyModes, ", ")))
	}
	return req.WhileBusy, nil
}

// defaultWhileBusy is the agent's conversation.whileBusy, when the agent
// says ("": queue).
func (s *Server) defaultWhileBusy() string {
	if d, ok := s.Agent.(interface{ DefaultWhileBusy() string }); ok {
		return d.DefaultWhileBusy()
	}
	return ""
}

// refuseBusy answers 409 turn_running, starting nothing, when a turn of
// session runs or waits (whileBusy reject). The session decides again when
// the turn reaches it: a turn that started in between refuses this one
// there (a failed event with the same code).
func (s *Server) refuseBusy(c *gin.Context, ctx context.Context, session string) bool {
	if s.Control == nil {
		return false
	}
	v, err := s.Control.State(ctx, session)
	if err != nil || (v.Running == "" && len(v.Queued) == 0) {
		return false
	}
	running := v.Running
	if running == "" {
		running = v.Queued[0]
	}
	abort(c, agent.CodeTurnRunning, fmt.Sprintf("session busy: turn %q is running or waiting (%d waiting); this turn was not started (whileBusy: reject) — send it again once the session is idle, or abort the running turn",
		running, len(v.Queued)))
	return true
}

// steerInstead folds prompt into session's running turn (whileBusy
// steer) and streams that turn — its events from the start, its answer,
// under its own key (the Idempotency-Key header names it). It reports
// false, having done nothing, when the prompt cannot steer (images, too
// long, the turn's steering limit reached), no turn runs, or the running
// turn refuses it as too late (workflows.RefusedSteerLate: its model step,
// maybe its last, is answering): the prompt is then a turn of its own,
// which the caller streams, so its answer is never another turn's.
func (s *Server) steerInstead(c *gin.Context, ctx context.Context, session, key string, prompt agent.Prompt) bool {
	st, ok := s.Control.(TurnSteerer)
	if !ok || s.Attacher == nil || len(prompt.Images) > 0 || strings.TrimSpace(prompt.Text) == "" ||
		len(prompt.Text) > limit(s.Limits.SteerBytes, DefaultSteerBytes) {
		return false
	}
	v, err := s.Control.State(ctx, session)
	if err != nil || v.Running == "" || v.Running == key {
		return false
	}
	release, ok, err := s.reserveSteer(ctx, session)
	if err != nil || !ok {
		return false
	}
	if err := st.SteerTurn(ctx, session, v.Running, prompt.Text); err != nil {
		release()
		return false
	}
	s.log().Info("invoke steered the running turn", "session", session, "turn", v.Running, "key", key)
	events, err := s.Attacher.Attach(agent.WithResumeAfter(ctx, 0), session, v.Running)
	if err != nil {
		c.JSON(http.StatusAccepted, gin.H{"steered": v.Running})
		return true
	}
	c.Header("Fastagent-Steered", v.Running)
	s.stream(c, ctx, v.Running, func(context.Context) iter.Seq[agent.Event] { return events })
	return true
}
