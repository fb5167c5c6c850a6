package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/mcp"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/oauthserver"
	"github.com/fastagent/fastagent/internal/workspace"
	"github.com/fastagent/fastagent/workflows"
)

// The agent calls a tool of a remote MCP server over streamable HTTP,
// configured in fastagent.yaml with a bearer header whose secret the worker
// expands from its environment: the call succeeds, the server refused the
// requests without the token, and the secret appears neither in what the
// model was sent nor in the turn's events.
func TestRemoteMCPToolEndToEnd(t *testing.T) {
	const secret = "e2e-remote-mcp-token-7f3a"
	t.Setenv("E2E_REMOTE_MCP_TOKEN", secret)

	s := sdk.NewServer(&sdk.Implementation{Name: "inventory", Version: "1.0.0"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "stock", Description: "How many of an item are in stock"},
		func(_ context.Context, _ *sdk.CallToolRequest, in struct {
			Item string `json:"item"`
		}) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf("%d %s in stock", len(in.Item), in.Item)}}}, nil, nil
		})
	mcpHandler := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil)
	var authorized, refused atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+secret {
			refused.Add(1)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		authorized.Add(1)
		mcpHandler.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)

	e := newEnv(t)
	e.writeConfig(fmt.Sprintf("mcpServers:\n  inventory:\n    url: %s/mcp\n    allowPrivate: true\n    headers:\n      Authorization: \"Bearer ${E2E_REMOTE_MCP_TOKEN}\"\n", hs.URL))
	e.startWorker()
	e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "r1", Name: "stock", Args: `{"item":"bolts"}`}}},
		modelserver.Reply{Text: []string{"5 bolts"}},
	)
	evs := collect(t, e.agent, context.Background(), "remote-mcp", "how many bolts?")
	must(t, evs, agent.TypeCompleted)
	var ended *agent.Event
	for i := range evs {
		if evs[i].Type == agent.TypeToolEnded {
			ended = &evs[i]
		}
	}
	if ended == nil || ended.IsError || ended.Content != "5 bolts in stock" {
		t.Fatalf("tool_ended = %+v, want 5 bolts in stock", ended)
	}
	reqs := e.kit.Model.Requests()
	if !strings.Contains(toolNames(reqs[0]), "stock") {
		t.Errorf("the remote MCP tool was not offered to the model: %s", toolNames(reqs[0]))
	}
	if authorized.Load() == 0 || refused.Load() != 0 {
		t.Errorf("server saw %d authorized and %d refused requests", authorized.Load(), refused.Load())
	}
	b, _ := json.Marshal(reqs)
	ev, _ := json.Marshal(evs)
	if strings.Contains(string(b), secret) || strings.Contains(string(ev), secret) {
		t.Error("the header's secret reached the model's requests or the turn's events")
	}
	// Nor the session's workflow history (its payloads are readable: the
	// prompt and the call's arguments are there).
	var hist strings.Builder
	it := e.client.GetWorkflowHistory(context.Background(), workflows.WorkflowID("remote-mcp"), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		he, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		hist.WriteString(he.String())
	}
	if h := hist.String(); !strings.Contains(h, "how many bolts?") {
		t.Fatal("the history does not hold the prompt in clear: the check below would prove nothing")
	}
	if strings.Contains(hist.String(), secret) {
		t.Error("the header's secret is in the workflow history")
	}
}

// The agent calls a tool of a remote MCP server that needs the MCP
// authorization flow: logged in beforehand (as fastagent mcp login does),
// the worker sends the stored token and, once it has expired, refreshes it
// and writes the new one back.
func TestRemoteMCPOAuthEndToEnd(t *testing.T) {
	s := sdk.NewServer(&sdk.Implementation{Name: "tickets", Version: "1.0.0"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "open_tickets", Description: "Count open tickets"},
		func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "3 open tickets"}}}, nil, nil
		})
	as := oauthserver.New(t, sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil))

	e := newEnv(t)
	e.writeConfig(fmt.Sprintf("mcpServers:\n  tickets:\n    url: %s/mcp\n    allowPrivate: true\n    oauth: true\n", as.URL))
	ws := workspace.Workspace{Dir: e.kit.Dir}
	entry := workspace.MCPServer{URL: as.URL + "/mcp", AllowPrivate: true, OAuth: true}
	srv := workspace.MCPServerConfig(workspace.MCPContext{Workspace: ws}, "tickets", entry)
	if _, err := mcp.Login(t.Context(), srv, mcp.LoginOptions{Open: oauthserver.Browser}); err != nil {
		t.Fatal(err)
	}
	// The access token expires before the worker first uses it.
	tf, err := mcp.ReadTokenFile(srv.OAuthFile)
	if err != nil {
		t.Fatal(err)
	}
	stale := tf.Token.AccessToken
	tf.Token.Expiry = time.Now().Add(-time.Minute)
	b, _ := json.Marshal(tf)
	if err := os.WriteFile(srv.OAuthFile, b, 0o600); err != nil {
		t.Fatal(err)
	}

	e.startWorker()
	e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "o1", Name: "open_tickets", Args: `{}`}}},
		modelserver.Reply{Text: []string{"three"}},
	)
	evs := collect(t, e.agent, context.Background(), "remote-mcp-oauth", "open tickets?")
	must(t, evs, agent.TypeCompleted)
	var ended *agent.Event
	for i := range evs {
		if evs[i].Type == agent.TypeToolEnded {
			ended = &evs[i]
		}
	}
	if ended == nil || ended.IsError || ended.Content != "3 open tickets" {
		t.Fatalf("tool_ended = %+v, want 3 open tickets", ended)
	}
	if n := as.Refreshes(); n != 1 {
		t.Errorf("refreshes = %d, want 1", n)
	}
	after, err := mcp.ReadTokenFile(srv.OAuthFile)
	if err != nil || after.Token.AccessToken == stale || !after.Token.Valid() {
		t.Errorf("token file after the turn: %+v %v", after, err)
	}
	all, _ := json.Marshal(e.kit.Model.Requests())
	if strings.Contains(string(all), after.Token.AccessToken) || strings.Contains(string(all), after.Token.RefreshToken) {
		t.Error("a token reached the model's requests")
	}
}
