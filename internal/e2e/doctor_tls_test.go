package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/agent/agenttest"
	"github.com/fastagent/fastagent/internal/devserver"
	"github.com/fastagent/fastagent/internal/doctor"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/serve"
	"github.com/fastagent/fastagent/internal/tclient"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
)

// Temporal Cloud's API-key path, locally: a TLS frontend (a private CA, a
// server name that is not the address) that wants no client certificate
// and authorizes every call by its API key. Configured only by
// TEMPORAL_API_KEY, TEMPORAL_TLS_CA and TEMPORAL_TLS_SERVER_NAME, doctor's
// Temporal checks pass (and name the credential: an API key over TLS), a
// wrong key fails them, and a worker and agent serve a turn.
func TestAPIKeyOverTLSDoctorAndTurn(t *testing.T) {
	ca := newPKI(t, "fastagent-test")
	const serverName = "temporal.fastagent.test"
	srvCert, srvKey := ca.issue(t, "frontend", serverName)
	srv, err := devserver.Start(context.Background(), devserver.Options{
		DatabaseFile: filepath.Join(t.TempDir(), "temporal.db"),
		UIPort:       -1,
		LogWriter:    logSink(t.TempDir()),
		TLS:          &devserver.TLS{CertFile: srvCert, KeyFile: srvKey, CAFile: ca.CAFile, ServerName: serverName},
	})
	if err != nil {
		t.Fatalf("start TLS server: %v", err)
	}
	t.Cleanup(srv.Stop)
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4}))
	env := func(key string) {
		for k, v := range map[string]string{"TEMPORAL_API_KEY": key, "TEMPORAL_TLS_CA": ca.CAFile, "TEMPORAL_TLS_SERVER_NAME": serverName,
			"TEMPORAL_TLS_CERT": "", "TEMPORAL_TLS_KEY": "", "TEMPORAL_TLS": ""} {
			t.Setenv(k, v)
		}
	}
	check := func() doctor.Report {
		o := doctor.Options{Temporal: tclient.Config{Address: srv.FrontendAddress(), Namespace: srv.Namespace(), Logger: quiet}.FromEnv(),
			Models: []string{"openai/gpt-4o-mini"}, Getenv: func(k string) string { return map[string]string{"OPENAI_API_KEY": "k"}[k] },
			Timeout: 10 * time.Second}
		return doctor.Run(context.Background(), o)
	}

	env("not-the-key")
	if r := check(); r.OK() {
		t.Fatal("doctor passed with a wrong API key")
	}
	env(srv.APIKey())
	r := check()
	for _, c := range r {
		if c.Status == doctor.Fail {
			t.Errorf("%s: %s", c.Name, c.Detail)
		}
	}
	var temporal doctor.Result
	for _, c := range r {
		if c.Name == "temporal" {
			temporal = c
		}
	}
	if temporal.Status != doctor.Pass || !strings.Contains(temporal.Detail, "API key over TLS") {
		t.Fatalf("temporal check %s %q, want a pass naming the API key over TLS", temporal.Status, temporal.Detail)
	}

	c, err := tclient.Dial(context.Background(), tclient.Config{Address: srv.FrontendAddress(), Logger: quiet}.FromEnv())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	k := testkit.New(t)
	bus := feed.NewInProcess()
	t.Cleanup(func() { _ = bus.Close() })
	queue := fmt.Sprintf("e2e-apikey-tls-%d", time.Now().UnixNano())
	rt, err := k.Runtime(context.Background(), bus, serve.Config{TaskQueue: queue})
	if err != nil {
		t.Fatal(err)
	}
	w, err := rt.StartWorker(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	evs := collect(t, rt.Agent(c), context.Background(), "apikey-tls", "hello with an API key over TLS")
	if term := agenttest.CheckTerminal(t, evs); term.Type != agent.TypeCompleted {
		t.Fatalf("turn: %s", describe(evs))
	}
	if got := agenttest.TextAfterLastRetry(evs); !strings.Contains(got, "hello with an API key over TLS") {
		t.Errorf("answer %q", got)
	}
}
