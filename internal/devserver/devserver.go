// Package devserver starts the Temporal development server of fastagent —
// the fastagent-devserver program, a module of its own
// (cmd/fastagent-devserver) — as a child process, for `fastagent dev`,
// fastagent.Start with an embedded server, the lab and the end-to-end
// tests. Nothing here links the Temporal server: fastagent stays on the
// current Temporal SDK, and only the child carries the server.
//
// The child is locked on its own, whoever reaches its loopback ports: every
// frontend call needs the per-run key (Server.APIKey, sent as
// "authorization: Bearer <key>"), internode traffic is mutual TLS with a CA
// it keeps in memory, and its Web UI answers only a browser that opened a
// login link (UILoginURL). The key reaches it on its stdin, never on its
// command line or in its environment, and it makes itself non-dumpable.
//
// The child lives as long as its parent: it stops when its stdin closes
// (Stop, or the parent's exit), and on Linux the kernel kills it when the
// parent dies (PR_SET_PDEATHSIG).
package devserver

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/fastagent/fastagent/internal/sessionstart"
	"github.com/fastagent/fastagent/internal/tclient"
	"github.com/fastagent/fastagent/internal/uigate"
)

// protocol is the version of the child's stdin/stdout protocol this
// package speaks (cmd/fastagent-devserver's protocol constant).
const protocol = 1

// ReadyTimeout bounds how long Start waits for the child to serve.
var ReadyTimeout = 2 * time.Minute

// Options configures the server. Zero values get sane defaults.
type Options struct {
	// Binary is the fastagent-devserver program; empty finds it (Find).
	Binary string
	// DatabaseFile is the SQLite file; empty keeps everything in memory.
	DatabaseFile string
	// IP the frontend and UI bind to; default 127.0.0.1.
	IP string
	// FrontendPort is the gRPC port clients dial; 0 picks a free port.
	FrontendPort int
	// UIPort serves the Web UI; 0 picks a free port, -1 disables the UI.
	UIPort int
	// Namespace is created on every start (a no-op when it exists); default "default".
	Namespace string
	// Logger reports progress (a first build of the program); default
	// slog.Default().
	Logger *slog.Logger
	// LogWriter receives the server's JSON log lines at LogLevel and above
	// (the child's stderr; default os.Stderr at warn). An *os.File is
	// handed to the child as it is.
	LogWriter io.Writer
	LogLevel  slog.Level
	// NoSearchAttributes leaves the session search attributes unregistered
	// (tests of a namespace without them); by default Start registers them.
	NoSearchAttributes bool
	// Untuned keeps Temporal's stock dynamic configuration instead of the
	// latency tuning (see docs/operations.md, "Latency tuning").
	Untuned bool
	// DynamicConfig overrides or adds dynamic config values (numbers,
	// strings, booleans, durations as "10s").
	DynamicConfig map[string]any
	// TLS serves the frontend over TLS; nil serves plaintext.
	TLS *TLS
	// CodecEndpoint is the codec server the Web UI decodes payloads with
	// (e.g. http://127.0.0.1:8787/codec/dev/<key>); empty shows payloads as
	// stored. Only a signed-in browser sees it.
	CodecEndpoint string
	// APIKey is the credential every frontend call must carry; empty draws
	// one for this run.
	APIKey string
	// KeyFile, when set, receives APIKey (mode 0600), for the CLI and the
	// operator's own tools; it belongs in a directory tools cannot read.
	KeyFile string
}

// TLS is the frontend's TLS setup (PEM files). The server's own clients
// use the internal frontend (internode mutual TLS), not this; the Web UI
// trusts CAFile, checks ServerName and, when client certificates are
// required, presents the server certificate, so it must then also be valid
// for client auth and be signed by a CA in ClientCAFile. A client
// certificate alone is no credential: calls still need the API key.
type TLS struct {
	CertFile string `json:"certFile"`
	KeyFile  string `json:"keyFile"`
	// CAFile signed CertFile; ServerName is a name in CertFile.
	CAFile     string `json:"caFile"`
	ServerName string `json:"serverName"`
	// ClientCAFile, when set, makes the frontend require client
	// certificates signed by it (mTLS).
	ClientCAFile string `json:"clientCAFile,omitempty"`
}

