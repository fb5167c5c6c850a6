// Command custom-tool embeds fastagent in a Go program using only public
// packages: it registers a Go tool (dice) and a hook, starts the runtime on an
// embedded Temporal server, runs one turn and prints the answer.
//
//	cd examples && OPENAI_API_KEY=… FASTAGENT_MODEL=openai/gpt-4o-mini go run ./custom-tool "roll two dice"
//
// examples/ is a Go module of its own (with a replace directive to the
// repository), so the compiler refuses any import of an internal package.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/fastagent/fastagent"
	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/hooks"
)

// dice is a Go tool: it rolls n six-sided dice.
type dice struct{}

func (dice) Spec() agent.ToolSpec {
	return agent.ToolSpec{
		Name:        "dice",
		Description: "Roll n six-sided dice and return the faces.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer","minimum":1,"maximum":10}},"required":["n"]}`),
		Idempotent:  false, // a roll is not repeatable: never re-run after a lost worker
	}
}

func (dice) Run(_ context.Context, call agent.ToolCall) (agent.ToolResult, error) {
	var args struct {
		N int `json:"n"`
	}
	if err := json.Unmarshal(call.Args, &args); err != nil {
		// Bad arguments are the model's to fix: an error result, not a Go error.
		return agent.ToolResult{IsError: true, Content: "arguments: " + err.Error()}, nil //nolint:nilerr
	}
	faces := make([]string, args.N)
	for i := range faces {
		faces[i] = fmt.Sprint(1 + rand.IntN(6))
	}
	return agent.ToolResult{Content: "rolled " + strings.Join(faces, ", ")}, nil
}

// turnHooks add a line to every turn's system prompt.
var turnHooks = hooks.Hooks{
	BeforeAgentStart: func(_ context.Context, turn hooks.TurnInfo) (string, error) {
		return "Session " + turn.Session + " is a dice game; always use the dice tool to roll.", nil
	},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	prompt := "roll two dice"
	if len(os.Args) > 1 {
		prompt = strings.Join(os.Args[1:], " ")
	}
	answer, err := run(ctx, agentDir(), prompt)
	if err != nil {
		fmt.Fprintln(os.Stderr, "custom-tool:", err)
		os.Exit(1)
	}
	fmt.Println(answer)
}

// run starts the runtime with the dice tool and the hook, runs one turn and
// returns its answer.
func run(ctx context.Context, dir, prompt string) (string, error) {
	state, err := os.MkdirTemp("", "custom-tool-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(state)
	rt, err := fastagent.Start(ctx, fastagent.Options{
		Dir:      dir,
		StateDir: state,
		Temporal: fastagent.Temporal{Embedded: true, UIPort: -1},
		Roles:    fastagent.Roles{Worker: true}, // no HTTP: the turn runs through the Go API
		Tools:    []agent.Tool{dice{}},
		Hooks:    turnHooks,
	})
	if err != nil {
		return "", err
	}
	defer rt.Close()
	res, err := agent.Collect(rt.Agent().Invoke(ctx, agent.Scope{Session: "dice-1"}, agent.Prompt{Text: prompt}))
	if err != nil {
		return "", err
	}
	return res.Text, nil
}

// agentDir is the agent folder next to this file.
func agentDir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "agent"
	}
	return filepath.Join(filepath.Dir(file), "agent")
}
