//go:build nodevserver

package fastagent

import (
	"log/slog"

	"github.com/fastagent/fastagent/internal/serve"
)

// startEmbedded is nil in a build without the embedded server: asking for
// Temporal.Embedded is then an error that says so.
var startEmbedded func(string, serve.Embedded, string, *slog.Logger) (*serve.EmbeddedServer, error)
