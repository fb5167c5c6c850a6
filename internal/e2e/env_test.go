// Package e2e runs fastagent end to end on the Temporal dev server (the
// fastagent-devserver program, a child process of the test binary): the
// real worker, the real langchaingo client against a scripted model server
// over loopback HTTP, real SQLite, real HTTP ingress.
package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/devserver"
	"github.com/fastagent/fastagent/internal/durable"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/ingress"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/tclient"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
)

// server is the Temporal dev server shared by every test here.
var server *devserver.Server

func TestMain(m *testing.M) {
	if os.Getenv("FASTAGENT_E2E_MCP") == "1" {
		mcpServerMain()
	}
	dir, err := os.MkdirTemp("", "fastagent-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	server, err = devserver.Start(context.Background(), devserver.Options{
		DatabaseFile: filepath.Join(dir, "temporal.db"),
		UIPort:       -1,
		LogWriter:    logSink(dir),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start embedded temporal:", err)
		os.Exit(1)
	}
	code := m.Run()
	server.Stop()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func logSink(dir string) *os.File {
	f, err := os.Create(filepath.Join(dir, "temporal.log"))
	if err != nil {
		return os.Stderr
	}
	return f
}

// env is one test's stack: a kit (model server, store, workspace), a feed,
// a worker on its own task queue, and a durable agent.
type env struct {
	t      *testing.T
	kit    *testkit.Kit
	bus    feed.Bus
	client client.Client
	queue  string
	worker sdkworker.Worker
	agent  *durable.Agent
	// lastProc is the process startProcess started last.
	lastProc *proc
	// extraEnv is added to the environment of processes startProcess starts.
	extraEnv []string
	// noProcessToken starts processes without FASTAGENT_API_TOKEN (e2eToken).
	noProcessToken bool
}

// e2eToken is the admin API token processes started by startProcess accept.
const e2eToken = "e2e-admin-token"

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvFor(t, modelserver.OpenAI)
}

// newEnvFor is newEnv with a model server of the given provider's shape;
// the in-process worker and worker processes use that provider.
func newEnvFor(t *testing.T, provider modelserver.Shape) *env {
	t.Helper()
	k := testkit.NewFor(t, provider)
	bus := feed.NewInProcess()
	t.Cleanup(func() { _ = bus.Close() })
	c, err := tclient.Dial(context.Background(), tclient.Config{
		Address: server.FrontendAddress(), APIKey: server.APIKey(), Plaintext: true,
		Namespace: server.Namespace(),
		Logger:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4})),
	})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(c.Close)
	e := &env{t: t, kit: k, bus: bus, client: c, queue: fmt.Sprintf("e2e-%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano())}
	e.agent = e.runtime().Agent(c)
	return e
}

// tuning adjusts the Config (versioning, stop timeout, roles…) and the
// Components (repliers, interceptors) of one runtime.
type tuning = func(*serve.Config, *serve.Components)

// runtime assembles the env's serving runtime as the serving commands
// assemble theirs (serve.Assemble): the kit's store, loader, models and
// activities, the env's current feed and task queue. Its durable agent
// does not wait for a client to re-attach (DetachGrace: tests that need
// it set it). tune adjusts the runtime of one worker.
func (e *env) runtime(tune ...tuning) *serve.Parts {
	e.t.Helper()
	cfg := serve.Config{Dir: e.kit.Dir, TaskQueue: e.queue, DetachGrace: -1}
	with := e.kit.Components(e.bus)
	for _, f := range tune {
		f(&cfg, &with)
	}
	p, err := serve.Assemble(context.Background(), cfg, with)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(p.Close)
	return p
}

// withRepliers adds channel repliers to a worker (env.startWorker).
func withRepliers(rp ...channels.Replier) tuning {
	return func(_ *serve.Config, w *serve.Components) { w.Repliers = append(w.Repliers, rp...) }
}

// withInterceptors adds worker interceptors to a worker (env.startWorker).
func withInterceptors(icpt ...interceptor.WorkerInterceptor) tuning {
	return func(_ *serve.Config, w *serve.Components) { w.Interceptors = append(w.Interceptors, icpt...) }
}

// forProviders runs fn as one subtest per model provider shape (openai,
// anthropic), each with its own env built by newEnvFor.
func forProviders(t *testing.T, fn func(t *testing.T, e *env)) {
	for _, p := range testkit.Providers {
		t.Run(string(p), func(t *testing.T) { fn(t, newEnvFor(t, p)) })
	}
}

// session names a session of a test run per provider: sessions are
// workflows of the one shared namespace, so the anthropic run of a test
// must not reuse (and attach to) the openai run's session.
func (e *env) session(name string) string {
	if p := e.kit.Model.Shape(); p != modelserver.OpenAI {
		return name + "-" + string(p)
	}
	return name
}

// startWorker starts an in-process worker for the env's task queue, built
// by the env's runtime; tune adjusts it (withRepliers…).
func (e *env) startWorker(tune ...tuning) sdkworker.Worker {
	e.t.Helper()
	w, err := e.runtime(tune...).StartWorker(context.Background(), e.client)
	if err != nil {
		e.t.Fatalf("start worker: %v", err)
	}
	e.t.Cleanup(w.Stop)
	e.worker = w
	return w
}

// server returns the ingress the env's runtime builds for a (the env's
// durable agent, or a restarted copy), before authentication is set.
func (e *env) server(a agent.Agent) *ingress.Server { return e.runtime().IngressFor(a) }

// ingress serves the env's durable agent over real HTTP without tokens
// (ingress.Server.NoAuth): these tests are about turns, not doors, and the
// serving commands never set NoAuth. auth_test.go covers the doors.
func (e *env) ingress() *httptest.Server {
	return e.serveNoAuth(e.server(e.agent))
}

// serveNoAuth serves srv, ready and without tokens, until the test ends.
func (e *env) serveNoAuth(srv *ingress.Server) *httptest.Server {
	srv.NoAuth = true
	srv.SetReady(true)
	hs := httptest.NewServer(srv.Handler())
	e.t.Cleanup(hs.Close)
	return hs
}

// writeConfig writes fastagent.yaml into the workspace.
func (e *env) writeConfig(yaml string) {
	e.t.Helper()
	if err := e.kit.WriteConfig(yaml); err != nil {
		e.t.Fatal(err)
	}
}
