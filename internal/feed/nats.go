package feed

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// DefaultPrefix is the subject prefix of the NATS feed: a session's messages
// travel on DefaultPrefix + "." + token(session).
const DefaultPrefix = "fastagent.feed"

// defaultFlushTimeout bounds Flush and Subscribe when ctx has no deadline
// (nats.go requires one).
const defaultFlushTimeout = 10 * time.Second

// Option configures a NATS bus.
type Option func(*natsConfig)

type natsConfig struct {
	prefix        string
	name          string
	reconnectWait time.Duration
	extra         []nats.Option
}

// WithPrefix sets the subject prefix (default DefaultPrefix), for example to
// isolate tests or deployments sharing a NATS server.
func WithPrefix(prefix string) Option { return func(c *natsConfig) { c.prefix = prefix } }

// WithName sets the connection name shown by the NATS server.
func WithName(name string) Option { return func(c *natsConfig) { c.name = name } }

// WithReconnectWait sets the delay between reconnect attempts (default 1s).
func WithReconnectWait(d time.Duration) Option {
	return func(c *natsConfig) { c.reconnectWait = d }
}

// WithNATSOptions appends raw nats.go options, applied after the defaults.
func WithNATSOptions(opts ...nats.Option) Option {
	return func(c *natsConfig) { c.extra = append(c.extra, opts...) }
}

// NATS is a Bus over core NATS publish/subscribe. Workers and ingresses in
// different processes each hold one; a session's messages flow on its own
// subject.
type NATS struct {
	nc     *nats.Conn
	prefix string

	mu     sync.Mutex
	subs   map[*natsSub]struct{}
	closed bool
}

var _ Bus = (*NATS)(nil)

// NewNATS connects to the NATS server at url. The connection reconnects
// forever; messages published while disconnected are buffered by nats.go up
// to its reconnect buffer limit.
func NewNATS(url string, opts ...Option) (*NATS, error) {
	cfg := natsConfig{prefix: DefaultPrefix, name: "fastagent-feed", reconnectWait: time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	if err := checkPrefix(cfg.prefix); err != nil {
		return nil, err
	}
	nopts := []nats.Option{
		nats.Name(cfg.name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(cfg.reconnectWait),
	}
	nopts = append(nopts, cfg.extra...)
	nc, err := nats.Connect(url, nopts...)
	if err != nil {
		return nil, fmt.Errorf("feed: connect to NATS at %s: %w", url, err)
	}
	return &NATS{nc: nc, prefix: cfg.prefix, subs: make(map[*natsSub]struct{})}, nil
}

func checkPrefix(p string) error {
	if p == "" {
		return errors.New("feed: empty subject prefix")
	}
	for _, tok := range strings.Split(p, ".") {
		if tok == "" || strings.ContainsAny(tok, " \t\r\n*>") {
			return fmt.Errorf("feed: invalid subject prefix %q", p)
		}
	}
	return nil
}

// Subject returns the NATS subject carrying session's messages. The session
// ID is base64url-encoded so that any string is one valid subject token.
func (b *NATS) Subject(session string) string {
	return b.prefix + "." + base64.RawURLEncoding.EncodeToString([]byte(session))
}

// Publish encodes m as JSON and publishes it on the session's subject.
func (b *NATS) Publish(ctx context.Context, m Message) error {
	if err := checkSession(m.Session); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("feed: publish: %w", err)
	}
	data, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("feed: encode message: %w", err)
	}
	if err := b.nc.Publish(b.Subject(m.Session), data); err != nil {
		if errors.Is(err, nats.ErrConnectionClosed) {
			return ErrClosed
		}
		return fmt.Errorf("feed: publish: %w", err)
	}
	return nil
}

// Flush waits until the server has received everything published so far.
func (b *NATS) Flush(ctx context.Context) error {
	if err := b.flush(ctx); err != nil {
		return fmt.Errorf("feed: flush: %w", err)
	}
	return nil
}

func (b *NATS) flush(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultFlushTimeout)
		defer cancel()
	}
	err := b.nc.FlushWithContext(ctx)
	if errors.Is(err, nats.ErrConnectionClosed) {
		return ErrClosed
	}
	return err
}

// Subscribe subscribes to the session's subject and returns once the server
// has registered the subscription, so a message published afterwards by any
// connection is delivered.
func (b *NATS) Subscribe(ctx context.Context, session string) (Subscription, error) {
	if err := checkSession(session); err != nil {
		return nil, err
	}
	s := &natsSub{bus: b, q: newQueue()}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		s.q.close()
		return nil, ErrClosed
	}
	b.subs[s] = struct{}{}
	b.mu.Unlock()

	// The handler only decodes and queues, so the nats.go pending buffer
	// stays near empty and the server never sees a slow consumer.
	sub, err := b.nc.Subscribe(b.Subject(session), func(msg *nats.Msg) {
		var m Message
		if json.Unmarshal(msg.Data, &m) != nil {
			return // at-most-once: an undecodable message is dropped
		}
		s.q.push(m)
	})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("feed: subscribe to session %q: %w", session, err)
	}
	s.setSub(sub)
	_ = sub.SetPendingLimits(-1, -1)
	if err := b.flush(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("feed: subscribe to session %q: %w", session, err)
	}
	return s, nil
}

// Close ends all subscriptions, flushes pending publishes (best effort) and
// closes the connection. Later calls are no-ops.
func (b *NATS) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	subs := b.subs
	b.subs = nil
	b.mu.Unlock()
	for s := range subs {
		s.close()
	}
	if b.nc.IsConnected() {
		_ = b.nc.FlushTimeout(2 * time.Second)
	}
	b.nc.Close()
	return nil
}

type natsSub struct {
	bus  *NATS
	q    *queue
	once sync.Once

	mu  sync.Mutex
	sub *nats.Subscription
}

func (s *natsSub) setSub(sub *nats.Subscription) {
	s.mu.Lock()
	s.sub = sub
	s.mu.Unlock()
}

func (s *natsSub) C() <-chan Message { return s.q.out }

// Close unsubscribes and closes the channel; later calls are no-ops.
func (s *natsSub) Close() error {
	s.bus.mu.Lock()
	if s.bus.subs != nil {
		delete(s.bus.subs, s)
	}
	s.bus.mu.Unlock()
	s.close()
	return nil
}

func (s *natsSub) close() {
	s.once.Do(func() {
		s.mu.Lock()
		sub := s.sub
		s.mu.Unlock()
		if sub != nil {
			// Errors mean the subscription or connection is already gone.
			_ = sub.Unsubscribe()
		}
		s.q.close()
	})
}
