// Package egress is the way out for sandboxed tools that were given the
// network: an HTTP proxy (CONNECT tunnels and plain HTTP) that resolves each
// destination itself and refuses every address of the control plane and of
// the machine's own networks before it dials.
//
// Tools never get a route of their own: the sandbox leaves them either no
// network at all or only a connection to this proxy, so the deny list holds
// whatever a tool sends. The check is made on the resolved address the proxy
// then dials, so a name that resolves to a denied address (DNS rebinding,
// 127.0.0.1.nip.io) is refused too.
//
// The proxy is a few lines over net/http rather than a general proxy library:
// it needs no TLS interception, no upstream proxies and no websocket
// rewriting, and every byte that leaves goes through Dial, which is the part
// that matters.
package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Policy says which destinations the proxy may dial.
type Policy struct {
	// Deny are destinations that are never dialed, whatever else allows
	// them: the Temporal frontend, the Web UI, the ingress, metrics, the
	// store, the feed, as configured.
	Deny []Dest `json:"deny,omitempty"`
	// Allow exempts addresses from the private-network rule (10/8,
	// 172.16/12, 192.168/16, fc00::/7, 100.64/10) — an internal API a tool
	// is meant to reach. Loopback, link-local (cloud metadata) and Deny stay
	// refused.
	Allow []netip.Prefix `json:"allow,omitempty"`
	// Hosts pins names to addresses ("api.example.test" → "127.0.0.1:8080").
	// A pinned destination is an operator's explicit choice: it passes the
	// loopback and private rules, never Deny. The end-to-end tests use it to
	// stand a loopback server in for an internet host.
	Hosts map[string]string `json:"hosts,omitempty"`
}

// Dest is an address range and, unless 0, one port.
type Dest struct {
	Prefix netip.Prefix `json:"prefix"`
	Port   uint16       `json:"port,omitempty"`
}

func (d Dest) String() string {
	if d.Port == 0 {
		return d.Prefix.String()
	}
	return fmt.Sprintf("%s port %d", d.Prefix, d.Port)
}

// builtinDeny are refused unless Hosts pins them; private ranges can be
// opened with Allow, the rest cannot.
var (
	neverAllowed = mustPrefixes("127.0.0.0/8", "::1/128", "0.0.0.0/8", "::/128",
		"169.254.0.0/16", "fe80::/10", "224.0.0.0/4", "ff00::/8", "255.255.255.255/32",
		"64:ff9b::/96", "64:ff9b:1::/48", "2002::/16", "100::/64")
	private = mustPrefixes("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10",
		"fc00::/7", "192.0.0.0/24", "198.18.0.0/15")
)

func mustPrefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// ErrDenied is wrapped by every refusal of a destination.
var ErrDenied = errors.New("egress: destination refused")

// Check reports whether ip:port may be dialed; pinned says the address
// came from Hosts.
func (p Policy) Check(ip netip.Addr, port uint16, pinned bool) error {
	ip = bare(ip)
	for _, d := range p.Deny {
		if d.Prefix.Contains(ip) && (d.Port == 0 || d.Port == port) {
			return fmt.Errorf("%w: %s is part of this deployment's control plane", ErrDenied, netip.AddrPortFrom(ip, port))
		}
	}
	if pinned {
		return nil
	}
	if !ip.IsValid() || inAny(neverAllowed, ip) {
		return fmt.Errorf("%w: %s is a loopback, link-local or reserved address", ErrDenied, ip)
	}
	if inAny(private, ip) && !inAny(p.Allow, ip) {
		return fmt.Errorf("%w: %s is a private address (allow it with tools.networkAllow)", ErrDenied, ip)
	}
	return nil
}

// bare is ip as the prefixes see it: IPv4-mapped addresses as IPv4, and
// no IPv6 zone ("::1%lo" is ::1 on interface lo; no prefix contains a
// zoned address, so a zone would dodge every one of them).
func bare(ip netip.Addr) netip.Addr { return ip.Unmap().WithZone("") }

