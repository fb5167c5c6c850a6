// Package devserver runs a Temporal server (SQLite persistence) and the
// Temporal Web UI in this process: the body of the fastagent-devserver
// program, which `fastagent dev`, fastagent.Start with an embedded server
// and the end-to-end tests start as a child process. Only this module links
// go.temporal.io/server, so fastagent itself stays on the current SDK and
// free of the server's code.
//
// The server is locked on its own, whoever can reach its loopback ports:
// every frontend call needs the per-run credential (Server.APIKey, sent as
// "authorization: Bearer <key>"), internode traffic is mutual TLS with a
// CA kept in memory (see auth.go), and the Web UI answers only a browser
// that opened a login link (package uigate).
package devserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/server/common/authorization"
	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	tlog "go.temporal.io/server/common/log"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	sqliteschema "go.temporal.io/server/schema/sqlite"
	"go.temporal.io/server/temporal"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/fastagent/fastagent/cmd/fastagent-devserver/internal/uigate"
)

// Options configures the embedded server. Zero values get sane defaults.
type Options struct {
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
	// Logger reports the UI's own failures; default slog.Default().
	Logger *slog.Logger
	// LogWriter receives the server's JSON log lines at LogLevel and above
	// (default: os.Stderr at warn).
	LogWriter io.Writer
	LogLevel  slog.Level
	// Untuned keeps Temporal's stock dynamic configuration instead of the
	// latency tuning described in Tuning.
	Untuned bool
	// DynamicConfig overrides or adds dynamic config values.
	DynamicConfig map[string]any
	// TLS serves the frontend over TLS; nil serves plaintext.
	TLS *TLS
	// CodecEndpoint is the codec server the Web UI decodes payloads with
	// (e.g. http://127.0.0.1:8787/codec); empty shows payloads as stored.
	// Only a signed-in browser sees it.
	CodecEndpoint string
	// APIKey is the credential every frontend call must carry
	// ("authorization: Bearer <APIKey>"); empty draws one for this run.
	APIKey string
	// KeyFile, when set, receives APIKey (mode 0600), for the CLI and the
	// operator's own tools; it belongs in a directory tools cannot read.
	KeyFile string
}

// TLS is the frontend's TLS setup (PEM files). The server's own clients
// use the internal frontend (internode mutual TLS), not this; the Web UI
// server trusts CAFile, checks ServerName and, when client certificates
// are required, presents the server certificate, so it must then also be
// valid for client auth and be signed by a CA in ClientCAFile. A client
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

// Server is a running embedded Temporal server (and UI).
type Server struct {
	server       temporal.Server
	ui           *webUI
	frontendAddr string
	uiAddr       string
	namespace    string
	apiKey       string
	actions      *actionHandler

	started  chan struct{} // closed when the server's Start returned
	startErr error         // what it returned
	failed   chan error    // its error, when it failed
}

// Tuning is the dynamic configuration applied unless Options.Untuned is set.
// Each entry removes a measured source of per-step latency on a one-shard,
// one-machine server (see docs/operations.md, "Latency tuning"):
//   - the history queue processors poll at 20/s by default, so a workflow task
//     after an activity completes waits up to 50 ms for its poll slot;
//   - eager activity dispatch hands the first activity to the worker that
//     completed the workflow task, skipping a matching round trip;
//   - one task-queue partition lets sync match find the waiting poller.
func Tuning() map[string]any {
	return map[string]any{
		"history.transferProcessorMaxPollRPS":   2000,
		"history.timerProcessorMaxPollRPS":      2000,
		"history.visibilityProcessorMaxPollRPS": 2000,
		"history.outboundProcessorMaxPollRPS":   2000,
		"system.enableActivityEagerExecution":   true,
		"matching.numTaskqueueReadPartitions":   1,
		"matching.numTaskqueueWritePartitions":  1,
		// Schedules and visibility-driven listings should see new runs at once.
		"system.forceSearchAttributesCacheRefreshOnRead": true,
	}
}

