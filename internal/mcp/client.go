package mcp

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/sandbox"
	"github.com/fastagent/fastagent/internal/tools"
)

// client is the Manager's handle on one server configuration: it starts
// connections, restarts them when they break, and caches the tool list.
type client struct {
	m   *Manager
	srv Server
	log *slog.Logger
	// ctx bounds starts; it is cancelled when the client is closed.
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	closed   bool
	cur      *conn    // the live connection, if any
	starting *attempt // the start in progress, if any
	lastErr  error    // why the last start or listing failed
	retryAt  time.Time
	failures int // consecutive failures to start and list
}

// attempt is one start of a connection; done is closed when it is over.
type attempt struct {
	done chan struct{}
	conn *conn
	err  error
}

// conn is one session with the server.
type conn struct {
	session *sdk.ClientSession
	proc    *sandbox.Process // stdio only: the server, confined
	stdin   io.Closer        // stdio only: closing it asks the server to exit
	stderr  *stderrTail      // stdio only

	dead    atomic.Bool // the session ended
	closing atomic.Bool // we are closing it
	stale   atomic.Bool // the server said its tool list changed

	// listSem serialises listing and guards defs and listed.
	listSem chan struct{}
	defs    []toolDef
	listed  bool

	// calls maps the progress token of each running call to the context
	// it runs with (notifications/progress become its progress reports).
	calls     sync.Map // string → context.Context
	nextToken atomic.Int64
}

// progress passes a server's notifications/progress to the call whose
// token it names, as its progress report; other tokens are ignored.
func (cn *conn) progress(p *sdk.ProgressNotificationParams) {
	if p == nil {
		return
	}
	token, ok := p.ProgressToken.(string)
	if !ok {
		return
	}
	if ctx, ok := cn.calls.Load(token); ok {
		agent.ReportProgress(ctx.(context.Context), agent.Progress{Message: p.Message, Progress: p.Progress, Total: p.Total})
	}
}

func newClient(m *Manager, s Server) *client {
	ctx, cancel := context.WithCancel(m.ctx)
	return &client{
		m:      m,
		srv:    s,
		log:    m.logger.With("mcpServer", s.Name),
		ctx:    ctx,
		cancel: cancel,
	}
}

