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
	"github.com/nats-io/nats.go/jetstream"
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
	retention     time.Duration
	maxTurnAge    time.Duration
	maxBytes      int64
	prefix        string
	name          string
	reconnectWait time.Duration
	extra         []nats.Option
}

// WithPrefix sets the subject prefix (default DefaultPrefix), for example to
// isolate tests or deployments sharing a NATS server.
func WithPrefix(prefix string) Option { return func(c *natsConfig) { c.prefix = prefix } }

// WithRetention sets how long a turn is kept after it ended (default
// DefaultRetention): the window in which a finished turn can be replayed
// from the feed (later, its text comes from the session store).
func WithRetention(d time.Duration) Option { return func(c *natsConfig) { c.retention = d } }

// DefaultMaxTurnAge is how long the stream keeps any message at most: the
// backstop for turns whose end was never seen by a bus that could drop them
// (the worker that published the outcome stopped within the retention).
const DefaultMaxTurnAge = 24 * time.Hour

// WithMaxTurnAge sets the backstop age of every message (default
// DefaultMaxTurnAge, at least the retention). A turn running longer than
// this loses its start from the feed; the relay then fills it in from the
// store.
func WithMaxTurnAge(d time.Duration) Option { return func(c *natsConfig) { c.maxTurnAge = d } }

// WithMaxBytes bounds the stream's memory (default unlimited: the retention
// bounds it); the oldest messages go first.
func WithMaxBytes(n int64) Option { return func(c *natsConfig) { c.maxBytes = n } }

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

// NATS is a Bus over NATS JetStream. Workers and ingresses in different
// processes each hold one. Every turn has its own subject in one memory
// stream; a turn is kept whole while it runs and dropped the retention
// after its end (the bus that publishes its outcome purges its subject
// then; messages older than the max turn age go in any case). Publishers
// publish without waiting for the broker's ack, and a subscriber reads its
// turn's subject from the start with an ordered consumer. Seq is the stream
// sequence (resume positions are the relay's, derived from the turn's steps).
type NATS struct {
	nc        *nats.Conn
	js        jetstream.JetStream
	st        jetstream.Stream
	prefix    string
	stream    string
	retention time.Duration

	stops   stopBoard
	stopSub *nats.Subscription

	mu     sync.Mutex
	subs   map[*natsSub]struct{}
	purges map[string]*time.Timer
	closed bool
}

var _ Bus = (*NATS)(nil)

// NewNATS connects to the NATS server at url and creates (or updates) the
// feed's stream. The connection reconnects forever; messages published while
// disconnected are buffered by nats.go up to its reconnect buffer limit.
func NewNATS(url string, opts ...Option) (*NATS, error) {
	cfg := natsConfig{prefix: DefaultPrefix, name: "fastagent-feed", reconnectWait: time.Second, retention: DefaultRetention}
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
	url = maskUserInfo(url) // only the server's address in errors from here on
	if err != nil {
		return nil, fmt.Errorf("feed: connect to NATS at %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("feed: JetStream on %s: %w", url, err)
	}
	if cfg.maxTurnAge <= 0 {
		cfg.maxTurnAge = DefaultMaxTurnAge
	}
	b := &NATS{nc: nc, js: js, prefix: cfg.prefix, stream: StreamName(cfg.prefix), retention: cfg.retention,
		subs: make(map[*natsSub]struct{}), purges: make(map[string]*time.Timer)}
	ctx, cancel := context.WithTimeout(context.Background(), defaultFlushTimeout)
	defer cancel()
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        b.stream,
		Description: "fastagent live feed: one subject per turn, kept for late and re-attaching consumers",
		Subjects:    []string{b.prefix + ".>"},
		Storage:     jetstream.MemoryStorage,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      max(cfg.maxTurnAge, cfg.retention),
		MaxBytes:    cfg.maxBytes,
	})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("feed: create stream %s on %s (is JetStream enabled? start nats-server with -js): %w", b.stream, url, err)
	}
	b.st = st
	// One core subscription per bus for stop notices: they are rare, live
	// only, and outside the stream (see StopSubject).
	b.stopSub, err = nc.Subscribe(b.StopSubject(), func(msg *nats.Msg) {
		var n stopNotice
		if json.Unmarshal(msg.Data, &n) == nil && checkTurn(n.Session, n.Turn) == nil {
			b.stops.stop(n.Session, n.Turn)
		}
	})
	if err == nil {
		err = b.flush(ctx) // the server has the subscription before NewNATS returns
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("feed: subscribe to stop notices on %s: %w", url, err)
	}
	return b, nil
}

// stopNotice is the body of a message on the stop subject.
type stopNotice struct {
	Session string `json:"session"`
	Turn    string `json:"turn"`
}

