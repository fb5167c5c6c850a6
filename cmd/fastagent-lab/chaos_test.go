package main

import (
	"strings"
	"testing"
)

// TestChaosFailsOnDuplicateOrLoss: a chaos run whose table shows a duplicate,
// a loss or a scenario that could not run ends with an error (make chaos
// exits non-zero); a clean table does not.
func TestChaosFailsOnDuplicateOrLoss(t *testing.T) {
	clean := []chaosRow{{Scenario: "kill", Trials: 10, OneTerminal: 10, AsSpecified: 10}}
	if err := chaosFailure(clean); err != nil {
		t.Errorf("clean run: %v", err)
	}
	for name, rows := range map[string][]chaosRow{
		"duplicate": {clean[0], {Scenario: "load", Trials: 250, OneTerminal: 250, AsSpecified: 246, Duplicates: 4}},
		"loss":      {{Scenario: "dev", Trials: 1, Lost: 1}},
		"error":     {{Scenario: "faults", Notes: "error: boom"}},
	} {
		err := chaosFailure(rows)
		if err == nil || !strings.Contains(err.Error(), rows[len(rows)-1].Scenario) {
			t.Errorf("%s: err = %v, want one naming %s", name, err, rows[len(rows)-1].Scenario)
		}
	}
}
