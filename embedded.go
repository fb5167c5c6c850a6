//go:build !nodevserver

package fastagent

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/fastagent/fastagent/internal/devserver"
)

// startEmbedded starts the embedded Temporal server with its state in db;
// a codecEndpoint configures its Web UI's codec server.
func startEmbedded(db string, uiPort int, codecEndpoint string, log *slog.Logger) (addr, namespace, ui string, stop func(), err error) {
	logFile := io.Discard
	if f, err := os.OpenFile(filepath.Join(filepath.Dir(db), "temporal.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
		logFile = f
		defer func() {
			if stop == nil {
				_ = f.Close()
			}
		}()
	}
	srv, err := devserver.Start(devserver.Options{DatabaseFile: db, FrontendPort: 0, UIPort: uiPort, Logger: log, LogWriter: logFile,
		CodecEndpoint: codecEndpoint})
	if err != nil {
		return "", "", "", nil, err
	}
	stop = func() {
		srv.Stop()
		if c, ok := logFile.(io.Closer); ok {
			_ = c.Close()
		}
	}
	return srv.FrontendAddress(), srv.Namespace(), srv.UIAddress(), stop, nil
}
