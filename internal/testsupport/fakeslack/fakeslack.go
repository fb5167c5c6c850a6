// Package fakeslack is a Slack Web API on loopback for tests: it records
// every call (method and parameters, form or JSON, and when) and answers
// the methods the Slack channel uses as Slack does, keeping each message's
// text: chat.postMessage, chat.update, native streams (stream.go), the
// assistant thread status and users.info (AddUser). Tests point slack-go at it with
// SLACK_API_URL / slack.OptionAPIURL, and can inject failures per method.
package fakeslack

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
)

// Call is one Web API call the fake received.
type Call struct {
	Method string
	// Params are the call's parameters (form values, or a JSON body's
	// top-level fields rendered as strings).
	Params map[string]string
	// Raw is the request body.
	Raw []byte
	// At is when the fake received it.
	At time.Time
	// Header is the request's header (Authorization carries the token).
	Header http.Header
}

// Get returns the parameter name ("" when absent).
func (c Call) Get(name string) string { return c.Params[name] }

// Handler answers one method; it returns the JSON response's fields
// ("ok" is added when missing).
type Handler func(s *Server, c Call) map[string]any

// Server is the fake Slack Web API.
type Server struct {
	*httptest.Server
	mu       sync.Mutex
	calls    []Call
	seq      int
	handlers map[string]Handler
	// fail holds injected failures per method: each call consumes one.
	fail map[string][]Failure
	// msgs are the messages posted or streamed, by ts (stream.go).
	msgs map[string]*Message
	// deleted are the messages chat.delete removed; msgSeq numbers the
	// messages in creation order.
	deleted []Message
	msgSeq  int
	// files serves files.* and the download and upload URLs (files.go).
	files *files
	// socket serves the Socket Mode websocket path once Socket is called.
	socket http.Handler
	// users are the members users.info describes, by ID.
	users map[string]User
	// channels are the channels conversations.list lists, by ID.
	channels map[string]string
}

// AddChannel makes conversations.list list the channel id named name.
func (s *Server) AddChannel(id, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.channels[id] = name
}

// User is a workspace member as users.info describes them.
type User struct {
	ID     string
	TeamID string
	// Admin, Owner and PrimaryOwner are the member's workspace roles.
	Admin, Owner, PrimaryOwner bool
	Bot, Deleted               bool
}

// AddUser makes users.info describe u; other users are user_not_found.
func (s *Server) AddUser(u User) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users[u.ID] = u
}

// Failure is an injected answer to the next call of a method.
type Failure struct {
	// Status is the HTTP status (429 for a rate limit); 0 = 200 with
	// ok:false.
	Status int
	// RetryAfter is sent as the Retry-After header (seconds) with a 429.
	RetryAfter int
	// Error is the Slack error code of an ok:false answer.
	Error string
}

// New starts a fake with the default methods; it is closed by Close.
func New() *Server {
	s := &Server{handlers: map[string]Handler{}, fail: map[string][]Failure{}, files: newFiles(), users: map[string]User{},
		channels: map[string]string{}}
	for _, set := range []map[string]Handler{defaults, fileMethods} {
		for m, h := range set {
			s.handlers[m] = h
		}
	}
	registerStream(s)
	s.Server = httptest.NewServer(s.routes())
	return s
}

// APIURL is the base URL to give slack-go (with its trailing slash).
func (s *Server) APIURL() string { return s.URL + "/" }

// Handle sets (or replaces) the handler of method.
func (s *Server) Handle(method string, h Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handlers[method] = h
}

// Wrap replaces the handler of method with wrap of it (e.g. one that
// delays some calls).
func (s *Server) Wrap(method string, wrap func(Handler) Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handlers[method] = wrap(s.handlers[method])
}

// Fail makes the next calls of method answer with failures, in order.
func (s *Server) Fail(method string, f ...Failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail[method] = append(s.fail[method], f...)
}

// NextTS returns a new unique message timestamp.
func (s *Server) NextTS() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nextTSLocked()
}

func (s *Server) nextTSLocked() string {
	s.seq++
	return fmt.Sprintf("1800000000.%06d", s.seq)
}

