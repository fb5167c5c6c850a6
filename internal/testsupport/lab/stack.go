package lab

import (
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
	"github.com/fastagent/fastagent/internal/ingress"
	"github.com/fastagent/fastagent/internal/worker"
)

var queueSeq atomic.Int64

// NewQueue returns a task queue name unique to this process and call.
func NewQueue(name string) string {
	return fmt.Sprintf("lab-%s-%d-%d", name, time.Now().UnixNano(), queueSeq.Add(1))
}

// Durable returns a durable agent on queue whose ingress side reads bus.
func Durable(c client.Client, bus feed.Bus, queue string) *durable.Agent {
	return &durable.Agent{Client: c, Feed: bus, TaskQueue: queue, Logger: QuietLogger()}
}

// StartWorker starts an in-process worker on queue running the kit's
// activities, which publish to bus.
func StartWorker(c client.Client, k *Kit, bus feed.Bus, queue string) (sdkworker.Worker, error) {
	w, err := worker.New(c, worker.Options{TaskQueue: queue, Activities: k.Activities(bus)})
	if err != nil {
		return nil, err
	}
	if err := w.Start(); err != nil {
		return nil, fmt.Errorf("start worker: %w", err)
	}
	return w, nil
}

// HTTP is an ingress served on a loopback port.
type HTTP struct {
	URL string
	srv *http.Server
}

// ServeIngress serves a (ready) ingress for a on a free loopback port. A
// durable agent also gets the control plane.
func ServeIngress(a agent.Agent) (*HTTP, error) { return ServeIngressAdmit(a, nil) }

// ServeIngressAdmit is ServeIngress with admission control (nil: none).
func ServeIngressAdmit(a agent.Agent, adm ingress.Admitter) (*HTTP, error) {
	srv := &ingress.Server{Agent: a, NoAuth: true, Logger: QuietLogger(), Admission: adm}
	if d, ok := a.(*durable.Agent); ok {
		srv.Control, srv.Attacher = d, d
	}
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