// childConfig is the configuration line the child reads on stdin.
type childConfig struct {
	DatabaseFile  string         `json:"databaseFile,omitempty"`
	IP            string         `json:"ip,omitempty"`
	FrontendPort  int            `json:"frontendPort,omitempty"`
	UIPort        int            `json:"uiPort,omitempty"`
	Namespace     string         `json:"namespace,omitempty"`
	LogLevel      string         `json:"logLevel,omitempty"`
	Untuned       bool           `json:"untuned,omitempty"`
	DynamicConfig map[string]any `json:"dynamicConfig,omitempty"`
	TLS           *TLS           `json:"tls,omitempty"`
	CodecEndpoint string         `json:"codecEndpoint,omitempty"`
	APIKey        string         `json:"apiKey"`
	KeyFile       string         `json:"keyFile,omitempty"`
}

// message is one line the child prints.
type message struct {
	Protocol int `json:"protocol"`
	Ready    *struct {
		Frontend  string `json:"frontend"`
		Namespace string `json:"namespace"`
		UI        string `json:"ui"`
	} `json:"ready"`
	Error   string           `json:"error"`
	Actions map[string]int64 `json:"actions"`
}

// Server is a running fastagent-devserver child.
type Server struct {
	bin          string
	cmd          *exec.Cmd
	stdin        *os.File
	frontendAddr string
	uiAddr       string
	namespace    string
	apiKey       string
	tls          *TLS

	answers chan message  // the child's answers to requests, in order
	exited  chan struct{} // closed when the child exited
	waitErr error         // its exit status, once exited is closed

	mu       sync.Mutex // one request at a time
	stopOnce sync.Once
}

// Start starts the child and returns once it serves (and, unless
// NoSearchAttributes, the session search attributes are registered); ctx
// bounds the start, not the server's life.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.LogWriter == nil {
		opts.LogWriter = os.Stderr
	}
	if opts.LogLevel == 0 {
		opts.LogLevel = slog.LevelWarn
	}
	if opts.APIKey == "" {
		key, err := newKey()
		if err != nil {
			return nil, err
		}
		opts.APIKey = key
	}
	bin := opts.Binary
	if bin == "" {
		var err error
		if bin, err = Find(opts.Logger); err != nil {
			return nil, err
		}
	}
	var s *Server
	for attempt := 1; ; attempt++ {
		s = &Server{bin: bin, apiKey: opts.APIKey, tls: opts.TLS, answers: make(chan message, 1), exited: make(chan struct{})}
		err := s.start(ctx, opts)
		if err == nil {
			break
		}
		// The server exits at once (a fatal log line, no answer) when a port
		// one of its services drew was taken before it bound it — another
		// server starting on this machine. A new start draws new ports.
		if !errors.Is(err, errDied) || attempt == startAttempts {
			return nil, err
		}
		opts.Logger.Warn("the Temporal dev server died while starting; starting it again", "attempt", attempt+1, "error", err)
	}
	if !opts.NoSearchAttributes {
		if err := s.registerSearchAttributes(ctx); err != nil {
			s.Stop()
			return nil, err
		}
	}
	return s, nil
}