func inAny(ps []netip.Prefix, ip netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// ParseDests turns "10.1.2.3", "10.0.0.0/8", "host:port", "[::1]:7233" or
// "host" into destinations, resolving names now (each address as a /32 or
// /128, with the port when one is given). Unresolvable names are returned in
// the error but do not stop the others.
func ParseDests(ctx context.Context, entries []string) ([]Dest, error) {
	var out []Dest
	var errs []error
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if p, err := netip.ParsePrefix(e); err == nil {
			out = append(out, Dest{Prefix: p.Masked()})
			continue
		}
		host, port := e, uint16(0)
		if h, ps, err := net.SplitHostPort(e); err == nil {
			n, err := strconv.ParseUint(ps, 10, 16)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: bad port", e))
				continue
			}
			host, port = h, uint16(n)
		}
		host = strings.Trim(host, "[]")
		if ip, err := netip.ParseAddr(host); err == nil {
			ip = ip.Unmap()
			out = append(out, Dest{Prefix: netip.PrefixFrom(ip, ip.BitLen()), Port: port})
			continue
		}
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			errs = append(errs, fmt.Errorf("resolve %s: %w", host, err))
			continue
		}
		for _, ip := range ips {
			ip = ip.Unmap()
			out = append(out, Dest{Prefix: netip.PrefixFrom(ip, ip.BitLen()), Port: port})
		}
	}
	return out, errors.Join(errs...)
}

// ParsePrefixes reads CIDRs or addresses (tools.networkAllow).
func ParsePrefixes(entries []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, e := range entries {
		if p, err := netip.ParsePrefix(strings.TrimSpace(e)); err == nil {
			out = append(out, p.Masked())
			continue
		}
		ip, err := netip.ParseAddr(strings.TrimSpace(e))
		if err != nil {
			return nil, fmt.Errorf("%q is neither an address nor a CIDR range", e)
		}
		ip = ip.Unmap()
		out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
	}
	return out, nil
}

// Proxy is the egress proxy. Serve it on as many listeners as needed (one
// per sandboxed call inside its network namespace, or one on loopback).
type Proxy struct {
	// policy is replaced, never changed in place, under pmu (Deny).
	pmu      sync.RWMutex
	policy   Policy
	log      *slog.Logger
	resolver *net.Resolver
	dialer   net.Dialer
	srv      *http.Server
	fwd      *httputil.ReverseProxy
	tr       *http.Transport
	// ownAddrs lists the addresses of this machine's interfaces (a test
	// seam; localAddrs, cached).
	ownAddrs func() []netip.Addr

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// localAddrs are the addresses of this machine's network interfaces.
func localAddrs() []netip.Addr {
	ifs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range ifs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, bare(p.Addr()))
		}
	}
	return out
}

// cachedLocalAddrs is localAddrs read at most every ttl: interfaces change
// rarely (a DHCP lease, a container's network attached).
func cachedLocalAddrs(ttl time.Duration) func() []netip.Addr {
	var mu sync.Mutex
	var at time.Time
	var addrs []netip.Addr
	return func() []netip.Addr {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(at) > ttl {
			addrs, at = localAddrs(), time.Now()
		}
		return addrs
	}
}

// New returns a proxy enforcing p.
func New(p Policy, log *slog.Logger) *Proxy {
	if log == nil {
		log = slog.Default()
	}
	x := &Proxy{policy: p, log: log, resolver: net.DefaultResolver,
		dialer: net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second},
		conns:  map[net.Conn]struct{}{}, ownAddrs: cachedLocalAddrs(30 * time.Second)}
	tr := &http.Transport{
		Proxy:                 nil, // never chain to another proxy from the worker's environment
		DialContext:           x.Dial,
		ForceAttemptHTTP2:     false,
		MaxIdleConns:          16,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 2 * time.Minute,
	}
	x.tr = tr
	x.fwd = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL = r.In.URL // absolute-form: the destination as the client named it
			r.Out.Host = r.In.Host
			r.Out.Header.Del("Proxy-Authorization")
			r.Out.Header.Del("Proxy-Connection")
		},
		Transport: tr,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			x.refuse(w, r.Host, err)
		},
	}
	x.srv = &http.Server{Handler: http.HandlerFunc(x.serveHTTP), ReadHeaderTimeout: 30 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	return x
}

