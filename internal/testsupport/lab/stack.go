package lab

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/durable"
	"github.com/fastagent/fastagent/internal/feed"
	"github.com/fastagent/fastagent/internal/serve"
)

var queueSeq atomic.Int64

// NewQueue returns a task queue name unique to this process and call.
func NewQueue(name string) string {
	return fmt.Sprintf("lab-%s-%d-%d", name, time.Now().UnixNano(), queueSeq.Add(1))
}

// Durable returns the durable agent on queue whose ingress side reads bus,
// built by the kit's Runtime: it reads the kit's session store, so a turn
// whose live feed lost steps is filled in from the store.
func Durable(c client.Client, k *Kit, bus feed.Bus, queue string) (*durable.Agent, error) {
	p, err := k.Runtime(bus, queue)
	if err != nil {
		return nil, err
	}
	return p.Agent(c), nil
}

// StartWorker starts an in-process worker on queue running the kit's
// activities, which publish to bus, built by the kit's Runtime; tune
// adjusts its Config and Components (pollers, repliers).
func StartWorker(c client.Client, k *Kit, bus feed.Bus, queue string, tune ...func(*serve.Config, *serve.Components)) (sdkworker.Worker, error) {
	p, err := k.Runtime(bus, queue, tune...)
	if err != nil {
		return nil, err
	}
	return p.StartWorker(context.Background(), c)
}

// HTTP is an ingress served on a loopback port.
type HTTP struct {
	URL string
	srv *http.Server
}

// ServeIngress serves p's ingress for a (ready, without tokens) on a free
// loopback port: a durable agent gets the control plane, and admission
// control when p's Config sets a limit.
func ServeIngress(p *serve.Parts, a agent.Agent) (*HTTP, error) {
	srv := p.IngressFor(a)
	srv.NoAuth = true
	srv.SetReady(true)
	return ServeHandler(srv.Handler())
}

// ServeHandler serves h on a free loopback port.
func ServeHandler(h http.Handler) (*HTTP, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	return &HTTP{URL: "http://" + ln.Addr().String(), srv: hs}, nil
}

// Close stops serving and drops open streams.
func (h *HTTP) Close() { _ = h.srv.Close() }

// FreePort asks the kernel for a free loopback TCP port.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// NATSReachable reports whether a NATS server answers at url.
func NATSReachable(url string) error {
	b, err := feed.NewNATS(url)
	if err != nil {
		return err
	}
	return b.Close()
}