// start runs the child, sends its configuration and waits for its ready
// line.
func (s *Server) start(ctx context.Context, opts Options) error {
	cfg, err := json.Marshal(childConfig{ //nolint:gosec // G117: the key goes to the child on its stdin, on purpose
		DatabaseFile: opts.DatabaseFile, IP: opts.IP, FrontendPort: opts.FrontendPort, UIPort: opts.UIPort,
		Namespace: opts.Namespace, LogLevel: opts.LogLevel.String(), Untuned: opts.Untuned,
		DynamicConfig: opts.DynamicConfig, TLS: opts.TLS, CodecEndpoint: opts.CodecEndpoint,
		APIKey: opts.APIKey, KeyFile: opts.KeyFile,
	})
	if err != nil {
		return fmt.Errorf("devserver: configuration: %w", err)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("devserver: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		_, _ = inR.Close(), inW.Close()
		return fmt.Errorf("devserver: %w", err)
	}
	s.cmd = exec.Command(s.bin, "--config", "-") //nolint:gosec // G204: the dev server program, found by Find
	s.cmd.Stdin, s.cmd.Stdout, s.cmd.Stderr = inR, outW, opts.LogWriter
	s.cmd.Env = childEnv()
	s.cmd.SysProcAttr = procAttr()
	s.stdin = inW
	started := make(chan error, 1)
	go s.run(started)
	err = <-started
	_, _ = inR.Close(), outW.Close() // the child holds its own ends
	if err != nil {
		_, _ = inW.Close(), outR.Close()
		return fmt.Errorf("devserver: start %s: %w", s.bin, err)
	}
	lines := bufio.NewReader(outR)
	first := make(chan message, 1)
	go s.read(lines, outR, first)
	if _, err := inW.Write(append(cfg, '\n')); err != nil {
		s.Stop()
		return fmt.Errorf("devserver: %s %w, without reading its configuration (%w)", s.bin, errDied, s.exitStatus())
	}
	return s.awaitReady(ctx, first)
}

// run starts the child and waits for it on a goroutine locked to its OS
// thread for the child's whole life: PR_SET_PDEATHSIG fires when the
// thread that started the child ends, not the process, so that thread
// must outlive the child.
func (s *Server) run(started chan<- error) {
	runtime.LockOSThread() // never unlocked: the thread ends with this goroutine, after the child
	if err := s.cmd.Start(); err != nil {
		started <- err
		close(s.exited)
		return
	}
	started <- nil
	s.waitErr = s.cmd.Wait()
	close(s.exited)
}

// read hands the first line to first and every later one to s.answers.
func (s *Server) read(lines *bufio.Reader, closer io.Closer, first chan<- message) {
	defer closer.Close()
	defer close(s.answers)
	n := 0
	for {
		line, err := lines.ReadBytes('\n')
		if len(line) > 0 {
			var m message
			if json.Unmarshal(line, &m) != nil {
				m = message{Error: "not a protocol line: " + strings.TrimSpace(string(line))}
			}
			if n == 0 {
				first <- m
			} else {
				s.answers <- m
			}
			n++
		}
		if err != nil {
			if n == 0 {
				close(first)
			}
			return
		}
	}
}

func (s *Server) awaitReady(ctx context.Context, first <-chan message) error {
	timer := time.NewTimer(ReadyTimeout)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		s.Stop()
		return fmt.Errorf("devserver: %w", context.Cause(ctx))
	case m, ok := <-first:
		switch {
		case !ok:
			<-s.exited
			return fmt.Errorf("devserver: %s %w (%w); its log has the reason", s.bin, errDied, s.exitStatus())
		case m.Protocol != protocol:
			s.Stop()
			return fmt.Errorf("devserver: %s speaks protocol %d, this fastagent %d: rebuild it from this version (%s)", s.bin, m.Protocol, protocol, buildHint)
		case m.Error != "":
			<-s.exited
			return errors.New(m.Error)
		case m.Ready == nil:
			s.Stop()
			return fmt.Errorf("devserver: %s printed no ready line", s.bin)
		}
		s.frontendAddr, s.namespace, s.uiAddr = m.Ready.Frontend, m.Ready.Namespace, m.Ready.UI
		return nil
	case <-timer.C:
		s.Stop()
		return fmt.Errorf("devserver: %s did not serve within %s", s.bin, ReadyTimeout)
	}
}

// childEnv is the child's environment: this one without the variables
// that carry secrets of the agent (model keys, tokens): the server needs
// none of them.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if keepEnv(name) {
			env = append(env, kv)
		}
	}
	return env
}

// keepEnv: what a Go program and its time zone, locale and temporary
// directory need.
func keepEnv(name string) bool {
	switch name {
	case "PATH", "HOME", "USER", "LANG", "TZ", "TMPDIR", "GODEBUG", "GOMAXPROCS", "GOMEMLIMIT", "GOTRACEBACK":
		return true
	}
	return strings.HasPrefix(name, "LC_")
}

// registerSearchAttributes registers the session search attributes the
// namespace lacks (sessionstart.Register), so that sessions started on the
// server can be found by agent, channel, principal and status.
func (s *Server) registerSearchAttributes(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var c client.Client
	var err error
	if s.tls != nil {
		c, err = s.dialTLS(ctx)
	} else {
		c, err = tclient.Dial(ctx, tclient.Config{Address: s.frontendAddr, Namespace: s.namespace, APIKey: s.apiKey, Plaintext: true,
			Logger: slog.New(slog.DiscardHandler)})
	}
	if err != nil {
		return fmt.Errorf("devserver: dial to register search attributes: %w", err)
	}
	defer c.Close()
	if _, err := sessionstart.Register(ctx, c, s.namespace); err != nil {
		return fmt.Errorf("devserver: %w", err)
	}
	return nil
}