// tools returns the server's tool definitions, starting the server or
// listing its tools if needed.
func (c *client) tools(ctx context.Context) ([]toolDef, error) {
	wctx, cancel := context.WithTimeout(ctx, startWait)
	defer cancel()
	// Closing the client cancels a listing in flight.
	defer context.AfterFunc(c.ctx, cancel)() //nolint:contextcheck // the listing also ends when the client closes (c.ctx)
	stillStarting := func(err error) error {
		if ctx.Err() == nil && errors.Is(wctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("still starting after %s; its tools will be offered once it is ready", startWait)
		}
		return err
	}
	for attempt := 1; ; attempt++ {
		cn, err := c.connect(wctx)
		if err != nil {
			return nil, stillStarting(err)
		}
		defs, err := cn.tools(wctx)
		if err == nil {
			c.mu.Lock()
			c.failures = 0
			c.mu.Unlock()
			return defs, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		err = fmt.Errorf("list tools: %w", err)
		switch {
		case isProtocolError(err):
			return nil, err
		case attempt == 1 && wctx.Err() == nil:
			// Listing has no side effects: try once more on a fresh
			// connection (the session may have ended unnoticed).
			c.drop(cn)
			continue
		}
		c.fail(cn, err)
		return nil, err
	}
}

// connect returns the live connection, starting one if there is none (or
// waiting for the start in progress). After a failed start it reports that
// failure until the retry delay has passed.
func (c *client) connect(ctx context.Context) (*conn, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errClosed
	}
	if cn := c.cur; cn != nil {
		if !cn.dead.Load() {
			c.mu.Unlock()
			return cn, nil
		}
		c.cur = nil
		c.log.Warn("MCP server session ended; reconnecting", "stderr", cn.stderrTail())
	}
	a := c.starting
	if a == nil {
		if time.Now().Before(c.retryAt) {
			err := c.lastErr
			c.mu.Unlock()
			return nil, err
		}
		a = &attempt{done: make(chan struct{})}
		if !c.m.spawn(func() { c.start(a) }) { //nolint:contextcheck // a server process lives with the manager, not with the call that started it
			c.mu.Unlock()
			return nil, errClosed
		}
		c.starting = a
	}
	c.mu.Unlock()
	select {
	case <-a.done:
		return a.conn, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// start runs attempt a: it dials the server and installs the connection.
func (c *client) start(a *attempt) {
	ctx, cancel := context.WithTimeout(c.ctx, startTimeout)
	defer cancel()
	cn, err := c.dial(ctx)

	c.mu.Lock()
	c.starting = nil
	switch {
	case c.closed:
		if err == nil {
			err = errClosed
		}
	case err != nil:
		c.recordFailure(err)
	default:
		if !c.m.spawn(func() { c.watch(cn) }) {
			err = errClosed
			break
		}
		c.cur = cn
		c.log.Info("MCP server connected")
	}
	c.mu.Unlock()
	if err != nil && cn != nil {
		cn.close()
		cn = nil
	}
	a.conn, a.err = cn, err
	close(a.done)
}

// recordFailure notes a failed start or listing and sets the retry delay;
// c.mu must be held.
func (c *client) recordFailure(err error) {
	c.failures++
	delay := maxRetryDelay
	if c.failures < 6 {
		delay = min(minRetryDelay<<(c.failures-1), maxRetryDelay)
	}
	c.lastErr = err
	c.retryAt = time.Now().Add(delay)
	c.log.Warn("MCP server unavailable", "error", err, "retryIn", delay)
}

// watch marks cn dead when its session ends, and reaps what is left of a
// stdio server's process group.
func (c *client) watch(cn *conn) {
	err := cn.session.Wait()
	cn.dead.Store(true)
	if cn.closing.Load() {
		return // close lets the server exit on its own first
	}
	cn.killGroup()
	c.log.Warn("MCP server session ended", "error", err, "stderr", cn.stderrTail())
}

// drop forgets cn (the next use reconnects) and closes it in the
// background; calls still running on it may finish.
func (c *client) drop(cn *conn) {
	c.mu.Lock()
	if c.cur == cn {
		c.cur = nil
	}
	c.mu.Unlock()
	if !c.m.spawn(cn.close) {
		cn.close()
	}
}

// fail drops cn after it failed to list tools, and delays the next start.
func (c *client) fail(cn *conn, err error) {
	c.mu.Lock()
	c.recordFailure(err)
	c.mu.Unlock()
	c.drop(cn)
}

// close closes the client for good: a start in progress is aborted and the
// live connection closed.
func (c *client) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	cn := c.cur
	c.cur = nil
	c.mu.Unlock()
	c.cancel()
	if cn != nil {
		cn.close()
	}
}

// dial starts the server (stdio) or opens the HTTP session, and performs
// the MCP handshake.
func (c *client) dial(ctx context.Context) (*conn, error) {
	cn := &conn{listSem: make(chan struct{}, 1)}
	client := sdk.NewClient(&sdk.Implementation{Name: "fastagent", Version: "1.0.0"}, &sdk.ClientOptions{
		Logger: c.log,
		// No roots, sampling or elicitation: the agent serves none of them.
		Capabilities: &sdk.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
			cn.stale.Store(true)
		},
		ProgressNotificationHandler: func(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
			cn.progress(req.Params) //nolint:contextcheck // the report belongs to the call's context, found by its token
		},
	})
	var transport sdk.Transport
	if c.srv.URL != "" {
		t, err := c.remoteTransport()
		if err != nil {
			return nil, fmt.Errorf("start: %w", err)
		}
		transport = t
	} else {
		t, err := c.startStdio(ctx, cn)
		if err != nil {
			return nil, fmt.Errorf("start: %w", err)
		}
		transport = t
	}
	session, err := client.Connect(ctx, transport, nil)
	if err != nil {
		cn.killGroup()
		cn.waitExit(2 * time.Second) // its last words on stderr copied before they are quoted
		err = fmt.Errorf("start: %w", err)
		if tail := cn.stderrTail(); tail != "" {
			err = fmt.Errorf("%w; stderr: %s", err, tail)
		}
		if c.srv.URL != "" {
			err = c.srv.authHint(err)
		}
		return nil, err
	}
	cn.session = session
	return cn, nil
}

// tools lists the server's tools unless the cached list is still valid.
func (cn *conn) tools(ctx context.Context) ([]toolDef, error) {
	select {
	case cn.listSem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-cn.listSem }()
	if cn.listed && !cn.stale.Load() {
		return cn.defs, nil
	}
	// Cleared before listing, so that a change announced meanwhile makes
	// the next call list again.
	cn.stale.Store(false)
	var defs []toolDef
	for t, err := range cn.session.Tools(ctx, nil) {
		if err != nil {
			cn.stale.Store(true)
			return nil, err
		}
		defs = append(defs, newToolDef(t))
	}
	cn.defs, cn.listed = defs, true
	return defs, nil
}

