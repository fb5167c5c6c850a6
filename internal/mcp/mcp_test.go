package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/fastagent/fastagent/internal/sandbox/sandboxtest"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
)

// The test binary doubles as the MCP server under test: run with
// MCP_ECHO_SERVER=1 it serves the echo server's tools on stdio. It appends
// "start <pid>" and "exit <pid>" to the file MCP_ECHO_LOG, so that tests can
// count starts and see exits.
func TestMain(m *testing.M) {
	if os.Getenv("MCP_ECHO_SERVER") == "1" {
		os.Exit(runEchoServer())
	}
	plantCanary()
	os.Exit(m.Run())
}

func runEchoServer() int {
	logPath := os.Getenv("MCP_ECHO_LOG")
	if os.Getenv("MCP_ECHO_MODE") == "fail-start" {
		fmt.Fprintln(os.Stderr, "echoserver: starting")
		fmt.Fprintln(os.Stderr, "echoserver: missing API key")
		return 1
	}
	record(logPath, "start")
	defer record(logPath, "exit")
	s := newEchoServer(logPath)
	if os.Getenv("MCP_ECHO_MODE") == "secrets" {
		addSecretsTool(s)
	}
	if err := s.Run(context.Background(), &sdk.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "echoserver:", err)
	}
	return 0
}

func record(logPath, event string) {
	if logPath == "" {
		return
	}
	f, err := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	fmt.Fprintf(f, "%s %d\n", event, os.Getpid())
	f.Close()
}

func text(s string) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: s}}}
}

// newEchoServer returns the test server: echo, add, fail, slow, env, image,
// addtool, crash and flaky.
func newEchoServer(logPath string) *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: "echo", Version: "1.0.0"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "echo", Description: "Echo the text"},
		func(_ context.Context, _ *sdk.CallToolRequest, in struct {
			Text string `json:"text" jsonschema:"the text to echo"`
		}) (*sdk.CallToolResult, any, error) {
			return text(in.Text), nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "add", Description: "Add two numbers", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *sdk.CallToolRequest, in struct {
			A float64 `json:"a"`
			B float64 `json:"b"`
		}) (*sdk.CallToolResult, any, error) {
			return text(strconv.FormatFloat(in.A+in.B, 'f', -1, 64)), nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "fail", Description: "Always fails"},
		func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
			r := text("failed on purpose")
			r.IsError = true
			return r, nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "slow", Description: "Sleeps"},
		func(ctx context.Context, _ *sdk.CallToolRequest, in struct {
			MS int `json:"ms"`
		}) (*sdk.CallToolResult, any, error) {
			record(logPath, "slow")
			select {
			case <-time.After(time.Duration(in.MS) * time.Millisecond):
				return text("slept"), nil, nil
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		})
	sdk.AddTool(s, &sdk.Tool{Name: "progress", Description: "Reports three steps, then waits to be cancelled"},
		func(ctx context.Context, req *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
			token := req.Params.GetProgressToken()
			if token == nil {
				return text("no progress token"), nil, nil
			}
			for i := 1; i <= 3; i++ {
				_ = req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{
					ProgressToken: token, Message: fmt.Sprintf("step %d", i), Progress: float64(i), Total: 3})
			}
			<-ctx.Done()
			return nil, nil, ctx.Err()
		})
	sdk.AddTool(s, &sdk.Tool{Name: "env", Description: "Reads an environment variable"},
		func(_ context.Context, _ *sdk.CallToolRequest, in struct {
			Name string `json:"name"`
		}) (*sdk.CallToolResult, any, error) {
			return text(os.Getenv(in.Name)), nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "image", Description: "Returns a picture"},
		func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{
				&sdk.TextContent{Text: "a picture:"},
				&sdk.ImageContent{MIMEType: "image/png", Data: []byte("12345678")},
			}}, nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "addtool", Description: "Adds a tool"},
		func(_ context.Context, _ *sdk.CallToolRequest, in struct {
			Name string `json:"name"`
		}) (*sdk.CallToolResult, any, error) {
			s.AddTool(&sdk.Tool{Name: in.Name, Description: "added", InputSchema: map[string]any{"type": "object"}},
				func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) { return text("new"), nil })
			return text("added"), nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "crash", Description: "Exits mid-call"},
		func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
			os.Exit(3)
			return nil, nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "flaky", Description: "Exits mid-call the first time", Annotations: &sdk.ToolAnnotations{IdempotentHint: true}},
		func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
			marker := logPath + ".flaky"
			if _, err := os.Stat(marker); err != nil {
				_ = os.WriteFile(marker, nil, 0o644)
				os.Exit(3)
			}
			return text("recovered"), nil, nil
		})
	return s
}

