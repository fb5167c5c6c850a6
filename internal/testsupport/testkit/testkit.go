// Package testkit builds the real parts tests run against: a scripted
// model server (OpenAI-compatible, or Anthropic-shaped with NewFor) reached
// through the real langchaingo client, a SQLite session store, a workspace, and a side-effecting
// "counter" tool. It also maps the conformance suite's scenarios to model
// scripts. It links no Temporal server, so any package's tests may use it.
package testkit

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/sandbox/sandboxtest"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/agent/agenttest"
	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/workspace"
)

// ModelSpec is the model tests configure (the OpenAI-shaped server);
// AnthropicModelSpec the model of a kit opened with the Anthropic shape.
const (
	ModelSpec          = "openai/scripted"
	AnthropicModelSpec = "anthropic/claude-scripted"
)

// Providers are the wire shapes the end-to-end tests run against.
var Providers = []modelserver.Shape{modelserver.OpenAI, modelserver.Anthropic}

// Kit is one test's backend: model server, store, workspace, tools.
type Kit struct {
	Model *modelserver.Server
	Store store.Store
	// Dir is the workspace; StorePath the SQLite session store in it (the
	// file worker subprocesses open too).
	Dir       string
	StorePath string
	Counter   *CounterTool
	Models    *serve.Models
	Loader    *workspace.Loader
	// Faults is the store Activities write through; it can lose a tool
	// result on purpose (LoseToolResult).
	Faults *FaultStore
}

// New builds a kit whose resources are released at the end of the test.
func New(t testing.TB) *Kit {
	t.Helper()
	return NewFor(t, modelserver.OpenAI)
}

// NewFor builds a kit whose scripted model server speaks the given
// provider's API; the worker environment (Getenv, ProcessEnv) names that
// provider's model, key and base URL.
func NewFor(t testing.TB, provider modelserver.Shape) *Kit {
	t.Helper()
	k, err := OpenFor(t.TempDir(), provider)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	return k
}

// Open builds a kit in the workspace dir (programs such as the bench use it
// directly). The counter tool and extra are registered as Go tools; the model
// server echoes unless scripted otherwise. Close releases it.
func Open(dir string, extra ...agent.Tool) (*Kit, error) {
	return OpenFor(dir, modelserver.OpenAI, extra...)
}

// OpenFor is Open with a model server of the given provider shape.
func OpenFor(dir string, provider modelserver.Shape, extra ...agent.Tool) (*Kit, error) {
	k := &Kit{Dir: dir, StorePath: filepath.Join(dir, ".fastagent", "sessions.db"), Counter: &CounterTool{}}
	st, err := store.OpenSQLite(k.StorePath)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	loader, err := workspace.NewLoader(dir, "")
	if err != nil {
		_ = st.Close()
		return nil, fmt.Errorf("workspace: %w", err)
	}
	k.Store, k.Loader = st, loader
	k.Faults = &FaultStore{Store: st}
	k.Models = &serve.Models{Getenv: k.Getenv}
	loader.Extra = append([]agent.Tool{k.Counter}, extra...)
	loader.Getenv = k.Getenv
	// Tools run confined, as on a worker (one sandbox per process).
	loader.Sandbox = sandboxtest.Box()
	k.Model = modelserver.NewFor(provider)
	k.Model.Handle(Echo)
	return k, nil
}

// Close stops the model server and MCP servers and closes the store.
func (k *Kit) Close() {
	k.Model.Close()
	k.Loader.Close()
	_ = k.Store.Close()
}

// ProcessEnv is the environment of fastagent subprocesses that use this
// kit's model server.
func (k *Kit) ProcessEnv() []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for _, name := range []string{"FASTAGENT_MODEL", k.keyEnv(), k.urlEnv()} {
		env = append(env, name+"="+k.Getenv(name))
	}
	return env
}

// WriteConfig writes fastagent.yaml into the workspace.
func (k *Kit) WriteConfig(yaml string) error {
	return os.WriteFile(filepath.Join(k.Dir, workspace.ConfigFile), []byte(yaml), 0o644)
}

