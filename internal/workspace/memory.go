package workspace

import (
	"fmt"

	"github.com/fastagent/fastagent/internal/memory"
)

// MemoryConfig is fastagent.yaml's memory: block: long-term memory (the
// remember, recall and forget tools) kept in the deployment's store.
type MemoryConfig struct {
	// Enabled adds the tools.
	Enabled bool `yaml:"enabled"`
	// Scope is principal (the default: each principal's memories are its
	// own; shared ones are read too) or shared (remember writes team facts).
	Scope string `yaml:"scope"`
	// OwnerlessWrites lets sessions without an owner (a channel's, a
	// schedule's, a webhook's) write and forget shared memories under
	// scope: shared; off (the default), they only read them.
	OwnerlessWrites bool `yaml:"ownerlessWrites"`
	// Inject adds the memories most relevant to the turn's prompt before
	// it, as a delimited block of data, in each step (off unless count is
	// set).
	Inject MemoryInject `yaml:"inject"`
}

// MemoryInject bounds the memories added to the prompt.
type MemoryInject struct {
	// Count is how many memories at most (0: none injected).
	Count int `yaml:"count"`
	// MaxTokens bounds their size, estimated at 4 bytes a token (default 400).
	MaxTokens int `yaml:"maxTokens"`
}

// Bounds of memory.inject.
const (
	maxInjectCount         = 20
	maxInjectTokens        = 4000
	DefaultInjectMaxTokens = 400
)

// ScopeOrDefault is the configured scope, principal when unset.
func (m MemoryConfig) ScopeOrDefault() string {
	if m.Scope == "" {
		return memory.ScopePrincipal
	}
	return m.Scope
}

// InjectTokens is inject.maxTokens or its default.
func (m MemoryConfig) InjectTokens() int {
	if m.Inject.MaxTokens <= 0 {
		return DefaultInjectMaxTokens
	}
	return m.Inject.MaxTokens
}

func (m MemoryConfig) validate() error {
	switch m.Scope {
	case "", memory.ScopePrincipal, memory.ScopeShared:
	default:
		return badKey(fmt.Sprintf("%q is not a scope: use principal (each person's own, the default) or shared (team facts)", m.Scope), "memory", "scope")
	}
	if m.Inject.Count < 0 || m.Inject.Count > maxInjectCount {
		return badKey(fmt.Sprintf("%d is out of range 0..%d (0: nothing injected)", m.Inject.Count, maxInjectCount), "memory", "inject", "count")
	}
	if m.Inject.MaxTokens < 0 || m.Inject.MaxTokens > maxInjectTokens {
		return badKey(fmt.Sprintf("%d is out of range 1..%d (unset: %d)", m.Inject.MaxTokens, maxInjectTokens, DefaultInjectMaxTokens), "memory", "inject", "maxTokens")
	}
	if !m.Enabled && m.Inject.Count > 0 {
		return badKey("memory injection needs memory.enabled: true", "memory", "inject", "count")
	}
	return nil
}
