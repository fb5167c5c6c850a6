// Package toolprogress throttles what a running tool call reports about
// itself (agent.ReportProgress) before it goes on the turn's live feed: at
// most one report per interval, the latest one winning, and nothing when
// nothing changed. Progress is live only; it never enters workflow history.
package toolprogress

import (
	"math"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/fastagent/fastagent/agent"
)

// DefaultEvery is the least time between two reports of one call.
const DefaultEvery = time.Second

// MaxMessage bounds a report's message, in characters; a longer one keeps
// its end (the latest words) after "…".
const MaxMessage = 200

// Throttle passes the reports of one tool call to send, at most one per
// Every: a report that comes sooner waits for the interval to pass and is
// replaced by any later one; a report equal to the last one sent is not
// sent again. It is safe for concurrent use.
type Throttle struct {
	every     time.Duration
	send      func(agent.Progress)
	now       func() time.Time
	afterFunc func(time.Duration, func()) (stop func() bool)

	mu      sync.Mutex
	pending *agent.Progress
	last    agent.Progress
	sent    bool
	lastAt  time.Time
	stop    func() bool // the scheduled send, nil when none
	closed  bool
}

// New returns a throttle sending through send at most once per every
// (DefaultEvery when every <= 0). send is called with the throttle's lock
// held, in report order; it must not call back into the throttle.
func New(every time.Duration, send func(agent.Progress)) *Throttle {
	if every <= 0 {
		every = DefaultEvery
	}
	return &Throttle{every: every, send: send, now: time.Now, afterFunc: func(d time.Duration, f func()) func() bool {
		return time.AfterFunc(d, f).Stop
	}}
}

// Report offers p; it never waits for the interval. Counts that are not
// finite or are negative are dropped (a tool's bug must not break the
// heartbeat or the stream that carry them).
func (t *Throttle) Report(p agent.Progress) {
	p.Message = Clean(p.Message)
	p.Progress, p.Total = count(p.Progress), count(p.Total)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	if t.sent && p == t.last {
		t.pending = nil // back to what consumers already show
		return
	}
	t.pending = &p
	if t.stop != nil {
		return // the scheduled send takes the latest
	}
	if wait := t.lastAt.Add(t.every).Sub(t.now()); t.sent && wait > 0 {
		t.stop = t.afterFunc(wait, t.fire)
		return
	}
	t.flush()
}

// count is n when it is a finite, non-negative number, else 0 (unknown).
func count(n float64) float64 {
	if math.IsNaN(n) || math.IsInf(n, 0) || n < 0 {
		return 0
	}
	return n
}

// fire sends the report that waited for the interval.
func (t *Throttle) fire() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stop = nil
	if !t.closed {
		t.flush()
	}
}

// flush sends the pending report; t.mu is held.
func (t *Throttle) flush() {
	if t.pending == nil {
		return
	}
	p := *t.pending
	t.pending = nil
	t.last, t.sent, t.lastAt = p, true, t.now()
	t.send(p)
}

// Last returns the last report sent, and whether there was one.
func (t *Throttle) Last() (agent.Progress, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last, t.sent
}

// Close drops a waiting report and sends nothing more: the call ended, and
// its end is what consumers see next.
func (t *Throttle) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	t.pending = nil
	if t.stop != nil {
		t.stop()
		t.stop = nil
	}
}

// Clean makes a message one line for people: control characters (an
// escape sequence's ESC, a carriage return, a tab) become spaces, runs of
// spaces one, invisible format characters go, and a message longer than MaxMessage keeps its end.
func Clean(s string) string {
	s = ansi.ReplaceAllString(s, "")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == unicode.ReplacementChar {
			return ' '
		}
		if unicode.Is(unicode.Cf, r) {
			return -1 // bidi overrides, zero-width joiners: invisible, and can disguise the line
		}
		return r
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > MaxMessage {
		s = "…" + string(r[len(r)-MaxMessage+1:])
	}
	return s
}

// ansi matches a terminal's escape sequences (colours, cursor moves).
var ansi = regexp.MustCompile(`\x1b(\[[0-9;?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|[@-Z\\-_])`)

// LastLine is the last line of output with something on it, as a terminal
// shows it: a carriage return starts the line over (progress bars), and
// the line is Cleaned. An unfinished last line counts. It is "" when the
// output has no such line.
func LastLine(out []byte) string {
	s := string(out)
	for s != "" {
		line := s
		if i := strings.LastIndexByte(s, '\n'); i >= 0 {
			line, s = s[i+1:], s[:i]
		} else {
			s = ""
		}
		for line != "" {
			seg := line
			if i := strings.LastIndexByte(line, '\r'); i >= 0 {
				seg, line = line[i+1:], line[:i]
			} else {
				line = ""
			}
			if c := Clean(seg); c != "" {
				return c
			}
		}
	}
	return ""
}
