package serve

import (
	"context"

	"github.com/fastagent/fastagent/internal/ingress"
	"github.com/fastagent/fastagent/internal/store"
)

// agentMemories are one agent's memories in the deployment's store, for
// the ingress's /memories routes: every query and scope is the agent's.
type agentMemories struct {
	store store.Store
	agent string
}

var _ ingress.Memories = agentMemories{}

// Recall implements ingress.Memories.
func (m agentMemories) Recall(ctx context.Context, q store.MemoryQuery) ([]store.Memory, error) {
	q.Agent = m.agent
	return m.store.Recall(ctx, q)
}

// Forget implements ingress.Memories.
func (m agentMemories) Forget(ctx context.Context, scope store.MemoryScope, id string) (store.Memory, error) {
	scope.Agent = m.agent
	return m.store.Forget(ctx, scope, id)
}
