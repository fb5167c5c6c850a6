// Command fastagent serves file-defined agents durably on Temporal.
//
//	fastagent dev                 embedded Temporal + Web UI + worker + HTTP ingress
//	fastagent invoke "hi" -s s1   run one turn against a running server
//	fastagent start|worker|ingress  production processes against a Temporal cluster
package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"go.temporal.io/api/serviceerror"

	"github.com/fastagent/fastagent/internal/sandbox"
	"github.com/fastagent/fastagent/internal/tclient"
)

func main() {
	// Non-dumpable from the start: tool processes cannot read this
	// process's /proc/<pid>/environ, mem or cmdline (see internal/sandbox).
	if err := sandbox.Harden(); err != nil {
		slog.Warn("fastagent: process stays dumpable", "err", err)
	}
	err := newRoot().Execute()
	if err == nil {
		return
	}
	var ex *exitError
	if errors.As(err, &ex) {
		if msg := ex.Error(); msg != "" {
			fmt.Fprintln(os.Stderr, "fastagent:", msg+unauthorizedHint(err))
		}
		os.Exit(ex.code)
	}
	fmt.Fprintln(os.Stderr, "fastagent:", err.Error()+unauthorizedHint(err))
	os.Exit(exitUsageOr(err))
}

// unauthorizedHint says where Temporal's credential comes from when a call
// was refused for the lack of one.
func unauthorizedHint(err error) string {
	var denied *serviceerror.PermissionDenied
	if !errors.As(err, &denied) {
		return ""
	}
	return " (Temporal wants a credential: set TEMPORAL_API_KEY, or, for `fastagent dev`, run in its directory or pass " +
		"--dir/--state-dir so the key in <state-dir>/" + tclient.DevTokenFile + " is sent)"
}

// Exit codes: 0 ok, 1 runtime failure, 2 usage error.
const (
	exitFailure = 1
	exitUsage   = 2
)

// exitError carries an exit code out of a command; err keeps the cause
// (wrapped with %w), so callers can still test it with errors.Is/As.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return ""
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func usageError(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

func failure(format string, args ...any) error {
	return &exitError{code: exitFailure, err: fmt.Errorf(format, args...)}
}

// exitUsageOr treats cobra's own errors (unknown flag, bad args) as usage
// errors and everything else as runtime failures.
func exitUsageOr(err error) int {
	var ex *exitError
	if errors.As(err, &ex) {
		return ex.code
	}
	if isCobraUsage(err) {
		return exitUsage
	}
	return exitFailure
}