// dialTLS dials the frontend served over TLS as the Web UI does: trusting
// CAFile, checking ServerName and, when client certificates are required,
// presenting the server certificate.
func (s *Server) dialTLS(ctx context.Context) (client.Client, error) {
	t := s.tls
	ca, err := os.ReadFile(t.CAFile)
	if err != nil {
		return nil, fmt.Errorf("devserver: read the CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("devserver: no certificate in %s", t.CAFile)
	}
	conf := &tls.Config{RootCAs: pool, ServerName: t.ServerName, MinVersion: tls.VersionTLS12}
	if t.ClientCAFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("devserver: load the server certificate: %w", err)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	return client.DialContext(ctx, client.Options{
		HostPort: s.frontendAddr, Namespace: s.namespace,
		Credentials:       client.NewAPIKeyStaticCredentials(s.apiKey),
		ConnectionOptions: client.ConnectionOptions{TLS: conf},
		Logger:            sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
	})
}

// FrontendAddress is the host:port a Temporal client dials.
func (s *Server) FrontendAddress() string { return s.frontendAddr }

// UIAddress is the Web UI's host:port, empty when the UI is disabled.
func (s *Server) UIAddress() string { return s.uiAddr }

// Namespace is the namespace created at start.
func (s *Server) Namespace() string { return s.namespace }

// APIKey is the credential every frontend call must carry
// ("authorization: Bearer <key>").
func (s *Server) APIKey() string { return s.apiKey }

// exitStatus is how the child exited, once it did ("exit status 0" for a
// clean exit).
func (s *Server) exitStatus() error {
	<-s.exited
	if s.waitErr == nil {
		return errors.New("exit status 0")
	}
	return s.waitErr
}

// Pid is the child's process ID.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Exited is closed when the child exited (Stop, or it died); Err then
// says how.
func (s *Server) Exited() <-chan struct{} { return s.exited }

// Err is how the child exited, once Exited is closed.
func (s *Server) Err() error {
	select {
	case <-s.exited:
		return s.waitErr
	default:
		return nil
	}
}

// UILoginURL returns a new one-time login link to the Web UI ("" when the
// UI is disabled).
func (s *Server) UILoginURL() (string, error) {
	if s.uiAddr == "" {
		return "", nil
	}
	return uigate.LoginURL("http://"+s.uiAddr, s.apiKey)
}

// Actions returns how many billable actions the server counted in
// namespace (default: the server's namespace) since it started, by action
// type as its "action" metric names them: grpc_ExecuteMultiOperation (an
// update-with-start that started the workflow),
// message_UpdateWorkflowExecution:Acceptance, command_ScheduleActivityTask,
// command_BatchMarkers (all markers of one workflow task),
// grpc_RecordActivityTaskHeartbeat, activity_retry, … The server counts
// every command it is sent, including the TemporalChangeVersion upsert
// Temporal Cloud does not bill and the individual markers behind
// command_BatchMarkers (command_RecordMarker). It is nil when the child
// does not answer.
func (s *Server) Actions(namespace string) map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	req, _ := json.Marshal(map[string]string{"actions": namespace})
	if _, err := s.stdin.Write(append(req, '\n')); err != nil {
		return nil
	}
	select {
	case m, ok := <-s.answers:
		if !ok || m.Error != "" {
			return nil
		}
		if m.Actions == nil {
			return map[string]int64{}
		}
		return m.Actions
	case <-time.After(10 * time.Second):
		return nil
	}
}

// StopTimeout bounds how long Stop waits for the child to stop cleanly
// before it kills it.
var StopTimeout = 30 * time.Second

// Stop stops the child: it closes its stdin (the child stops its server
// and exits), and kills it if it is still there after StopTimeout. It is
// idempotent.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		_ = s.stdin.Close()
		select {
		case <-s.exited:
		case <-time.After(StopTimeout):
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
	})
}

// Kill kills the child at once (SIGKILL), as a crash would.
func (s *Server) Kill() {
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.Stop()
}

// newKey draws a per-run credential: 32 random bytes, hex.
func newKey() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("devserver: draw the frontend credential: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// startAttempts is how many times Start starts a child that dies before
// it serves.
const startAttempts = 3

// errDied: the child exited before its ready line, without saying why on
// stdout.
var errDied = errors.New("exited before it served")

// errNotFound is Find's error when neither a program nor a way to build
// one was found.
var errNotFound = errors.New("the Temporal dev server program (fastagent-devserver) was not found")
