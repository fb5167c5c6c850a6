package webhook

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/egress"
)

// callbackTarget is where an endpoint's callbacks may go: its URL's host,
// checked on every address dialed. Loopback and private addresses only
// with the file's reply.allowPrivate; link-local (cloud metadata),
// reserved addresses and the deployment's own services (SetControlPlane)
// never. Redirects are never followed, and no proxy from the environment
// is used: the address checked is the address connected to.
type callbackTarget struct {
	kind         string
	allowPrivate bool

	mu   sync.RWMutex
	deny []egress.Dest
}

// hint is how to let callbacks reach a receiver on the operator's own
// network.
func (g *callbackTarget) hint() string {
	return "if the receiver is on your own network, set reply.allowPrivate: true in channels/webhooks/" +
		trimKind(g.kind) + ".yaml"
}

func trimKind(kind string) string { return kind[min(len(KindPrefix), len(kind)):] }

// checkURL refuses, when the file loads, a callback URL whose host is an
// address callbacks may never reach (names are checked when dialed).
func (g *callbackTarget) checkURL(u *url.URL) error {
	host := u.Hostname()
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return nil //nolint:nilerr // a name: checked on the addresses it resolves to, when dialed
	}
	port, _ := strconv.ParseUint(u.Port(), 10, 16)
	return g.check(ip, uint16(port))
}

// check reports whether a callback may connect to ip:port.
func (g *callbackTarget) check(ip netip.Addr, port uint16) error {
	ip = ip.Unmap()
	g.mu.RLock()
	deny := g.deny
	g.mu.RUnlock()
	if err := (egress.Policy{Deny: deny}).Check(ip, port, true); err != nil {
		return fmt.Errorf("%s is one of this deployment's own services: callbacks never go there", netip.AddrPortFrom(ip, port))
	}
	switch k := egress.Kind(ip); k {
	case egress.KindPublic:
		return nil
	case egress.KindLoopback, egress.KindPrivate:
		if g.allowPrivate {
			return nil
		}
		return fmt.Errorf("%s is a %s address; %s", ip, k, g.hint())
	default:
		return fmt.Errorf("%s is a %s address (cloud metadata and the like): callbacks never go there", ip, k)
	}
}

// control is the dialer's check of each address it connects to, after
// name resolution: a name that resolves (or re-resolves) to a refused
// address is refused.
func (g *callbackTarget) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return channels.Permanent(fmt.Errorf("callback to %s refused: not an IP address and port", address))
	}
	if err := g.check(ap.Addr(), ap.Port()); err != nil {
		return channels.Permanent(fmt.Errorf("callback refused: %w", err))
	}
	return nil
}

// client is the HTTP client of the endpoint's callbacks.
func (g *callbackTarget) client() *http.Client {
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: g.control}
	tr := &http.Transport{
		Proxy:                 nil, // a proxy would dial the address itself, unchecked
		DialContext:           dialer.DialContext,
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		IdleConnTimeout:       90 * time.Second,
	}
	return &http.Client{Transport: tr, Timeout: 45 * time.Second,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			return channels.Permanent(fmt.Errorf("callback refused: %s answered a redirect to %s, and callbacks never follow redirects: set reply.url to the address that takes them",
				redact(via[len(via)-1].URL), redact(req.URL)))
		}}
}

// redact is u without its user information and query (they may hold a
// token), for messages.
func redact(u *url.URL) string {
	c := *u
	c.User, c.RawQuery, c.Fragment = nil, "", ""
	return c.String()
}

// SetControlPlane sets the deployment's own services (the Temporal
// frontend, the ingress, the store, the feed, metrics) that callbacks
// never reach, even with reply.allowPrivate.
func (r *Replier) SetControlPlane(deny []egress.Dest) {
	r.target.mu.Lock()
	r.target.deny = append([]egress.Dest(nil), deny...)
	r.target.mu.Unlock()
	r.client.CloseIdleConnections() // a kept-alive connection was checked against the old list
}
