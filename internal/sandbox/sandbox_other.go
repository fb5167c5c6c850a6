//go:build !linux

package sandbox

import (
	"context"
	"errors"
	"syscall"

	"github.com/fastagent/fastagent/internal/egress"
)

// Sandbox refuses every tool outside Linux unless the mode is Off, which
// this build does not support either: tools need Linux.
type Sandbox struct{ status Status }

// Open reports that no mechanism exists on this system.
func Open(cfg Config) *Sandbox {
	return &Sandbox{status: Status{Error: ErrUnavailable.Error() + " (only Linux has the namespaces and Landlock the tool sandbox needs); " + fixHint}}
}

// Status says why tools cannot run here.
func (s *Sandbox) Status() Status { return s.status }

// Hidden is empty: nothing runs.
func (s *Sandbox) Hidden() []string { return nil }

// ControlPlane is empty: nothing runs.
func (s *Sandbox) ControlPlane() []egress.Dest { return nil }

// Deny does nothing: nothing runs.
func (s *Sandbox) Deny([]egress.Dest) {}

// Close does nothing.
func (s *Sandbox) Close() error { return nil }

// Start refuses.
func (s *Sandbox) Start(context.Context, *Cmd) (*Process, error) {
	return nil, errors.New(s.status.Error)
}

// Process is never started on this system.
type Process struct{}

// Pid is 0.
func (p *Process) Pid() int { return 0 }

// Wait returns at once.
func (p *Process) Wait() error { return nil }

// Done is closed.
func (p *Process) Done() <-chan struct{} { c := make(chan struct{}); close(c); return c }

// Signal does nothing.
func (p *Process) Signal(syscall.Signal) error { return nil }

// Kill does nothing.
func (p *Process) Kill() {}

// Harden does nothing on this system.
func Harden() error { return nil }
