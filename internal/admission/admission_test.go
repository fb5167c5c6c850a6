package admission

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/testsupport/wait"
)

func TestInFlightLimit(t *testing.T) {
	t.Parallel()
	l := New(Limits{MaxInFlight: 2, RetryAfter: 3 * time.Second}, nil, nil)
	r1, no := l.admit()
	if no != nil {
		t.Fatalf("first turn refused: %v", no)
	}
	r2, no := l.admit()
	if no != nil {
		t.Fatalf("second turn refused: %v", no)
	}
	if _, no := l.admit(); no == nil || no.RetryAfter < 3*time.Second || no.RetryAfter > 6*time.Second {
		t.Fatalf("third turn: refusal %v, want one with Retry-After 3–6s", no)
	}
	r1()
	r1() // a second release is a no-op
	if got := l.InFlight(); got != 1 {
		t.Fatalf("in flight after one release (twice) = %d, want 1", got)
	}
	r3, no := l.admit()
	if no != nil {
		t.Fatalf("turn after a release refused: %v", no)
	}
	r2()
	r3()
	if got := l.InFlight(); got != 0 {
		t.Fatalf("in flight at the end = %d, want 0", got)
	}
}

func TestBacklogLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		limits Limits
		sample Backlog
		err    error
		refuse bool
	}{
		{"zero limits admit", Limits{}, Backlog{Count: 1e6, Age: time.Hour}, nil, false},
		{"count under", Limits{MaxBacklog: 10}, Backlog{Count: 10}, nil, false},
		{"count over", Limits{MaxBacklog: 10}, Backlog{Count: 11}, nil, true},
		{"age under", Limits{MaxBacklogAge: time.Second}, Backlog{Count: 3, Age: 900 * time.Millisecond}, nil, false},
		{"age over", Limits{MaxBacklogAge: time.Second}, Backlog{Count: 3, Age: 1500 * time.Millisecond}, nil, true},
		{"failed probe admits", Limits{MaxBacklog: 1}, Backlog{}, errors.New("unavailable"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			probe := func(context.Context) (Backlog, error) { return tc.sample, tc.err }
			l := New(tc.limits, probe, nil)
			err := l.Refresh(context.Background())
			if (err != nil) != (tc.err != nil) {
				t.Fatalf("Refresh error = %v, want %v", err, tc.err)
			}
			release, no := l.admit()
			if (no != nil) != tc.refuse {
				t.Fatalf("refusal = %v, want refused=%v", no, tc.refuse)
			}
			if no != nil && (no.RetryAfter < DefaultRetryAfter || no.RetryAfter > 2*DefaultRetryAfter || no.Reason == "") {
				t.Errorf("refusal = %+v, want a reason and the default Retry-After (with its jitter)", no)
			}
			if release != nil {
				release()
			}
		})
	}
}

// TestProbeCached checks that the probe runs at most once per SampleEvery
// however many turns arrive, and that a stale sample stops refusing.
func TestProbeCached(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	calls := 0
	probed := make(chan struct{}, 100)
	probe := func(context.Context) (Backlog, error) {
		mu.Lock()
		calls++
		mu.Unlock()
		probed <- struct{}{}
		return Backlog{Count: 100}, nil
	}
	l := New(Limits{MaxBacklog: 5}, probe, nil)
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	// The first Admit starts a sample and admits (no sample yet).
	if _, no := l.admit(); no != nil {
		t.Fatalf("admitted without a sample expected, got %v", no)
	}
	<-probed
	waitProbed(t, l)
	for range 50 {
		if _, no := l.admit(); no == nil {
			t.Fatal("a turn was admitted past a backlog of 100 (limit 5)")
		}
	}
	mu.Lock()
	got := calls
	mu.Unlock()
	if got != 1 {
		t.Fatalf("probe ran %d times within one SampleEvery, want 1", got)
	}
	// Later, a new sample is started by the next Admit.
	now = now.Add(SampleEvery)
	_, _ = l.admit()
	<-probed
	waitProbed(t, l)
	// A sample older than 4 × SampleEvery is not trusted: admit.
	l.mu.Lock()
	l.probing, l.next = true, now.Add(time.Hour) // no further samples
	l.mu.Unlock()
	now = now.Add(5 * SampleEvery)
	if _, no := l.admit(); no != nil {
		t.Fatalf("a stale sample refused a turn: %v", no)
	}
}

func TestNilLimiterAdmits(t *testing.T) {
	t.Parallel()
	var l *Limiter
	release, no := l.admit()
	if no != nil || release == nil {
		t.Fatalf("nil limiter: refusal %v, release nil=%v", no, release == nil)
	}
	release()
}

func TestValidate(t *testing.T) {
	t.Parallel()
	if err := (Limits{MaxInFlight: -1}).Validate(); err == nil {
		t.Error("negative MaxInFlight accepted")
	}
	if err := (Limits{MaxInFlight: 10, MaxBacklogAge: time.Second}).Validate(); err != nil {
		t.Errorf("valid limits refused: %v", err)
	}
}

// waitProbed waits until the limiter's background sample is stored.
func waitProbed(t *testing.T, l *Limiter) {
	t.Helper()
	wait.For(t, 10*time.Second, "the background sample to finish", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return !l.probing
	})
}

// Refused callers are told to wait different whole-second delays between
// the configured RetryAfter and twice it, so that they do not all come back
// at once.
func TestRetryAfterJitter(t *testing.T) {
	l := New(Limits{MaxInFlight: 1, RetryAfter: 2 * time.Second}, nil, nil)
	release, err := l.Admit()
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	seen := map[time.Duration]bool{}
	for range 200 {
		_, refusal := l.Admit()
		var r *Refusal
		if !errors.As(refusal, &r) {
			t.Fatalf("not refused: %v", refusal)
		}
		if r.RetryAfter < 2*time.Second || r.RetryAfter > 4*time.Second || r.RetryAfter%time.Second != 0 {
			t.Fatalf("RetryAfter %s: want whole seconds in [2s, 4s]", r.RetryAfter)
		}
		seen[r.RetryAfter] = true
	}
	if len(seen) < 2 {
		t.Fatalf("every refusal said %v: no jitter", seen)
	}
}
