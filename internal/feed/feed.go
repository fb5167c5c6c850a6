// Package feed is the live event feed from activities (workers) to ingresses.
//
// Token deltas and other live progress never enter Temporal history; workers
// publish them here and ingresses subscribe per session. Delivery is
// at-most-once and ordered per publisher, every current subscriber of a
// session receives every message published to it, and publishers never wait
// for subscribers: each subscription buffers without bound until it is read.
package feed

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fastagent/fastagent/agent"
)

// Message kinds.
const (
	// KindEvent carries an agent event of a turn.
	KindEvent = "event"
	// KindAttempt announces a new attempt of a turn step (after a retry).
	KindAttempt = "attempt"
	// KindEnd marks the end of what a publisher will send for a turn.
	KindEnd = "end"
)

// Message is one item on a session's feed.
type Message struct {
	Session     string       `json:"session"`
	Turn        string       `json:"turn"`
	Kind        string       `json:"kind"`
	Step        int          `json:"step,omitempty"`
	Attempt     int          `json:"attempt,omitempty"`
	MaxAttempts int          `json:"maxAttempts,omitempty"`
	Marker      string       `json:"marker,omitempty"`
	Event       *agent.Event `json:"event,omitempty"`
}

// Bus carries messages from publishers to the subscribers of a session.
type Bus interface {
	// Publish sends m to the subscribers of m.Session; it never blocks on them.
	Publish(ctx context.Context, m Message) error
	// Flush returns once everything published so far by this Bus has reached
	// the broker (no-op in process).
	Flush(ctx context.Context) error
	// Subscribe starts delivering the session's messages published from now
	// on. ctx bounds the set-up only; the subscription lives until Close.
	Subscribe(ctx context.Context, session string) (Subscription, error)
	// Close ends all subscriptions of this Bus and releases its resources.
	Close() error
}

// Subscription is a live stream of one session's messages. Messages are
// shared with other subscribers and must be treated as read-only.
type Subscription interface {
	// C delivers the messages; it is closed after Close or when the bus closes.
	C() <-chan Message
	// Close stops delivery and closes C; messages not yet received are dropped.
	Close() error
}

// ErrClosed is returned by operations on a closed Bus.
var ErrClosed = errors.New("feed: bus closed")

// Open returns the bus named by url: "" or "inprocess" for an in-process
// bus, "nats://…" (or "tls://…") for a NATS connection.
func Open(url string) (Bus, error) {
	switch {
	case url == "" || url == "inprocess":
		return NewInProcess(), nil
	case strings.HasPrefix(url, "nats://") || strings.HasPrefix(url, "tls://"):
		return NewNATS(url)
	default:
		return nil, fmt.Errorf("feed: unsupported feed URL %q: want \"\", \"inprocess\" or nats://host:port", url)
	}
}

func checkSession(session string) error {
	if session == "" {
		return errors.New("feed: empty session ID")
	}
	return nil
}
