package mcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fastagent/fastagent/internal/egress"
)

// Transports of a server with a URL.
const (
	// TransportStreamable is the streamable HTTP transport (the default).
	TransportStreamable = "streamable-http"
	// TransportSSE is the legacy HTTP+SSE transport (protocol 2024-11-05).
	TransportSSE = "sse"
)

// remoteTransport returns the SDK transport of a server with a URL: its
// HTTP client sends the configured headers (their ${NAME} references
// expanded from the worker's environment here, at connect time) and the
// stored OAuth access token, and dials only addresses the server may have.
func (c *client) remoteTransport() (sdk.Transport, error) {
	hc, err := c.srv.httpClient(c.m.ctx)
	if err != nil {
		return nil, err
	}
	if c.srv.Transport == TransportSSE {
		return &sseTransport{inner: &sdk.SSEClientTransport{Endpoint: c.srv.URL, HTTPClient: hc}, life: c.ctx}, nil
	}
	return &sdk.StreamableClientTransport{Endpoint: c.srv.URL, HTTPClient: hc}, nil
}

// sseTransport opens the SSE event stream under the client's lifetime
// rather than the start attempt's context: the SDK ties the stream's GET to
// the context Connect gets, and a start's context ends once it is done.
type sseTransport struct {
	inner *sdk.SSEClientTransport
	life  context.Context
}

func (t *sseTransport) Connect(ctx context.Context) (sdk.Connection, error) {
	sctx, cancel := context.WithCancel(t.life)
	stop := context.AfterFunc(ctx, cancel)
	conn, err := t.inner.Connect(sctx) //nolint:contextcheck // the event stream lives as long as the client, not the connect call
	if !stop() || err != nil {
		cancel()
		if err == nil {
			_ = conn.Close()
			err = ctx.Err()
		}
		return nil, err
	}
	return &sseConn{Connection: conn, cancel: cancel}, nil
}

// sseConn ends the event stream's context when the connection closes.
type sseConn struct {
	sdk.Connection
	cancel context.CancelFunc
}

func (c *sseConn) Close() error {
	err := c.Connection.Close()
	c.cancel()
	return err
}

// authHint adds what to do to a refusal of the server's authorization.
func (s Server) authHint(err error) error {
	msg := err.Error()
	if !strings.Contains(msg, http.StatusText(http.StatusUnauthorized)) && !strings.Contains(msg, http.StatusText(http.StatusForbidden)) {
		return err
	}
	switch {
	case s.OAuthFile != "":
		return fmt.Errorf("%w (the server refused the stored token; run: fastagent mcp login %s)", err, s.Name)
	case len(s.Headers) > 0:
		return fmt.Errorf("%w (the server refused the configured headers' credentials)", err)
	default:
		return fmt.Errorf("%w (the server wants credentials: set headers: with a token from the environment, or oauth: true and run fastagent mcp login %s)", err, s.Name)
	}
}

// httpClient is the client every request to the server (and, for OAuth,
// to its authorization server) goes through.
func (s Server) httpClient(ctx context.Context) (*http.Client, error) {
	var missing []string
	headers := make(http.Header, len(s.Headers))
	for k, v := range s.Headers {
		headers.Set(k, expandVars(v, &missing))
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return nil, fmt.Errorf("headers reference unset variables %v: set them in the worker's environment (or .env)", slices.Compact(missing))
	}
	base := s.baseClient()
	u, err := url.Parse(s.URL)
	if err != nil {
		return nil, fmt.Errorf("url %q: %w", s.URL, err)
	}
	rt := &authTransport{base: base.Transport, headers: headers, scheme: u.Scheme, host: u.Host}
	if s.OAuthFile != "" {
		ts, err := loadTokenSource(ctx, s, base)
		if err != nil {
			return nil, err
		}
		rt.token = ts
	}
	// The guarded client's redirect rule kept: no hop to another host.
	return &http.Client{Transport: rt, CheckRedirect: base.CheckRedirect}, nil
}

