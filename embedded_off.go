//go:build nodevserver

package fastagent

import (
	"errors"
	"log/slog"
)

// embedded is a started embedded Temporal server (none in this build).
type embedded struct {
	addr, namespace, ui, key string
	login                    func() (string, error)
	stop                     func()
}

// startEmbedded is unavailable in a build without the embedded server.
func startEmbedded(string, int, string, *slog.Logger) (*embedded, error) {
	return nil, errors.New("this build has no embedded Temporal server (tag nodevserver); set Options.Temporal.Address or Client")
}
