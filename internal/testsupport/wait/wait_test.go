package wait

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// fatalTB records a Fatalf and ends the calling goroutine, as testing does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls For as a test would and returns what it failed with ("" if it
// returned).
func run(limit time.Duration, what string, cond func() bool) string {
	tb := &fatalTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		For(tb, limit, what, cond)
	}()
	<-done
	return tb.msg
}

func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	t.Parallel()
	var checks atomic.Int32
	start := time.Now()
	if msg := run(10*time.Second, "the third check", func() bool { return checks.Add(1) == 3 }); msg != "" {
		t.Fatalf("For failed: %s", msg)
	}
	if n := checks.Load(); n != 3 {
		t.Errorf("the condition was checked %d times, want 3 (it held on the third)", n)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("For returned %s after the condition held", d)
	}
}

func TestForFailsWhenTheConditionNeverHolds(t *testing.T) {
	t.Parallel()
	var checks atomic.Int32
	start := time.Now()
	msg := run(200*time.Millisecond, "the impossible", func() bool { checks.Add(1); return false })
	if want := "waited 200ms for the impossible"; msg != want {
		t.Errorf("For failed with %q, want %q", msg, want)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("For gave up after %s, before its limit", d)
	}
	// Checked at once, every 5 ms and at the limit: not once, not busily.
	if n := checks.Load(); n < 3 || n > 50 {
		t.Errorf("the condition was checked %d times in 200ms", n)
	}
}

func TestUntilChecksOnTheCallersGoroutine(t *testing.T) {
	t.Parallel()
	if !Until(time.Second, func() bool { return true }) {
		t.Fatal("Until = false for a condition that holds")
	}
	// A condition may stop the test: t.FailNow from it ends this goroutine.
	if msg := run(time.Second, "x", func() bool { runtime.Goexit(); return false }); msg != "" {
		t.Errorf("a condition ending the goroutine made For fail with %q", msg)
	}
	if Until(20*time.Millisecond, func() bool { return false }) {
		t.Error("Until = true for a condition that never holds")
	}
}

func TestInterval(t *testing.T) {
	t.Parallel()
	for limit, want := range map[time.Duration]time.Duration{
		100 * time.Millisecond: 5 * time.Millisecond,
		time.Second:            10 * time.Millisecond,
		time.Minute:            50 * time.Millisecond,
	} {
		if got := interval(limit); got != want {
			t.Errorf("interval(%s) = %s, want %s", limit, got, want)
		}
	}
}
