package workspace

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/egress"
	"github.com/fastagent/fastagent/internal/sandbox"
)

// TestMCPServersFromConfig runs the loader's default MCP source against a
// streamable HTTP server: its tools load with origin mcp:<server>, after Go
// tools and before workspace tools, and run.
func TestMCPServersFromConfig(t *testing.T) {
	t.Parallel()
	srv := sdk.NewServer(&sdk.Implementation{Name: "docs", Version: "1.0.0"}, nil)
	sdk.AddTool(srv, &sdk.Tool{Name: "lookup", Description: "Look up a doc page"},
		func(_ context.Context, _ *sdk.CallToolRequest, in struct {
			Topic string `json:"topic"`
		}) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "page about " + in.Topic}}}, nil, nil
		})
	sdk.AddTool(srv, &sdk.Tool{Name: "shadowed", Description: "Loses to the Go tool"},
		func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{}, nil, nil
		})
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	defer hs.Close()

	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"fastagent.yaml":    fmt.Sprintf("mcpServers:\n  docs:\n    url: %s\n    allowPrivate: true\n  ghost:\n    command: /nonexistent/mcp-server\n", hs.URL),
		"tools/lookup.yaml": "description: workspace lookup\ncommand: cat\n",
	})
	l, err := NewLoader(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Getenv = func(string) string { return "" }
	l.Extra = []agent.Tool{fakeTool{name: "shadowed"}}
	d, err := l.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	o := origins(d)
	if o["lookup"] != "mcp:docs" || o["shadowed"] != OriginGo {
		t.Fatalf("origins %v; diagnostics:\n%s", o, diagText(d))
	}
	want := []Collision{{Name: "shadowed", Kept: "go", Skipped: "mcp:docs"}, {Name: "lookup", Kept: "mcp:docs", Skipped: "workspace:tools/lookup.yaml"}}
	if fmt.Sprint(d.Collisions) != fmt.Sprint(want) {
		t.Errorf("collisions %v, want %v", d.Collisions, want)
	}
	if !strings.Contains(diagText(d), "mcp:ghost: ") {
		t.Errorf("the broken server is not diagnosed:\n%s", diagText(d))
	}
	res := runTool(t, d, "lookup", `{"topic": "retries"}`)
	if res.IsError || res.Content != "page about retries" {
		t.Errorf("lookup = %+v", res)
	}
}

// A remote entry becomes a remote mcp.Server: its transport, headers (as
// written: the worker expands them) and its OAuth token file in the state
// dir, which is one of the paths no tool may read.
func TestMCPServerConfigRemote(t *testing.T) {
	ws := Workspace{Dir: t.TempDir()}
	ws.AgentDir = ws.Dir
	s := MCPServerConfig(MCPContext{Workspace: ws}, "linear", MCPServer{URL: "https://mcp.example.com/sse", Transport: "sse", OAuth: true,
		Headers: map[string]string{"X-Team": "${TEAM}"}})
	if s.Transport != "sse" || s.Headers["X-Team"] != "${TEAM}" || s.Sandbox != nil || s.Dir != "" {
		t.Errorf("server = %+v", s)
	}
	secret := false
	for _, p := range SecretPaths(ws) {
		if strings.HasPrefix(s.OAuthFile, p+"/") {
			secret = true
		}
	}
	if !secret {
		t.Errorf("token file %s is not under a secret path %v", s.OAuthFile, SecretPaths(ws))
	}
	if got := MCPServerConfig(MCPContext{Workspace: ws}, "gh", MCPServer{URL: "https://mcp.example.com/"}); got.OAuthFile != "" || got.Transport != "streamable-http" {
		t.Errorf("no oauth: %+v", got)
	}
}

// A remote server at one of the deployment's own addresses (the sandbox's
// control plane, as the worker builds it) is refused even with
// allowPrivate: the loader hands the sandbox's deny list to the MCP client.
func TestRemoteMCPNeverReachesTheControlPlane(t *testing.T) {
	srv := sdk.NewServer(&sdk.Implementation{Name: "docs", Version: "1.0.0"}, nil)
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	deny, err := egress.ParseDests(t.Context(), []string{strings.TrimPrefix(hs.URL, "http://")})
	if err != nil {
		t.Fatal(err)
	}
	sb := sandbox.Open(sandbox.Config{Mode: sandbox.Off, Egress: egress.Policy{Deny: deny}})
	t.Cleanup(func() { _ = sb.Close() })
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"fastagent.yaml": fmt.Sprintf("mcpServers:\n  frontend:\n    url: %s\n    allowPrivate: true\n", hs.URL)})
	l, err := NewLoader(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	l.Getenv = func(string) string { return "" }
	l.Sandbox = sb
	d, err := l.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(diagText(d), "one of this deployment's own services") {
		t.Errorf("diagnostics:\n%s", diagText(d))
	}
}
