package ingress

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/pisession"
	"github.com/fastagent/fastagent/internal/sessionstart"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows"
)

// MaxImport is the largest POST /sessions/import body accepted (32 MiB).
const MaxImport = 32 << 20

// Sessions reads and moves sessions: the list, transcripts, export and
// import, rewind and follow-ups (internal/durable implements it).
type Sessions interface {
	// ListSessions lists a page of sessions; a bad cursor is invalid_command.
	ListSessions(ctx context.Context, q store.SessionQuery) (store.SessionPage, error)
	// Status is a session's workflow status ("open", "stored", "terminated", …).
	Status(ctx context.Context, session string) (string, error)
	// Transcript returns the leaf and the current branch, or every entry
	// (append order) when tree is set.
	Transcript(ctx context.Context, session string, tree bool) (string, []transcript.Entry, error)
	// HasEntry reports whether session holds entry.
	HasEntry(ctx context.Context, session, entry string) (bool, error)
	// Import creates session from entries; an existing one is session_exists.
	Import(ctx context.Context, session string, entries []transcript.Entry) error
	// Rewind moves the leaf to entry between turns (turn_running during one).
	Rewind(ctx context.Context, session, entry string) (workflows.RewindResult, error)
	// FollowUp queues text as turn key behind the current one, not waiting.
	FollowUp(ctx context.Context, session, key, text string) error
	// SearchSessions lists the sessions whose search attributes match f
	// (Temporal visibility); a bad cursor is invalid_command.
	SearchSessions(ctx context.Context, f sessionstart.Filter, limit int, cursor string) (sessionstart.Page, error)
}

// Deleter deletes sessions for good (DELETE /sessions/{id}).
type Deleter interface {
	// DeleteSession ends session's workflow and its sub-agents' and removes
	// its stored data. A running or queued turn is agent.CodeTurnRunning
	// unless force; an unknown session agent.CodeNoSuchSession.
	DeleteSession(ctx context.Context, session string, force bool) (DeletedSession, error)
}

// DeletedSession is the answer of DELETE /sessions/{id}: what was removed.
type DeletedSession struct {
	Session string `json:"session"`
	// Workflows are the workflows ended: the session's and its running
	// sub-agents' (empty when the session was not open).
	Workflows []string `json:"workflows"`
	// Entries counts the transcript entries removed.
	Entries int64 `json:"entries"`
	// SubSessions are the sub-agent sessions removed with it.
	SubSessions []string `json:"subSessions"`
	// Running is the turn that was running when force ended it.
	Running string `json:"running,omitempty"`
}

// SessionListItem is one session of GET /sessions.
type SessionListItem struct {
	store.SessionInfo
	// Status is the workflow's: open, stored (no workflow yet), or how the
	// last run closed.
	Status string `json:"status"`
}

// ImportRequest is the body of POST /sessions/import.
type ImportRequest struct {
	// Session is the new session's ID ("" the file header's ID).
	Session string `json:"session,omitempty"`
	// JSONL is the pi session file.
	JSONL string `json:"jsonl"`
}

func (s *Server) sessionRoutes(r gin.IRoutes) {
	r.GET("/sessions", s.guard(RightControl, RightApprove), s.listSessions)
	// An imported session is the caller's, and takes follow-ups: with
	// POST /invoke off, so is importing one.
	r.POST("/sessions/import", s.invokeSwitch, s.guard(RightInvoke), s.importSession)
	r.GET("/sessions/:id/transcript", s.guard(RightControl, RightApprove), s.transcript)
	r.GET("/sessions/:id/export", s.guard(RightControl), s.export)
	r.POST("/sessions/:id/rewind", s.guard(RightControl), s.rewind)
	r.POST("/sessions/:id/followup", s.guard(RightInvoke), s.followUp)
	r.DELETE("/sessions/:id", s.guard(RightControl), s.deleteSession)
}

// deleteSession serves DELETE /sessions/{id}[?force=true]: the session's
// workflow (and its sub-agents') ended, its transcript and records
// removed. A running or queued turn is 409 turn_running unless force.
// Each deletion is logged and counted (fastagent_sessions_deleted_total).
func (s *Server) deleteSession(c *gin.Context) {
	force := false
	if v := c.Query("force"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			abort(c, agent.CodeInvalidCommand, "force must be true or false")
			return
		}
		force = b
	}
	id := c.Param("id")
	if subAgentSession(c, id) || !s.access(c, id, false) {
		return
	}
	if s.Deleter == nil {
		abort(c, agent.CodeUnsupportedCapability, "deleting sessions is not available")
		return
	}
	p := principalOf(c)
	res, err := s.Deleter.DeleteSession(c.Request.Context(), id, force)
	if err != nil {
		s.log().Warn("session not deleted", "session", id, "principal", p.Name, "force", force, "error", err)
		sessionsDeleted.WithLabelValues(deleteOutcome(err)).Inc()
		s.fail(c, err)
		return
	}
	sessionsDeleted.WithLabelValues("deleted").Inc()
	s.log().Info("session deleted", "audit", true, "session", id, "principal", p.Name, "force", force,
		"running", res.Running, "workflows", res.Workflows, "entries", res.Entries, "subSessions", res.SubSessions)
	c.JSON(http.StatusOK, res)
}

