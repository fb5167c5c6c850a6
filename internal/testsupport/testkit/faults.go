package testkit

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/fastagent/fastagent/internal/store"
	"github.com/fastagent/fastagent/transcript"
)

// ErrInjected is the error of a fault a test asked for.
var ErrInjected = errors.New("testkit: injected fault")

// FaultStore is a session store that fails chosen appends on purpose; with
// nothing armed it is the store it wraps.
type FaultStore struct {
	store.Store

	mu     sync.Mutex
	lose   map[string]string // session -> tool whose next result append fails
	branch map[string]int    // session -> branch reads left to fail
}

// LoseToolResult makes the next append of a tool result of tool in session
// fail, once, without storing anything: the tool has run (its side effect
// happened) but its result is lost, as when its worker dies right after the
// call.
func (f *FaultStore) LoseToolResult(session, tool string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lose == nil {
		f.lose = map[string]string{}
	}
	f.lose[session] = tool
}

// Append fails with ErrInjected if it would store an armed tool result.
func (f *FaultStore) Append(ctx context.Context, session string, entries ...transcript.Entry) error {
	if f.take(session, entries) {
		return fmt.Errorf("append to session %q: %w: the tool result was lost before it was stored", session, ErrInjected)
	}
	return f.Store.Append(ctx, session, entries...)
}

func (f *FaultStore) take(session string, entries []transcript.Entry) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	tool, ok := f.lose[session]
	if !ok {
		return false
	}
	for _, e := range entries {
		if m := e.Message; m != nil && m.Role == transcript.RoleToolResult && m.ToolName == tool {
			delete(f.lose, session)
			return true
		}
	}
	return false
}

// FailBranch makes the next n branch reads of session fail with
// ErrInjected, as a store that is briefly unreachable.
func (f *FaultStore) FailBranch(session string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.branch == nil {
		f.branch = map[string]int{}
	}
	f.branch[session] = n
}

// Branch fails with ErrInjected while FailBranch has reads of session left.
func (f *FaultStore) Branch(ctx context.Context, session, leaf string) ([]transcript.Entry, error) {
	f.mu.Lock()
	n := f.branch[session]
	if n > 0 {
		f.branch[session] = n - 1
	}
	f.mu.Unlock()
	if n > 0 {
		return nil, fmt.Errorf("read session %q: %w: the store is unreachable", session, ErrInjected)
	}
	return f.Store.Branch(ctx, session, leaf)
}
