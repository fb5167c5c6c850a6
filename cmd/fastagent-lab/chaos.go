package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/internal/testsupport/lab"
	"github.com/fastagent/fastagent/internal/testsupport/lab/chaosreport"
)

// chaosFlags are the sizes of the fault suite; the defaults are the issue's.
type chaosFlags struct {
	trials     int
	devTrials  int
	concurrent int
	turns      int
	killAt     float64
	skipWarmup bool
	only       string
	json       bool
	nats       string
}

var chaosSections = []string{"kill", "dev", "faults", "load", "webhook", "delegation"}

type chaos struct {
	f    chaosFlags
	prog *lab.Progress
	srv  *lab.Server
	c    client.Client
	bins lab.Binaries
	run  string
	rows []chaosreport.Row
}

func runChaos(args []string) error {
	var f chaosFlags
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.IntVar(&f.trials, "trials", 10, "trials per worker-kill point and per model fault")
	fs.IntVar(&f.devTrials, "dev-trials", 3, "trials of killing the whole `fastagent dev` process")
	fs.IntVar(&f.concurrent, "concurrent", 200, "concurrent sessions while a worker is killed")
	fs.IntVar(&f.turns, "turns", 5, "turns per session in the concurrent scenario")
	fs.Float64Var(&f.killAt, "kill-at", 0.3, "fraction of the concurrent scenario's turns done when the worker is killed")
	fs.BoolVar(&f.skipWarmup, "skip-warmup", false, "kill trials without the warm-up turn (the killed call is then the session's first, with the default 20s heartbeat)")
	fs.StringVar(&f.only, "only", "", "comma-separated sections to run: "+strings.Join(chaosSections, ","))
	fs.BoolVar(&f.json, "json", false, "print JSON instead of the table")
	fs.StringVar(&f.nats, "nats", envOr("FASTAGENT_LAB_NATS", "nats://127.0.0.1:4222"), "NATS URL (worker processes and this program share the live feed through it)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	selected, err := selectSections(f.only, chaosSections)
	if err != nil {
		return err
	}
	ch := &chaos{f: f, run: fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffff)}
	ch.prog = &lab.Progress{W: os.Stderr, Total: len(selected)}
	report := chaosreport.Report{Title: "fastagent chaos", Started: time.Now().UTC(), Machine: lab.MachineFacts(), Flags: strings.Join(args, " ")}
	defer ch.bins.Close()
	if ch.srv, err = lab.StartServer(lab.ServerOptions{}); err != nil {
		return err
	}
	defer ch.srv.Close()
	if ch.c, err = ch.srv.Dial(context.Background()); err != nil {
		return err
	}
	defer ch.c.Close()

	for i, name := range selected {
		var err error
		switch name {
		case "kill":
			ch.prog.Step(i+1, "worker process SIGKILL")
			err = ch.workerKills()
		case "dev":
			ch.prog.Step(i+1, "fastagent dev SIGKILL")
			err = ch.devKill()
		case "faults":
			ch.prog.Step(i+1, "model faults and a panicking tool")
			err = ch.faults()
		case "load":
			ch.prog.Step(i+1, "concurrent sessions while a worker dies")
			err = ch.loadWithKill()
		case "webhook":
			ch.prog.Step(i+1, "a webhook event redelivered while its session is busy")
			err = ch.webhookRedelivery()
		case "delegation":
			ch.prog.Step(i+1, "worker process SIGKILL while a sub-agent runs")
			err = ch.delegationKills()
		}
		if err != nil {
			ch.prog.Logf("error: %v", err)
			ch.rows = append(ch.rows, chaosreport.Row{Scenario: name, Notes: "error: " + lab.OneLine(err.Error(), 200)})
		}
	}
	report.Rows = ch.rows
	if f.json {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(report); err != nil {
			return err
		}
		return chaosreport.Failure(report.Rows)
	}
	chaosreport.Fprint(os.Stdout, report)
	return chaosreport.Failure(report.Rows)
}
