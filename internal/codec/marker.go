package codec

import (
	"context"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
)

// The SDK does not say which data converter a client was made with. A
// client made with the codec carries its Marker (a client interceptor);
// OnClient asks the client, without any call to the server, whether it
// does: callers handed a client of the program's (the public ingress, a
// plugin's Agent) refuse one that would write payloads unencrypted.

type probeKey struct{}

// probeID is the workflow ID the probe asks for: never a real workflow's.
const probeID = "fastagent-codec-probe"

// Marker is the client interceptor that tells OnClient the client encodes
// with c. Put it on every client made with c.
func (c *Codec) Marker() interceptor.ClientInterceptor { return &marker{id: c.KeyID()} }

type marker struct {
	interceptor.ClientInterceptorBase
	id string
}

func (m *marker) InterceptClient(next interceptor.ClientOutboundInterceptor) interceptor.ClientOutboundInterceptor {
	return &markerOut{ClientOutboundInterceptorBase: interceptor.ClientOutboundInterceptorBase{Next: next}, id: m.id}
}

type markerOut struct {
	interceptor.ClientOutboundInterceptorBase
	id string
}

// GetWorkflowRun answers the probe with the encrypting key's ID; any other
// call passes.
func (m *markerOut) GetWorkflowRun(ctx context.Context, in *interceptor.ClientGetWorkflowRunInput) client.WorkflowRun {
	if found, ok := ctx.Value(probeKey{}).(*string); ok && in.WorkflowID == probeID {
		*found = m.id
	}
	return m.Next.GetWorkflowRun(ctx, in)
}

// OnClient reports whether cl encodes payloads with c (its encrypting key):
// whether cl was made with c's Marker. It makes no call to the server.
func (c *Codec) OnClient(cl client.Client) (ok bool) {
	if cl == nil {
		return false
	}
	defer func() {
		if recover() != nil {
			ok = false // a client that cannot even build a handle
		}
	}()
	var found string
	_ = cl.GetWorkflow(context.WithValue(context.Background(), probeKey{}, &found), probeID, "")
	return found != "" && found == c.KeyID()
}
