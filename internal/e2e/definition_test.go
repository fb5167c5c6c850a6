package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/transcript"
)

// mcpServerMain serves a tiny MCP server on stdio when the test binary is
// re-executed with FASTAGENT_E2E_MCP=1 (see TestMain).
func mcpServerMain() {
	s := sdk.NewServer(&sdk.Implementation{Name: "shouter", Version: "1.0.0"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "shout", Description: "Upper-case a text"},
		func(_ context.Context, _ *sdk.CallToolRequest, in struct {
			Text string `json:"text"`
		}) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strings.ToUpper(in.Text) + "!"}}}, nil, nil
		})
	// probe_network tries each address as walls_test.go's probe does: a
	// direct TCP connection, and an HTTP request through the proxy the
	// sandbox offers (HTTP_PROXY), one line each.
	sdk.AddTool(s, &sdk.Tool{Name: "probe_network", Description: "Try to reach addresses"},
		func(ctx context.Context, _ *sdk.CallToolRequest, in struct {
			Addrs []string `json:"addrs"`
		}) (*sdk.CallToolResult, any, error) {
			var b strings.Builder
			hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: http.ProxyFromEnvironment}}
			for _, a := range in.Addrs {
				if c, err := net.DialTimeout("tcp", a, 3*time.Second); err == nil {
					_ = c.Close()
					fmt.Fprintf(&b, "OPEN %s\n", a)
				} else {
					fmt.Fprintf(&b, "CLOSED %s\n", a)
				}
				code := "000"
				if resp, err := hc.Get("http://" + a + "/"); err == nil {
					code = strconv.Itoa(resp.StatusCode)
					_ = resp.Body.Close()
				}
				fmt.Fprintf(&b, "VIA-PROXY %s %s\n", a, code)
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: b.String()}}}, nil, nil
		})
	if err := s.Run(context.Background(), &sdk.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "mcp server:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func (e *env) write(rel, content string) {
	e.t.Helper()
	p := filepath.Join(e.kit.Dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
		e.t.Fatal(err)
	}
}

func systemPrompt(r modelserver.Request) string {
	for _, m := range r.Messages {
		if m.Role == "system" {
			return m.Content
		}
	}
	return ""
}

func toolNames(r modelserver.Request) string {
	var names []string
	for _, tl := range r.Tools {
		names = append(names, tl.Name)
	}
	return strings.Join(names, ",")
}

// An edit to persona.md between two turns reaches the model on the next
// turn, without restarting anything.
func TestPersonaEditTakesEffectNextTurn(t *testing.T) {
	e := newEnv(t)
	e.startWorker()
	e.write("persona.md", "You are Ada, a terse assistant.")
	must(t, collect(t, e.agent, context.Background(), "persona", "one"), agent.TypeCompleted)
	e.write("persona.md", "You are Grace, a cheerful assistant.")
	must(t, collect(t, e.agent, context.Background(), "persona", "two"), agent.TypeCompleted)
	reqs := e.kit.Model.Requests()
	first, second := systemPrompt(reqs[len(reqs)-2]), systemPrompt(reqs[len(reqs)-1])
	if !strings.HasPrefix(first, "You are Ada") || !strings.HasPrefix(second, "You are Grace") {
		t.Errorf("system prompts:\n1: %.60q\n2: %.60q", first, second)
	}
}

// The agent calls a tool of an MCP server started over stdio from
// fastagent.yaml, end to end.
func TestMCPToolEndToEnd(t *testing.T) {
	e := newEnv(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	e.writeConfig(fmt.Sprintf("mcpServers:\n  shouter:\n    command: %s\n    env: {FASTAGENT_E2E_MCP: \"1\"}\n", exe))
	e.startWorker()
	e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "m1", Name: "shout", Args: `{"text":"hello mcp"}`}}},
		modelserver.Reply{Text: []string{"shouted"}},
	)
	evs := collect(t, e.agent, context.Background(), "mcp", "shout it")
	must(t, evs, agent.TypeCompleted)
	var ended *agent.Event
	for i := range evs {
		if evs[i].Type == agent.TypeToolEnded {
			ended = &evs[i]
		}
	}
	if ended == nil || ended.IsError || ended.Content != "HELLO MCP!" {
		t.Fatalf("tool_ended = %+v, want HELLO MCP!", ended)
	}
	reqs := e.kit.Model.Requests()
	if !strings.Contains(toolNames(reqs[0]), "shout") {
		t.Errorf("the MCP tool was not offered to the model: %s", toolNames(reqs[0]))
	}
}

