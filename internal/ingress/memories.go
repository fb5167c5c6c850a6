package ingress

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/store"
)

// Memories are one agent's long-term memories (the remember tool's): the
// implementation fills in the agent of every query and scope.
type Memories interface {
	Recall(ctx context.Context, q store.MemoryQuery) ([]store.Memory, error)
	Forget(ctx context.Context, scope store.MemoryScope, id string) (store.Memory, error)
}

// Page sizes of GET /memories.
const (
	DefaultMemoryPage = 50
	MaxMemoryPage     = store.MaxRecall
)

// MemoryList is the body of GET /memories.
type MemoryList struct {
	Memories []store.Memory `json:"memories"`
}

func (s *Server) memoryRoutes(r gin.IRoutes) {
	r.GET("/memories", s.guard(RightInvoke, RightControl), s.listMemories)
	r.DELETE("/memories/:id", s.guard(RightInvoke, RightControl), s.forgetMemory)
}

func (s *Server) memories(c *gin.Context) bool {
	if s.Memories == nil {
		abort(c, agent.CodeUnsupportedCapability, "long-term memory is not available on this server")
		return false
	}
	return true
}

// listMemories serves GET /memories?q=&limit=&principal=: the caller's
// memories and the shared ones, most relevant to q first (newest first
// without q). An admin sees every principal's, or one principal's with
// principal= ("shared" names the shared ones). Only an admin and a
// memory's owner see the session it came from.
func (s *Server) listMemories(c *gin.Context) {
	if !s.memories(c) {
		return
	}
	q := store.MemoryQuery{Text: c.Query("q"), Limit: DefaultMemoryPage}
	if l := c.Query("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > MaxMemoryPage {
			abort(c, agent.CodeInvalidCommand, fmt.Sprintf("limit must be a number from 1 to %d", MaxMemoryPage))
			return
		}
		q.Limit = n
	}
	p := principalOf(c)
	who, named := c.GetQuery("principal")
	switch {
	case s.NoAuth || p.Admin():
		switch {
		case !named:
			q.All = true
		case who == "shared":
			q.Owners = []string{""}
		default:
			q.Owners = []string{who}
		}
	case named && who != p.Name && who != "shared":
		abort(c, CodeForbidden, fmt.Sprintf("principal %q may list only its own and the shared memories (principal=%s or principal=shared)", p.Name, p.Name))
		return
	case named && who == "shared":
		q.Owners = []string{""}
	case named:
		q.Owners = []string{p.Name}
	default:
		q.Owners = []string{p.Name, ""}
	}
	ms, err := s.Memories.Recall(c.Request.Context(), q)
	if err != nil {
		s.fail(c, err)
		return
	}
	if ms == nil {
		ms = []store.Memory{}
	}
	if !s.NoAuth && !p.Admin() {
		// The session a memory came from is its owner's to know: a
		// shared memory does not tell other principals which session
		// (whose, named how) wrote it.
		for i := range ms {
			if ms[i].Owner != p.Name {
				ms[i].Session = ""
			}
		}
	}
	c.JSON(http.StatusOK, MemoryList{Memories: ms})
}

// forgetMemory serves DELETE /memories/{id}: the caller's own memory (an
// admin's: any, shared ones included). Another principal's memory answers
// 404 like one that does not exist.
func (s *Server) forgetMemory(c *gin.Context) {
	if !s.memories(c) {
		return
	}
	p := principalOf(c)
	scope := store.MemoryScope{Owners: []string{p.Name}}
	if s.NoAuth || p.Admin() {
		scope = store.MemoryScope{All: true}
	}
	m, err := s.Memories.Forget(c.Request.Context(), scope, c.Param("id"))
	if errors.Is(err, store.ErrNotFound) {
		abort(c, agent.CodeNotFound, fmt.Sprintf("no memory %q of yours (shared memories are deleted by an admin)", c.Param("id")))
		return
	}
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"forgotten": m})
}
