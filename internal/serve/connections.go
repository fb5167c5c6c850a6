package serve

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fastagent/fastagent/internal/channels"
)

// Restart bounds of a long connection whose Run returned while the
// ingress was not stopping: the wait doubles from the first to the second.
const (
	connRestartMin = time.Second
	connRestartMax = time.Minute
)

// connections runs the long connections (Channel.Conn) of an ingress
// process and tracks which have not connected yet.
type connections struct {
	mu      sync.Mutex
	waiting map[string]bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// Waiting lists the kinds whose connection has not connected yet, sorted.
func (c *connections) Waiting() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.waiting))
	for k := range c.waiting {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// connected marks kind's connection ready.
func (c *connections) connected(kind string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.waiting, kind)
}

// stop ends every connection and waits for them, at most ShutdownTimeout.
func (c *connections) stop() {
	c.cancel()
	done := make(chan struct{})
	go func() {
		c.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(ShutdownTimeout):
	}
}

// startConnections starts the Run of every channel's long connection until
// ctx ends or stop is called. Each delivery is handed to st with
// channels.Dispatch; a Run that returns early is logged and restarted with
// backoff. It returns nil when no channel has a long connection.
func (p *Parts) startConnections(ctx context.Context, st channels.Starter) *connections {
	ctx, cancel := context.WithCancel(ctx)
	c := &connections{waiting: map[string]bool{}, cancel: cancel}
	for _, a := range append([]agentDoors{{chans: p.Channels}}, p.agentDoors...) {
		p.startAgentConnections(ctx, c, st, a)
	}
	if len(c.waiting) == 0 {
		cancel()
		return nil
	}
	return c
}

// startAgentConnections starts the long connections of a's channels (the
// main agent's, or another agent's handing to its task queue and scoped
// names), each named by its kind ("<agent>/<kind>" for another agent).
func (p *Parts) startAgentConnections(ctx context.Context, c *connections, st channels.Starter, a agentDoors) {
	tq := p.Config.TaskQueue
	if a.name != "" {
		tq = a.name
	}
	hand := channels.Hand(st, tq)
	if a.name != "" {
		plain := hand
		hand = func(ctx context.Context, parsed channels.Parsed) error {
			return plain(channels.ForAgent(ctx, a.name), parsed)
		}
	}
	for _, ch := range a.chans {
		if ch.Conn == nil {
			continue
		}
		kind := ch.Door.Kind()
		if a.name != "" {
			kind = a.name + "/" + kind
		}
		if l, ok := ch.Conn.(interface{ SetLogger(*slog.Logger) }); ok && p.Config.Logger != nil {
			l.SetLogger(p.Config.Logger)
		}
		c.waiting[kind] = true
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			p.keepConnected(ctx, kind, ch.Conn, hand, func() { c.connected(kind) })
		}()
		p.Config.Logger.Info("channel enabled", "kind", kind, "transport", "long connection", "file", ch.File)
	}
}

// keepConnected runs conn until ctx ends, restarting it when it returns
// early: after restartMin, doubling up to connRestartMax, back to the
// minimum once a run connected.
func (p *Parts) keepConnected(ctx context.Context, kind string, conn channels.Connector,
	hand func(context.Context, channels.Parsed) error, ready func()) {
	log := p.Config.Logger
	if log == nil {
		log = slog.Default()
	}
	wait := p.restartMin()
	for {
		var connected atomic.Bool
		err := conn.Run(ctx, hand, func() {
			if !connected.Swap(true) {
				ready()
			}
		})
		if ctx.Err() != nil {
			if err != nil {
				log.Warn("channel connection stopped", "kind", kind, "error", err)
			}
			return
		}
		if connected.Load() {
			wait = p.restartMin()
		}
		log.Error("channel connection ended; restarting", "kind", kind, "error", err, "in", wait)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return
		}
		wait = min(2*wait, connRestartMax)
	}
}

func (p *Parts) restartMin() time.Duration {
	if p.connRestart > 0 {
		return p.connRestart
	}
	return connRestartMin
}

// RunConnectors runs the long connections of chans outside a full ingress
// (tests, benchmarks) the way Start runs them: handed to st with
// channels.Dispatch, restarted with backoff, their bot identities looked
// up, stopped when ctx ends. ready is
// called once every connection has connected. The returned channel is
// closed once all have stopped.
func RunConnectors(ctx context.Context, chans []*channels.Channel, st channels.Starter, taskQueue string,
	ready func(), log *slog.Logger) <-chan error {
	if log == nil {
		log = slog.Default()
	}
	p := &Parts{Config: Config{TaskQueue: taskQueue, Logger: log}, Channels: chans}
	done := make(chan error)
	c := p.startConnections(ctx, st)
	if c == nil {
		ready()
		close(done)
		return done
	}
	ids := p.resolver() // the doors' bot identities, until ctx ends
	ids.Start(ctx)
	go func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for len(c.Waiting()) > 0 {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		ready()
	}()
	go func() {
		<-ctx.Done()
		c.stop()
		ids.Close()
		close(done)
	}()
	return done
}