// fill sets the defaults and picks free ports; a port asked for that is
// taken is an error naming the flag that changes it. It draws the API key
// when none is given.
func (opts *Options) fill() error {
	if opts.IP == "" {
		opts.IP = "127.0.0.1"
	}
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.LogWriter == nil {
		opts.LogWriter = os.Stderr
	}
	if opts.LogLevel == 0 {
		opts.LogLevel = slog.LevelWarn
	}
	var err error
	if opts.FrontendPort == 0 {
		if opts.FrontendPort, err = FreePort(); err != nil {
			return err
		}
	} else if err := portFree(opts.IP, opts.FrontendPort); err != nil {
		return fmt.Errorf("temporal frontend port: %w (choose another with --temporal-port)", err)
	}
	if opts.UIPort == 0 {
		if opts.UIPort, err = FreePort(); err != nil {
			return err
		}
	} else if opts.UIPort > 0 {
		if err := portFree(opts.IP, opts.UIPort); err != nil {
			return fmt.Errorf("temporal ui port: %w (choose another with --ui-port)", err)
		}
	}
	if opts.APIKey == "" {
		if opts.APIKey, err = newKey(); err != nil {
			return err
		}
	}
	return nil
}

// dynamicConfig is the server's dynamic config: the latency tuning (unless
// Untuned) overlaid with Options.DynamicConfig.
func (opts *Options) dynamicConfig() dynamicconfig.StaticClient {
	dyn := dynamicconfig.StaticClient{}
	if !opts.Untuned {
		for k, v := range Tuning() {
			dyn[dynamicconfig.MakeKey(k)] = v
		}
	}
	for k, v := range opts.DynamicConfig {
		dyn[dynamicconfig.MakeKey(k)] = v
	}
	return dyn
}

// Start builds and starts the server, creating the SQLite schema when the
// file is new and the namespace on every start. It returns once the frontend
// accepts connections.
func Start(opts Options) (*Server, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	sqlConf, err := sqlConfig(opts)
	if err != nil {
		return nil, err
	}
	internode, err := internodeTLS()
	if err != nil {
		return nil, err
	}
	conf, err := serverConfig(opts, sqlConf, internode)
	if err != nil {
		return nil, err
	}
	logger := tlog.NewZapLogger(zap.New(zapcore.NewCore(
		zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()),
		zapcore.AddSync(opts.LogWriter),
		zapLevel(opts.LogLevel),
	)))
	dyn := opts.dynamicConfig()
	claims := tokenClaims{key: []byte(opts.APIKey)}
	actions := newActionHandler()
	srv, err := temporal.NewServer(
		temporal.WithConfig(conf),
		temporal.ForServices(services()),
		temporal.WithLogger(logger),
		temporal.WithAuthorizer(authorization.NewDefaultAuthorizer()),
		temporal.WithClaimMapper(func(*config.Config) authorization.ClaimMapper { return claims }),
		temporal.WithDynamicConfigClient(dyn),
		temporal.WithCustomMetricsHandler(actions),
	)
	if err != nil {
		return nil, fmt.Errorf("devserver: build: %w", err)
	}
	s := &Server{
		server:       srv,
		frontendAddr: net.JoinHostPort(opts.IP, strconv.Itoa(opts.FrontendPort)),
		namespace:    opts.Namespace,
		apiKey:       opts.APIKey,
		actions:      actions,
		started:      make(chan struct{}),
		failed:       make(chan error, 1),
	}
	if err := s.serve(opts); err != nil {
		return nil, err
	}
	if opts.KeyFile != "" {
		if err := writeKey(opts.KeyFile, opts.APIKey); err != nil {
			s.Stop()
			return nil, err
		}
	}
	return s, nil
}

// serve starts the server and the Web UI and waits until they serve.
//
// The server's Start returns once every service started, its system worker
// last (about a second after the frontend serves, in backoffs of its SDK
// clients): the server is ready once the frontend answers its health
// check. The Web UI starts beside it (it dials lazily).
func (s *Server) serve(opts Options) error {
	go func() {
		err := s.server.Start()
		s.startErr = err
		close(s.started)
		if err != nil {
			s.failed <- fmt.Errorf("devserver: start: %w", err)
		}
	}()
	uiDone := make(chan error, 1)
	if opts.UIPort > 0 {
		go func() {
			var err error
			s.ui, err = startUI(opts, s.frontendAddr)
			uiDone <- err
		}()
	} else {
		uiDone <- nil
	}
	err := s.awaitServing(opts.TLS != nil, 60*time.Second)
	if uiErr := <-uiDone; err == nil {
		err = uiErr
	}
	if err != nil {
		s.Stop()
		return err
	}
	if opts.UIPort > 0 {
		s.uiAddr = net.JoinHostPort(opts.IP, strconv.Itoa(opts.UIPort))
	}
	return nil
}

