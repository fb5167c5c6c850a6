package wakes_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/fastagent/fastagent/workflows/wakes"
)

// Next follows the wake-up's own time zone, across a DST change.
func TestNextInItsTimeZone(t *testing.T) {
	t.Parallel()
	// 09:00 in Berlin is 08:00 UTC in winter and 07:00 UTC in summer; DST
	// began on 2026-03-29.
	after := time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC)
	first, err := wakes.Next("0 9 * * *", "Europe/Berlin", after)
	if err != nil {
		t.Fatal(err)
	}
	second, _ := wakes.Next("0 9 * * *", "Europe/Berlin", first)
	if first != time.Date(2026, 3, 29, 7, 0, 0, 0, time.UTC) || second != time.Date(2026, 3, 30, 7, 0, 0, 0, time.UTC) {
		t.Fatalf("first %s, second %s", first, second)
	}
	if _, err := wakes.Next("0 9 * * *", "Mars/Olympus", after); err == nil {
		t.Fatal("an unknown time zone was accepted")
	}
	if _, err := wakes.Next("every day", "", after); err == nil {
		t.Fatal("a bad cron was accepted")
	}
}

func TestParseDirective(t *testing.T) {
	t.Parallel()
	b, _ := json.Marshal(wakes.Directive{Unwake: "w3"})
	if d, ok := wakes.ParseDirective(b); !ok || d.Unwake != "w3" {
		t.Fatalf("%+v %v", d, ok)
	}
	if _, ok := wakes.ParseDirective(json.RawMessage(`{"other":1}`)); ok {
		t.Fatal("details without a directive parsed as one")
	}
}
