// Package wait is how tests wait for something to happen: a condition
// checked until it holds, bounded by a time limit, so that a test neither
// sleeps a guessed time (slow when it is generous, flaky when the machine is
// loaded) nor hangs when the awaited thing never happens.
//
// The condition runs on the caller's goroutine, between ticks: it may call
// t.Fatal, it does not race with the code that reads what it saw, and it
// adds no goroutine (a leak check can use it). testify's Eventually checks
// its condition on a goroutine of its own, which rules all three out.
//
// A test that must let time pass on purpose (a timer that must not fire, a
// throttle, "nothing else arrives within X") still sleeps, saying why.
package wait

import (
	"testing"
	"time"
)

// For fails t with "waited <limit> for <what>" unless cond holds within
// limit. cond is checked at once, then every tick (a hundredth of limit,
// between 5 and 50 ms), and once more at the limit.
func For(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Until(limit, cond) {
		t.Fatalf("waited %s for %s", limit, what)
	}
}

// Until reports whether cond held within limit, checking it as For does; a
// test that reports the timeout itself (with what it saw last, or after
// cleaning up) uses it.
func Until(limit time.Duration, cond func() bool) bool {
	if cond() {
		return true
	}
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(interval(limit))
	defer tick.Stop()
	for {
		select {
		case <-deadline.C:
			return cond()
		case <-tick.C:
			if cond() {
				return true
			}
		}
	}
}

// interval is how often a condition bounded by limit is checked.
func interval(limit time.Duration) time.Duration {
	return min(max(limit/100, 5*time.Millisecond), 50*time.Millisecond)
}
