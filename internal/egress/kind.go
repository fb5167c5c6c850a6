package egress

import "net/netip"

// Address kinds Kind reports.
const (
	KindPublic    = ""
	KindLoopback  = "loopback"
	KindLinkLocal = "link-local"
	KindReserved  = "reserved"
	KindPrivate   = "private"
)

// Kind names the class of ip the policy's built-in rules go by: loopback,
// link-local (cloud metadata), reserved (unspecified, multicast,
// broadcast, translation prefixes), private (RFC 1918, ULA, CGNAT,
// benchmarking) or public (""). Other senders of requests whose target
// someone else chooses (webhook callbacks) refuse by it too.
func Kind(ip netip.Addr) string {
	ip = bare(ip)
	switch {
	case !ip.IsValid():
		return KindReserved
	case ip.IsLoopback():
		return KindLoopback
	case ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast():
		return KindLinkLocal
	case inAny(neverAllowed, ip):
		return KindReserved
	case inAny(private, ip):
		return KindPrivate
	}
	return KindPublic
}
