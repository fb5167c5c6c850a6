package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestCheck(t *testing.T) {
	p := Policy{
		Deny:  []Dest{{Prefix: netip.MustParsePrefix("203.0.113.7/32"), Port: 7233}, {Prefix: netip.MustParsePrefix("198.51.100.0/24")}},
		Allow: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16")},
	}
	cases := []struct {
		ip     string
		port   uint16
		pinned bool
		ok     bool
	}{
		{"93.184.216.34", 443, false, true},
		{"127.0.0.1", 80, false, false},
		{"::1", 80, false, false},
		{"::ffff:127.0.0.1", 80, false, false}, // IPv4-mapped loopback
		{"169.254.169.254", 80, false, false},  // cloud metadata
		{"fe80::1", 80, false, false},
		{"0.0.0.0", 80, false, false},
		{"10.1.2.3", 443, false, false},       // private
		{"10.20.3.4", 443, false, true},       // private, allowed
		{"192.168.1.1", 80, false, false},     // private
		{"100.64.0.1", 80, false, false},      // CGNAT
		{"64:ff9b::7f00:1", 80, false, false}, // NAT64 of 127.0.0.1
		{"203.0.113.7", 7233, false, false},   // the control plane's port
		{"203.0.113.7", 443, false, true},     // same host, another port
		{"198.51.100.9", 443, false, false},   // a denied range, any port
		{"127.0.0.1", 8080, true, true},       // pinned by the operator
		{"203.0.113.7", 7233, true, false},    // pinned, but the control plane
		// An IPv6 zone picks the interface, not the address: no prefix
		// contains a zoned address, so it must not dodge them.
		{"::1%lo", 80, false, false},
		{"fe80::1%eth0", 80, false, false},
		{"fd00:ec2::254%eth0", 80, false, false}, // cloud metadata over IPv6 (ULA)
		{"::ffff:127.0.0.1%lo", 80, false, false},
	}
	for _, c := range cases {
		err := p.Check(netip.MustParseAddr(c.ip), c.port, c.pinned)
		if (err == nil) != c.ok {
			t.Errorf("Check(%s:%d, pinned=%v) = %v, want ok=%v", c.ip, c.port, c.pinned, err, c.ok)
		}
	}
}

func TestParseDests(t *testing.T) {
	got, err := ParseDests(context.Background(), []string{"127.0.0.1:7233", "[::1]:8233", "10.0.0.0/8", "localhost:8787", " "})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"127.0.0.1/32 port 7233": true, "::1/128 port 8233": true, "10.0.0.0/8": true, "127.0.0.1/32 port 8787": true}
	for _, d := range got {
		delete(want, d.String())
	}
	if len(want) > 0 {
		t.Errorf("missing %v in %v", want, got)
	}
	if _, err := ParsePrefixes([]string{"not an address"}); err == nil {
		t.Error("a bad networkAllow entry was accepted")
	}
}

// The proxy, as a tool would use it: plain HTTP and CONNECT reach a pinned
// host; loopback, a name resolving to loopback and the control plane get
// 403 and are never dialed.
func TestProxy(t *testing.T) {
	hits := 0
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		fmt.Fprint(w, "hello from "+r.Host)
	}))
	defer backend.Close()
	control := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		t.Error("the control plane was reached")
	}))
	defer control.Close()
	ctl := netip.MustParseAddrPort(strings.TrimPrefix(control.URL, "http://"))
	x := New(Policy{
		Deny:  []Dest{{Prefix: netip.PrefixFrom(ctl.Addr(), 32), Port: ctl.Port()}},
		Hosts: map[string]string{"api.example.test": strings.TrimPrefix(backend.URL, "http://"), "ctl.example.test": ctl.String()},
	}, nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = x.Serve(l) }()
	defer x.Close()
	proxyURL, _ := url.Parse("http://" + l.Addr().String())
	hc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}}

	get := func(u string) (int, string) {
		resp, err := hc.Get(u)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("http://api.example.test/x"); code != 200 || !strings.Contains(body, "hello") {
		t.Errorf("pinned host over HTTP: %d %q", code, body)
	}
	for _, u := range []string{control.URL, "http://ctl.example.test/", "http://127.0.0.1:9/", "http://localhost:9/", "http://169.254.169.254/"} {
		if code, body := get(u); code != http.StatusForbidden {
			t.Errorf("%s: %d %q, want 403", u, code, body)
		}
	}
	// CONNECT: a tunnel to the pinned host works, to the control plane not.
	tunnel := func(target string) string {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		br := bufio.NewReader(c)
		status, _ := br.ReadString('\n')
		if !strings.Contains(status, "200") {
			return status
		}
		for {
			line, _ := br.ReadString('\n')
			if line == "\r\n" || line == "" {
				break
			}
		}
		fmt.Fprintf(c, "GET / HTTP/1.0\r\nHost: api.example.test\r\n\r\n")
		b, _ := io.ReadAll(br)
		return string(b)
	}
	if got := tunnel("api.example.test:80"); !strings.Contains(got, "hello") {
		t.Errorf("CONNECT to the pinned host: %q", got)
	}
	if got := tunnel(ctl.String()); !strings.Contains(got, "403") {
		t.Errorf("CONNECT to the control plane: %q", got)
	}
	if hits != 2 {
		t.Errorf("backend hits = %d, want 2", hits)
	}
}