// awaitServing waits until the frontend answers its gRPC health check as
// serving (or, with TLS, until the server's Start returned), or Start
// failed.
func (s *Server) awaitServing(wholeStart bool, limit time.Duration) error {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	if wholeStart {
		select {
		case <-s.started:
			if s.startErr != nil {
				return fmt.Errorf("devserver: start: %w", s.startErr)
			}
			return waitListening(s.frontendAddr, limit)
		case <-deadline.C:
			return fmt.Errorf("devserver: the server did not start within %s", limit)
		}
	}
	conn, err := grpc.NewClient(s.frontendAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("devserver: health check: %w", err)
	}
	defer func() { _ = conn.Close() }()
	health := healthpb.NewHealthClient(conn)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-s.started:
			if s.startErr != nil {
				return fmt.Errorf("devserver: start: %w", s.startErr)
			}
			return waitListening(s.frontendAddr, limit)
		case <-deadline.C:
			return fmt.Errorf("devserver: the frontend %s did not serve within %s", s.frontendAddr, limit)
		case <-tick.C:
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: workflowservice.WorkflowService_ServiceDesc.ServiceName})
			cancel()
			if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
				return nil
			}
		}
	}
}

// Failed receives the error of a server whose start failed after it was
// ready (Start already returned).
func (s *Server) Failed() <-chan error { return s.failed }

