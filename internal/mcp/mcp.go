// Package mcp gives an agent the tools of Model Context Protocol servers.
//
// A Manager turns a list of server configurations into agent.Tool values.
// It keeps one long-lived session per distinct configuration (keyed by a
// hash of it), started lazily by the first call of Manager.Tools that names
// it, so that calling Tools on every model call is cheap: the server's tool
// list is cached and fetched again only after the server sends
// notifications/tools/list_changed or after a reconnect. A server that
// cannot be started or listed yields a Diagnostic and no tools; it never
// keeps the other servers' tools away. A server whose configuration is no
// longer passed to Tools is closed.
//
// Stdio servers run as child processes (in their own process group) with
// the working directory Server.Dir and an environment made of a small
// allowlist of the worker's environment (PATH, HOME, USER, LANG, LC_*, TERM,
// TZ, TMPDIR) plus Server.Env, whose values may reference worker variables
// as ${NAME}. Servers with a URL are reached over streamable HTTP or the
// legacy SSE transport, from the worker itself: with the configured headers
// (${NAME} expanded there), the stored OAuth token (refreshed and written
// back), and only to public addresses unless AllowPrivate (see remote.go).
//
// # Tool names
//
// Each MCP tool keeps its plain name (for example "search", not
// "github__search"): that is the name the server's documentation, prompts
// and users use, and prefixing would spend the model's attention and the
// providers' 64-character name limit on a detail it does not need. The
// price is possible collisions. Within one call of Tools the first server
// in the list that offers a name keeps it and each later duplicate is left
// out with a Diagnostic; collisions with built-in or Go tools are for the
// caller (the workspace loader) to report. Characters that model providers
// refuse in tool names (anything but ASCII letters, digits, '_' and '-')
// are replaced by '_' and names are cut to 64 characters; the MCP server is
// still called with the original name.
//
// # Calls
//
// A call's text contents are joined with newlines; other contents are
// summarised ("[image: image/png, 1234 bytes]"). Structured content is kept
// in ToolResult.Details, and used as the content when there is no other.
// A tool counts as idempotent when its annotations carry readOnlyHint or
// idempotentHint. When the connection breaks during a call, an idempotent
// tool is called once more on a fresh connection; any other tool gets an
// error result saying that the outcome is unknown. A call that provably
// never reached the server (the session was already closing or unknown to
// the server) is retried for every tool.
package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/egress"
	"github.com/fastagent/fastagent/internal/sandbox"
	"github.com/fastagent/fastagent/internal/tools"
)

const (
	// startTimeout bounds one attempt to start a server: process start (or
	// first HTTP request) and the MCP handshake.
	startTimeout = 2 * time.Minute
	// startWait is how long Tools waits for a server that is still
	// starting or listing its tools before it reports it and moves on; the
	// start carries on in the background.
	startWait = 30 * time.Second
	// terminateGrace is how long closing a stdio server waits after closing
	// its stdin before SIGTERM, and after SIGTERM before SIGKILL.
	terminateGrace = 2 * time.Second
	// minRetryDelay and maxRetryDelay bound the wait before a server that
	// failed to start or to list its tools is tried again.
	minRetryDelay = time.Second
	maxRetryDelay = 30 * time.Second
	// maxToolName is the longest tool name model providers accept.
	maxToolName = 64
)

// errClosed reports use of a server that was closed (no longer configured,
// or the Manager closed); it is only returned wrapped.
var errClosed = errors.New("the server was closed")

// Server is the configuration of one MCP server: either a command spoken to
// over stdio or the URL of a streamable HTTP endpoint.
type Server struct {
	// Name identifies the server in diagnostics and logs.
	Name string
	// Command and Args start a stdio server.
	Command string
	Args    []string
	// Env is added to the stdio server's environment; a value may reference
	// a variable of the worker's environment as ${NAME}.
	Env map[string]string
	// URL is the endpoint of a remote server: streamable HTTP, or the
	// legacy SSE transport's event stream when Transport is TransportSSE.
	URL string
	// Deferred keeps the server's tools out of the model request until
	// they are activated (agent.ToolSpec.Deferred).
	Deferred bool
	// Dir is the stdio server's working directory (the workspace, writable
	// to it but for Protected); empty means the worker's.
	Dir string
	// Sandbox confines a stdio server; without one it is not started.
	Sandbox *sandbox.Sandbox `json:"-"`
	// Protected are the workspace's rules: read-only (or hidden) for the
	// server, as for bash.
	Protected []tools.Protected
	// Network gives a stdio server egress through the sandbox's proxy.
	Network bool

	// Transport of a server with a URL: TransportStreamable ("", the
	// default) or TransportSSE.
	Transport string
	// Headers are sent with every request to a server with a URL; a value
	// may reference a variable of the worker's environment as ${NAME}
	// (expanded by the worker when it connects: the secret never reaches
	// the agent's history or its tools).
	Headers map[string]string
	// AllowPrivate lets a server with a URL be on loopback or a private
	// network; the deployment's own services (ControlPlane), link-local and
	// reserved addresses stay refused.
	AllowPrivate bool
	// OAuthFile is the stored OAuth login (Login writes it); "" means the
	// server does not use OAuth.
	OAuthFile string
	// ControlPlane are the deployment's own services, never dialed.
	ControlPlane []egress.Dest `json:"-"`
}

