package workspace

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/mcp"
	"github.com/fastagent/fastagent/internal/sandbox"
	"github.com/fastagent/fastagent/internal/tools"
)

// MCPSource provides the tools of Model Context Protocol servers (the
// config's mcpServers, by name). Problems with one server are diagnostics,
// never fatal to the others. NewLoader installs one backed by internal/mcp;
// tests replace it.
type MCPSource interface {
	Tools(ctx context.Context, mc MCPContext, servers map[string]MCPServer) ([]MCPTool, []Diagnostic)
}

// MCPContext is what starting a stdio server needs besides its entry: the
// workspace it runs in and the policy it runs under (the same as bash's).
type MCPContext struct {
	Workspace Workspace
	Sandbox   *sandbox.Sandbox
	Protected []tools.Protected
	Config    Config
}

// MCPTool is one tool of the MCP server named Server; its origin is
// "mcp:<Server>".
type MCPTool struct {
	Server string
	Tool   agent.Tool
}

// mcpManagers is the default MCPSource: one mcp.Manager per server name, so
// that every tool's server is known. A server that disappears from the
// config is closed; Close closes them all.
type mcpManagers struct {
	log    *slog.Logger
	mu     sync.Mutex
	byName map[string]*mcp.Manager
	closed bool
}

func (m *mcpManagers) Tools(ctx context.Context, mc MCPContext, servers map[string]MCPServer) ([]MCPTool, []Diagnostic) {
	names := sortedKeys(servers)
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, nil
	}
	if m.byName == nil {
		m.byName = map[string]*mcp.Manager{}
	}
	for name, mgr := range m.byName {
		if _, ok := servers[name]; !ok {
			delete(m.byName, name)
			go mgr.Close()
		}
	}
	mgrs := make([]*mcp.Manager, len(names))
	for i, name := range names {
		if m.byName[name] == nil {
			m.byName[name] = mcp.NewManager(m.log.With("mcp_server", name))
		}
		mgrs[i] = m.byName[name]
	}
	m.mu.Unlock()

	type result struct {
		tools []agent.Tool
		diags []mcp.Diagnostic
	}
	results := make([]result, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		s := servers[name]
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i].tools, results[i].diags = mgrs[i].Tools(ctx, []mcp.Server{MCPServerConfig(mc, name, s)})
		}()
	}
	wg.Wait()
	var tools []MCPTool
	var diags []Diagnostic
	for i, name := range names {
		for _, t := range results[i].tools {
			tools = append(tools, MCPTool{Server: name, Tool: t})
		}
		for _, d := range results[i].diags {
			diags = append(diags, Diagnostic{File: OriginMCP + name, Message: d.Message})
		}
	}
	return tools, diags
}

func (m *mcpManagers) Close() {
	m.mu.Lock()
	m.closed = true
	mgrs := m.byName
	m.byName = nil
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, mgr := range mgrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mgr.Close()
		}()
	}
	wg.Wait()
}

// MCPServerConfig is the internal/mcp configuration of the mcpServers entry
// name: a stdio server confined like bash, or a url: server reached by the
// worker (its OAuth login in the state dir, the sandbox's control plane
// never dialed).
func MCPServerConfig(mc MCPContext, name string, s MCPServer) mcp.Server {
	out := mcp.Server{Name: name, Command: s.Command, Args: s.Args, Env: s.Env, URL: s.URL, Deferred: s.Deferred}
	if s.URL == "" {
		out.Dir, out.Sandbox, out.Protected, out.Network = mc.Workspace.Dir, mc.Sandbox, mc.Protected, mc.Config.mcpNetwork(s)
		return out
	}
	out.Transport, out.Headers, out.AllowPrivate = s.MCPTransport(), s.Headers, s.AllowPrivate
	if s.OAuth {
		out.OAuthFile = MCPTokenFile(mc.Workspace, name)
	}
	if mc.Sandbox != nil {
		out.ControlPlane = mc.Sandbox.ControlPlane()
	}
	return out
}

// MCPTokenFile is where `fastagent mcp login <name>` stores the server's
// OAuth tokens: the workspace's state dir, which no tool can read.
func MCPTokenFile(ws Workspace, name string) string {
	return filepath.Join(ws.Dir, StateDirName, "mcp-oauth", name+".json")
}
