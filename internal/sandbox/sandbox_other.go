//go:build !linux

package sandbox

import (
	"context"
	"errors"
	"os/exec"
)

var errUnsupported = errors.New("sandbox: only Linux has the namespaces the tool sandbox needs")

// Available reports why tool processes are not sandboxed: only Linux is
// supported.
func Available() error { return errUnsupported }

// Wrap leaves cmd as it is: there is no tool sandbox on this system.
func Wrap(context.Context, *exec.Cmd, Policy) error { return nil }

// Harden does nothing on this system.
func Harden() error { return nil }
