package devserver

import (
	"net"
	"strconv"
	"testing"
)

// FreePort draws ports below the kernel's ephemeral range, where no
// outgoing connection or ":0" listener takes them before the server binds
// them, and each is free when returned.
func TestFreePortBelowEphemeral(t *testing.T) {
	lo, hi := belowEphemeral()
	if lo < 10000 || hi-lo < 1000 {
		t.Fatalf("range [%d, %d)", lo, hi)
	}
	seen := map[int]bool{}
	for range 20 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if p < lo || p >= hi {
			t.Errorf("port %d outside [%d, %d)", p, lo, hi)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Errorf("port %d is not free: %v", p, err)
			continue
		}
		_ = l.Close()
		seen[p] = true
	}
	if len(seen) < 15 {
		t.Errorf("20 draws gave %d distinct ports", len(seen))
	}
}
