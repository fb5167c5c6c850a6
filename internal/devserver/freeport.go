package devserver

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// FreePort returns a TCP port free on loopback now, for a listener that
// binds it a moment later (a test's second server, a worker process). It
// draws from below the kernel's ephemeral range, so that an outgoing
// connection or a ":0" listener elsewhere cannot take the port in between;
// it asks the kernel only when none is free there. (The dev server program
// draws its own ports the same way.)
func FreePort() (int, error) {
	lo, hi := belowEphemeral()
	for range 64 {
		port := lo + rand.IntN(hi-lo) //nolint:gosec // G404: a port to try, not a secret
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
			_ = l.Close()
			return port, nil
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("devserver: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// belowEphemeral is the range FreePort draws from: the 12,000 ports below
// the kernel's ephemeral range (Linux: /proc/sys/net/ipv4/ip_local_port_range,
// 32768 by default), never below 10000.
func belowEphemeral() (lo, hi int) {
	hi = 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 10000 {
				hi = n
			}
		}
	}
	return max(10000, hi-12000), hi
}
