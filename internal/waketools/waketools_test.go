package waketools_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/waketools"
	"github.com/fastagent/fastagent/workflows/wakes"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func run(t *testing.T, tool agent.Tool, pending []string, args string) agent.ToolResult {
	t.Helper()
	ctx := waketools.WithPending(context.Background(), waketools.Pending{IDs: pending, NextID: "w7"})
	res, err := tool.Run(ctx, agent.ToolCall{Args: json.RawMessage(args)})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestWakeBounds(t *testing.T) {
	t.Parallel()
	tools := waketools.Tools(waketools.Options{Now: func() time.Time { return t0 }})
	wake, unwake := tools[0], tools[1]
	many := make([]string, 20)
	for i := range many {
		many[i] = "w" + string(rune('a'+i))
	}
	cases := []struct {
		name, args string
		pending    []string
		wantErr    string
		fireAt     time.Time
		recurring  bool
	}{
		{"in 61s", `{"in":"61s","prompt":"check"}`, nil, "", t0.Add(61 * time.Second), false},
		{"in seconds number", `{"in":120,"prompt":"check"}`, nil, "", t0.Add(2 * time.Minute), false},
		{"in 59s too soon", `{"in":"59s","prompt":"x"}`, nil, "at least 1m0s ahead", time.Time{}, false},
		{"no prompt", `{"in":"2m"}`, nil, "prompt is required", time.Time{}, false},
		{"both in and cron", `{"in":"2m","cron":"0 * * * *","prompt":"x"}`, nil, "exactly one", time.Time{}, false},
		{"bad duration", `{"in":"soon","prompt":"x"}`, nil, "not a duration", time.Time{}, false},
		{"hourly cron", `{"cron":"0 * * * *","tz":"Europe/Berlin","prompt":"x"}`, nil, "", time.Date(2026, 3, 1, 13, 0, 0, 0, time.UTC), true},
		{"every 5 min too often", `{"cron":"*/5 * * * *","prompt":"x"}`, nil, "at least 10m0s between", time.Time{}, true},
		{"bad cron", `{"cron":"61 * * *","prompt":"x"}`, nil, "bad cron", time.Time{}, true},
		{"bad tz", `{"cron":"0 * * * *","tz":"Mars/Base","prompt":"x"}`, nil, "unknown time zone", time.Time{}, true},
		{"21st pending", `{"in":"2m","prompt":"x"}`, many, "20 pending wake-ups", time.Time{}, false},
	}
	for _, c := range cases {
		res := run(t, wake, c.pending, c.args)
		if c.wantErr != "" {
			if !res.IsError || !strings.Contains(res.Content, c.wantErr) {
				t.Errorf("%s: want error containing %q, got %+v", c.name, c.wantErr, res)
			}
			continue
		}
		d, ok := wakes.ParseDirective(res.Details)
		if res.IsError || !ok || d.Wake == nil {
			t.Fatalf("%s: want a wake directive, got %+v", c.name, res)
		}
		if !d.Wake.FireAt.Equal(c.fireAt) || d.Wake.Recurring() != c.recurring || d.Wake.ID != "w7" {
			t.Errorf("%s: got %+v, want fireAt %s recurring %v", c.name, d.Wake, c.fireAt, c.recurring)
		}
	}

	if res := run(t, unwake, []string{"w1"}, `{"id":"w1"}`); res.IsError {
		t.Errorf("unwake w1: %+v", res)
	} else if d, _ := wakes.ParseDirective(res.Details); d.Unwake != "w1" {
		t.Errorf("unwake directive: %+v", d)
	}
	if res := run(t, unwake, []string{"w1"}, `{"id":"w9"}`); !res.IsError || !strings.Contains(res.Content, "no pending wake-up") {
		t.Errorf("unwake unknown: %+v", res)
	}
	// Outside a durable session the tools refuse clearly.
	res, _ := wake.Run(context.Background(), agent.ToolCall{Args: json.RawMessage(`{"in":"2m","prompt":"x"}`)})
	if !res.IsError {
		t.Errorf("wake without session context should fail: %+v", res)
	}
}

// A recurring wake-up keeps its wall-clock time in its own zone across a
// daylight-saving change: 09:00 New York is 14:00 UTC before 8 March 2026 and
// 13:00 UTC after.
func TestNextAcrossDST(t *testing.T) {
	t.Parallel()
	before := time.Date(2026, 3, 7, 15, 0, 0, 0, time.UTC) // Sat 10:00 EST
	n1, err := wakes.Next("0 9 * * *", "America/New_York", before)
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 3, 8, 13, 0, 0, 0, time.UTC); !n1.Equal(want) { // Sun 09:00 EDT
		t.Errorf("first instant after the change = %s, want %s", n1, want)
	}
	n0, _ := wakes.Next("0 9 * * *", "America/New_York", time.Date(2026, 3, 6, 15, 0, 0, 0, time.UTC))
	if want := time.Date(2026, 3, 7, 14, 0, 0, 0, time.UTC); !n0.Equal(want) { // Sat 09:00 EST
		t.Errorf("instant before the change = %s, want %s", n0, want)
	}
	if gap := n1.Sub(n0); gap != 23*time.Hour {
		t.Errorf("the day of the change is %s long in UTC, want 23h", gap)
	}
	// A time that does not exist that night (02:30) is skipped, not doubled.
	n, _ := wakes.Next("30 2 * * *", "America/New_York", time.Date(2026, 3, 8, 5, 0, 0, 0, time.UTC))
	if n.Before(time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC)) {
		t.Errorf("02:30 on the DST night: got %s", n)
	}
}

func TestEnvelope(t *testing.T) {
	t.Parallel()
	got := wakes.Envelope("w3", "check the build")
	if !strings.HasPrefix(got, "[wake-up w3 fired — YOUR self-scheduled turn, not a user message]") || !strings.HasSuffix(got, "check the build") {
		t.Errorf("envelope = %q", got)
	}
}
