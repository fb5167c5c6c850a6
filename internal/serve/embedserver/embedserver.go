// Package embedserver starts the embedded Temporal development server for
// serve.Parts.Connect. It is its own package so that only the programs
// that embed the server (fastagent dev, fastagent.Start with Embedded)
// link it: the rest of the assembly, and every test built on it, stays
// free of the Temporal server's code.
package embedserver

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/fastagent/fastagent/internal/devserver"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/tclient"
)

// Start starts the embedded Temporal server with its state (temporal.db),
// log (temporal.log) and key (temporal-token) in stateDir; a codecEndpoint
// configures its Web UI's codec server.
func Start(stateDir string, e serve.Embedded, codecEndpoint string, log *slog.Logger) (*serve.EmbeddedServer, error) {
	logFile := &serverLog{w: io.Discard}
	if f, err := os.OpenFile(filepath.Join(stateDir, "temporal.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
		logFile.w, logFile.c = f, f
	}
	closeLog := logFile.Close
	srv, err := devserver.Start(devserver.Options{
		DatabaseFile: filepath.Join(stateDir, "temporal.db"),
		FrontendPort: e.FrontendPort, UIPort: e.UIPort, Logger: log, LogWriter: logFile,
		CodecEndpoint: codecEndpoint, KeyFile: filepath.Join(stateDir, tclient.DevTokenFile),
	})
	if err != nil {
		closeLog()
		return nil, err
	}
	return &serve.EmbeddedServer{
		Frontend: srv.FrontendAddress(), Namespace: srv.Namespace(), UI: srv.UIAddress(), Login: srv.UILoginURL,
		Key: srv.APIKey(),
		Stop: func() {
			srv.Stop()
			closeLog()
		},
	}, nil
}

// serverLog is the embedded server's log file. Some of the Temporal
// server's goroutines keep logging for a while after Stop returns; once
// the file is closed their lines are dropped instead of each one printing
// "write error: file already closed" to stderr.
type serverLog struct {
	mu     sync.Mutex
	w      io.Writer
	c      io.Closer
	closed bool
}

func (l *serverLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return len(p), nil
	}
	return l.w.Write(p)
}

// Close closes the file; later writes are discarded.
func (l *serverLog) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed && l.c != nil {
		_ = l.c.Close()
	}
	l.closed = true
}
