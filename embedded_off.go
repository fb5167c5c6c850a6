//go:build nodevserver

package fastagent

import (
	"errors"
	"log/slog"
)

// startEmbedded is unavailable in a build without the embedded server.
func startEmbedded(string, int, string, *slog.Logger) (string, string, string, func(), error) {
	return "", "", "", nil, errors.New("this build has no embedded Temporal server (tag nodevserver); set Options.Temporal.Address or Client")
}
