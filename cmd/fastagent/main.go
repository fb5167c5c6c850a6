// Command fastagent serves file-defined agents durably on Temporal.
//
//	fastagent dev                 embedded Temporal + Web UI + worker + HTTP ingress
//	fastagent invoke "hi" -s s1   run one turn against a running server
//	fastagent start|worker|ingress  production processes against a Temporal cluster
package main

import (
	"errors"
	"fmt"
	"os"
)

func main() {
	err := newRoot().Execute()
	if err == nil {
		return
	}
	var ex *exitError
	if errors.As(err, &ex) {
		if ex.msg != "" {
			fmt.Fprintln(os.Stderr, "fastagent:", ex.msg)
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

// exitError carries an exit code out of a command.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func usageError(format string, args ...any) error {
	return &exitError{code: exitUsage, msg: fmt.Sprintf(format, args...)}
}

func failure(format string, args ...any) error {
	return &exitError{code: exitFailure, msg: fmt.Sprintf(format, args...)}
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