// echoServer returns the configuration of a stdio echo server and the path
// of its event log.
func echoServer(t *testing.T, name string) (Server, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The log lives in the server's workspace: the only place the sandbox
	// lets it write.
	dir := t.TempDir()
	logPath := filepath.Join(dir, name+".log")
	return Server{
		Name:    name,
		Command: exe,
		// atexit_sleep_ms: a race-enabled server would otherwise linger 1s
		// at exit.
		Env:     map[string]string{"MCP_ECHO_SERVER": "1", "MCP_ECHO_LOG": logPath, "GORACE": "atexit_sleep_ms=0"},
		Sandbox: sandboxtest.Box(),
		Dir:     dir,
	}, logPath
}

// events returns the pids logged with event.
func events(t *testing.T, logPath, event string) []string {
	t.Helper()
	b, err := os.ReadFile(logPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var pids []string
	for _, line := range strings.Split(string(b), "\n") {
		if ev, pid, ok := strings.Cut(line, " "); ok && ev == event {
			pids = append(pids, pid)
		}
	}
	return pids
}

func newManager(t *testing.T) *Manager {
	t.Helper()
	var w io.Writer = io.Discard
	if testing.Verbose() {
		w = os.Stderr
	}
	m := NewManager(slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(m.Close)
	return m
}

func toolNamed(t *testing.T, tools []agent.Tool, name string) agent.Tool {
	t.Helper()
	for _, tl := range tools {
		if tl.Spec().Name == name {
			return tl
		}
	}
	t.Fatalf("no tool %q among %v", name, names(tools))
	return nil
}

func names(tools []agent.Tool) []string {
	var out []string
	for _, tl := range tools {
		out = append(out, tl.Spec().Name)
	}
	return out
}

// hostPIDs returns the host PIDs of the processes whose environment holds
// kv: an echo server and, when it is sandboxed, its namespace's init and
// unshare. With server set, only the server (this test binary), which must
// be there.
func hostPIDs(t *testing.T, kv string, server bool) []int {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var found []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); server && (err != nil || exe != self) {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && slices.Contains(strings.Split(string(env), "\x00"), kv) {
			found = append(found, pid)
		}
	}
	if server && len(found) != 1 {
		t.Fatalf("servers with %s: %v, want one", kv, found)
	}
	return found
}

func mustTools(t *testing.T, m *Manager, servers ...Server) []agent.Tool {
	t.Helper()
	tools, diags := m.Tools(context.Background(), servers)
	if len(diags) > 0 {
		t.Fatalf("diagnostics: %v", diags)
	}
	return tools
}

func run(t *testing.T, tl agent.Tool, args string) agent.ToolResult {
	t.Helper()
	res, err := tl.Run(context.Background(), agent.ToolCall{ID: "c1", Name: tl.Spec().Name, Args: json.RawMessage(args)})
	if err != nil {
		t.Fatalf("%s(%s): %v", tl.Spec().Name, args, err)
	}
	return res
}

func TestToolsListsServerTools(t *testing.T) {
	m := newManager(t)
	srv, _ := echoServer(t, "echo")
	srv.Deferred = true
	tools := mustTools(t, m, srv)
	want := []string{"add", "addtool", "crash", "echo", "env", "fail", "flaky", "image", "progress", "slow"}
	got := names(tools)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("tools = %v, want %v", got, want)
	}
	echo := toolNamed(t, tools, "echo").Spec()
	if echo.Description != "Echo the text" || !echo.Deferred || echo.Idempotent {
		t.Errorf("echo spec = %+v", echo)
	}
	var schema struct {
		Type       string `json:"type"`
		Properties map[string]struct {
			Type        string `json:"type"`
			Description string `json:"description"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if err := json.Unmarshal(echo.Parameters, &schema); err != nil {
		t.Fatalf("echo parameters %s: %v", echo.Parameters, err)
	}
	if schema.Type != "object" || schema.Properties["text"].Type != "string" || schema.Properties["text"].Description != "the text to echo" {
		t.Errorf("echo parameters = %s", echo.Parameters)
	}
	if add := toolNamed(t, tools, "add").Spec(); !add.Idempotent {
		t.Errorf("add (readOnlyHint) is not idempotent")
	}
	if flaky := toolNamed(t, tools, "flaky").Spec(); !flaky.Idempotent {
		t.Errorf("flaky (idempotentHint) is not idempotent")
	}
}

func TestCallTools(t *testing.T) {
	m := newManager(t)
	srv, _ := echoServer(t, "echo")
	tools := mustTools(t, m, srv)

	if res := run(t, toolNamed(t, tools, "echo"), `{"text":"hello"}`); res.Content != "hello" || res.IsError {
		t.Errorf("echo = %+v", res)
	}
	if res := run(t, toolNamed(t, tools, "add"), `{"a":2,"b":3.5}`); res.Content != "5.5" || res.IsError {
		t.Errorf("add = %+v", res)
	}
	if res := run(t, toolNamed(t, tools, "fail"), ``); res.Content != "failed on purpose" || !res.IsError {
		t.Errorf("fail = %+v", res)
	}
	if res := run(t, toolNamed(t, tools, "image"), `{}`); res.Content != "a picture:\n[image: image/png, 8 bytes]" {
		t.Errorf("image = %+v", res)
	}
	if res := run(t, toolNamed(t, tools, "echo"), `["not", "an object"]`); !res.IsError {
		t.Errorf("echo with an array = %+v, want an error result", res)
	}
	// Arguments the server's schema refuses come back as an error result.
	if res := run(t, toolNamed(t, tools, "add"), `{"a":"two"}`); !res.IsError {
		t.Errorf("add with bad arguments = %+v, want an error result", res)
	}
}

func TestFailingServersAreDiagnosed(t *testing.T) {
	m := newManager(t)
	good, _ := echoServer(t, "good")
	ghost := Server{Name: "ghost", Command: "/nonexistent/mcp-server", Sandbox: sandboxtest.Box(), Dir: t.TempDir()}
	broken, _ := echoServer(t, "broken")
	broken.Env["MCP_ECHO_MODE"] = "fail-start"
	invalid := Server{Name: "invalid"}

	tools, diags := m.Tools(context.Background(), []Server{ghost, good, broken, invalid})
	if len(diags) != 3 {
		t.Fatalf("diagnostics = %v, want 3", diags)
	}
	if diags[0].Server != "ghost" || !strings.Contains(diags[0].Message, "/nonexistent/mcp-server") {
		t.Errorf("ghost diagnostic = %+v", diags[0])
	}
	if diags[1].Server != "broken" || !strings.Contains(diags[1].Message, "missing API key") {
		t.Errorf("broken diagnostic = %+v", diags[1])
	}
	if diags[2].Server != "invalid" {
		t.Errorf("invalid diagnostic = %+v", diags[2])
	}
	if !strings.HasPrefix(diags[0].String(), `mcp server "ghost": `) {
		t.Errorf("String() = %q", diags[0].String())
	}
	if res := run(t, toolNamed(t, tools, "echo"), `{"text":"still here"}`); res.Content != "still here" {
		t.Errorf("echo = %+v", res)
	}
	// A failed server is not restarted on every call.
	_, diags = m.Tools(context.Background(), []Server{ghost, good})
	if len(diags) != 1 || diags[0].Server != "ghost" {
		t.Errorf("second diagnostics = %v", diags)
	}
}

func TestCancelDuringSlowCall(t *testing.T) {
	m := newManager(t)
	srv, logPath := echoServer(t, "echo")
	tools := mustTools(t, m, srv)

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := toolNamed(t, tools, "slow").Run(ctx, agent.ToolCall{Args: json.RawMessage(`{"ms":60000}`)})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("slow: err = %v, want deadline exceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("slow returned after %s", d)
	}
	// The session survives the cancelled call.
	if res := run(t, toolNamed(t, tools, "echo"), `{"text":"after"}`); res.Content != "after" {
		t.Errorf("echo = %+v", res)
	}
	if starts := events(t, logPath, "start"); len(starts) != 1 {
		t.Errorf("server started %d times", len(starts))
	}
}

func TestSessionIsReused(t *testing.T) {
	m := newManager(t)
	srv, logPath := echoServer(t, "echo")
	for i := range 3 {
		tools := mustTools(t, m, srv)
		if res := run(t, toolNamed(t, tools, "echo"), fmt.Sprintf(`{"text":"%d"}`, i)); res.Content != strconv.Itoa(i) {
			t.Errorf("echo = %+v", res)
		}
	}
	// Deferred is not part of the session's identity.
	srv.Deferred = true
	mustTools(t, m, srv)
	if starts := events(t, logPath, "start"); len(starts) != 1 {
		t.Errorf("server started %d times, want 1", len(starts))
	}
}

func TestRemovedServerIsClosed(t *testing.T) {
	m := newManager(t)
	a, aLog := echoServer(t, "a")
	b, bLog := echoServer(t, "b")
	tools, diags := m.Tools(context.Background(), []Server{a, b})
	// Both servers offer the same tools: a, first in the list, keeps them
	// (one diagnostic per tool of b, however many the echo server offers).
	if len(diags) == 0 || len(diags) != len(tools) {
		t.Fatalf("diagnostics = %v, want one per tool of b", diags)
	}
	for _, d := range diags {
		if d.Server != "b" || !strings.Contains(d.Message, `server "a" already provides`) {
			t.Errorf("diagnostic = %+v", d)
		}
	}
	echoA := toolNamed(t, tools, "echo")

	bTools := mustTools(t, m, b)
	wait.For(t, 15*time.Second, "server a to exit", func() bool { return len(events(t, aLog, "exit")) == 1 })
	if _, err := echoA.Run(context.Background(), agent.ToolCall{Args: json.RawMessage(`{"text":"x"}`)}); err == nil {
		t.Errorf("a tool of the removed server still runs")
	}
	if res := run(t, toolNamed(t, bTools, "echo"), `{"text":"b"}`); res.Content != "b" {
		t.Errorf("echo on b = %+v", res)
	}
	if starts := events(t, bLog, "start"); len(starts) != 1 {
		t.Errorf("server b started %d times", len(starts))
	}
	if exits := events(t, bLog, "exit"); len(exits) != 0 {
		t.Errorf("server b exited")
	}
}

func TestCloseStopsServers(t *testing.T) {
	m := newManager(t)
	srv, logPath := echoServer(t, "echo")
	tools := mustTools(t, m, srv)
	done := make(chan error, 1)
	go func() {
		_, err := toolNamed(t, tools, "slow").Run(context.Background(), agent.ToolCall{Args: json.RawMessage(`{"ms":60000}`)})
		done <- err
	}()
	wait.For(t, 15*time.Second, "the slow call to reach the server", func() bool { return len(events(t, logPath, "slow")) == 1 })
	start := time.Now()
	m.Close()
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Close took %s", d)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("slow succeeded after Close")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("slow still running after Close")
	}
	wait.For(t, 15*time.Second, "server to exit", func() bool { return len(events(t, logPath, "exit")) == 1 })
	if _, diags := m.Tools(context.Background(), []Server{srv}); len(diags) != 1 {
		t.Errorf("Tools after Close: diagnostics %v", diags)
	}
}

func TestCrashDuringCall(t *testing.T) {
	m := newManager(t)
	srv, logPath := echoServer(t, "echo")
	tools := mustTools(t, m, srv)

	// Not idempotent: not retried, outcome unknown.
	res := run(t, toolNamed(t, tools, "crash"), `{}`)
	if !res.IsError || !strings.Contains(res.Content, "outcome is unknown") {
		t.Errorf("crash = %+v", res)
	}
	if starts := events(t, logPath, "start"); len(starts) != 1 {
		t.Errorf("crash was retried: %d starts", len(starts))
	}
	// The next call reconnects.
	if res := run(t, toolNamed(t, tools, "echo"), `{"text":"back"}`); res.Content != "back" {
		t.Errorf("echo = %+v", res)
	}
	// Idempotent: retried once on a new connection.
	if res := run(t, toolNamed(t, tools, "flaky"), `{}`); res.Content != "recovered" || res.IsError {
		t.Errorf("flaky = %+v", res)
	}
	if starts := events(t, logPath, "start"); len(starts) != 3 {
		t.Errorf("server started %d times, want 3", len(starts))
	}
}

func TestServerDiesBetweenCalls(t *testing.T) {
	m := newManager(t)
	srv, logPath := echoServer(t, "echo")
	mustTools(t, m, srv)
	// The server logs its PID in the sandbox's PID namespace; find it on
	// the host by its environment instead.
	pid := hostPIDs(t, "MCP_ECHO_LOG="+logPath, true)[0]
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Once the dead server is reaped, the next use reconnects quietly. (A
	// call racing with the death itself may reach the dying server: its
	// outcome is unknown, see TestCrashDuringCall.)
	wait.For(t, 15*time.Second, "the server to be reaped", func() bool {
		return syscall.Kill(pid, 0) == syscall.ESRCH && len(hostPIDs(t, "MCP_ECHO_LOG="+logPath, false)) == 0
	})
	tools := mustTools(t, m, srv)
	if res := run(t, toolNamed(t, tools, "echo"), `{"text":"again"}`); res.Content != "again" {
		t.Errorf("echo = %+v", res)
	}
	if starts := events(t, logPath, "start"); len(starts) != 2 {
		t.Errorf("server started %d times, want 2", len(starts))
	}
}

func TestToolListChanged(t *testing.T) {
	m := newManager(t)
	srv, logPath := echoServer(t, "echo")
	tools := mustTools(t, m, srv)
	if res := run(t, toolNamed(t, tools, "addtool"), `{"name":"fresh"}`); res.Content != "added" {
		t.Fatalf("addtool = %+v", res)
	}
	wait.For(t, 15*time.Second, "the new tool to be listed", func() bool {
		return slices.Contains(names(mustTools(t, m, srv)), "fresh")
	})
	if res := run(t, toolNamed(t, mustTools(t, m, srv), "fresh"), `{}`); res.Content != "new" {
		t.Errorf("fresh = %+v", res)
	}
	if starts := events(t, logPath, "start"); len(starts) != 1 {
		t.Errorf("server started %d times", len(starts))
	}
}

func TestEnvironment(t *testing.T) {
	t.Setenv("MCP_TEST_SECRET", "s3cret")
	t.Setenv("MCP_TEST_HIDDEN", "hidden")
	t.Setenv("LC_MCPTEST", "lc")
	m := newManager(t)
	srv, _ := echoServer(t, "echo")
	srv.Env["TOKEN"] = "tok-${MCP_TEST_SECRET}-$MCP_TEST_SECRET-${MCP_TEST_UNSET}"
	srv.Dir = t.TempDir()
	tools := mustTools(t, m, srv)
	env := toolNamed(t, tools, "env")
	for name, want := range map[string]string{
		"TOKEN":           "tok-s3cret-$MCP_TEST_SECRET-",
		"MCP_TEST_HIDDEN": "",
		"LC_MCPTEST":      "lc",
		"PATH":            os.Getenv("PATH"),
		"PWD":             srv.Dir,
	} {
		if res := run(t, env, fmt.Sprintf(`{"name":%q}`, name)); res.Content != want {
			t.Errorf("%s = %q, want %q", name, res.Content, want)
		}
	}
}

func TestStreamableHTTP(t *testing.T) {
	srv := newEchoServer("")
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	defer hs.Close()
	m := newManager(t)
	remote := Server{Name: "remote", URL: hs.URL, AllowPrivate: true}
	tools := mustTools(t, m, remote)
	if res := run(t, toolNamed(t, tools, "add"), `{"a":40,"b":2}`); res.Content != "42" {
		t.Errorf("add = %+v", res)
	}
	if res := run(t, toolNamed(t, mustTools(t, m, remote), "echo"), `{"text":"over http"}`); res.Content != "over http" {
		t.Errorf("echo = %+v", res)
	}
	m.Close()
}

func TestModelToolName(t *testing.T) {
	for in, want := range map[string]string{
		"search":                "search",
		"github.create-issue":   "github_create-issue",
		"héllo/wörld":           "h_llo_w_rld",
		strings.Repeat("x", 70): strings.Repeat("x", 64),
	} {
		if got := modelToolName(in); got != want {
			t.Errorf("modelToolName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestExpandVars(t *testing.T) {
	t.Setenv("MCP_A", "1")
	var missing []string
	got := expandVars("${MCP_A}$MCP_A${MCP_NOPE}${not-a-name}${}$${MCP_A}${unterminated", &missing)
	if want := "1$MCP_A${not-a-name}${}$1${unterminated"; got != want {
		t.Errorf("expandVars = %q, want %q", got, want)
	}
	if !slices.Equal(missing, []string{"MCP_NOPE"}) {
		t.Errorf("missing = %v", missing)
	}
}

func TestStderrTail(t *testing.T) {
	s := newStderrTail(slog.New(slog.DiscardHandler))
	for i := range 30 {
		fmt.Fprintf(s, "line %d\n", i)
	}
	got := s.String()
	if !strings.HasPrefix(got, "line 20\n") || !strings.HasSuffix(got, "line 29") {
		t.Errorf("tail = %q", got)
	}
}

func TestToResult(t *testing.T) {
	size := int64(3)
	res := toResult(&sdk.CallToolResult{
		Content: []sdk.Content{
			&sdk.TextContent{Text: "a"},
			&sdk.AudioContent{MIMEType: "audio/wav", Data: []byte("abc")},
			&sdk.ResourceLink{URI: "file:///x", Name: "x", MIMEType: "text/plain", Size: &size},
			&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "file:///y", Text: "why"}},
			&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "file:///z", MIMEType: "application/zip", Blob: []byte("zz")}},
		},
		StructuredContent: map[string]any{"n": 1},
	})
	want := "a\n[audio: audio/wav, 3 bytes]\n[resource link: file:///x (x), text/plain]\n[resource: file:///y]\nwhy\n[resource: file:///z, application/zip, 2 bytes]"
	if res.Content != want || string(res.Details) != `{"n":1}` {
		t.Errorf("toResult = %q, details %s", res.Content, res.Details)
	}
	if res := toResult(&sdk.CallToolResult{StructuredContent: []int{1, 2}}); res.Content != "[1,2]" {
		t.Errorf("structured only = %q", res.Content)
	}
}

// TestResultTruncated: a huge MCP result reaches the model bounded like any
// tool output, with the full text in Details.
func TestResultTruncated(t *testing.T) {
	m := newManager(t)
	srv, _ := echoServer(t, "echo")
	tl := mustTools(t, m, srv)
	var b strings.Builder
	for i := 0; b.Len() < 300<<10; i++ {
		fmt.Fprintf(&b, "line %d of a very long MCP result\n", i)
	}
	big := b.String()
	args, err := json.Marshal(map[string]string{"text": big})
	if err != nil {
		t.Fatal(err)
	}
	res := run(t, toolNamed(t, tl, "echo"), string(args))
	if len(res.Content) > 51<<10 || !strings.HasPrefix(res.Content, "line 0 of") || !strings.Contains(res.Content, "[Output truncated to its first") {
		t.Fatalf("content is %d bytes, ends %q", len(res.Content), res.Content[max(0, len(res.Content)-200):])
	}
	var d struct {
		FullOutput string `json:"fullOutput"`
	}
	if err := json.Unmarshal(res.Details, &d); err != nil || d.FullOutput != big {
		t.Fatalf("details hold %d bytes (err %v), want the full %d", len(d.FullOutput), err, len(big))
	}
}

// A server's notifications/progress for a call reach the call's context as
// its progress reports (agent.ReportProgress), message and numbers.
func TestProgressNotifications(t *testing.T) {
	m := newManager(t)
	srv, _ := echoServer(t, "echo")
	tl := toolNamed(t, mustTools(t, m, srv), "progress")
	reports := make(chan agent.Progress, 10)
	ctx, cancel := context.WithCancel(agent.WithProgress(context.Background(), func(p agent.Progress) { reports <- p }))
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = tl.Run(ctx, agent.ToolCall{ID: "c1", Name: "progress", Args: json.RawMessage(`{}`)})
	}()
	for i := 1; i <= 3; i++ {
		select {
		case p := <-reports:
			if want := fmt.Sprintf("step %d", i); p.Message != want || p.Progress != float64(i) || p.Total != 3 {
				t.Fatalf("report %d = %+v, want %s (%d/3)", i, p, want, i)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("report %d did not arrive", i)
		}
	}
	cancel()
	<-done
}