// A deferred tool stays out of the request until search_tools activates it
// mid-turn; it is offered for the rest of the turn and on the next turn,
// and the system prompt does not change.
func TestDeferredToolActivation(t *testing.T) {
	e := newEnv(t)
	e.write("tools/weather.yaml", "description: Weather forecast for a city.\ndeferred: true\nidempotent: true\n"+
		"parameters:\n  type: object\n  properties: {city: {type: string}}\ncommand: \"echo sunny\"\n")
	e.startWorker()
	e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "s1", Name: "search_tools", Args: `{"query":"weather forecast"}`}}},
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "w1", Name: "weather", Args: `{"city":"Oslo"}`}}},
		modelserver.Reply{Text: []string{"sunny in Oslo"}},
		modelserver.Reply{Text: []string{"still here"}},
	)
	evs := collect(t, e.agent, context.Background(), "deferred", "weather in Oslo?")
	must(t, evs, agent.TypeCompleted)
	must(t, collect(t, e.agent, context.Background(), "deferred", "next turn"), agent.TypeCompleted)
	reqs := e.kit.Model.Requests()
	if len(reqs) != 4 {
		t.Fatalf("want 4 model calls, got %d", len(reqs))
	}
	if strings.Contains(toolNames(reqs[0]), "weather") || !strings.Contains(toolNames(reqs[0]), "search_tools") {
		t.Errorf("before activation the request offers %s", toolNames(reqs[0]))
	}
	for i := 1; i < 4; i++ {
		if !strings.Contains(toolNames(reqs[i]), "weather") {
			t.Errorf("request %d after activation lacks weather: %s", i+1, toolNames(reqs[i]))
		}
		if systemPrompt(reqs[i]) != systemPrompt(reqs[0]) {
			t.Errorf("request %d: the system prompt changed with the activation", i+1)
		}
	}
	for _, ev := range evs {
		if ev.Type == agent.TypeToolEnded && ev.ID == "w1" && (ev.IsError || !strings.Contains(ev.Content, "sunny")) {
			t.Errorf("weather tool result: %+v", ev)
		}
	}
	v, err := e.agent.State(context.Background(), "deferred")
	if err != nil || strings.Join(v.Activated, ",") != "weather" {
		t.Errorf("session activations = %v (%v)", v.Activated, err)
	}
}

// A tool that requires approval waits durably — no activity blocked — while
// the worker is replaced; the approval given over HTTP afterwards runs it
// once. A denial becomes an error result the model sees.
func TestApprovalSurvivesWorkerRestart(t *testing.T) {
	e := newEnv(t)
	e.writeConfig("tools:\n  counter: {requiresApproval: true}\n")
	w := e.startWorker()
	hs := e.ingress()
	e.kit.Model.Enqueue(
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "a1", Name: "counter", Args: `{}`}}},
		modelserver.Reply{Text: []string{"counted"}},
		modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "a2", Name: "counter", Args: `{}`}}},
		modelserver.Reply{Text: []string{"ok, not counting"}},
	)
	done := make(chan []agent.Event, 1)
	go func() { done <- collect(t, e.agent, context.Background(), "approve", "count once") }()
	waitApproval(t, hs.URL, "approve", "a1")

	w.Stop() // returns once stopped; the waiting turn holds no activity: nothing is lost
	e.startWorker()

	post(t, hs.URL+"/sessions/approve/approvals/a1", `{"approve":true}`, http.StatusOK)
	evs := <-done
	must(t, evs, agent.TypeCompleted)
	if n := e.kit.Counter.Runs("approve"); n != 1 {
		t.Errorf("approved tool ran %d times, want 1", n)
	}

	go func() { done <- collect(t, e.agent, context.Background(), "approve", "count again") }()
	waitApproval(t, hs.URL, "approve", "a2")
	post(t, hs.URL+"/sessions/approve/approvals/a2", `{"approve":false,"reason":"not now"}`, http.StatusOK)
	must(t, <-done, agent.TypeCompleted)
	if n := e.kit.Counter.Runs("approve"); n != 1 {
		t.Errorf("denied tool ran: %d runs", n)
	}
	entries, _ := e.kit.Store.Entries(context.Background(), "approve")
	var denied *transcript.Message
	for _, en := range entries {
		if en.Message != nil && en.Message.ToolCallID == "a2" {
			denied = en.Message
		}
	}
	if denied == nil || !denied.IsError || !strings.Contains(denied.Text, "denied") || !strings.Contains(denied.Text, "not now") {
		t.Errorf("denied call's result = %+v", denied)
	}
	post(t, hs.URL+"/sessions/approve/approvals/nope", `{"approve":true}`, http.StatusNotFound)
	post(t, hs.URL+"/sessions/approve/approvals/a2", `{}`, http.StatusBadRequest)
}

func waitApproval(t *testing.T, base, session, call string) {
	t.Helper()
	waitFor(t, 30*time.Second, "call "+call+" to wait for approval", func() bool {
		resp, err := http.Get(base + "/sessions/" + session)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var v struct {
			Approvals []struct {
				Call string `json:"call"`
				Tool string `json:"tool"`
			} `json:"approvals"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&v)
		for _, a := range v.Approvals {
			if a.Call == call {
				return true
			}
		}
		return false
	})
}

func post(t *testing.T, url, body string, want int) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		t.Errorf("POST %s: %s, want %d", url, resp.Status, want)
	}
}