// Serve accepts proxy clients on l until l or the proxy is closed.
func (x *Proxy) Serve(l net.Listener) error {
	err := x.srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// Close stops every listener and open tunnel.
func (x *Proxy) Close() error {
	err := x.srv.Close()
	x.mu.Lock()
	for c := range x.conns {
		_ = c.Close()
	}
	x.mu.Unlock()
	return err
}

// Deny adds ds to the destinations the proxy never dials, from the next
// dial on: a control-plane address learned after it started (the Temporal
// frontend of a client given later). Destinations it has are skipped.
func (x *Proxy) Deny(ds []Dest) {
	x.pmu.Lock()
	x.policy = x.policy.WithDeny(ds)
	policy := x.policy
	x.pmu.Unlock()
	// What was dialed before is not dialed again: kept-alive connections
	// of plain HTTP go, and so do open tunnels to a destination now denied.
	x.tr.CloseIdleConnections()
	x.mu.Lock()
	defer x.mu.Unlock()
	for c := range x.conns {
		if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil && policy.Check(ap.Addr(), ap.Port(), true) != nil {
			_ = c.Close()
		}
	}
}

// WithDeny is p with ds added to Deny (those it has skipped); p's Deny is
// not changed in place.
func (p Policy) WithDeny(ds []Dest) Policy {
	deny := slices.Clone(p.Deny)
	for _, d := range ds {
		if !slices.Contains(deny, d) {
			deny = append(deny, d)
		}
	}
	p.Deny = deny
	return p
}

func (x *Proxy) currentPolicy() Policy {
	x.pmu.RLock()
	defer x.pmu.RUnlock()
	return x.policy
}

// Dial resolves addr, refuses it when the policy says so, and otherwise
// connects to the first permitted address.
func (x *Proxy) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("egress: %q: %w", addr, err)
	}
	policy := x.currentPolicy()
	pinned := false
	if to, ok := policy.Hosts[strings.ToLower(host)]; ok {
		pinned = true
		if h, p, err := net.SplitHostPort(to); err == nil {
			host, port = h, p
		} else {
			host = to
		}
	}
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		ips = []netip.Addr{ip}
	} else if ips, err = x.resolver.LookupNetIP(ctx, "ip", host); err != nil {
		return nil, fmt.Errorf("egress: resolve %s: %w", host, err)
	}
	pn, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("egress: %q: bad port", addr)
	}
	var refused error
	for _, ip := range ips {
		if err := policy.Check(ip, uint16(pn), pinned); err != nil {
			refused = err
			continue
		}
		if !pinned && slices.Contains(x.ownAddrs(), bare(ip)) {
			// A service of this machine listening on every address
			// (0.0.0.0) answers on its public address too.
			refused = fmt.Errorf("%w: %s is an address of this machine", ErrDenied, bare(ip))
			continue
		}
		return x.dialer.DialContext(ctx, "tcp", net.JoinHostPort(bare(ip).String(), port))
	}
	if refused == nil {
		refused = fmt.Errorf("egress: %s has no address", host)
	}
	x.log.Info("tool network request refused", "destination", addr, "reason", refused.Error())
	return nil, refused
}

func (x *Proxy) serveHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodConnect:
		x.tunnel(w, r)
	case r.URL.IsAbs() && r.URL.Scheme == "http":
		x.fwd.ServeHTTP(w, r)
	default:
		http.Error(w, "this is the tool network proxy: send absolute http:// URLs or CONNECT host:port", http.StatusBadRequest)
	}
}

// tunnel serves CONNECT host:port: dial (policy-checked), answer 200, then
// copy both ways until either side closes.
func (x *Proxy) tunnel(w http.ResponseWriter, r *http.Request) {
	up, err := x.Dial(r.Context(), "tcp", r.Host)
	if err != nil {
		x.refuse(w, r.Host, err)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		_ = up.Close()
		http.Error(w, "egress: connection cannot be tunnelled", http.StatusInternalServerError)
		return
	}
	down, buf, err := hj.Hijack()
	if err != nil {
		_ = up.Close()
		return
	}
	x.track(up, true)
	x.track(down, true)
	defer func() {
		x.track(up, false)
		x.track(down, false)
		_ = up.Close()
		_ = down.Close()
	}()
	if _, err := io.WriteString(down, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() {
		// Bytes the client sent after the CONNECT line are in buf.
		_, _ = io.Copy(up, buf)
		closeWrite(up)
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(down, up)
		closeWrite(down)
		done <- struct{}{}
	}()
	<-done
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

func (x *Proxy) track(c net.Conn, add bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if add {
		x.conns[c] = struct{}{}
	} else {
		delete(x.conns, c)
	}
}

func (x *Proxy) refuse(w http.ResponseWriter, dest string, err error) {
	code := http.StatusBadGateway
	if errors.Is(err, ErrDenied) {
		code = http.StatusForbidden
	}
	http.Error(w, fmt.Sprintf("fastagent tool network: %s: %v", dest, err), code)
}
