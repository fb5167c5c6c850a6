package agenttest

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// Report is what a function run by Try did to its test.
type Report struct {
	Failed  bool
	Skipped bool
	// Log holds the messages of Error, Fatal, Skip and Log calls, in order.
	Log []string
}

// String joins the log.
func (r Report) String() string { return strings.Join(r.Log, "\n") }

// Try runs fn against a recorder instead of t: failures and skips are
// recorded in the returned Report rather than failing t, and Fatal or Skip
// end fn as they would end a test. Everything else (Cleanup, TempDir, Name…)
// is t's. Tests of the suite itself use it to show a case fails against a
// deliberately broken Agent.
func Try(t testing.TB, fn func(tb testing.TB)) Report {
	t.Helper()
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(r)
	}()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	return Report{Failed: r.failed, Skipped: r.skipped, Log: append([]string(nil), r.log...)}
}

// recorder is a testing.TB that records instead of reporting.
type recorder struct {
	testing.TB
	mu      sync.Mutex
	failed  bool
	skipped bool
	log     []string
}

func (r *recorder) add(msg string, fail, skip bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, msg)
	r.failed = r.failed || fail
	r.skipped = r.skipped || skip
}

func (r *recorder) Helper() {}
func (r *recorder) Fail()   { r.add("Fail", true, false) }
func (r *recorder) FailNow() {
	r.add("FailNow", true, false)
	runtime.Goexit()
}
func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}
func (r *recorder) Log(args ...any) { r.add(fmt.Sprint(args...), false, false) }
func (r *recorder) Logf(format string, args ...any) {
	r.add(fmt.Sprintf(format, args...), false, false)
}
func (r *recorder) Error(args ...any) { r.add(fmt.Sprint(args...), true, false) }
func (r *recorder) Errorf(format string, args ...any) {
	r.add(fmt.Sprintf(format, args...), true, false)
}
func (r *recorder) Fatal(args ...any) {
	r.add(fmt.Sprint(args...), true, false)
	runtime.Goexit()
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.add(fmt.Sprintf(format, args...), true, false)
	runtime.Goexit()
}
func (r *recorder) Skip(args ...any) {
	r.add(fmt.Sprint(args...), false, true)
	runtime.Goexit()
}
func (r *recorder) Skipf(format string, args ...any) {
	r.add(fmt.Sprintf(format, args...), false, true)
	runtime.Goexit()
}
func (r *recorder) SkipNow() {
	r.add("SkipNow", false, true)
	runtime.Goexit()
}
func (r *recorder) Skipped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.skipped
}