// Spec returns the provider/model the kit's workers use.
func (k *Kit) Spec() string {
	if k.Model.Shape() == modelserver.Anthropic {
		return AnthropicModelSpec
	}
	return ModelSpec
}

// KeyEnv returns the environment variable that holds the API key of the
// kit's provider (OPENAI_API_KEY or ANTHROPIC_API_KEY).
func (k *Kit) KeyEnv() string { return k.keyEnv() }

func (k *Kit) keyEnv() string {
	if k.Model.Shape() == modelserver.Anthropic {
		return "ANTHROPIC_API_KEY"
	}
	return "OPENAI_API_KEY"
}

func (k *Kit) urlEnv() string {
	if k.Model.Shape() == modelserver.Anthropic {
		return "ANTHROPIC_BASE_URL"
	}
	return "OPENAI_BASE_URL"
}

// Getenv is the environment model clients see: the scripted server as the
// endpoint of the kit's provider.
func (k *Kit) Getenv(name string) string {
	switch name {
	case "FASTAGENT_MODEL":
		return k.Spec()
	case k.urlEnv():
		return k.Model.URL()
	case k.keyEnv():
		return "test-key"
	}
	return ""
}

// Activities returns activities over the kit's backends and bus.
func (k *Kit) Activities(bus feed.Bus) *activities.Activities {
	return &activities.Activities{
		Store:       k.Faults,
		Feed:        bus,
		Definitions: k.Loader,
		Models:      k.Models,
	}
}

// Components are the kit's backends as serve.Assemble takes them: its
// store, loader (with the kit's tool sandbox), models and activities, with
// bus as the live feed.
func (k *Kit) Components(bus feed.Bus) serve.Components {
	return serve.Components{Store: k.Store, Feed: bus, Loader: k.Loader, Models: k.Models, Activities: k.Activities(bus)}
}

// Runtime assembles the serving runtime over the kit's Components, in the
// kit's workspace unless cfg.Dir says otherwise, so a test's worker, durable
// agent and ingress are built as the serving commands build theirs. The kit
// and bus stay the caller's: Parts.Close releases neither.
func (k *Kit) Runtime(ctx context.Context, bus feed.Bus, cfg serve.Config) (*serve.Parts, error) {
	if cfg.Dir == "" {
		cfg.Dir = k.Dir
	}
	return serve.Assemble(ctx, cfg, k.Components(bus))
}

// Echo answers with every user text of the request joined by "|".
func Echo(req modelserver.Request) modelserver.Reply {
	var texts []string
	for _, m := range req.Messages {
		if m.Role == "user" {
			texts = append(texts, m.Content)
		}
	}
	s := strings.Join(texts, "|")
	if len(s) > 1 {
		return modelserver.Reply{Text: []string{s[:len(s)/2], s[len(s)/2:]}}
	}
	return modelserver.Reply{Text: []string{s}}
}

// Script programs a conformance scenario for the next turn of session: the
// model replies (Script) and, for agenttest.ToolLostThenTransient, the loss
// of the counter tool's result in the store Activities use.
func (k *Kit) Script(session string, s agenttest.Scenario) {
	if s == agenttest.ToolLostThenTransient {
		k.Faults.LoseToolResult(session, CounterName)
	}
	Script(k.Model, s)
}

// Script queues the model replies of a conformance scenario on the shared
// queue (the suite runs its cases one at a time). Faults other than the
// model's are armed by Kit.Script.
func Script(ms *modelserver.Server, s agenttest.Scenario) {
	answer := modelserver.Reply{Text: []string{"hello", " world"}}
	switch s {
	case agenttest.Reply:
		ms.Enqueue(answer)
	case agenttest.Fail:
		ms.Enqueue(modelserver.Reply{Status: 401, Message: "Incorrect API key provided"})
	case agenttest.Echo:
		// the fallback handler echoes
	case agenttest.FailAfterOutput:
		ms.Enqueue(modelserver.Reply{Text: []string{"partial", " answ", "er that breaks"}, DisconnectAfter: 2}, answer)
	case agenttest.TransientThenReply:
		ms.Enqueue(modelserver.Reply{Status: 500, Message: "upstream overloaded"}, answer)
	case agenttest.ToolThenTransient, agenttest.ToolLostThenTransient:
		ms.Enqueue(
			modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: "call_counter_1", Name: CounterName, Args: `{"note":"once"}`}}},
			modelserver.Reply{Status: 500, Message: "upstream overloaded"},
			answer,
		)
	case agenttest.Slow:
		ms.Enqueue(modelserver.Reply{Text: []string{"thinking about it"}, Hang: true})
	}
}

