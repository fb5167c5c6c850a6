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

	"github.com/fastagent/fastagent/internal/devserver"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/tclient"
)

// Start starts the embedded Temporal server with its state (temporal.db),
// log (temporal.log) and key (temporal-token) in stateDir; a codecEndpoint
// configures its Web UI's codec server.
func Start(stateDir string, e serve.Embedded, codecEndpoint string, log *slog.Logger) (*serve.EmbeddedServer, error) {
	logFile := io.Discard
	if f, err := os.OpenFile(filepath.Join(stateDir, "temporal.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
		logFile = f
	}
	closeLog := func() {
		if c, ok := logFile.(io.Closer); ok {
			_ = c.Close()
		}
	}
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