// StopSubject is the core NATS subject stop notices travel on: beside the
// stream's subjects (prefix.>), so notices are never stored, and every bus
// of the prefix receives each.
func (b *NATS) StopSubject() string { return b.prefix + "_stop" }

// Stop publishes a stop notice for the turn to every bus of the prefix
// (this one included) and flushes it.
func (b *NATS) Stop(ctx context.Context, session, turn string) error {
	if err := checkTurn(session, turn); err != nil {
		return err
	}
	data, err := json.Marshal(stopNotice{Session: session, Turn: turn})
	if err != nil {
		return fmt.Errorf("feed: encode stop notice: %w", err)
	}
	if err := b.nc.Publish(b.StopSubject(), data); err != nil {
		if errors.Is(err, nats.ErrConnectionClosed) {
			return ErrClosed
		}
		return fmt.Errorf("feed: publish stop notice: %w", err)
	}
	return b.Flush(ctx)
}

// WatchStop watches for a stop notice of the turn from any bus of the
// prefix.
func (b *NATS) WatchStop(session, turn string) (<-chan struct{}, func()) {
	return b.stops.watch(session, turn)
}

// expire drops a turn's subject the retention after its end (its outcome).
func (b *NATS) expire(subject string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	if t := b.purges[subject]; t != nil {
		t.Stop()
	}
	b.purges[subject] = time.AfterFunc(b.retention, func() {
		b.mu.Lock()
		delete(b.purges, subject)
		closed := b.closed
		b.mu.Unlock()
		if closed {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), defaultFlushTimeout)
		defer cancel()
		_ = b.st.Purge(ctx, jetstream.WithPurgeSubject(subject)) // the max turn age is the backstop
	})
}

// StreamName is the JetStream stream that holds the feed with this prefix.
func StreamName(prefix string) string {
	return strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(prefix))
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

// Subject returns the NATS subject carrying a turn's messages. The IDs are
// base64url-encoded so that any string is one valid subject token.
func (b *NATS) Subject(session, turn string) string {
	enc := base64.RawURLEncoding
	return b.prefix + "." + enc.EncodeToString([]byte(session)) + "." + enc.EncodeToString([]byte(turn))
}

// Publish encodes m as JSON and publishes it on the turn's subject, without
// waiting for the stream's ack.
func (b *NATS) Publish(ctx context.Context, m Message) error {
	if err := checkTurn(m.Session, m.Turn); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("feed: publish: %w", err)
	}
	data, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("feed: encode message: %w", err)
	}
	subject := b.Subject(m.Session, m.Turn)
	if err := b.nc.Publish(subject, data); err != nil {
		if errors.Is(err, nats.ErrConnectionClosed) {
			return ErrClosed
		}
		return fmt.Errorf("feed: publish: %w", err)
	}
	if m.Kind == KindOutcome {
		b.expire(subject) //nolint:contextcheck // expiry is scheduled after the publish returns, on the bus's own clock
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

// Subscribe reads the turn's subject from the start of the stream with an
// ordered consumer, then follows it live.
func (b *NATS) Subscribe(ctx context.Context, session, turn string) (Subscription, error) {
	if err := checkTurn(session, turn); err != nil {
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

	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultFlushTimeout)
		defer cancel()
	}
	cons, err := b.js.OrderedConsumer(ctx, b.stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{b.Subject(session, turn)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("feed: subscribe to turn %q of session %q: %w", turn, session, err)
	}
	// The handler only decodes and queues, so the client buffer stays near
	// empty.
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		var m Message
		if json.Unmarshal(msg.Data(), &m) != nil {
			return // at-most-once: an undecodable message is dropped
		}
		if md, err := msg.Metadata(); err == nil {
			m.Seq = int64(md.Sequence.Stream)
		}
		s.q.push(m)
	}, jetstream.PullMaxMessages(256))
	if err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("feed: subscribe to turn %q of session %q: %w", turn, session, err)
	}
	s.setConsumer(cc)
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
	for _, t := range b.purges {
		t.Stop()
	}
	b.purges = nil
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

	mu sync.Mutex
	cc jetstream.ConsumeContext
}

func (s *natsSub) setConsumer(cc jetstream.ConsumeContext) {
	s.mu.Lock()
	s.cc = cc
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
		cc := s.cc
		s.mu.Unlock()
		if cc != nil {
			cc.Stop()
		}
		s.q.close()
	})
}

// maskUserInfo returns a NATS URL (or a comma-separated list of them) with
// any user info — a token, or a user and password — replaced by xxxxx.
func maskUserInfo(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		scheme, rest, ok := strings.Cut(strings.TrimSpace(p), "://")
		if !ok {
			continue
		}
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			parts[i] = scheme + "://xxxxx@" + rest[at+1:]
		}
	}
	return strings.Join(parts, ",")
}