// baseClient dials through the server's address policy, uses no proxy from
// the environment (the address checked is the address connected to) and
// follows no redirect to another host.
func (s Server) baseClient() *http.Client {
	g := &dialGuard{allowPrivate: s.AllowPrivate, deny: s.ControlPlane, own: ownAddrs()}
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: g.control}
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          8,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   15 * time.Second,
		ResponseHeaderTimeout: 2 * time.Minute,
	}
	return &http.Client{Transport: tr, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 5 || req.URL.Host != via[0].URL.Host {
			return http.ErrUseLastResponse
		}
		return nil
	}}
}

// authTransport adds the configured headers and the OAuth bearer token to
// requests to the configured server's own scheme and host only: a
// redirect or an SSE endpoint naming another host never gets them.
type authTransport struct {
	base         http.RoundTripper
	headers      http.Header
	token        *fileTokenSource
	scheme, host string
}

func (t *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !strings.EqualFold(req.URL.Scheme, t.scheme) || !strings.EqualFold(req.URL.Host, t.host) {
		return nil, fmt.Errorf("mcp: %s is not the configured server %s://%s: its headers and token are not sent elsewhere", req.URL.Redacted(), t.scheme, t.host)
	}
	req = req.Clone(req.Context())
	for k, vs := range t.headers {
		req.Header[k] = vs
	}
	if t.token != nil {
		tok, err := t.token.Token() //nolint:contextcheck // oauth2.TokenSource takes no context; its refresh client has its own timeout
		if err != nil {
			return nil, err
		}
		tok.SetAuthHeader(req)
	}
	return t.base.RoundTrip(req)
}

// dialGuard refuses addresses a remote MCP server may not have: the
// deployment's own services (ControlPlane) and link-local or reserved
// addresses always; loopback and private addresses unless the operator set
// allowPrivate. It checks each address the dialer connects to, after name
// resolution, so a public name resolving to 127.0.0.1 is refused too.
type dialGuard struct {
	allowPrivate bool
	deny         []egress.Dest
	own          []netip.Addr
}

// errRefused wraps every refusal of an address.
var errRefused = errors.New("address refused")

func (g *dialGuard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", errRefused, address, err)
	}
	return g.check(ap.Addr(), ap.Port())
}

func (g *dialGuard) check(ip netip.Addr, port uint16) error {
	ip = ip.Unmap().WithZone("")
	if err := (egress.Policy{Deny: g.deny}).Check(ip, port, true); err != nil || g.ownService(ip, port) {
		return fmt.Errorf("%w: %s is one of this deployment's own services; an MCP server is never reached there", errRefused, netip.AddrPortFrom(ip, port))
	}
	switch k := egress.Kind(ip); k {
	case egress.KindPublic:
		return nil
	case egress.KindLoopback, egress.KindPrivate:
		if g.allowPrivate {
			return nil
		}
		return fmt.Errorf("%w: %s is a %s address; if the MCP server is on this machine or your own network, set allowPrivate: true on its mcpServers entry", errRefused, ip, k)
	default:
		return fmt.Errorf("%w: %s is a %s address (cloud metadata and the like): an MCP server is never reached there", errRefused, ip, k)
	}
}

// ownService reports whether ip:port is a deployment service on this
// machine reached by another of its addresses (the ingress on 0.0.0.0 is
// named 127.0.0.1:<port> but answers on every address).
func (g *dialGuard) ownService(ip netip.Addr, port uint16) bool {
	isOwn := func(a netip.Addr) bool {
		a = a.Unmap()
		return a.IsLoopback() || a.IsUnspecified() || slices.Contains(g.own, a)
	}
	if !isOwn(ip) {
		return false
	}
	for _, d := range g.deny {
		if d.Port == port && d.Prefix.IsSingleIP() && isOwn(d.Prefix.Addr()) {
			return true
		}
	}
	return false
}

// ownAddrs are this machine's interface addresses.
func ownAddrs() []netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap().WithZone(""))
		}
	}
	return out
}

// CheckURLHost refuses, when the configuration loads, a URL whose host is
// an address the server may never have (names are checked when dialed).
func CheckURLHost(host, port string, allowPrivate bool) error {
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return nil //nolint:nilerr // a name: checked on the addresses it resolves to
	}
	p, _ := strconv.ParseUint(port, 10, 16)
	return (&dialGuard{allowPrivate: allowPrivate}).check(ip, uint16(p))
}
