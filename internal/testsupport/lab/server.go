package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/internal/devserver"
	"github.com/fastagent/fastagent/internal/tclient"
)

// Server is a Temporal dev server (a child process of this one) on a
// temporary SQLite file, UI off.
type Server struct {
	*devserver.Server
	// Dir holds temporal.db and temporal.log.
	Dir string
	log *os.File
}

// ServerOptions configure StartServer.
type ServerOptions struct {
	// Untuned keeps Temporal's stock dynamic configuration (devserver.Options.Untuned).
	Untuned bool
	// DynamicConfig overrides single dynamic config values on top of the
	// tuning (or of the stock configuration when Untuned).
	DynamicConfig map[string]any
}

// StartServer starts a dev server in a new temporary directory. Its log
// goes to temporal.log there.
func StartServer(opts ServerOptions) (*Server, error) {
	dir, err := os.MkdirTemp("", "fastagent-lab-temporal-")
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "temporal.log"))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	srv, err := devserver.Start(context.Background(), devserver.Options{
		DatabaseFile:  filepath.Join(dir, "temporal.db"),
		UIPort:        -1,
		LogWriter:     logf,
		Logger:        QuietLogger(),
		Untuned:       opts.Untuned,
		DynamicConfig: opts.DynamicConfig,
	})
	if err != nil {
		_ = logf.Close()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start embedded temporal: %w", err)
	}
	return &Server{Server: srv, Dir: dir, log: logf}, nil
}

// Dial returns a client of the server's namespace that logs only errors
// worth a human's attention.
func (s *Server) Dial(ctx context.Context) (client.Client, error) {
	return tclient.Dial(ctx, tclient.Config{
		Address:   s.FrontendAddress(),
		Namespace: s.Namespace(),
		APIKey:    s.APIKey(),
		Plaintext: true,
		Logger:    QuietLogger(),
	})
}

// Close stops the server and removes its directory.
func (s *Server) Close() {
	s.Stop()
	_ = s.log.Close()
	_ = os.RemoveAll(s.Dir)
}

// QuietLogger discards routine logs: the SDK's and the activities' retry
// warnings during fault scenarios are expected and would drown the progress
// lines.
func QuietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// Temporal is the Temporal server a lab scenario runs on: a child of this
// process (Server) or of a process of its own (ServerProc).
type Temporal interface {
	FrontendAddress() string
	APIKey() string
	Namespace() string
	Dial(ctx context.Context) (client.Client, error)
	Close()
}

var (
	_ Temporal = (*Server)(nil)
	_ Temporal = (*ServerProc)(nil)
)

// ServerInfo is what a server process tells its parent (ServeProcess
// writes it as JSON to the file its parent names).
type ServerInfo struct {
	Address   string `json:"address"`
	APIKey    string `json:"apiKey"`
	Namespace string `json:"namespace"`
}

// ServeProcess is the body of a server process (`fastagent-lab server`):
// it starts a Temporal server as StartServer does, writes its ServerInfo to
// infoFile once it serves, and stops it when stop is closed.
func ServeProcess(infoFile string, stop <-chan struct{}) error {
	srv, err := StartServer(ServerOptions{})
	if err != nil {
		return err
	}
	defer srv.Close()
	b, _ := json.Marshal(ServerInfo{Address: srv.FrontendAddress(), APIKey: srv.APIKey(), Namespace: srv.Namespace()})
	if err := os.WriteFile(infoFile+".tmp", b, 0o600); err != nil {
		return err
	}
	if err := os.Rename(infoFile+".tmp", infoFile); err != nil {
		return err
	}
	<-stop
	return nil
}

// ServerProc is a Temporal server in a process of its own: the same server
// as the embedded one (SQLite persistence, the same dynamic configuration),
// so a figure measured on it differs only by the process boundary.
type ServerProc struct {
	*Proc
	info ServerInfo
	dir  string
}

// StartServerProcess starts `<bin> server -info <file>` (bin: a
// fastagent-lab binary) and waits until the server serves.
func StartServerProcess(bin string) (*ServerProc, error) {
	dir, err := os.MkdirTemp("", "fastagent-lab-server-")
	if err != nil {
		return nil, err
	}
	info := filepath.Join(dir, "server.json")
	p, err := StartProc(bin, []string{"server", "-info", info}, os.Environ())
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s := &ServerProc{Proc: p, dir: dir}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		b, err := os.ReadFile(info)
		if err == nil && json.Unmarshal(b, &s.info) == nil {
			return s, nil
		}
		select {
		case <-p.Done():
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("the server process exited: %s", OneLine(p.Output(), 300))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Close()
			return nil, errors.New("the server process did not start within 2 minutes")
		}
	}
}

// FrontendAddress is the server's gRPC address.
func (s *ServerProc) FrontendAddress() string { return s.info.Address }

// APIKey is the credential its frontend wants.
func (s *ServerProc) APIKey() string { return s.info.APIKey }

// Namespace is the namespace it created.
func (s *ServerProc) Namespace() string { return s.info.Namespace }

// Dial returns a client of the server's namespace, as Server.Dial.
func (s *ServerProc) Dial(ctx context.Context) (client.Client, error) {
	return tclient.Dial(ctx, tclient.Config{Address: s.info.Address, Namespace: s.info.Namespace,
		APIKey: s.info.APIKey, Plaintext: true, Logger: QuietLogger()})
}

// Close stops the server process (SIGTERM, then SIGKILL) and removes its
// directory.
func (s *ServerProc) Close() {
	s.Stop(10 * time.Second)
	_ = os.RemoveAll(s.dir)
}
