// Package sandboxtest gives the tests of one binary shared tool sandboxes:
// one with the mechanism a worker would pick, one unconfined for controls
// (the run that shows an attack does work without the sandbox).
package sandboxtest

import (
	"os"
	"sync"
	"testing"

	"github.com/fastagent/fastagent/internal/sandbox"
)

var (
	once           sync.Once
	box, unconfine *sandbox.Sandbox
)

func open() {
	once.Do(func() {
		box = sandbox.Open(sandbox.Config{})
		unconfine = sandbox.Open(sandbox.Config{Mode: sandbox.Off})
	})
}

// Box is the sandbox a worker on this machine gets (namespaces, else
// Landlock); its Status may say that none works.
func Box() *sandbox.Sandbox {
	open()
	return box
}

// Unconfined is a sandbox with tools.sandbox: off.
func Unconfined() *sandbox.Sandbox {
	open()
	return unconfine
}

// Required reports whether a missing mechanism fails a test rather than
// skipping it: in CI (CI=true) and with FASTAGENT_REQUIRE_SERVICES=1.
func Required() bool {
	return os.Getenv("CI") == "true" || os.Getenv("FASTAGENT_REQUIRE_SERVICES") == "1"
}

// Require returns Box, skipping the test where no mechanism works here (or
// failing it where Required says so).
func Require(tb testing.TB) *sandbox.Sandbox {
	tb.Helper()
	b := Box()
	if st := b.Status(); st.Mode == "" {
		if Required() {
			tb.Fatalf("no tool sandbox on this machine: %s", st.Error)
		}
		tb.Skipf("no tool sandbox here: %s", st.Error)
	}
	return b
}
