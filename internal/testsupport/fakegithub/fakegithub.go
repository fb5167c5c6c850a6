// Package fakegithub is the GitHub REST API on loopback for tests: issue
// comments (create, edit, list with Link pagination), pull request reviews
// (create, update, list) and App installation access tokens. It records
// every call (with its Authorization header) and can hold a call after its
// effect (a comment created, the response not yet sent) to test a client
// killed in that window. Tests point go-github at it with GITHUB_API_URL.
package fakegithub

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Call is one API call the fake received.
type Call struct {
	// Op names the operation: comment.create, comment.edit, comment.list,
	// review.create, review.update, review.list, app.token.
	Op     string
	Method string
	Path   string
	Auth   string
	Body   []byte
	At     time.Time
}

// Comment is an issue comment or a pull request review.
type Comment struct {
	ID     int64
	Repo   string
	Number int
	Body   string
	// Review is set for a pull request review (Event its event).
	Review bool
	Event  string
	Edits  int
	// Author is the Authorization header it was created with.
	Author string
}

// Server is the fake API.
type Server struct {
	*httptest.Server

	mu       sync.Mutex
	calls    []Call
	comments map[int64]*Comment
	nextID   int64
	// hold, when set, is called after a create takes effect and before
	// its response is written.
	hold func(Call)
	// PerPage caps a list page (default 100, as GitHub's maximum).
	PerPage int
	// Token is the installation token app.token issues.
	Token string
}

// New starts the fake on loopback.
func New() *Server {
	s := &Server{comments: map[int64]*Comment{}, nextID: 1000, PerPage: 100, Token: "ghs_fakeinstallationtoken"}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /repos/{owner}/{repo}/issues/{number}/comments", s.createComment)
	mux.HandleFunc("GET /repos/{owner}/{repo}/issues/{number}/comments", s.list(false))
	mux.HandleFunc("PATCH /repos/{owner}/{repo}/issues/comments/{id}", s.edit)
	mux.HandleFunc("POST /repos/{owner}/{repo}/pulls/{number}/reviews", s.createReview)
	mux.HandleFunc("GET /repos/{owner}/{repo}/pulls/{number}/reviews", s.list(true))
	mux.HandleFunc("PUT /repos/{owner}/{repo}/pulls/{number}/reviews/{id}", s.updateReview)
	mux.HandleFunc("POST /app/installations/{id}/access_tokens", s.appToken)
	s.Server = httptest.NewServer(mux)
	return s
}

// Hold makes every create call f after the comment exists and before the
// response is sent (nil: no hold).
func (s *Server) Hold(f func(Call)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold = f
}

// Calls returns the calls received, of the given ops (none: all).
func (s *Server) Calls(ops ...string) []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Call
	for _, c := range s.calls {
		if len(ops) == 0 || contains(ops, c.Op) {
			out = append(out, c)
		}
	}
	return out
}

// Comments returns the comments and reviews of repo#number ("" and 0: all)
// in creation order.
func (s *Server) Comments(repo string, number int) []Comment {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Comment
	for _, c := range s.comments {
		if (repo == "" || c.Repo == repo) && (number == 0 || c.Number == number) {
			out = append(out, *c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// AddComment adds a comment as another user would (for list tests).
func (s *Server) AddComment(repo string, number int, body string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	s.comments[s.nextID] = &Comment{ID: s.nextID, Repo: repo, Number: number, Body: body}
	return s.nextID
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// record reads the request and records it.
func (s *Server) record(op string, r *http.Request) Call {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	c := Call{Op: op, Method: r.Method, Path: r.URL.RequestURI(), Auth: r.Header.Get("Authorization"), Body: body, At: time.Now()}
	s.mu.Lock()
	s.calls = append(s.calls, c)
	s.mu.Unlock()
	return c
}

func authorized(w http.ResponseWriter, c Call) bool {
	if c.Auth == "" {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"message": "Requires authentication"})
		return false
	}
	return true
}

func (s *Server) createComment(w http.ResponseWriter, r *http.Request) {
	s.create(w, r, "comment.create", false)
}

func (s *Server) createReview(w http.ResponseWriter, r *http.Request) {
	s.create(w, r, "review.create", true)
}

func (s *Server) create(w http.ResponseWriter, r *http.Request, op string, review bool) {
	c := s.record(op, r)
	if !authorized(w, c) {
		return
	}
	var in struct {
		Body  string `json:"body"`
		Event string `json:"event"`
	}
	number, err := strconv.Atoi(r.PathValue("number"))
	if json.Unmarshal(c.Body, &in) != nil || err != nil || in.Body == "" {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"message": "Validation Failed"})
		return
	}
	if len([]rune(in.Body)) > 65536 {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"message": "Body is too long (maximum is 65536 characters)"})
		return
	}
	s.mu.Lock()
	s.nextID++
	cm := &Comment{ID: s.nextID, Repo: r.PathValue("owner") + "/" + r.PathValue("repo"), Number: number, Body: in.Body,
		Review: review, Event: in.Event, Author: c.Auth}
	s.comments[cm.ID] = cm
	out := s.json(cm)
	hold := s.hold
	s.mu.Unlock()
	if hold != nil {
		hold(c)
	}
	writeJSON(w, http.StatusCreated, out)
}

