package lab

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/internal/devserver"
	"github.com/fastagent/fastagent/internal/tclient"
)

// Server is an embedded Temporal server on a temporary SQLite file, UI off.
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
}

// StartServer starts an embedded server in a new temporary directory. Its
// log goes to temporal.log there.
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
	srv, err := devserver.Start(devserver.Options{
		DatabaseFile: filepath.Join(dir, "temporal.db"),
		UIPort:       -1,
		LogWriter:    logf,
		Logger:       QuietLogger(),
		Untuned:      opts.Untuned,
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
