//go:build !nodevserver

package fastagent

import "github.com/fastagent/fastagent/internal/serve/embedserver"

// startEmbedded starts the embedded Temporal server (Temporal.Embedded).
var startEmbedded = embedserver.Start
