package lab

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strconv"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/activities"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/localagent"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
)

// Kit is one scenario's backend: the test kit (scripted model server,
// workspace in a temporary directory, SQLite session store, counter tool)
// made usable from a program.
type Kit struct {
	*testkit.Kit
}

// CounterName is the name of the kit's counter tool.
const CounterName = testkit.CounterName

// NewKit builds a kit in a new temporary directory; tools are extra Go tools
// for in-process workers (subprocess workers have the built-in tools only).
// The counter tool is sequential here: the step figure measures one call
// after another.
func NewKit(tools ...agent.Tool) (*Kit, error) {
	dir, err := os.MkdirTemp("", "fastagent-lab-ws-")
	if err != nil {
		return nil, err
	}
	k, err := testkit.Open(dir, tools...)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	k.Counter.Sequential = true
	return &Kit{k}, nil
}

// Activities returns activities over the kit's backends publishing to bus,
// logging quietly.
func (k *Kit) Activities(bus feed.Bus) *activities.Activities {
	a := k.Kit.Activities(bus)
	a.Logger = QuietLogger()
	return a
}

// Runtime assembles the serving runtime on queue over the kit — its store,
// loader, models and quiet activities — with bus as the live feed, as the
// serving commands assemble theirs (serve.Assemble); tune adjusts its
// Config (admission) and Components (worker pollers, repliers). The kit and
// bus stay the caller's: Parts.Close releases neither.
func (k *Kit) Runtime(bus feed.Bus, queue string, tune ...func(*serve.Config, *serve.Components)) (*serve.Parts, error) {
	cfg := serve.Config{Dir: k.Dir, TaskQueue: queue, Logger: QuietLogger()}
	with := k.Components(bus)
	with.Activities = k.Activities(bus)
	for _, f := range tune {
		f(&cfg, &with)
	}
	return serve.Assemble(context.Background(), cfg, with)
}

// Local returns the in-process agent loop (the baseline) over the kit,
// publishing to bus (an in-process bus).
func (k *Kit) Local(bus feed.Bus) *localagent.Agent {
	return &localagent.Agent{Acts: k.Activities(bus)}
}

// Close releases the kit and removes its workspace.
func (k *Kit) Close() {
	k.Kit.Close()
	_ = os.RemoveAll(k.Dir)
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