// key identifies the configuration: equal configurations share a session.
// Deferred is left out, as it changes the tool specs but not the session.
func (s Server) key() string {
	b, _ := json.Marshal(struct {
		Name      string
		Command   string
		Args      []string
		Env       map[string]string
		URL       string
		Dir       string
		Protected []tools.Protected
		Network   bool
		Transport string
		Headers   map[string]string
		Private   bool
		OAuthFile string
	}{s.Name, s.Command, s.Args, s.Env, s.URL, s.Dir, s.Protected, s.Network, s.Transport, s.Headers, s.AllowPrivate, s.OAuthFile})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func (s Server) validate() error {
	switch {
	case s.Name == "":
		return errors.New("the server has no name")
	case s.Command != "" && s.URL != "":
		return errors.New("set either command or url, not both")
	case s.Command == "" && s.URL == "":
		return errors.New("set command (stdio) or url (streamable HTTP)")
	case s.URL != "":
		u, err := url.Parse(s.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("url %q is not an http or https URL", s.URL)
		}
		if s.Transport != "" && s.Transport != TransportStreamable && s.Transport != TransportSSE {
			return fmt.Errorf("transport %q is not %s or %s", s.Transport, TransportStreamable, TransportSSE)
		}
	case s.Transport != "" || len(s.Headers) > 0 || s.OAuthFile != "":
		return errors.New("transport, headers and oauth apply to a server with a url")
	}
	return nil
}

// Diagnostic reports a server whose tools are (partly) unavailable.
type Diagnostic struct {
	// Server is the server's name.
	Server string
	// Message says what went wrong (without the server name), for example
	// the start error and the tail of the command's stderr.
	Message string
}

// String formats the diagnostic with the server name.
func (d Diagnostic) String() string {
	return fmt.Sprintf("mcp server %q: %s", d.Server, d.Message)
}

// Manager keeps the sessions with MCP servers. It is safe for concurrent
// use; Close it when the worker stops. Because servers not passed to Tools
// are closed, one Manager should serve one agent definition.
type Manager struct {
	logger *slog.Logger
	// ctx is cancelled by Close: it aborts starts and calls in flight.
	ctx    context.Context
	cancel context.CancelFunc
	// wg counts background goroutines (starts, session watchers, closes).
	wg sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	clients map[string]*client // by Server.key
}

// NewManager returns a Manager that logs to logger (nil discards logs).
func NewManager(logger *slog.Logger) *Manager {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Manager{
		logger:  logger,
		ctx:     ctx,
		cancel:  cancel,
		clients: make(map[string]*client),
	}
}

// spawn runs f in a goroutine that Close waits for. It reports false, and
// does not run f, once the Manager is closed.
func (m *Manager) spawn(f func()) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		f()
	}()
	return true
}

// Tools returns the tools of servers, starting the servers not yet running,
// and closes the running servers that are not in the list. Servers that
// cannot be started or listed, and tools whose name an earlier server in the
// list already took, are reported as diagnostics in the order of servers.
// Tools waits at most about 30 seconds for a server that is still starting;
// it then reports it and its start carries on in the background.
func (m *Manager) Tools(ctx context.Context, servers []Server) ([]agent.Tool, []Diagnostic) {
	clients := make([]*client, len(servers))
	errs := make([]error, len(servers))

	if closed := m.reconcile(servers, clients, errs); closed {
		diags := make([]Diagnostic, 0, len(servers))
		for _, s := range servers {
			diags = append(diags, Diagnostic{Server: s.Name, Message: "the MCP manager is closed"})
		}
		return nil, diags
	}

	defs := make([][]toolDef, len(servers))
	var wg sync.WaitGroup
	for i, c := range clients {
		if c == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defs[i], errs[i] = c.tools(ctx)
		}()
	}
	wg.Wait()

	var (
		tools []agent.Tool
		diags []Diagnostic
		owner = make(map[string]string)
	)
	for i, s := range servers {
		if errs[i] != nil {
			diags = append(diags, Diagnostic{Server: s.Name, Message: errs[i].Error()})
			continue
		}
		for _, d := range defs[i] {
			if prev, taken := owner[d.spec.Name]; taken {
				diags = append(diags, Diagnostic{Server: s.Name, Message: fmt.Sprintf("tool %q is left out: server %q already provides a tool of that name", d.spec.Name, prev)})
				continue
			}
			owner[d.spec.Name] = s.Name
			spec := d.spec
			spec.Deferred = s.Deferred
			tools = append(tools, &tool{c: clients[i], remote: d.remote, spec: spec})
		}
	}
	return tools, diags
}

// reconcile finds or creates the client of each configured server (a
// server that does not validate gets its error instead) and closes the
// clients of servers no longer configured. It reports a closed manager.
func (m *Manager) reconcile(servers []Server, clients []*client, errs []error) (closed bool) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return true
	}
	wanted := make(map[string]bool, len(servers))
	for i, s := range servers {
		if err := s.validate(); err != nil {
			errs[i] = err
			continue
		}
		key := s.key()
		wanted[key] = true
		c := m.clients[key]
		if c == nil {
			c = newClient(m, s)
			m.clients[key] = c
		}
		clients[i] = c
	}
	var gone []*client
	for key, c := range m.clients {
		if !wanted[key] {
			delete(m.clients, key)
			gone = append(gone, c)
		}
	}
	m.mu.Unlock()

	for _, c := range gone {
		c.log.Info("closing MCP server no longer configured")
		if !m.spawn(c.close) {
			c.close()
		}
	}
	return false
}

// Close closes all sessions: calls in flight are cancelled, stdio servers
// are asked to exit (stdin closed), then terminated and killed together with
// their process group. Close waits for all of it; Tools calls after Close
// only report diagnostics.
func (m *Manager) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		m.wg.Wait()
		return
	}
	m.closed = true
	clients := make([]*client, 0, len(m.clients))
	for _, c := range m.clients {
		clients = append(clients, c)
	}
	m.clients = nil
	m.mu.Unlock()

	m.cancel()
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.close()
		}()
	}
	wg.Wait()
	m.wg.Wait()
}
