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

	"github.com/fastagent/fastagent/internal/sandbox"
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
			fmt.Fprintln(os.Stderr, "fastagent:", msg)
		}
		os.Exit(ex.code)
	}
	fmt.Fprintln(os.Stderr, "fastagent:", err)
	os.Exit(exitUsageOr(err))
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
