//go:build nodevserver

package serve

import (
	"errors"
	"log/slog"
)

// embedded is a started embedded Temporal server (none in this build).
type embedded struct {
	EmbeddedServer
	key  string
	stop func()
}

// startEmbedded is unavailable in a build without the embedded server.
func startEmbedded(string, Embedded, string, *slog.Logger) (*embedded, error) {
	return nil, errors.New("this build has no embedded Temporal server (tag nodevserver); connect to a Temporal server by address")
}
