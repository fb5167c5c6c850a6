package egress

import (
	"net/netip"
	"testing"
)

// Kind classes addresses by the same lists Check refuses by.
func TestKind(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"93.184.215.14": KindPublic, "2606:2800:21f:cb07:6820:80da:af6b:8b2c": KindPublic,
		"127.0.0.1": KindLoopback, "::1": KindLoopback, "::ffff:127.0.0.1": KindLoopback,
		"169.254.169.254": KindLinkLocal, "fe80::1": KindLinkLocal,
		"0.0.0.0": KindReserved, "::": KindReserved, "239.1.2.3": KindReserved, "64:ff9b::7f00:1": KindReserved,
		"::1%lo": KindLoopback, "fe80::1%eth0": KindLinkLocal, "fd00::1%eth0": KindPrivate, "64:ff9b::7f00:1%1": KindReserved,
		"10.1.2.3": KindPrivate, "172.16.0.1": KindPrivate, "192.168.1.1": KindPrivate, "100.64.0.1": KindPrivate, "fd00::1": KindPrivate,
	} {
		if got := Kind(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Kind(%s) = %q, want %q", addr, got, want)
		}
		if err := (Policy{}).Check(netip.MustParseAddr(addr), 80, false); (err == nil) != (want == KindPublic) {
			t.Errorf("Check(%s) = %v, but Kind says %q", addr, err, want)
		}
	}
}
