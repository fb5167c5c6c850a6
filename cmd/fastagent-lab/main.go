// Command fastagent-lab measures and shakes fastagent, built from this
// source tree, on the Temporal dev server (the fastagent-devserver program,
// a child process):
//
//	fastagent-lab bench [flags]   latency, throughput, history and memory figures, side by side
//	fastagent-lab chaos [flags]   worker and server kills, model faults, tool panics under load
//	fastagent-lab load [flags]    the load curve: latency, throughput, CPU and memory per offered load
//	fastagent-lab server -info f  a Temporal server started by a process of its own (load -server process runs it)
//
// Results go to stdout as one table (or JSON with -json); progress goes to
// stderr. bench also writes the report as bench.json and a chart of the
// latency distributions as bench.svg into -out (default bench-out/). Nothing is asserted: the tables say what was measured next to the
// goal. `make bench` and `make chaos` run it with the default sizes; flags
// shrink them for a quick run. It needs the go toolchain (worker and dev
// subprocesses are built from the tree once per run) and, for the
// multi-process scenarios, NATS (default nats://127.0.0.1:4222).
//
// Environment:
//
//	FASTAGENT_LAB_NATS     NATS URL (default of -nats)
//	FASTAGENT_LAB_DEBUG=1  print diagnostics on stderr: the history of the
//	                       slowest throughput and cold-session turns, the
//	                       output of a restarted dev process
//	FASTAGENT_LAB_DEV_LOG  --log-level of the dev processes (default warn)
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/fastagent/fastagent/internal/testsupport/lab"
)

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	if os.Args[1] == "server" { // its own signal handling: it stops its server
		if err := runServer(os.Args[2:]); err != nil && !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "fastagent-lab server:", err)
			os.Exit(1)
		}
		return
	}
	// Subprocesses run in their own process groups: stop them on Ctrl-C.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "fastagent-lab: %v: stopping subprocesses\n", s)
		lab.KillAll()
		os.Exit(130)
	}()
	var err error
	switch os.Args[1] {
	case "bench":
		err = runBench(os.Args[2:])
	case "chaos":
		err = runChaos(os.Args[2:])
	case "load":
		err = runLoad(os.Args[2:])
	case "-h", "-help", "--help", "help":
		usage()
		return
	default:
		fmt.Fprintf(os.Stderr, "fastagent-lab: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fastagent-lab:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage:
  fastagent-lab bench [flags]   benchmark table (go run ./cmd/fastagent-lab bench -h for flags)
  fastagent-lab chaos [flags]   fault-suite table (go run ./cmd/fastagent-lab chaos -h for flags)
  fastagent-lab load [flags]    the load curve: open-loop Poisson turns at each offered rate (load -h for flags)
  fastagent-lab server -info f  a Temporal server in a process of its own, until SIGTERM (load -server process starts it)
`)
}

// runServer is `fastagent-lab server -info <file>`: the embedded Temporal
// server in a process of its own, serving until SIGTERM or SIGINT.
func runServer(args []string) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	info := fs.String("info", "", "file to write the server's address, API key and namespace to (JSON) once it serves")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *info == "" {
		return errors.New("server: -info <file> is required")
	}
	stop := make(chan struct{})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() { <-sig; close(stop) }()
	return lab.ServeProcess(*info, stop)
}