// A tool names loopback through the proxy with an IPv6 zone
// (CONNECT [::1%25lo]:port): refused like [::1], never dialed.
func TestProxyRefusesZonedLoopback(t *testing.T) {
	l6, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	defer l6.Close()
	reached := make(chan struct{}, 1)
	go func() {
		for {
			c, err := l6.Accept()
			if err != nil {
				return
			}
			reached <- struct{}{}
			_ = c.Close()
		}
	}()
	x := New(Policy{}, nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = x.Serve(l) }()
	defer x.Close()
	port := l6.Addr().(*net.TCPAddr).Port
	for _, target := range []string{fmt.Sprintf("[::1%%25lo]:%d", port), fmt.Sprintf("[::1%%25%d]:%d", 1, port)} {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		status, _ := bufio.NewReader(c).ReadString('\n')
		_ = c.Close()
		if !strings.Contains(status, "403") {
			t.Errorf("CONNECT %s: %q, want 403", target, status)
		}
	}
	select {
	case <-reached:
		t.Error("the proxy dialed IPv6 loopback through a zoned address")
	default:
	}
}

// A service of this machine bound to every address (0.0.0.0) is reachable
// through the machine's own public address: that address is refused like
// loopback, whatever port.
func TestProxyRefusesTheMachinesOwnAddresses(t *testing.T) {
	t.Parallel()
	x := New(Policy{}, nil)
	own := netip.MustParseAddr("203.0.113.7")
	x.ownAddrs = func() []netip.Addr { return []netip.Addr{own} }
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, dest := range []string{"203.0.113.7:7233", "[::ffff:203.0.113.7]:443"} {
		c, err := x.Dial(ctx, "tcp", dest)
		if c != nil {
			_ = c.Close()
		}
		if !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), "this machine") {
			t.Errorf("dial %s: %v, want refused as an address of this machine", dest, err)
		}
	}
	// The real list of this machine's addresses holds at least loopback.
	if addrs := localAddrs(); len(addrs) == 0 {
		t.Error("localAddrs found no address of this machine")
	}
}

// A destination denied after the proxy started (a Temporal frontend
// learned from a client given later) is refused from the next dial on,
// even where the operator pinned a name to it.
func TestProxyDenyLearnedLater(t *testing.T) {
	t.Parallel()
	frontend, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer frontend.Close()
	go func() {
		for {
			c, err := frontend.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	fe := netip.MustParseAddrPort(frontend.Addr().String())
	x := New(Policy{Hosts: map[string]string{"temporal.example.test": fe.String()}}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := x.Dial(ctx, "tcp", "temporal.example.test:7233")
	if err != nil {
		t.Fatalf("before Deny, the pinned frontend: %v", err)
	}
	_ = c.Close()
	x.Deny([]Dest{{Prefix: netip.PrefixFrom(fe.Addr(), 32), Port: fe.Port()}})
	x.Deny([]Dest{{Prefix: netip.PrefixFrom(fe.Addr(), 32), Port: fe.Port()}}) // twice: kept once
	if c, err := x.Dial(ctx, "tcp", "temporal.example.test:7233"); !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), "control plane") {
		if c != nil {
			_ = c.Close()
		}
		t.Fatalf("after Deny, the frontend: %v, want refused as the control plane", err)
	}
	if n := len(x.currentPolicy().Deny); n != 1 {
		t.Errorf("Deny holds %d destinations, want 1", n)
	}
}
