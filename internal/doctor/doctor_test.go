package doctor_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/devserver"
	"github.com/fastagent/fastagent/internal/doctor"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/tclient"
	"github.com/fastagent/fastagent/internal/testsupport/testkit"
)

// natsURL is the NATS server of the tests; FASTAGENT_TEST_NATS_URL overrides it.
func natsURL() string {
	if u := os.Getenv("FASTAGENT_TEST_NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

// options are the checks of a worker against s, with a SQLite store, the
// NATS feed (its stream made as a worker makes it) and a model with its key.
func options(t *testing.T, s *devserver.Server) doctor.Options {
	t.Helper()
	b, err := feed.NewNATS(natsURL())
	testkit.RequireService(t, "NATS", natsURL(), err)
	_ = b.Close()
	env := map[string]string{"OPENAI_API_KEY": "sk-test"}
	return doctor.Options{
		Temporal: tclient.Config{Address: s.FrontendAddress(), Namespace: s.Namespace(), APIKey: s.APIKey(), Plaintext: true},
		Store:    filepath.Join(t.TempDir(), "sessions.db"),
		Feed:     natsURL(),
		Models:   []string{"openai/gpt-4o-mini"},
		Getenv:   func(k string) string { return env[k] },
	}
}

func start(t *testing.T, o devserver.Options) *devserver.Server {
	t.Helper()
	o.UIPort, o.LogWriter = -1, io.Discard
	s, err := devserver.Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func status(r doctor.Report, name string) doctor.Result {
	for _, c := range r {
		if c.Name == name {
			return c
		}
	}
	return doctor.Result{Name: name, Status: "missing"}
}

func printed(r doctor.Report) string {
	var b bytes.Buffer
	r.Print(&b)
	return b.String()
}

// Against the dev server (the search attributes registered, as `fastagent
// dev` does), every check passes and the worker deployment is skipped
// (unversioned); naming a deployment with no version fails with the
// rollout to run.
func TestDoctorPassesOnTheDevServer(t *testing.T) {
	s := start(t, devserver.Options{})
	o := options(t, s)
	r := doctor.Run(context.Background(), o)
	out := printed(r)
	if !r.OK() || !strings.Contains(out, "all checks passed") {
		t.Fatalf("doctor against the dev server:\n%s", out)
	}
	for _, name := range []string{"temporal", "namespace", "search attributes", "store", "feed", "model keys"} {
		if c := status(r, name); c.Status != doctor.Pass {
			t.Errorf("%s: %s %s, want pass", name, c.Status, c.Detail)
		}
	}
	if c := status(r, "worker deployment"); c.Status != doctor.Skip {
		t.Errorf("worker deployment: %s %s, want skip (unversioned)", c.Status, c.Detail)
	}
	if c := status(r, "temporal"); !strings.Contains(c.Detail, "API key without TLS") {
		t.Errorf("temporal: %q, want the credential named", c.Detail)
	}

	o.Deployment = "doctor-test"
	r = doctor.Run(context.Background(), o)
	if c := status(r, "worker deployment"); c.Status != doctor.Fail || !strings.Contains(c.Detail, "fastagent rollout --deployment doctor-test") {
		t.Errorf("deployment without a version: %s %q, want a failure naming the rollout", c.Status, c.Detail)
	}
	if r.OK() {
		t.Error("a failed check left the report OK")
	}
}

// Against a server without the session search attributes doctor fails and
// says to run --fix; --fix registers them through the operator API; then
// every check passes.
func TestDoctorFixRegistersSearchAttributes(t *testing.T) {
	s := start(t, devserver.Options{NoSearchAttributes: true})
	o := options(t, s)
	r := doctor.Run(context.Background(), o)
	c := status(r, "search attributes")
	if r.OK() || c.Status != doctor.Fail || !strings.Contains(c.Detail, "FastAgentAgent") || !strings.Contains(c.Detail, "doctor --fix") {
		t.Fatalf("without the search attributes: %s %q (report OK=%v), want a failure naming them and --fix\n%s", c.Status, c.Detail, r.OK(), printed(r))
	}
	o.Fix = true
	r = doctor.Run(context.Background(), o)
	if c := status(r, "search attributes"); c.Status != doctor.Fixed || !strings.Contains(c.Detail, "FastAgentStatus") || !r.OK() {
		t.Fatalf("--fix: %s %q, want fixed\n%s", c.Status, c.Detail, printed(r))
	}
	o.Fix = false
	if r = doctor.Run(context.Background(), o); !r.OK() || status(r, "search attributes").Status != doctor.Pass {
		t.Fatalf("after --fix:\n%s", printed(r))
	}
}

// Nothing reachable: Temporal fails with what to change, the checks that
// need it are skipped, a missing model key is named, and the report fails.
func TestDoctorReportsWhatIsWrong(t *testing.T) {
	r := doctor.Run(context.Background(), doctor.Options{
		Temporal: tclient.Config{Address: "127.0.0.1:1", Namespace: "default"},
		Models:   []string{"anthropic/claude-sonnet-4-5"},
		Timeout:  3 * time.Second,
	})
	if r.OK() {
		t.Fatalf("report OK with nothing reachable:\n%s", printed(r))
	}
	if c := status(r, "temporal"); c.Status != doctor.Fail || !strings.Contains(c.Detail, "127.0.0.1:1") {
		t.Errorf("temporal: %s %q", c.Status, c.Detail)
	}
	for _, name := range []string{"namespace", "search attributes", "worker deployment"} {
		if c := status(r, name); c.Status != doctor.Skip {
			t.Errorf("%s: %s, want skip when Temporal is unreachable", name, c.Status)
		}
	}
	if c := status(r, "model keys"); c.Status != doctor.Fail || !strings.Contains(c.Detail, "ANTHROPIC_API_KEY") {
		t.Errorf("model keys: %s %q, want a failure naming ANTHROPIC_API_KEY", c.Status, c.Detail)
	}
	if c := status(r, "store"); c.Status != doctor.Skip {
		t.Errorf("store: %s, want skip without a store", c.Status)
	}
	out := printed(r)
	if !strings.Contains(out, "FAIL") || !strings.Contains(out, "checks failed") {
		t.Errorf("printed report lacks its failures:\n%s", out)
	}
}

func TestIsCloud(t *testing.T) {
	for addr, want := range map[string]bool{
		"us-east-1.aws.api.temporal.io:7233": true, "prod.a1b2c.tmprl.cloud:7233": true,
		"127.0.0.1:7233": false, "temporal-frontend.temporal.svc.cluster.local:7233": false,
	} {
		if got := doctor.IsCloud(addr); got != want {
			t.Errorf("IsCloud(%q) = %v, want %v", addr, got, want)
		}
	}
}
