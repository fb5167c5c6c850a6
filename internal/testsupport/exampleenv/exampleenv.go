// Package exampleenv is what the public packages' runnable examples stand
// on: a Temporal development server for the package's tests (Main), the
// client options that reach it, and an agent folder whose model is a
// scripted OpenAI-compatible server on loopback.
package exampleenv

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/internal/devserver"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
)

var server *devserver.Server

// Main runs the package's tests and examples with a Temporal development
// server (the fastagent-devserver program, see internal/devserver) and
// exits with their status. Call it from TestMain.
func Main(m *testing.M) {
	dir, err := os.MkdirTemp("", "fastagent-examples-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	server, err = devserver.Start(context.Background(), devserver.Options{
		DatabaseFile: filepath.Join(dir, "temporal.db"), UIPort: -1, LogWriter: io.Discard,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start the Temporal dev server:", err)
		os.Exit(1)
	}
	code := m.Run()
	server.Stop()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// ClientOptions reach the development server as a Temporal Cloud
// namespace is reached: an endpoint, a namespace and an API key (here
// without TLS: it listens on loopback in plaintext).
func ClientOptions() client.Options {
	return client.Options{
		HostPort:          server.FrontendAddress(),
		Namespace:         server.Namespace(),
		Credentials:       client.NewAPIKeyStaticCredentials(server.APIKey()),
		ConnectionOptions: client.ConnectionOptions{TLSDisabled: true},
		Logger:            Quiet,
	}
}

// Quiet is a logger that discards everything.
var Quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// Agent makes an agent folder (a persona, and fastagent.yaml when config
// is not empty) and a scripted OpenAI-compatible model that answers with
// replies; env is the environment the model client reads. done removes
// both.
func Agent(config string, replies ...modelserver.Reply) (dir string, env func(string) string, done func()) {
	dir, err := os.MkdirTemp("", "fastagent-example-")
	if err != nil {
		panic(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "persona.md"), []byte("You help people.\n"), 0o600); err != nil {
		panic(err)
	}
	if config != "" {
		if err := os.WriteFile(filepath.Join(dir, "fastagent.yaml"), []byte(config), 0o600); err != nil {
			panic(err)
		}
	}
	ms := modelserver.New()
	ms.Enqueue(replies...)
	vars := map[string]string{
		"FASTAGENT_MODEL":   "openai/scripted",
		"OPENAI_BASE_URL":   ms.URL(),
		"OPENAI_API_KEY":    "example-key",
		"FASTAGENT_SANDBOX": os.Getenv("FASTAGENT_SANDBOX"),
	}
	env = func(k string) string { return vars[k] }
	return dir, env, func() {
		ms.Close()
		_ = os.RemoveAll(dir)
	}
}
