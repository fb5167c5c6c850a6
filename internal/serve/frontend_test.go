package serve

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"

	"github.com/fastagent/fastagent/internal/egress"
)

// fakeFrontend answers GetSystemInfo, what a client asks when it connects
// (and the runtime, to learn where it is connected).
type fakeFrontend struct {
	workflowservice.UnimplementedWorkflowServiceServer
}

func (fakeFrontend) GetSystemInfo(context.Context, *workflowservice.GetSystemInfoRequest) (*workflowservice.GetSystemInfoResponse, error) {
	return &workflowservice.GetSystemInfoResponse{}, nil
}

// The Temporal frontend of every client the worker's tools could learn of
// is on their deny list, whatever opens it to them otherwise (here a name
// the operator pinned to it): the address of a client made with the
// plugin, and the address any client running a tool call is connected to
// — a user's own client, not made with the plugin, included.
func TestTemporalFrontendDeniedToTools(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "fastagent.yaml"), []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	getenv := func(k string) string {
		return map[string]string{"FASTAGENT_MODEL": "openai/scripted", "OPENAI_API_KEY": "test-key"}[k]
	}
	p, err := Open(ctx, Config{Dir: dir, Getenv: getenv})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	pl, err := p.Plugin(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	denied := func(addr string) bool {
		t.Helper()
		ap := netip.MustParseAddrPort(addr)
		// Pinned: only the deny list can refuse it.
		return egress.Policy{Deny: p.Sandbox.ControlPlane()}.Check(ap.Addr(), ap.Port(), true) != nil
	}

	// A client made with the plugin: its configured address.
	if denied("203.0.113.7:7233") {
		t.Fatal("the frontend is denied before any client exists (the test cannot fail)")
	}
	lazy, err := client.NewLazyClient(client.Options{HostPort: "203.0.113.7:7233", Plugins: []client.Plugin{pl}})
	if err != nil {
		t.Fatal(err)
	}
	lazy.Close()
	if !denied("203.0.113.7:7233") || denied("203.0.113.7:443") {
		t.Errorf("after a client made with the plugin: 203.0.113.7:7233 denied=%v, :443 denied=%v; want the frontend's port alone",
			denied("203.0.113.7:7233"), denied("203.0.113.7:443"))
	}

	// A client of the user's, without the plugin, running a tool call.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	workflowservice.RegisterWorkflowServiceServer(srv, fakeFrontend{})
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	c, err := client.Dial(client.Options{HostPort: l.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if denied(l.Addr().String()) {
		t.Fatal("the user's frontend is denied before a tool ran (the test cannot fail)")
	}
	if p.Acts.ClientSeen == nil {
		t.Fatal("the activities learn no client before a tool runs")
	}
	if err := p.Acts.ClientSeen(ctx, c); err != nil {
		t.Fatal(err)
	}
	if !denied(l.Addr().String()) {
		t.Errorf("the frontend of the client running a tool (%s) is not on the deny list %v", l.Addr(), p.Sandbox.ControlPlane())
	}
}