func (s *Server) edit(w http.ResponseWriter, r *http.Request) { s.update(w, r, "comment.edit", false) }

func (s *Server) updateReview(w http.ResponseWriter, r *http.Request) {
	s.update(w, r, "review.update", true)
}

func (s *Server) update(w http.ResponseWriter, r *http.Request, op string, review bool) {
	c := s.record(op, r)
	if !authorized(w, c) {
		return
	}
	var in struct {
		Body string `json:"body"`
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if json.Unmarshal(c.Body, &in) != nil || err != nil || in.Body == "" {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"message": "Validation Failed"})
		return
	}
	s.mu.Lock()
	cm, ok := s.comments[id]
	if !ok || cm.Review != review {
		s.mu.Unlock()
		writeJSON(w, http.StatusNotFound, map[string]any{"message": "Not Found"})
		return
	}
	cm.Body = in.Body
	cm.Edits++
	out := s.json(cm)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) list(review bool) http.HandlerFunc {
	op := "comment.list"
	if review {
		op = "review.list"
	}
	return func(w http.ResponseWriter, r *http.Request) {
		c := s.record(op, r)
		if !authorized(w, c) {
			return
		}
		number, _ := strconv.Atoi(r.PathValue("number"))
		repo := r.PathValue("owner") + "/" + r.PathValue("repo")
		var all []Comment
		for _, cm := range s.Comments(repo, number) {
			if cm.Review == review {
				all = append(all, cm)
			}
		}
		per := s.PerPage
		if p, err := strconv.Atoi(r.URL.Query().Get("per_page")); err == nil && p > 0 && p < per {
			per = p
		}
		page := 1
		if p, err := strconv.Atoi(r.URL.Query().Get("page")); err == nil && p > 0 {
			page = p
		}
		last := (len(all) + per - 1) / per
		if last == 0 {
			last = 1
		}
		var out []map[string]any
		s.mu.Lock()
		for i := (page - 1) * per; i < page*per && i < len(all); i++ {
			out = append(out, s.json(s.comments[all[i].ID]))
		}
		s.mu.Unlock()
		if out == nil {
			out = []map[string]any{}
		}
		if last > 1 {
			u := *r.URL
			link := func(p int, rel string) string {
				q := u.Query()
				q.Set("page", strconv.Itoa(p))
				q.Set("per_page", strconv.Itoa(per))
				return fmt.Sprintf(`<%s%s?%s>; rel="%s"`, s.URL, u.Path, q.Encode(), rel)
			}
			var links []string
			if page < last {
				links = append(links, link(page+1, "next"))
			}
			links = append(links, link(last, "last"), link(1, "first"))
			w.Header().Set("Link", strings.Join(links, ", "))
		}
		writeJSON(w, http.StatusOK, out)
	}
}

func (s *Server) appToken(w http.ResponseWriter, r *http.Request) {
	c := s.record("app.token", r)
	if !strings.HasPrefix(c.Auth, "Bearer ") {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"message": "A JSON web token could not be decoded"})
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"token": s.Token, "expires_at": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
}

// json is cm as the API shows it; s.mu is held.
func (s *Server) json(cm *Comment) map[string]any {
	return map[string]any{"id": cm.ID, "body": cm.Body, "html_url": fmt.Sprintf("%s/%s/issues/%d#issuecomment-%d", s.URL, cm.Repo, cm.Number, cm.ID)}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
