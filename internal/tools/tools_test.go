package tools

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/sandbox"
	"github.com/fastagent/fastagent/internal/sandbox/sandboxtest"
)

// testBoxes returns this test binary's sandboxes: the default mechanism
// (as a worker would pick it) and an unconfined one (tools.sandbox: off).
func testBoxes() (*sandbox.Sandbox, *sandbox.Sandbox) {
	return sandboxtest.Box(), sandboxtest.Unconfined()
}

// testTools returns the built-in tools with opts, by name; without a
// sandbox in opts they get the default one.
func testTools(opts Options) map[string]agent.Tool {
	if opts.Sandbox == nil {
		opts.Sandbox, _ = testBoxes()
	}
	m := make(map[string]agent.Tool)
	for _, tool := range Builtin(opts) {
		m[tool.Spec().Name] = tool
	}
	return m
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// run calls tool in dir with args (marshalled unless already raw JSON).
func run(t *testing.T, tool agent.Tool, dir string, args any) agent.ToolResult {
	t.Helper()
	return runCtx(t, context.Background(), tool, dir, args)
}

// runUnsandboxed runs tool with an unconfined sandbox (tools.sandbox: off),
// for controls and for tests that follow its processes by their host PIDs
// (the sandbox's PID namespaces renumber them).
func runUnsandboxed(t *testing.T, tool agent.Tool, dir string, args any) agent.ToolResult {
	t.Helper()
	return runCtx(t, context.Background(), unconfined(tool), dir, args)
}

// unconfined returns bash with the unconfined sandbox; other tools as they are.
func unconfined(tool agent.Tool) agent.Tool {
	if b, ok := tool.(*bashTool); ok {
		c := *b
		_, c.opts.Sandbox = testBoxes()
		return &c
	}
	return tool
}

func runCtx(t *testing.T, ctx context.Context, tool agent.Tool, dir string, args any) agent.ToolResult {
	t.Helper()
	raw, ok := args.(json.RawMessage)
	if !ok {
		raw = mustJSON(t, args)
	}
	res, err := tool.Run(ctx, agent.ToolCall{ID: "c1", Name: tool.Spec().Name, Args: raw, Session: "s", Dir: dir})
	if err != nil {
		t.Fatalf("%s.Run: %v", tool.Spec().Name, err)
	}
	return res
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func details(t *testing.T, r agent.ToolResult) outputDetails {
	t.Helper()
	var d outputDetails
	if len(r.Details) == 0 {
		t.Fatal("no details")
	}
	if err := json.Unmarshal(r.Details, &d); err != nil {
		t.Fatalf("details %s: %v", r.Details, err)
	}
	return d
}

func TestBuiltinOrderAndSpecs(t *testing.T) {
	t.Parallel()
	list := Builtin(Options{})
	var names []string
	for _, tool := range list {
		spec := tool.Spec()
		names = append(names, spec.Name)
		if spec.Description == "" {
			t.Errorf("%s: no description", spec.Name)
		}
		var schema struct {
			Type       string                     `json:"type"`
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		}
		if err := json.Unmarshal(spec.Parameters, &schema); err != nil || schema.Type != "object" {
			t.Errorf("%s: bad parameters schema: %v", spec.Name, err)
		}
		if spec.Idempotent != (spec.Name == NameRead) {
			t.Errorf("%s: Idempotent = %v", spec.Name, spec.Idempotent)
		}
	}
	if got := strings.Join(names, ","); got != "read,bash,edit,write" {
		t.Fatalf("Builtin order = %s", got)
	}
	wantProps := map[string]string{
		NameRead:  "limit,offset,path|path",
		NameBash:  "command,timeout|command",
		NameEdit:  "newText,oldText,path|path,oldText,newText",
		NameWrite: "content,path|path,content",
	}
	for _, tool := range list {
		var schema struct {
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		}
		_ = json.Unmarshal(tool.Spec().Parameters, &schema)
		var props []string
		for p := range schema.Properties {
			props = append(props, p)
		}
		sortStrings(props)
		if got := strings.Join(props, ",") + "|" + strings.Join(schema.Required, ","); got != wantProps[tool.Spec().Name] {
			t.Errorf("%s: properties|required = %s, want %s", tool.Spec().Name, got, wantProps[tool.Spec().Name])
		}
	}
	if tool, ok := ByName(list, NameEdit); !ok || tool.Spec().Name != NameEdit {
		t.Error("ByName(edit) failed")
	}
	if _, ok := ByName(list, "nope"); ok {
		t.Error("ByName(nope) found something")
	}
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

func TestBadWorkingDirectoryIsGoError(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "f")
	writeFile(t, file, "x")
	for _, dir := range []string{"", "relative/dir", "/definitely/not/here", file} {
		for _, tool := range Builtin(Options{}) {
			args := map[string]any{"path": "a", "command": "true", "content": "", "oldText": "a", "newText": "b"}
			if _, err := tool.Run(context.Background(), agent.ToolCall{Args: mustJSON(t, args), Dir: dir}); err == nil {
				t.Errorf("%s with Dir %q: no error", tool.Spec().Name, dir)
			}
		}
	}
}

func TestInvalidArgsAreErrorResults(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tools := testTools(Options{})
	cases := []struct {
		tool string
		args string
		want string
	}{
		{NameRead, `{}`, `"path"`},
		{NameRead, `{"path":"a","offset":"2"}`, `"offset"`},
		{NameBash, `{"command":42}`, `"command"`},
		{NameEdit, `{"path":"a"}`, `"oldText"`},
		{NameWrite, `{"path":"a"}`, `"content"`},
		{NameWrite, `not json`, `not valid JSON`},
	}
	for _, c := range cases {
		r := run(t, tools[c.tool], dir, json.RawMessage(c.args))
		if !r.IsError || !strings.Contains(r.Content, c.want) {
			t.Errorf("%s %s: got %+v, want error mentioning %s", c.tool, c.args, r, c.want)
		}
	}
}
