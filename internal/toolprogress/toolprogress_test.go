package toolprogress

import (
	"encoding/json"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fastagent/fastagent/agent"
)

// fakeClock drives a Throttle without waiting: timers fire when the test
// advances the clock past them.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at      time.Time
	f       func()
	stopped bool
}

func (c *fakeClock) afterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	tm := &fakeTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, tm)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !tm.stopped
		tm.stopped = true
		return was
	}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// advance moves the clock by d and fires the timers now due.
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	keep := c.timers[:0]
	for _, tm := range c.timers {
		if !tm.stopped && !tm.at.After(c.now) {
			tm.stopped = true
			due = append(due, tm)
		} else if !tm.stopped {
			keep = append(keep, tm)
		}
	}
	c.timers = keep
	c.mu.Unlock()
	for _, tm := range due {
		tm.f()
	}
}

func newTest(every time.Duration) (*Throttle, *fakeClock, *[]string) {
	c := &fakeClock{now: time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)}
	var sent []string
	th := New(every, func(p agent.Progress) { sent = append(sent, p.Message) })
	th.now, th.afterFunc = c.Now, c.afterFunc
	return th, c, &sent
}

func msg(s string) agent.Progress { return agent.Progress{Message: s} }

func TestThrottle(t *testing.T) {
	t.Parallel()
	th, clock, sent := newTest(time.Second)

	th.Report(msg("step 1")) // the first report goes at once
	th.Report(msg("step 2"))
	th.Report(msg("step 3")) // latest wins
	if !slices.Equal(*sent, []string{"step 1"}) {
		t.Fatalf("within the first interval sent %q, want only step 1", *sent)
	}
	clock.advance(999 * time.Millisecond)
	if len(*sent) != 1 {
		t.Fatalf("before the interval passed sent %q", *sent)
	}
	clock.advance(time.Millisecond)
	if !slices.Equal(*sent, []string{"step 1", "step 3"}) {
		t.Fatalf("after the interval sent %q, want step 1, step 3", *sent)
	}

	// Nothing changed: nothing sent, however often it is reported.
	for range 10 {
		th.Report(msg("step 3"))
		clock.advance(2 * time.Second)
	}
	if len(*sent) != 2 {
		t.Fatalf("an unchanged report was sent again: %q", *sent)
	}

	// A change reported after a quiet spell goes at once.
	th.Report(msg("step 4"))
	if (*sent)[len(*sent)-1] != "step 4" {
		t.Fatalf("after a quiet spell sent %q", *sent)
	}

	// A change taken back before its turn sends nothing.
	th.Report(msg("step 5"))
	th.Report(msg("step 4"))
	clock.advance(time.Second)
	if (*sent)[len(*sent)-1] != "step 4" || len(*sent) != 3 {
		t.Fatalf("a report taken back was sent: %q", *sent)
	}

	// Numbers count as a change too.
	th.Report(agent.Progress{Message: "step 4", Progress: 1, Total: 2})
	clock.advance(time.Second)
	if len(*sent) != 4 {
		t.Fatalf("a progress count change was not sent: %q", *sent)
	}

	// After Close a waiting report is dropped and nothing more is sent.
	th.Report(msg("step 6"))
	th.Report(msg("step 7"))
	th.Close()
	clock.advance(5 * time.Second)
	th.Report(msg("step 8"))
	if got := (*sent)[len(*sent)-1]; got == "step 7" || got == "step 8" {
		t.Fatalf("sent %q after Close: %q", got, *sent)
	}
}

// TestThrottleRate reports a new line every 10 ms for 10 s of (fake) time:
// at most one send per second, each the latest line at its time.
func TestThrottleRate(t *testing.T) {
	t.Parallel()
	th, clock, sent := newTest(time.Second)
	for i := range 1000 {
		th.Report(agent.Progress{Message: "line", Progress: float64(i)})
		clock.advance(10 * time.Millisecond)
	}
	if n := len(*sent); n < 9 || n > 11 {
		t.Fatalf("1000 reports over 10 s sent %d times, want about 10", n)
	}
	if p, ok := th.Last(); !ok || p.Progress < 990 {
		t.Fatalf("last sent %+v, want a recent report", p)
	}
}

// TestThrottleCounts: counts that cannot be encoded (NaN, ±Inf) or make no
// sense (negative) reach consumers as unknown, never as themselves.
func TestThrottleCounts(t *testing.T) {
	t.Parallel()
	c := &fakeClock{now: time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)}
	var got []agent.Progress
	th := New(time.Second, func(p agent.Progress) { got = append(got, p) })
	th.now, th.afterFunc = c.Now, c.afterFunc
	nan, inf := math.NaN(), math.Inf(1)
	th.Report(agent.Progress{Message: "a", Progress: nan, Total: inf})
	c.advance(time.Second)
	th.Report(agent.Progress{Message: "b", Progress: -1, Total: -inf})
	c.advance(time.Second)
	th.Report(agent.Progress{Message: "c", Progress: 2, Total: 5})
	want := []agent.Progress{{Message: "a"}, {Message: "b"}, {Message: "c", Progress: 2, Total: 5}}
	if !slices.Equal(got, want) {
		t.Fatalf("sent %+v, want %+v", got, want)
	}
	for _, p := range got {
		if _, err := json.Marshal(p); err != nil {
			t.Errorf("report %+v does not encode: %v", p, err)
		}
	}
}

func TestClean(t *testing.T) {
	t.Parallel()
	long := ""
	for range 300 {
		long += "x"
	}
	long += "END"
	cases := map[string]string{
		"  step 1\t of  3 ":         "step 1 of 3",
		"\x1b[32mgreen\x1b[0m done": "green done",
		"a\x00b":                    "a b",
		"safe\u202egnp.exe":         "safegnp.exe",
		long:                        "…" + long[len(long)-MaxMessage+1:],
		"":                          "",
	}
	for in, want := range cases {
		if got := Clean(in); got != want {
			t.Errorf("Clean(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLastLine(t *testing.T) {
	t.Parallel()
	cases := []struct{ out, want string }{
		{"", ""},
		{"step 1\n", "step 1"},
		{"step 1\nstep 2\n", "step 2"},
		{"step 1\nstep 2", "step 2"},       // an unfinished line counts
		{"step 1\n\n  \n", "step 1"},       // blank lines do not
		{"10%\r50%\r", "50%"},              // a carriage return starts the line over
		{"done\n 10%\r 20%\r   \r", "20%"}, // a line cleared by spaces keeps what it showed
		{"\x1b[1mbuilding\x1b[0m\n", "building"},
		{"\n\n", ""},
	}
	for _, c := range cases {
		if got := LastLine([]byte(c.out)); got != c.want {
			t.Errorf("LastLine(%q) = %q, want %q", c.out, got, c.want)
		}
	}
}
