package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/fastagent/fastagent/activities"
	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/localagent"
	"github.com/fastagent/fastagent/internal/modelserver"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/workspace"
)

// ModelSpec is the model every lab workspace uses: the scripted server
// behind the real OpenAI-compatible client.
const ModelSpec = "openai/scripted"

// Kit is one scenario's backend: a scripted model server, a workspace in a
// temporary directory, and the SQLite session store inside it (the file
// worker subprocesses open too).
type Kit struct {
	Model *modelserver.Server
	Store store.Store
	// Dir is the workspace; StorePath the session store file in it.
	Dir       string
	StorePath string
	Loader    *workspace.Loader
	Models    *serve.Models
}

// NewKit builds a kit. tools are Go tools registered on in-process workers
// (subprocess workers have the built-in tools only).
func NewKit(tools ...agent.Tool) (*Kit, error) {
	dir, err := os.MkdirTemp("", "fastagent-lab-ws-")
	if err != nil {
		return nil, err
	}
	k := &Kit{Dir: dir, StorePath: filepath.Join(dir, ".fastagent", "sessions.db")}
	k.Store, err = store.OpenSQLite(k.StorePath)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("open store: %w", err)
	}
	k.Loader, err = workspace.NewLoader(dir, "")
	if err != nil {
		_ = k.Store.Close()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("workspace: %w", err)
	}
	k.Loader.Extra = tools
	k.Loader.Getenv = k.Getenv
	k.Models = &serve.Models{Getenv: k.Getenv}
	k.Model = modelserver.New()
	return k, nil
}

// Getenv is the environment in-process model clients see.
func (k *Kit) Getenv(name string) string {
	switch name {
	case "FASTAGENT_MODEL":
		return ModelSpec
	case "OPENAI_BASE_URL":
		return k.Model.URL()
	case "OPENAI_API_KEY":
		return "lab-key"
	}
	return os.Getenv(name)
}

// ProcessEnv is the environment of fastagent subprocesses using this kit's
// model server.
func (k *Kit) ProcessEnv() []string {
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"FASTAGENT_MODEL=" + ModelSpec,
		"OPENAI_BASE_URL=" + k.Model.URL(),
		"OPENAI_API_KEY=lab-key",
	}
}

// WriteConfig writes fastagent.yaml into the workspace.
func (k *Kit) WriteConfig(yaml string) error {
	return os.WriteFile(filepath.Join(k.Dir, workspace.ConfigFile), []byte(yaml), 0o644)
}

// Activities returns activities over the kit's backends publishing to bus.
func (k *Kit) Activities(bus feed.Bus) *activities.Activities {
	return &activities.Activities{
		Store:          k.Store,
		Feed:           bus,
		Definitions:    k.Loader,
		Models:         k.Models,
		Logger:         QuietLogger(),
		HeartbeatEvery: 500 * time.Millisecond,
	}
}

// Local returns the in-process agent loop (the baseline) over the kit,
// publishing to bus (an in-process bus).
func (k *Kit) Local(bus feed.Bus) *localagent.Agent {
	return &localagent.Agent{Acts: k.Activities(bus)}
}

// Close stops the model server, closes the store and removes the workspace.
func (k *Kit) Close() {
	k.Model.Close()
	k.Loader.Close()
	_ = k.Store.Close()
	_ = os.RemoveAll(k.Dir)
}

// CounterName is the name of CounterTool.
const CounterName = "counter"

// CounterTool is a trivial, sequential Go tool that counts its runs per
// session (the step of the step-overhead figure).
type CounterTool struct {
	mu   sync.Mutex
	runs map[string]int
}

// Spec describes the tool.
func (c *CounterTool) Spec() agent.ToolSpec {
	return agent.ToolSpec{
		Name:        CounterName,
		Description: "Counts how many times it was called in this session.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{}}`),
		Sequential:  true,
	}
}

// Run counts the call.
func (c *CounterTool) Run(_ context.Context, call agent.ToolCall) (agent.ToolResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runs == nil {
		c.runs = map[string]int{}
	}
	c.runs[call.Session]++
	return agent.ToolResult{Content: "count=" + strconv.Itoa(c.runs[call.Session])}, nil
}

// Runs returns the number of runs in session.
func (c *CounterTool) Runs(session string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[session]
}

// PanicName is the name of PanicTool.
const PanicName = "panicky"

// PanicTool panics on every call.
type PanicTool struct{}

// Spec describes the tool.
func (PanicTool) Spec() agent.ToolSpec {
	return agent.ToolSpec{
		Name:        PanicName,
		Description: "Always panics (fault injection).",
		Parameters:  json.RawMessage(`{"type":"object","properties":{}}`),
	}
}

// Run panics.
func (PanicTool) Run(context.Context, agent.ToolCall) (agent.ToolResult, error) {
	panic("lab: injected tool panic")
}

var stepsDirective = regexp.MustCompile(`\[steps=(\d+)\]`)

// StepsHandler is a model-server fallback for benchmarks. A prompt that
// contains "[steps=N]" gets N consecutive replies that each call tool once
// (counted from the tool results after the last user message), then a short
// text; any other prompt gets the text "hello world" in two chunks. It is
// stateless, so safe for any number of concurrent sessions.
func StepsHandler(tool string) func(modelserver.Request) modelserver.Reply {
	return func(r modelserver.Request) modelserver.Reply {
		last := r.LastUserText()
		m := stepsDirective.FindStringSubmatch(last)
		if m == nil {
			return modelserver.Reply{Text: []string{"hello", " world"}}
		}
		want, _ := strconv.Atoi(m[1])
		done := 0
		for i := len(r.Messages) - 1; i >= 0 && r.Messages[i].Role != "user"; i-- {
			if r.Messages[i].Role == "tool" {
				done++
			}
		}
		if done < want {
			return modelserver.Reply{ToolCalls: []modelserver.ToolCall{{
				ID: "call_" + strconv.Itoa(done+1), Name: tool, Args: `{}`,
			}}}
		}
		return modelserver.Reply{Text: []string{"done"}}
	}
}
