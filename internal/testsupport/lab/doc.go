// Package lab assembles fastagent for the benchmark and fault-suite program
// (cmd/fastagent-lab): a Temporal dev server (child process) on a temporary SQLite
// file, the scripted model server, a SQLite session store in a temporary
// workspace, in-process workers and durable agents, worker and `fastagent
// dev` subprocesses built once from this source tree, a client for the
// ingress's server-sent events, transcript checks, and the statistics and
// table helpers the program prints with.
//
// It is the program-side counterpart of internal/testsupport/testkit and the e2e test
// env: the same assembly without a testing.TB, every resource released by an
// explicit Close.
package lab