// services are the server's services: the default ones and the internal
// frontend its own clients call (see auth.go).
func services() []string {
	return []string{"frontend", "internal-frontend", "history", "matching", "worker"}
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

// UILoginURL returns a new one-time login link to the Web UI ("" when the
// UI is disabled).
func (s *Server) UILoginURL() (string, error) {
	if s.ui == nil {
		return "", nil
	}
	return uigate.LoginURL("http://"+s.uiAddr, s.apiKey)
}

// Stop stops the UI and the server.
func (s *Server) Stop() {
	if s.ui != nil {
		s.ui.stop()
	}
	<-s.started         // the server stops once it started
	_ = s.server.Stop() // stopping: nothing left to do with an error
}

func sqlConfig(opts Options) (*config.SQL, error) {
	conf := &config.SQL{PluginName: sqliteplugin.PluginName}
	if opts.DatabaseFile == "" {
		conf.ConnectAttributes = map[string]string{"mode": "memory", "cache": "shared"}
		conf.DatabaseName = "mem" + strconv.FormatInt(time.Now().UnixNano(), 36)
	} else {
		// WAL + synchronous=NORMAL: each commit no longer waits for an fsync.
		// It survives a process kill; an OS crash may lose the last commits.
		conf.ConnectAttributes = map[string]string{"mode": "rwc", "journal_mode": "WAL", "synchronous": "NORMAL"}
		conf.DatabaseName = opts.DatabaseFile
	}
	if opts.DatabaseFile != "" {
		if _, err := os.Stat(opts.DatabaseFile); err == nil {
			if err := forgetMembers(opts.DatabaseFile); err != nil {
				return nil, err
			}
		}
		if _, err := os.Stat(opts.DatabaseFile); errors.Is(err, os.ErrNotExist) {
			if err := os.MkdirAll(filepath.Dir(opts.DatabaseFile), 0o755); err != nil {
				return nil, fmt.Errorf("devserver: state dir: %w", err)
			}
			if err := sqliteschema.SetupSchema(conf); err != nil {
				return nil, fmt.Errorf("devserver: create schema in %s: %w", opts.DatabaseFile, err)
			}
		}
	} // in memory, the SQLite plugin sets the schema up on its first connection
	ns, err := sqliteschema.NewNamespaceConfig("active", opts.Namespace, false, nil)
	if err != nil {
		return nil, fmt.Errorf("devserver: namespace: %w", err)
	}
	if err := sqliteschema.CreateNamespaces(conf, ns); err != nil {
		return nil, fmt.Errorf("devserver: create namespace %q: %w", opts.Namespace, err)
	}
	return conf, nil
}

func serverConfig(opts Options, sqlConf *config.SQL, internode config.GroupTLS) (*config.Config, error) {
	var conf config.Config
	conf.Global.Membership.MaxJoinDuration = 30 * time.Second
	conf.Global.Membership.BroadcastAddress = "127.0.0.1"
	conf.Persistence.DefaultStore = "sqlite-default"
	conf.Persistence.VisibilityStore = "sqlite-default"
	conf.Persistence.NumHistoryShards = 1
	conf.Persistence.DataStores = map[string]config.DataStore{"sqlite-default": {SQL: sqlConf}}
	conf.ClusterMetadata = &cluster.Config{
		EnableGlobalNamespace:    false,
		FailoverVersionIncrement: 10,
		MasterClusterName:        "active",
		CurrentClusterName:       "active",
		ClusterInformation: map[string]cluster.ClusterInformation{
			"active": {
				Enabled:                true,
				InitialFailoverVersion: 1,
				RPCAddress:             net.JoinHostPort("127.0.0.1", strconv.Itoa(opts.FrontendPort)),
				ClusterID:              "fastagent-dev",
			},
		},
	}
	conf.DCRedirectionPolicy.Policy = "noop"
	conf.Services = map[string]config.Service{}
	for _, name := range services() {
		var svc config.Service
		if name == "frontend" {
			svc.RPC.GRPCPort = opts.FrontendPort
			svc.RPC.BindOnIP = opts.IP
		} else {
			p, err := FreePort()
			if err != nil {
				return nil, err
			}
			svc.RPC.GRPCPort = p
			svc.RPC.BindOnLocalHost = true
		}
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		svc.RPC.MembershipPort = p
		conf.Services[name] = svc
	}
	conf.Archival.History.State = "disabled"
	conf.Archival.Visibility.State = "disabled"
	conf.NamespaceDefaults.Archival.History.State = "disabled"
	conf.NamespaceDefaults.Archival.Visibility.State = "disabled"
	// No PublicClient: with an internal frontend, the server's own clients
	// find it through membership and dial it with the internode TLS.
	conf.Global.TLS.Internode = internode
	if t := opts.TLS; t != nil {
		client := config.ClientTLS{ServerName: t.ServerName, RootCAFiles: []string{t.CAFile}}
		conf.Global.TLS.Frontend = config.GroupTLS{
			Server: config.ServerTLS{CertFile: t.CertFile, KeyFile: t.KeyFile},
			Client: client,
		}
		if t.ClientCAFile != "" {
			conf.Global.TLS.Frontend.Server.ClientCAFiles = []string{t.ClientCAFile}
			conf.Global.TLS.Frontend.Server.RequireClientAuth = true
		}
	}
	return &conf, nil
}

// FreePort returns a TCP port free on loopback now, for a listener that
// binds it a moment later (the server's services bind their own ports).
// It draws from below the kernel's ephemeral range, so that an outgoing
// connection or a ":0" listener elsewhere cannot take the port in between
// (seen: a service of one of several servers starting at once failed with
// "address already in use"); it asks the kernel only when none is free
// there.
func FreePort() (int, error) {
	lo, hi := belowEphemeral()
	for range 64 {
		port := lo + rand.IntN(hi-lo) //nolint:gosec // G404: a port to try, not a secret
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
			_ = l.Close()
			return port, nil
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("devserver: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// belowEphemeral is the range FreePort draws from: the 12,000 ports below
// the kernel's ephemeral range (Linux: /proc/sys/net/ipv4/ip_local_port_range,
// 32768 by default), never below 10000.
func belowEphemeral() (lo, hi int) {
	hi = 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 10000 {
				hi = n
			}
		}
	}
	return max(10000, hi-12000), hi
}

func portFree(ip string, port int) error {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("%s:%d is in use", ip, port)
	}
	return l.Close()
}

func waitListening(addr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			return c.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("devserver: frontend %s not listening after %s: %w", addr, limit, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func zapLevel(l slog.Level) zapcore.Level {
	switch {
	case l <= slog.LevelDebug:
		return zapcore.DebugLevel
	case l <= slog.LevelInfo:
		return zapcore.InfoLevel
	case l <= slog.LevelWarn:
		return zapcore.WarnLevel
	default:
		return zapcore.ErrorLevel
	}
}

// forgetMembers drops the cluster membership rows a previous run of the
// embedded server left behind. They name its (now dead) hosts and ports; a
// new process would otherwise try to join them and answer "Not enough hosts
// to serve the request" until they expire (30–45 s). The server is embedded
// and alone on this file, so every row is stale at startup.
func forgetMembers(file string) error {
	db, err := sql.Open("sqlite", "file:"+file+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return fmt.Errorf("devserver: open %s: %w", file, err)
	}
	defer db.Close()
	if _, err := db.Exec("DELETE FROM cluster_membership"); err != nil {
		return fmt.Errorf("devserver: reset cluster membership in %s: %w (is another fastagent dev using this state dir?)", file, err)
	}
	return nil
}