// deleteOutcome is the outcome label of a refused or failed deletion.
func deleteOutcome(err error) string {
	switch agent.CodeOf(err) {
	case agent.CodeTurnRunning:
		return "refused_running"
	case agent.CodeNoSuchSession:
		return "not_found"
	default:
		return "error"
	}
}

func (s *Server) sessions(c *gin.Context) bool {
	if s.Sessions == nil {
		abort(c, agent.CodeUnsupportedCapability, "reading and moving sessions is not available")
		return false
	}
	return true
}

// listSessions serves GET /sessions?limit=&cursor=: the caller's sessions
// (every session for an admin), most recently active first.
func (s *Server) listSessions(c *gin.Context) {
	if !s.sessions(c) {
		return
	}
	q := store.SessionQuery{Cursor: c.Query("cursor")}
	if l := c.Query("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > store.MaxSessionPage {
			abort(c, agent.CodeInvalidCommand, fmt.Sprintf("limit must be a number from 1 to %d", store.MaxSessionPage))
			return
		}
		q.Limit = n
	}
	if p := principalOf(c); !s.NoAuth && !p.Admin() {
		q.Owner = p.Name
	}
	if f, ok := searchFilter(c); ok {
		if err := f.Check(); err != nil {
			abort(c, agent.CodeInvalidCommand, err.Error())
			return
		}
		if q.Owner != "" {
			f.Principal = q.Owner
		}
		page, err := s.Sessions.SearchSessions(c.Request.Context(), f, q.Limit, q.Cursor)
		if err != nil {
			s.fail(c, err)
			return
		}
		c.JSON(http.StatusOK, page)
		return
	}
	page, err := s.Sessions.ListSessions(c.Request.Context(), q)
	if err != nil {
		s.fail(c, err)
		return
	}
	items := make([]SessionListItem, len(page.Sessions))
	for i, si := range page.Sessions {
		st, err := s.Sessions.Status(c.Request.Context(), si.Session)
		if err != nil {
			s.fail(c, err)
			return
		}
		items[i] = SessionListItem{SessionInfo: si, Status: st}
	}
	c.JSON(http.StatusOK, gin.H{"sessions": items, "nextCursor": page.NextCursor})
}

// searchFilter reads the search filters of GET /sessions (agent, principal,
// channel, status, parent); ok says at least one is set.
func searchFilter(c *gin.Context) (sessionstart.Filter, bool) {
	f := sessionstart.Filter{Agent: c.Query("agent"), Principal: c.Query("principal"), Channel: c.Query("channel"),
		Status: c.Query("status"), Parent: c.Query("parent")}
	return f, f != (sessionstart.Filter{})
}

// transcript serves GET /sessions/{id}/transcript[?tree=1].
func (s *Server) transcript(c *gin.Context) {
	if !s.sessions(c) || !s.access(c, c.Param("id"), false) {
		return
	}
	tree := c.Query("tree") == "1" || c.Query("tree") == "true"
	leaf, entries, err := s.Sessions.Transcript(c.Request.Context(), c.Param("id"), tree)
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"session": c.Param("id"), "leaf": leaf, "tree": tree, "entries": entries})
}

// export serves GET /sessions/{id}/export: the whole tree as a pi JSONL
// session file (application/x-ndjson).
func (s *Server) export(c *gin.Context) {
	if !s.sessions(c) || !s.access(c, c.Param("id"), false) {
		return
	}
	_, entries, err := s.Sessions.Transcript(c.Request.Context(), c.Param("id"), true)
	if err != nil {
		s.fail(c, err)
		return
	}
	if len(entries) == 0 {
		s.fail(c, agent.NewError(agent.CodeNoSuchSession, fmt.Sprintf("session %q has no entries to export", c.Param("id"))))
		return
	}
	h := pisession.Header{ID: c.Param("id"), Timestamp: entries[0].Time.UTC().Format("2006-01-02T15:04:05.000Z07:00")}
	var buf bytes.Buffer
	if err := pisession.Encode(&buf, h, entries); err != nil {
		s.fail(c, err)
		return
	}
	c.Header("Content-Disposition", fmt.Sprintf("attachment; filename=%q", sanitizeFile(c.Param("id"))+".jsonl"))
	c.Data(http.StatusOK, "application/x-ndjson", buf.Bytes())
}

func sanitizeFile(id string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == '"' || r < ' ' {
			return '_'
		}
		return r
	}, id)
}

