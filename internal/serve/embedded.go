//go:build !nodevserver

package serve

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/fastagent/fastagent/internal/devserver"
	"github.com/fastagent/fastagent/internal/tclient"
)

// embedded is a started embedded Temporal server.
type embedded struct {
	EmbeddedServer
	key  string
	stop func()
}

// startEmbedded starts the embedded Temporal server with its state
// (temporal.db), log (temporal.log) and key (temporal-token) in stateDir; a
// codecEndpoint configures its Web UI's codec server.
func startEmbedded(stateDir string, e Embedded, codecEndpoint string, log *slog.Logger) (*embedded, error) {
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
	return &embedded{
		EmbeddedServer: EmbeddedServer{Frontend: srv.FrontendAddress(), Namespace: srv.Namespace(), UI: srv.UIAddress(), Login: srv.UILoginURL},
		key:            srv.APIKey(),
		stop: func() {
			srv.Stop()
			closeLog()
		},
	}, nil
}
