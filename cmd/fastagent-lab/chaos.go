package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/internal/testsupport/lab"
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

var chaosSections = []string{"kill", "dev", "faults", "load"}

// chaosRow is one line of the fault table.
type chaosRow struct {
	Scenario    string `json:"scenario"`
	Trials      int    `json:"trials"`
	OneTerminal int    `json:"exactlyOneTerminal"`
	AsSpecified int    `json:"asSpecified"`
	Duplicates  int    `json:"duplicates"`
	Lost        int    `json:"lost"`
	SideEffect  string `json:"sideEffectAtMostOnce,omitempty"`
	Notes       string `json:"notes,omitempty"`
}

type chaosReport struct {
	Title   string      `json:"title"`
	Started time.Time   `json:"started"`
	Machine lab.Machine `json:"machine"`
	Flags   string      `json:"flags"`
	Rows    []chaosRow  `json:"rows"`
}

type chaos struct {
	f    chaosFlags
	prog *lab.Progress
	srv  *lab.Server
	c    client.Client
	bins lab.Binaries
	run  string
	rows []chaosRow
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
	report := chaosReport{Title: "fastagent chaos", Started: time.Now().UTC(), Machine: lab.MachineFacts(), Flags: strings.Join(args, " ")}
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
		}
		if err != nil {
			ch.prog.Logf("error: %v", err)
			ch.rows = append(ch.rows, chaosRow{Scenario: name, Notes: "error: " + oneLine(err.Error(), 200)})
		}
	}
	report.Rows = ch.rows
	if f.json {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(report); err != nil {
			return err
		}
		return chaosFailure(report.Rows)
	}
	printChaos(os.Stdout, report)
	return chaosFailure(report.Rows)
}

// chaosFailure is the run's verdict: an error (a non-zero exit) when any
// scenario found a duplicate or a loss, or could not run.
func chaosFailure(rows []chaosRow) error {
	var bad []string
	for _, r := range rows {
		switch {
		case r.Duplicates > 0 || r.Lost > 0:
			bad = append(bad, fmt.Sprintf("%s: %d duplicated, %d lost", r.Scenario, r.Duplicates, r.Lost))
		case r.Trials == 0 && strings.HasPrefix(r.Notes, "error:"):
			bad = append(bad, r.Scenario+": "+r.Notes)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("chaos found what must never happen: %s", strings.Join(bad, "; "))
}

func printChaos(w io.Writer, r chaosReport) {
	fmt.Fprintf(w, "%s — %s\n", r.Title, r.Started.Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "machine: %s\n", r.Machine)
	if r.Flags != "" {
		fmt.Fprintf(w, "flags: %s\n", r.Flags)
	}
	fmt.Fprintln(w)
	t := lab.Table{Header: []string{"scenario", "trials", "exactly-one terminal", "as specified", "duplicates", "lost", "side effect ≤ 1", "notes"}}
	for _, x := range r.Rows {
		if x.Trials == 0 {
			t.Add(x.Scenario, "", "", "", "", "", "", x.Notes)
			continue
		}
		t.Add(x.Scenario, fmt.Sprint(x.Trials), frac(x.OneTerminal, x.Trials), frac(x.AsSpecified, x.Trials),
			fmt.Sprint(x.Duplicates), fmt.Sprint(x.Lost), x.SideEffect, x.Notes)
	}
	t.Fprint(w)
}

func frac(n, of int) string { return fmt.Sprintf("%d/%d", n, of) }

// tally accumulates trial outcomes into a row.
type tally struct {
	row   chaosRow
	side  int // trials whose side effect ran at most once
	sideN int // trials with a side effect to check
	notes []string
	// took are the durations of the turns under test.
	took lab.Sample
}

// trial is what one trial found.
type trial struct {
	oneTerminal bool
	asSpecified bool
	duplicates  int
	lost        int
	sideChecked bool
	sideOK      bool
	note        string
	took        time.Duration
}

func (t *tally) add(r trial) {
	t.row.Trials++
	if r.oneTerminal {
		t.row.OneTerminal++
	}
	if r.asSpecified {
		t.row.AsSpecified++
	}
	t.row.Duplicates += r.duplicates
	t.row.Lost += r.lost
	if r.sideChecked {
		t.sideN++
		if r.sideOK {
			t.side++
		}
	}
	if r.took > 0 {
		t.took = append(t.took, r.took)
	}
	if r.note != "" && len(t.notes) < 3 {
		t.notes = append(t.notes, r.note)
	}
}

func (t *tally) done(extra ...string) chaosRow {
	r := t.row
	if t.sideN > 0 {
		r.SideEffect = frac(t.side, t.sideN)
	}
	if len(t.took) > 0 {
		extra = append(extra, fmt.Sprintf("turn under test took %s median, %s max",
			roundDur(t.took.P50()), roundDur(t.took.Percentile(100))))
	}
	notes := append(extra, t.notes...)
	r.Notes = oneLine(strings.Join(notes, "; "), 400)
	return r
}

// roundDur rounds d for a note: to 10 ms under 10 s, to 100 ms above.
func roundDur(d time.Duration) time.Duration {
	if d < 10*time.Second {
		return d.Round(10 * time.Millisecond)
	}
	return d.Round(100 * time.Millisecond)
}
