package fastagent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fastagent/fastagent"
	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/llms/fake"
)

// Start serves a folder-defined agent durably: here with an embedded
// Temporal server (no Web UI), the HTTP ingress on a free port, and a model
// reached through the environment Getenv reads. The turn runs as an update
// of the session's workflow, exactly as one sent over HTTP would.
func ExampleStart() {
	ctx := context.Background()
	dir, env, done := exampleSetup("Hello from a durable agent.")
	defer done()

	rt, err := fastagent.Start(ctx, fastagent.Options{
		Dir:      dir,
		Temporal: fastagent.Temporal{Embedded: true, UIPort: -1},
		HTTPAddr: "127.0.0.1:0",
		Getenv:   env,
	})
	if err != nil {
		fmt.Println("start:", err)
		return
	}
	defer rt.Close()

	res, err := agent.Collect(rt.Agent().Invoke(ctx, agent.Scope{Session: "example"}, agent.Prompt{Text: "Say hello."}))
	if err != nil {
		fmt.Println("turn:", err)
		return
	}
	fmt.Println(res.Text)
	// Output: Hello from a durable agent.
}

// Models serves a model spec with a langchaingo client you built yourself
// (here langchaingo's fake; in practice Bedrock, Google AI, or a client
// behind your own gateway): fastagent.yaml names the spec, Options.Models
// supplies its client, and no provider environment is read for it.
func ExampleOptions_models() {
	ctx := context.Background()
	dir, _, done := exampleSetup("")
	defer done()
	if err := os.WriteFile(filepath.Join(dir, "fastagent.yaml"), []byte("model: acme/house-model\n"), 0o600); err != nil {
		fmt.Println(err)
		return
	}
	rt, err := fastagent.Start(ctx, fastagent.Options{
		Dir:      dir,
		Temporal: fastagent.Temporal{Embedded: true, UIPort: -1},
		HTTPAddr: "127.0.0.1:0",
		Models:   map[string]llms.Model{"acme/house-model": fake.NewFakeLLM([]string{"Answered by the house model."})},
		Getenv:   func(string) string { return "" },
	})
	if err != nil {
		fmt.Println("start:", err)
		return
	}
	defer rt.Close()

	res, err := agent.Collect(rt.Agent().Invoke(ctx, agent.Scope{Session: "example-models"}, agent.Prompt{Text: "Who answers?"}))
	if err != nil {
		fmt.Println("turn:", err)
		return
	}
	fmt.Println(res.Text)
	// Output: Answered by the house model.
}

// exampleSetup makes an agent folder (a persona) and a scripted
// OpenAI-compatible model on loopback that answers with text; env is the
// environment the model client reads.
func exampleSetup(text string) (dir string, env func(string) string, done func()) {
	dir, err := os.MkdirTemp("", "fastagent-example-")
	if err != nil {
		panic(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "persona.md"), []byte("You greet people.\n"), 0o600); err != nil {
		panic(err)
	}
	ms := modelserver.New()
	ms.Enqueue(modelserver.Reply{Text: []string{text}})
	vars := map[string]string{
		"FASTAGENT_MODEL": "openai/scripted",
		"OPENAI_BASE_URL": ms.URL(),
		"OPENAI_API_KEY":  "example-key",
	}
	env = func(k string) string {
		if v, ok := vars[k]; ok {
			return v
		}
		return os.Getenv(k)
	}
	return dir, env, func() {
		ms.Close()
		_ = os.RemoveAll(dir)
	}
}
