//go:build !nodevserver

package fastagent

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
	addr, namespace, ui, key string
	// login returns a new one-time Web UI login link.
	login func() (string, error)
	stop  func()
}

// startEmbedded starts the embedded Temporal server with its state in db
// and its key in <dir of db>/temporal-token; a codecEndpoint configures its
// Web UI's codec server.
func startEmbedded(db string, uiPort int, codecEndpoint string, log *slog.Logger) (*embedded, error) {
	logFile := io.Discard
	if f, err := os.OpenFile(filepath.Join(filepath.Dir(db), "temporal.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
		logFile = f
	}
	closeLog := func() {
		if c, ok := logFile.(io.Closer); ok {
			_ = c.Close()
		}
	}
	srv, err := devserver.Start(devserver.Options{DatabaseFile: db, FrontendPort: 0, UIPort: uiPort, Logger: log, LogWriter: logFile,
		CodecEndpoint: codecEndpoint, KeyFile: filepath.Join(filepath.Dir(db), tclient.DevTokenFile)})
	if err != nil {
		closeLog()
		return nil, err
	}
	return &embedded{
		addr: srv.FrontendAddress(), namespace: srv.Namespace(), ui: srv.UIAddress(), key: srv.APIKey(),
		login: srv.UILoginURL,
		stop: func() {
			srv.Stop()
			closeLog()
		},
	}, nil
}
