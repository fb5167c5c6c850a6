package serve

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"github.com/fastagent/fastagent/internal/egress"
)

// frontends are the Temporal frontends this process's tools are kept from,
// learned from the clients the runtime was given or made: however a
// client came (dialled here, made with the plugin, a user's own client
// handed to Run or to a worker of theirs), its frontend joins the tool
// sandbox's deny list before a tool of its worker runs.
type frontends struct {
	mu sync.Mutex
	// seen are the clients whose frontend is denied already.
	seen map[client.Client]bool
}

// denyAddress adds hostPort (resolved now: every address of a name) to the
// tool sandbox's control plane; a name that does not resolve is logged.
func (p *Parts) denyAddress(hostPort string) {
	if p.Sandbox == nil || hostPort == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	deny, err := egress.ParseDests(ctx, []string{hostPort})
	if err != nil && p.Config.Logger != nil {
		p.Config.Logger.Warn("tool network deny list: the Temporal address did not resolve; its connected address is denied once a tool runs", "address", hostPort, "error", err)
	}
	p.Sandbox.Deny(deny)
}

// denyFrontend adds the address client c is connected to — its Temporal
// frontend, as the connection reached it — to the tool sandbox's control
// plane, once per client. It asks the server (GetSystemInfo, no workflow
// action); an error means the address is not known and no tool should run.
func (p *Parts) denyFrontend(ctx context.Context, c client.Client) error {
	if c == nil || p.Sandbox == nil {
		return nil
	}
	key := reflect.TypeOf(c).Comparable()
	if key {
		p.fronts.mu.Lock()
		seen := p.fronts.seen[c]
		p.fronts.mu.Unlock()
		if seen {
			return nil
		}
	}
	var pr peer.Peer
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.WorkflowService().GetSystemInfo(ctx, &workflowservice.GetSystemInfoRequest{}, grpc.Peer(&pr)); err != nil {
		return fmt.Errorf("learning the Temporal frontend's address, to keep tools from it: %w", err)
	}
	if pr.Addr == nil {
		return fmt.Errorf("learning the Temporal frontend's address, to keep tools from it: the connection named no peer")
	}
	p.denyAddress(pr.Addr.String())
	if key {
		p.fronts.mu.Lock()
		if p.fronts.seen == nil {
			p.fronts.seen = map[client.Client]bool{}
		}
		p.fronts.seen[c] = true
		p.fronts.mu.Unlock()
	}
	return nil
}