// startStdio starts a stdio server in the tool sandbox — the same policy
// as bash and workspace tools: the workspace writable but its rules, no
// secrets, no network unless the server has it — and returns the
// transport over its stdin and stdout.
func (c *client) startStdio(ctx context.Context, cn *conn) (sdk.Transport, error) {
	if c.srv.Sandbox == nil {
		return nil, tools.ErrNoSandbox
	}
	env, missing := commandEnv(c.srv.Dir, c.srv.Env)
	if len(missing) > 0 {
		c.log.Warn("MCP server env references unset variables; they expand to empty strings", "variables", missing)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		_ = inR.Close()
		_ = inW.Close()
		return nil, err
	}
	cn.stderr = newStderrTail(c.log)
	cmd := &sandbox.Cmd{Path: c.srv.Command, Args: append([]string{c.srv.Command}, c.srv.Args...), Env: env, Dir: c.srv.Dir,
		Stdin: inR, Stdout: outW, Stderr: cn.stderr}
	tools.Confine(cmd, c.srv.Dir, c.srv.Protected, c.srv.Network)
	proc, err := c.srv.Sandbox.Start(ctx, cmd)
	_ = inR.Close()
	_ = outW.Close()
	if err != nil {
		_ = inW.Close()
		_ = outR.Close()
		return nil, err
	}
	cn.proc, cn.stdin = proc, inW
	return &sdk.IOTransport{Reader: outR, Writer: inW}, nil
}

// close closes the session: a stdio server gets its stdin closed (its
// stdout stays open, so that its last words do not kill it with SIGPIPE),
// then SIGTERM and SIGKILL if it does not exit; what is left of the call
// is killed.
func (cn *conn) close() {
	cn.closing.Store(true)
	if cn.proc != nil {
		if cn.stdin != nil {
			_ = cn.stdin.Close()
		}
		select {
		case <-cn.proc.Done():
		case <-time.After(terminateGrace):
			_ = cn.proc.Signal(syscall.SIGTERM)
			select {
			case <-cn.proc.Done():
			case <-time.After(terminateGrace):
			}
		}
	}
	if cn.session != nil {
		_ = cn.session.Close()
	}
	cn.killGroup()
}

// killGroup kills the stdio server and everything it started.
func (cn *conn) killGroup() {
	if cn.proc != nil {
		cn.proc.Kill()
	}
	if cn.stdin != nil {
		_ = cn.stdin.Close()
	}
}

// waitExit waits, at most d, for a stdio server killed by killGroup to exit
// and its output to be copied.
func (cn *conn) waitExit(d time.Duration) {
	if cn.proc == nil {
		return
	}
	done := make(chan struct{})
	go func() {
		_ = cn.proc.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
	}
}

func (cn *conn) stderrTail() string {
	if cn.stderr == nil {
		return ""
	}
	return cn.stderr.String()
}

// call calls the tool on cn; Manager.Close cancels it.
func (c *client) call(ctx context.Context, cn *conn, name string, args any) (*sdk.CallToolResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.m.ctx, cancel)() //nolint:contextcheck // the call also ends when the manager closes
	params := &sdk.CallToolParams{Name: name, Arguments: args}
	// The call's progress token: the server may report progress under it
	// (notifications/progress), and the reports reach the call's consumers.
	// Unguessable, so a token names one call only, whatever else the
	// server has seen.
	token := fmt.Sprintf("fastagent-%d-%s", cn.nextToken.Add(1), rand.Text())
	cn.calls.Store(token, ctx)
	defer cn.calls.Delete(token)
	params.SetProgressToken(token)
	return cn.session.CallTool(ctx, params)
}

// isProtocolError reports whether err is an error response of the server
// (the server received the request and refused it), as opposed to a broken
// connection.
func isProtocolError(err error) bool {
	var werr *jsonrpc.Error
	return errors.As(err, &werr) && !notDelivered(err)
}

// notDelivered reports whether err shows that the request never reached the
// server, so that retrying cannot repeat a side effect.
func notDelivered(err error) bool {
	return errors.Is(err, sdk.ErrConnectionClosed) || errors.Is(err, sdk.ErrSessionMissing)
}