// WaitAborted waits until the model server has seen one more abandoned
// reply than before (before is Model.Aborted() when the turn started).
func WaitAborted(ms *modelserver.Server, before int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := ms.WaitAbortedN(ctx, before+1); err != nil {
		return fmt.Errorf("model server saw %d aborted replies, want %d: %w", ms.Aborted(), before+1, err)
	}
	return nil
}

// CounterName is the name of the counter tool.
const CounterName = "counter"

// CounterTool is a non-idempotent tool that counts its runs per session, so
// tests can prove it never ran twice.
type CounterTool struct {
	mu          sync.Mutex
	started     map[string]int
	runs        map[string]int
	interrupted map[string]int
	// Delay makes each run take this long (to kill a worker mid-call).
	Delay time.Duration
	// Sequential makes batches with the tool run one call at a time.
	Sequential bool
	// Idempotent declares the tool safe to retry, which it is not: tests set
	// it to build an engine that wrongly retries a side-effecting tool.
	Idempotent bool
	// holds are the calls Hold keeps running, by note.
	holds map[string]chan struct{}
}

// Hold makes calls whose note argument is note run until release is
// called (or their context ends): a test acts while the tool runs.
func (c *CounterTool) Hold(note string) (release func()) {
	ch := make(chan struct{})
	c.mu.Lock()
	if c.holds == nil {
		c.holds = map[string]chan struct{}{}
	}
	c.holds[note] = ch
	c.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// Spec describes the tool.
func (c *CounterTool) Spec() agent.ToolSpec {
	return agent.ToolSpec{
		Name:        CounterName,
		Description: "Counts how many times it was called in this session.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"note":{"type":"string"}}}`),
		Sequential:  c.Sequential,
		Idempotent:  c.Idempotent,
	}
}

// Run counts the call.
func (c *CounterTool) Run(ctx context.Context, call agent.ToolCall) (agent.ToolResult, error) {
	c.mu.Lock()
	if c.started == nil {
		c.started = map[string]int{}
	}
	c.started[call.Session]++
	var args struct {
		Note string `json:"note"`
	}
	_ = json.Unmarshal(call.Args, &args)
	hold := c.holds[args.Note]
	c.mu.Unlock()
	if hold != nil {
		select {
		case <-ctx.Done():
			return agent.ToolResult{}, ctx.Err()
		case <-hold:
		}
	}
	if c.Delay > 0 {
		select {
		case <-ctx.Done():
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.interrupted == nil {
				c.interrupted = map[string]int{}
			}
			c.interrupted[call.Session]++
			return agent.ToolResult{}, ctx.Err()
		case <-time.After(c.Delay):
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runs == nil {
		c.runs = map[string]int{}
	}
	c.runs[call.Session]++
	return agent.ToolResult{Content: fmt.Sprintf("count=%d", c.runs[call.Session])}, nil
}

// Started returns the number of runs in session that began (finished,
// interrupted or still running).
func (c *CounterTool) Started(session string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.started[session]
}

// Interrupted returns the number of runs in session whose context was
// cancelled during Delay.
func (c *CounterTool) Interrupted(session string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.interrupted[session]
}

// Runs returns the number of runs in session.
func (c *CounterTool) Runs(session string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[session]
}

// Sessions returns the sessions the tool ran in, sorted.
func (c *CounterTool) Sessions() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.runs))
}
