package feed

import (
	"fmt"
	"testing"
	"time"
)

// A notice is remembered for StopMemory (a watch registered within it
// closes at once, one registered after it does not), and at most
// maxRemembered notices are kept, the oldest forgotten first.
func TestStopMemory(t *testing.T) {
	at := time.Unix(1_700_000_000, 0)
	b := &stopBoard{now: func() time.Time { return at }}
	closed := func(session, turn string) bool {
		c, release := b.watch(session, turn)
		defer release()
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	b.stop("s", "t")
	at = at.Add(StopMemory - time.Second)
	if !closed("s", "t") {
		t.Error("a watch registered within StopMemory of the notice was not closed")
	}
	at = at.Add(2 * time.Second)
	if closed("s", "t") {
		t.Error("a watch registered after StopMemory was closed")
	}
	for i := range maxRemembered + 1 {
		b.stop("s", fmt.Sprint(i))
	}
	if len(b.stopped) > maxRemembered || len(b.order) > maxRemembered {
		t.Errorf("remembered %d notices (order %d), bound %d", len(b.stopped), len(b.order), maxRemembered)
	}
	if closed("s", "0") || !closed("s", fmt.Sprint(maxRemembered)) {
		t.Error("beyond the bound the oldest notice should go first")
	}
	if c, release := b.watch("s", "new"); true {
		release()
		if len(b.watches) != 0 {
			t.Errorf("a released watch is still registered: %d", len(b.watches))
		}
		select {
		case <-c:
			t.Error("a released watch was closed")
		default:
		}
	}
}
