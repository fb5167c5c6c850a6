package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
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
