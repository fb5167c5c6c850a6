// Package chaosreport is the fault suite's table (`fastagent-lab chaos`):
// the outcomes of trials tallied into rows, the rows printed, and the
// verdict — a run that found a duplicate, a loss, or a scenario that could
// not run fails. It is pure: the scenarios that produce trials live in
// cmd/fastagent-lab.
package chaosreport

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fastagent/fastagent/internal/testsupport/lab"
)

// Row is one line of the fault table.
type Row struct {
	Scenario    string `json:"scenario"`
	Trials      int    `json:"trials"`
	OneTerminal int    `json:"exactlyOneTerminal"`
	AsSpecified int    `json:"asSpecified"`
	Duplicates  int    `json:"duplicates"`
	Lost        int    `json:"lost"`
	SideEffect  string `json:"sideEffectAtMostOnce,omitempty"`
	Notes       string `json:"notes,omitempty"`
}

// Report is one run: where and how it ran, and its rows.
type Report struct {
	Title   string      `json:"title"`
	Started time.Time   `json:"started"`
	Machine lab.Machine `json:"machine"`
	Flags   string      `json:"flags"`
	Rows    []Row       `json:"rows"`
}

// Failure is the run's verdict: an error (a non-zero exit) when any
// scenario found a duplicate or a loss, or could not run.
func Failure(rows []Row) error {
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

// Fprint writes the report as a table; a row without trials (a scenario
// that could not run) shows only its notes.
func Fprint(w io.Writer, r Report) {
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

// Trial is what one trial found.
type Trial struct {
	OneTerminal bool
	AsSpecified bool
	Duplicates  int
	Lost        int
	// SideChecked says the trial had a side effect to check; SideOK that
	// it ran at most once.
	SideChecked bool
	SideOK      bool
	Note        string
	// Took is how long the turn under test took (0: not measured).
	Took time.Duration
}

// Tally accumulates trial outcomes into a row; set Row.Scenario first.
type Tally struct {
	Row   Row
	side  int // trials whose side effect ran at most once
	sideN int // trials with a side effect to check
	notes []string
	took  lab.Sample
}

// Add counts one trial; the first three trials' notes are kept.
func (t *Tally) Add(r Trial) {
	t.Row.Trials++
	if r.OneTerminal {
		t.Row.OneTerminal++
	}
	if r.AsSpecified {
		t.Row.AsSpecified++
	}
	t.Row.Duplicates += r.Duplicates
	t.Row.Lost += r.Lost
	if r.SideChecked {
		t.sideN++
		if r.SideOK {
			t.side++
		}
	}
	if r.Took > 0 {
		t.took = append(t.took, r.Took)
	}
	if r.Note != "" && len(t.notes) < 3 {
		t.notes = append(t.notes, r.Note)
	}
}

// Done returns the row: the side-effect fraction, the turn times and the
// notes (extra first) on one line.
func (t *Tally) Done(extra ...string) Row {
	r := t.Row
	if t.sideN > 0 {
		r.SideEffect = frac(t.side, t.sideN)
	}
	if len(t.took) > 0 {
		extra = append(extra, fmt.Sprintf("turn under test took %s median, %s max",
			roundDur(t.took.P50()), roundDur(t.took.Percentile(100))))
	}
	notes := append(extra, t.notes...)
	r.Notes = lab.OneLine(strings.Join(notes, "; "), 400)
	return r
}

// roundDur rounds d for a note: to 10 ms under 10 s, to 100 ms above.
func roundDur(d time.Duration) time.Duration {
	if d < 10*time.Second {
		return d.Round(10 * time.Millisecond)
	}
	return d.Round(100 * time.Millisecond)
}