// Calls returns the calls received, of the given methods (all when none).
func (s *Server) Calls(methods ...string) []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Call
	for _, c := range s.calls {
		if len(methods) == 0 {
			out = append(out, c)
			continue
		}
		for _, m := range methods {
			if c.Method == m {
				out = append(out, c)
				break
			}
		}
	}
	return out
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == socketPath {
		s.mu.Lock()
		h := s.socket
		s.mu.Unlock()
		if h != nil {
			h.ServeHTTP(w, r)
			return
		}
	}
	raw, _ := io.ReadAll(r.Body)
	c := Call{Method: strings.TrimPrefix(r.URL.Path, "/"), Params: map[string]string{}, Raw: raw, At: time.Now(), Header: r.Header.Clone()}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "application/json":
		var m map[string]any
		if json.Unmarshal(raw, &m) == nil {
			for k, v := range m {
				if str, ok := v.(string); ok {
					c.Params[k] = str
				} else {
					b, _ := json.Marshal(v)
					c.Params[k] = string(b)
				}
			}
		}
	default:
		r.Body = io.NopCloser(strings.NewReader(string(raw)))
		_ = r.ParseForm()
		for k := range r.Form {
			c.Params[k] = r.Form.Get(k)
		}
		for k := range r.URL.Query() {
			c.Params[k] = r.URL.Query().Get(k)
		}
	}
	s.mu.Lock()
	s.calls = append(s.calls, c)
	var f *Failure
	if q := s.fail[c.Method]; len(q) > 0 {
		f, s.fail[c.Method] = &q[0], q[1:]
	}
	h := s.handlers[c.Method]
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if f != nil {
		if f.Status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", fmt.Sprint(f.RetryAfter))
			w.WriteHeader(http.StatusTooManyRequests)
			_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": "ratelimited"})
			return
		}
		if f.Status != 0 {
			w.WriteHeader(f.Status)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": f.Error})
		return
	}
	if h == nil {
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": "unknown_method"})
		return
	}
	out := h(s, c)
	if _, ok := out["ok"]; !ok {
		out["ok"] = true
	}
	_ = json.NewEncoder(w).Encode(out)
}

var defaults = map[string]Handler{
	// reactions.add answers already_reacted to the same reaction on the
	// same message, as Slack does.
	"reactions.add": func(s *Server, c Call) map[string]any {
		n := 0
		for _, p := range s.Calls("reactions.add") {
			if p.Get("channel") == c.Get("channel") && p.Get("timestamp") == c.Get("timestamp") && p.Get("name") == c.Get("name") {
				n++
			}
		}
		if n > 1 {
			return map[string]any{"ok": false, "error": "already_reacted"}
		}
		return map[string]any{}
	},
	"chat.postMessage": func(s *Server, c Call) map[string]any {
		return map[string]any{"channel": c.Get("channel"), "ts": s.NextTS(), "message": map[string]any{"text": c.Get("text")}}
	},
	"chat.update": func(_ *Server, c Call) map[string]any {
		return map[string]any{"channel": c.Get("channel"), "ts": c.Get("ts"), "text": c.Get("text")}
	},
	"auth.test": func(_ *Server, _ Call) map[string]any {
		return map[string]any{"user_id": "U0LAN0Z89", "team_id": "T061EG9R6", "bot_id": "B0BOT"}
	},
	"conversations.list": func(s *Server, _ Call) map[string]any {
		s.mu.Lock()
		defer s.mu.Unlock()
		out := []map[string]any{}
		for id, name := range s.channels {
			out = append(out, map[string]any{"id": id, "name": name, "is_channel": true})
		}
		return map[string]any{"channels": out, "response_metadata": map[string]any{"next_cursor": ""}}
	},
	// conversations.open answers a user's direct message channel: "D" and
	// the user ID without its first letter.
	"conversations.open": func(_ *Server, c Call) map[string]any {
		users := c.Get("users")
		if users == "" || strings.Contains(users, ",") {
			return map[string]any{"ok": false, "error": "invalid_arguments"}
		}
		return map[string]any{"channel": map[string]any{"id": "D" + users[1:], "is_im": true}}
	},
	"users.info": func(s *Server, c Call) map[string]any {
		s.mu.Lock()
		u, ok := s.users[c.Get("user")]
		s.mu.Unlock()
		if !ok {
			return map[string]any{"ok": false, "error": "user_not_found"}
		}
		return map[string]any{"user": map[string]any{"id": u.ID, "team_id": u.TeamID, "name": strings.ToLower(u.ID),
			"is_admin": u.Admin, "is_owner": u.Owner, "is_primary_owner": u.PrimaryOwner, "is_bot": u.Bot, "deleted": u.Deleted}}
	},
}
