// Package modelserver is a scripted OpenAI-compatible chat completions server
// for tests and benchmarks. It speaks real HTTP on loopback, so clients under
// test (langchaingo's openai client among them) run unmodified against it.
//
// Replies are scripted with Reply values: queued with Enqueue (shared FIFO)
// or EnqueueFor (per conversation key), or produced by a Handle fallback.
// Faults are part of the script: error statuses with Retry-After, abrupt
// disconnects mid-stream, hangs, slow chunks, missing finish reasons. The
// server records every request, when the first delta of each reply reached
// the socket, and which replies the client abandoned.
package modelserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Server is a scripted chat completions server. Its methods are safe for
// concurrent use.
type Server struct {
	mu       sync.Mutex
	queue    []Reply
	keyed    []keyedQueue
	handler  func(Request) Reply
	requests []*Request
	aborted  int
	abortCh  chan struct{} // closed and replaced on every abort
	onFirst  func(Request, time.Time)
	url      string
	shape    Shape        // "" = OpenAI
	cache    *promptCache // PromptCache's accounting; nil = off
	servers  []*http.Server
	closed   bool

	done chan struct{} // closed by Close
	wg   sync.WaitGroup
}

// NewUnstarted returns a server that listens nowhere yet; serve it with
// ListenAndServe or mount Handler elsewhere.
func NewUnstarted() *Server {
	return &Server{
		handler: defaultHandler,
		abortCh: make(chan struct{}),
		done:    make(chan struct{}),
	}
}

// New returns a server listening on a free port of 127.0.0.1. It panics if
// no port can be had, like net/http/httptest.
func New() *Server {
	s := NewUnstarted()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("modelserver: listen on loopback: %v", err))
	}
	s.url = "http://" + ln.Addr().String() + "/v1"
	go func() { _ = s.serve(ln) }()
	return s
}

// ListenAndServe serves on addr (for example "127.0.0.1:8088") until Close,
// then returns nil.
func (s *Server) ListenAndServe(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("modelserver: listen on %s: %w", addr, err)
	}
	return s.serve(ln)
}

func (s *Server) serve(ln net.Listener) error {
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = ln.Close()
		return nil
	}
	s.servers = append(s.servers, hs)
	if s.url == "" {
		s.url = "http://" + ln.Addr().String() + "/v1"
	}
	s.mu.Unlock()
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("modelserver: serve: %w", err)
	}
	return nil
}

// URL returns the base URL to use as OPENAI_BASE_URL (or ANTHROPIC_BASE_URL
// for the Anthropic shape), ending in "/v1"; it is
// empty until the server listens somewhere.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.url
}

// Handler returns the server as a plain http.Handler. It serves
// POST /v1/chat/completions (and POST /chat/completions), or for the
// Anthropic shape POST /v1/messages (and POST /messages).
func (s *Server) Handler() http.Handler { return s }

// Close stops listening, drops open connections, ends hanging replies and
// waits for every handler to return.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.done)
	servers := s.servers
	s.mu.Unlock()
	for _, hs := range servers {
		_ = hs.Close()
	}
	s.wg.Wait()
}

// Requests returns a copy of the requests received so far, oldest first.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.requests))
	for i, r := range s.requests {
		out[i] = *r
	}
	return out
}

// Count returns how many chat completions requests were received.
func (s *Server) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.requests)
}

// OnFirstDelta sets a hook called with the request and the time the first
// content chunk of its reply was written and flushed to the socket (see
// Request.FirstDelta). fn may be called concurrently; nil removes the hook.
func (s *Server) OnFirstDelta(fn func(req Request, at time.Time)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onFirst = fn
}

// Aborted returns how many replies the client abandoned: its request context
// ended (it disconnected or canceled) before the reply was complete.
func (s *Server) Aborted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.aborted
}

// WaitAborted blocks until at least one reply has been aborted or ctx ends.
func (s *Server) WaitAborted(ctx context.Context) error {
	return s.WaitAbortedN(ctx, 1)
}

// WaitAbortedN blocks until at least n replies have been aborted or ctx ends.
func (s *Server) WaitAbortedN(ctx context.Context, n int) error {
	for {
		s.mu.Lock()
		got, ch := s.aborted, s.abortCh
		s.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("modelserver: waiting for %d aborted replies (have %d): %w", n, got, ctx.Err())
		}
	}
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		writeError(w, http.StatusServiceUnavailable, "", "modelserver is closed")
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()

	anthropic := s.shape == Anthropic
	fail := func(status int, msg string) {
		if anthropic {
			writeAnthropicError(w, status, "", msg)
		} else {
			writeError(w, status, "", msg)
		}
	}
	path := "/chat/completions"
	if anthropic {
		path = "/messages"
	}
	if r.URL.Path != "/v1"+path && r.URL.Path != path {
		fail(http.StatusNotFound, "modelserver serves only POST /v1"+path+", not "+r.URL.Path)
		return
	}
	if r.Method != http.MethodPost {
		fail(http.StatusMethodNotAllowed, "use POST")
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		fail(http.StatusBadRequest, "reading body: "+err.Error())
		return
	}
	var req Request
	if anthropic {
		req, err = decodeAnthropic(body)
		req.APIKey = r.Header.Get("X-Api-Key")
	} else {
		req, err = decodeRequest(body)
		req.APIKey = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	if err != nil {
		fail(http.StatusBadRequest, err.Error())
		return
	}
	req.Received = time.Now()

	s.mu.Lock()
	req.Seq = len(s.requests) + 1
	rec := &req
	s.requests = append(s.requests, rec)
	reply, ok := s.next(rec)
	handler := s.handler
	var cu *cacheUsage
	if anthropic && s.cache != nil {
		u := s.cache.account(body)
		cu = &u
	}
	s.mu.Unlock()
	if !ok {
		if handler == nil {
			handler = defaultHandler
		}
		reply = handler(req)
	}
	x := &exchange{s: s, w: w, r: r, rec: rec, req: req, reply: reply, cacheUsage: cu}
	x.respond()
}

// markFirstDelta records the time of the first content chunk of rec.
func (s *Server) markFirstDelta(rec *Request, at time.Time) {
	s.mu.Lock()
	rec.FirstDelta = at
	fn, cp := s.onFirst, *rec
	s.mu.Unlock()
	if fn != nil {
		fn(cp, at)
	}
}

// markDone records when the streamed reply of rec was complete.
func (s *Server) markDone(rec *Request, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec.Done = at
}

// markAborted counts an abandoned reply and wakes WaitAborted callers.
func (s *Server) markAborted(rec *Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec.Aborted = true
	s.aborted++
	close(s.abortCh)
	s.abortCh = make(chan struct{})
}
