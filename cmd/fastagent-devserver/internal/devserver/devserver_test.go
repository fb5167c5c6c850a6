package devserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// srv is one embedded server (in memory, with the Web UI) shared by the
// tests here; starting one takes seconds.
var (
	srv     *Server
	keyFile string
)

const testCodec = "http://127.0.0.1:1/codec/dev/0123456789abcdef"

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "devserver-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	keyFile = filepath.Join(dir, "temporal-token")
	srv, err = Start(Options{
		DatabaseFile:  filepath.Join(dir, "temporal.db"),
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		LogWriter:     io.Discard,
		CodecEndpoint: testCodec,
		KeyFile:       keyFile,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start embedded temporal:", err)
		os.Exit(1)
	}
	code := m.Run()
	srv.Stop()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// dial is a raw SDK client of the server sending key ("" sends none).
func dial(t *testing.T, key string) client.Client {
	t.Helper()
	opts := client.Options{
		HostPort:  srv.FrontendAddress(),
		Namespace: srv.Namespace(),
		Logger:    nopLogger{},
	}
	if key != "" {
		opts.Credentials = client.NewAPIKeyStaticCredentials(key)
		opts.ConnectionOptions.TLSDisabled = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, opts)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

type nopLogger struct{}

func (nopLogger) Debug(string, ...any) {}
func (nopLogger) Info(string, ...any)  {}
func (nopLogger) Warn(string, ...any)  {}
func (nopLogger) Error(string, ...any) {}

// The frontend refuses every call that does not carry the run's key: a
// process on loopback can neither read nor act, not even approve a gated
// tool call through the session's update.
func TestFrontendRefusesCallsWithoutTheKey(t *testing.T) {
	ctx := context.Background()
	for name, key := range map[string]string{"no key": "", "wrong key": strings.Repeat("0", 64)} {
		t.Run(name, func(t *testing.T) {
			c := dial(t, key) //nolint:contextcheck // the test client dials with its own deadline
			calls := map[string]func() error{
				"list": func() error {
					_, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: srv.Namespace()})
					return err
				},
				"describe namespace": func() error {
					_, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: srv.Namespace()})
					return err
				},
				"signal": func() error { return c.SignalWorkflow(ctx, "session:s1", "", "steer", "x") },
				"update": func() error {
					_, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
						WorkflowID: "session:s1", UpdateName: "approve", WaitForStage: client.WorkflowUpdateStageAccepted,
					})
					return err
				},
				"terminate": func() error { return c.TerminateWorkflow(ctx, "session:s1", "", "x") },
				"start": func() error {
					_, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "intruder", TaskQueue: "q"}, "Anything")
					return err
				},
			}
			for what, call := range calls {
				var denied *serviceerror.PermissionDenied
				if err := call(); !errors.As(err, &denied) {
					t.Errorf("%s: err = %v, want PermissionDenied", what, err)
				}
			}
		})
	}
}

// With the key, calls are served (a signal to a missing workflow is
// NotFound: it got past the authorizer).
func TestFrontendServesTheKey(t *testing.T) {
	ctx := context.Background()
	c := dial(t, srv.APIKey())
	if _, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: srv.Namespace()}); err != nil {
		t.Fatalf("list: %v", err)
	}
	if _, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: srv.Namespace()}); err != nil {
		t.Fatalf("describe namespace: %v", err)
	}
	var notFound *serviceerror.NotFound
	if err := c.SignalWorkflow(ctx, "no-such-workflow", "", "steer", "x"); !errors.As(err, &notFound) {
		t.Fatalf("signal: %v, want NotFound", err)
	}
	b, err := os.ReadFile(keyFile)
	if err != nil || strings.TrimSpace(string(b)) != srv.APIKey() {
		t.Fatalf("key file: %q %v", b, err)
	}
	if fi, _ := os.Stat(keyFile); fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, want 0600", fi.Mode().Perm())
	}
}

// The gRPC health check answers without a key (load balancers, probes).
func TestHealthCheckNeedsNoKey(t *testing.T) {
	conn, err := grpc.NewClient(srv.FrontendAddress(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "temporal.api.workflowservice.v1.WorkflowService"})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", resp, err)
	}
	// The same connection with a forged header is still refused.
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer guess")
	_, err = workflowservice.NewWorkflowServiceClient(conn).ListWorkflowExecutions(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: srv.Namespace()})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("list with a guessed key: %v", err)
	}
}

// The server's own clients still work: a schedule is run by the server's
// system worker, which calls the internal frontend (no key, internode
// mTLS). Triggering it starts a workflow.
func TestServerInternalClientsWork(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := dial(t, srv.APIKey())
	id := fmt.Sprintf("sched-%d", time.Now().UnixNano())
	h, err := c.ScheduleClient().Create(ctx, client.ScheduleOptions{
		ID:     id,
		Spec:   client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: 24 * time.Hour}}},
		Action: &client.ScheduleWorkflowAction{ID: id + "-run", Workflow: "Nothing", TaskQueue: "nobody-polls"},
	})
	if err != nil {
		t.Fatalf("create schedule: %v", err)
	}
	defer func() { _ = h.Delete(context.Background()) }()
	if err := h.Trigger(ctx, client.ScheduleTriggerOptions{Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_ALLOW_ALL}); err != nil {
		t.Fatalf("trigger: %v", err)
	}
	for {
		d, err := h.Describe(ctx)
		if err == nil && len(d.Info.RecentActions) > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the schedule never started its workflow: %v %+v", err, d)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func TestServerConfigLocksInternode(t *testing.T) {
	internode, err := internodeTLS()
	if err != nil {
		t.Fatal(err)
	}
	conf, err := serverConfig(Options{FrontendPort: 7233, IP: "127.0.0.1"}, nil, internode)
	if err != nil {
		t.Fatal(err)
	}
	if conf.PublicClient.HostPort != "" {
		t.Errorf("public client %q: the server's clients would call the locked frontend", conf.PublicClient.HostPort)
	}
	if _, ok := conf.Services["internal-frontend"]; !ok {
		t.Error("no internal frontend")
	}
	tls := conf.Global.TLS.Internode
	if !tls.Server.RequireClientAuth || tls.Server.KeyData == "" || len(tls.Client.RootCAData) == 0 {
		t.Errorf("internode TLS is not mutual: %+v", tls.Server.RequireClientAuth)
	}
}
