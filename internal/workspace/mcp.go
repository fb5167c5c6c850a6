package workspace

import (
	"context"

	"github.com/fastagent/fastagent/agent"
)

// MCPSource provides the tools of Model Context Protocol servers (the
// config's mcpServers, by name). It is the seam internal/mcp plugs into;
// problems with one server are diagnostics, never fatal to the others.
type MCPSource interface {
	Tools(ctx context.Context, servers map[string]MCPServer) ([]MCPTool, []Diagnostic)
}

// MCPTool is one tool of the MCP server named Server; its origin is
// "mcp:<Server>".
type MCPTool struct {
	Server string
	Tool   agent.Tool
}