// importSession serves POST /sessions/import {"session"?, "jsonl"}: a new
// durable session seeded from a pi JSONL file. A bad line is a 400 naming
// it; an existing session is a 409; either way nothing is created.
func (s *Server) importSession(c *gin.Context) {
	if s.refuseWhileDraining(c) || !s.sessions(c) {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, MaxImport))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			abort(c, CodeTooLarge, fmt.Sprintf("an import holds at most %d MiB", MaxImport>>20))
			return
		}
		abort(c, agent.CodeInvalidCommand, "could not read the request body")
		return
	}
	var req ImportRequest
	if err := decodeStrict(body, &req); err != nil || req.JSONL == "" {
		abort(c, agent.CodeInvalidCommand, `need { "jsonl": string (a pi session file), "session"?: string }`)
		return
	}
	h, entries, err := pisession.Decode(strings.NewReader(req.JSONL))
	if err != nil {
		var le *pisession.LineError
		if errors.As(err, &le) {
			abortWith(c, agent.CodeInvalidCommand, "the session file is not valid: "+err.Error(), gin.H{"line": le.Line})
			return
		}
		abort(c, agent.CodeInvalidCommand, err.Error())
		return
	}
	id := req.Session
	if id == "" {
		id = h.ID
	}
	if strings.TrimSpace(id) == "" {
		abort(c, agent.CodeInvalidCommand, "the file has no session id in its header; name the session (\"session\")")
		return
	}
	if len(entries) == 0 {
		abort(c, agent.CodeInvalidCommand, "the session file holds no entries")
		return
	}
	if subAgentSession(c, id) || !s.access(c, id, true) {
		return
	}
	if err := s.Sessions.Import(c.Request.Context(), id, entries); err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusCreated, gin.H{"session": id, "entries": len(entries), "leaf": entries[len(entries)-1].ID})
}

// rewind serves POST /sessions/{id}/rewind {"entry"}: between turns only.
func (s *Server) rewind(c *gin.Context) {
	if !s.sessions(c) {
		return
	}
	var req struct {
		Entry string `json:"entry"`
	}
	if !bindOptional(c, &req) {
		return
	}
	if strings.TrimSpace(req.Entry) == "" {
		abort(c, agent.CodeInvalidCommand, `need { "entry": string }`)
		return
	}
	if !s.access(c, c.Param("id"), false) {
		return
	}
	// The branch summary is a model call: checked against the principal's
	// tokensPerDay, and charged to it.
	if s.refuseOverTokensFor(c, "the session was not rewound: ") {
		return
	}
	ctx, cancel := summaryContext(c) // charged even when the client leaves
	defer cancel()
	res, err := s.Sessions.Rewind(ctx, c.Param("id"), req.Entry)
	if err != nil {
		s.fail(c, err)
		return
	}
	s.chargeSummary(c, c.Param("id"), "rewind", res.SummaryEntry, res.Usage)
	c.JSON(http.StatusOK, res)
}

// followUp serves POST /sessions/{id}/followup {"text"}: a turn queued
// behind the current one; 202 with its key (attach to follow it).
func (s *Server) followUp(c *gin.Context) {
	if s.refuseWhileDraining(c) || !s.sessions(c) {
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
	if !s.access(c, c.Param("id"), false) {
		return
	}
	key := c.GetHeader("Idempotency-Key")
	if key == "" {
		key = NewKey()
	}
	release, ok := s.admitTurn(c)
	if !ok {
		return
	}
	if err := s.Sessions.FollowUp(agent.WithPrincipal(c.Request.Context(), principalOf(c).Name), c.Param("id"), key, req.Text); err != nil {
		if release != nil {
			release()
		}
		s.fail(c, err)
		return
	}
	s.holdUntilEnd(s.withCharge(c, context.WithoutCancel(c.Request.Context())), c.Param("id"), key, release)
	c.Header("Idempotency-Key", key)
	c.JSON(http.StatusAccepted, gin.H{"turn": key, "events": EventsPath(s.basePath(c), c.Param("id"), key)})
}

// holdUntilEnd calls release once the queued turn key of session has
// ended (followed in the background through the Attacher), so that the
// places taken for it (admitTurn) are held while it runs; at once when the
// turn cannot be followed. A nil release holds nothing.
func (s *Server) holdUntilEnd(ctx context.Context, session, key string, release func()) {
	if release == nil {
		return
	}
	if s.Attacher == nil {
		release()
		return
	}
	go func() {
		defer release()
		events, err := s.Attacher.Attach(ctx, session, key)
		if err != nil {
			s.log().Warn("admission: cannot follow a queued follow-up turn; its places are released", "session", session, "turn", key, "error", err)
			return
		}
		for ev := range events {
			if ev.IsTerminal() {
				return
			}
		}
	}()
}

// decodeStrict decodes one JSON value.
func decodeStrict(body []byte, v any) error {
	dec := jsonDecoder(body)
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}

// jsonDecoder decodes body.
func jsonDecoder(body []byte) *json.Decoder { return json.NewDecoder(bytes.NewReader(body)) }

// checkForkEntry answers 404 not_found (and false) when a fork's fromEntry
// is not in its parent session, before anything is created.
func (s *Server) checkForkEntry(c *gin.Context, scope agent.Scope) bool {
	if !s.sessions(c) {
		return false
	}
	ok, err := s.Sessions.HasEntry(c.Request.Context(), scope.ParentSession, scope.FromEntry)
	if err != nil {
		s.fail(c, err)
		return false
	}
	if !ok {
		abort(c, agent.CodeNotFound, fmt.Sprintf("session %q has no entry %q to fork from", scope.ParentSession, scope.FromEntry))
		return false
	}
	return true
}

func (s *Server) log() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.Default()
}
