package chaosreport

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// A chaos run whose table shows a duplicate, a loss or a scenario that
// could not run ends with an error (make chaos exits non-zero); a clean
// table does not.
func TestFailureOnDuplicateOrLoss(t *testing.T) {
	clean := []Row{{Scenario: "kill", Trials: 10, OneTerminal: 10, AsSpecified: 10}}
	if err := Failure(clean); err != nil {
		t.Errorf("clean run: %v", err)
	}
	for name, rows := range map[string][]Row{
		"duplicate": {clean[0], {Scenario: "load", Trials: 250, OneTerminal: 250, AsSpecified: 246, Duplicates: 4}},
		"loss":      {{Scenario: "dev", Trials: 1, Lost: 1}},
		"error":     {{Scenario: "faults", Notes: "error: boom"}},
	} {
		err := Failure(rows)
		if err == nil || !strings.Contains(err.Error(), rows[len(rows)-1].Scenario) {
			t.Errorf("%s: err = %v, want one naming %s", name, err, rows[len(rows)-1].Scenario)
		}
	}
}

// A tally counts each outcome, the side effect only over the trials that
// had one, keeps three notes after the extra ones, and reports the turn
// times rounded.
func TestTally(t *testing.T) {
	tl := Tally{Row: Row{Scenario: "kill mid-tool"}}
	trials := []Trial{
		{OneTerminal: true, AsSpecified: true, SideChecked: true, SideOK: true, Took: 1234 * time.Millisecond, Note: "a"},
		{OneTerminal: true, Duplicates: 1, SideChecked: true, Took: 2 * time.Second, Note: "b"},
		{Lost: 1, Note: "c"},
		{OneTerminal: true, AsSpecified: true, Note: "d"},
	}
	for _, tr := range trials {
		tl.Add(tr)
	}
	r := tl.Done("worker restarted")
	want := Row{Scenario: "kill mid-tool", Trials: 4, OneTerminal: 3, AsSpecified: 2, Duplicates: 1, Lost: 1, SideEffect: "1/2",
		Notes: "worker restarted; turn under test took 1.23s median, 2s max; a; b; c"}
	if r != want {
		t.Errorf("row\n got %+v\nwant %+v", r, want)
	}
	if empty := (&Tally{Row: Row{Scenario: "none"}}).Done(); empty.SideEffect != "" || empty.Notes != "" || empty.Trials != 0 {
		t.Errorf("empty tally: %+v", empty)
	}
}

func TestRoundDur(t *testing.T) {
	for _, tc := range []struct{ in, want time.Duration }{
		{1234 * time.Millisecond, 1230 * time.Millisecond},
		{9994 * time.Millisecond, 9990 * time.Millisecond},
		{12345 * time.Millisecond, 12300 * time.Millisecond},
	} {
		if got := roundDur(tc.in); got != tc.want {
			t.Errorf("roundDur(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// The table shows fractions of the trials, and only the notes of a
// scenario that could not run.
func TestFprint(t *testing.T) {
	var b bytes.Buffer
	Fprint(&b, Report{Title: "fastagent chaos", Started: time.Date(2026, 12, 2, 11, 0, 0, 0, time.UTC), Flags: "-only load",
		Rows: []Row{
			{Scenario: "load", Trials: 120, OneTerminal: 119, AsSpecified: 118, Lost: 1, SideEffect: "3/3", Notes: "killed at 36"},
			{Scenario: "dev", Notes: "error: no binary"},
		}})
	out := b.String()
	for _, want := range []string{"fastagent chaos — 2026-12-02 11:00 UTC", "flags: -only load", "119/120", "118/120", "3/3", "killed at 36", "error: no binary"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "dev") && strings.Contains(line, "/") {
			t.Errorf("a scenario that could not run shows counts: %q", line)
		}
	}
}
