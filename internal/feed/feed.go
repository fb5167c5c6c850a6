// Package feed is the live event feed from activities (workers) to ingresses.
//
// Token deltas and other live progress never enter Temporal history; workers
// publish them here and ingresses read them per turn. The feed keeps each
// turn as a log for a bounded time after its last message (Retention), so a
// consumer that attaches late, or re-attaches after a dropped connection,
// reads the turn from its start and misses nothing. Every message carries its
// position in that log (Seq), the same for every consumer of a bus; it is
// not a resume cursor (a log can be swept, or recreated after a restart):
// the relay derives resume positions from the turn's steps. Delivery is at-most-once
// (a lost message is detected through the step markers and filled in from
// the session store), ordered per publisher, and publishers never wait for
// subscribers: each subscription buffers without bound until it is read.
package feed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fastagent/fastagent/agent"
)

// Message kinds.
const (
	// KindEvent carries an agent event of a turn.
	KindEvent = "event"
	// KindAttempt announces a new attempt of a turn step (after a retry).
	KindAttempt = "attempt"
	// KindEnd marks the end of what a publisher will send for a turn step.
	KindEnd = "end"
	// KindAttach announces a consumer attaching to the turn, so that a
	// detached consumer waiting to abort it knows it was picked up.
	KindAttach = "attach"
	// KindOutcome carries the turn's outcome once it is durably recorded.
	KindOutcome = "outcome"
	// KindUsage carries the usage of a model call its turn stopped while it
	// ran (Usage): the provider reported none, so it is an estimate. The
	// ingress charges it to the turn's principal (limits.perPrincipal).
	KindUsage = "usage"
)

// DefaultRetention is how long a turn's log is kept after its last message
// (in process) or after its end (NATS).
const DefaultRetention = 10 * time.Minute

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
	// Attach identifies the attaching consumer (KindAttach).
	Attach string `json:"attach,omitempty"`
	// Outcome is the turn's outcome as JSON (KindOutcome).
	Outcome json.RawMessage `json:"outcome,omitempty"`
	// Usage is a stopped model call's usage (KindUsage).
	Usage *agent.Usage `json:"usage,omitempty"`
	// Seq is the message's position in its turn's log, increasing; set by
	// the bus on delivery (what a publisher sets is ignored).
	Seq int64 `json:"-"`
}

// Bus carries messages from publishers to the subscribers of a turn.
type Bus interface {
	// Publish appends m to the log of turn m.Turn of m.Session and sends it to
	// the turn's subscribers; it never blocks on them.
	Publish(ctx context.Context, m Message) error
	// Flush returns once everything published so far by this Bus has reached
	// the broker (no-op in process).
	Flush(ctx context.Context) error
	// Subscribe delivers the turn's retained messages from its start, then
	// its live ones, in log order. ctx bounds the set-up only; the
	// subscription lives until Close.
	Subscribe(ctx context.Context, session, turn string) (Subscription, error)
	// Stop tells every process on the bus that the turn was stopped (the
	// workflow aborted it, or stopped its live reply): activities running
	// for it stop now instead of at their next heartbeat. Best effort — a
	// lost notice leaves the heartbeat to deliver the cancellation.
	Stop(ctx context.Context, session, turn string) error
	// WatchStop returns a channel closed when a stop for the turn reaches
	// this bus (at once if one did within StopMemory), and the function
	// that releases the watch.
	WatchStop(session, turn string) (<-chan struct{}, func())
	// Close ends all subscriptions of this Bus and releases its resources.
	Close() error
}

// Subscription is the stream of one turn's messages. Messages are
// shared with other subscribers and must be treated as read-only.
type Subscription interface {
	// C delivers the messages; it is closed after Close or when the bus closes.
	C() <-chan Message
	// Close stops delivery and closes C; messages not yet received are dropped.
	Close() error
}

// ErrClosed is returned by operations on a closed Bus.
var ErrClosed = errors.New("feed: bus closed")

// Open returns the bus named by url: "" or "inprocess" for the process's
// in-process bus (one per process, shared by every opener until the last
// closes it), "nats://…" (or "tls://…") for a NATS connection.
func Open(url string) (Bus, error) {
	switch {
	case url == "" || url == "inprocess":
		return openShared(), nil
	case strings.HasPrefix(url, "nats://") || strings.HasPrefix(url, "tls://"):
		return NewNATS(url)
	default:
		return nil, fmt.Errorf("feed: unsupported feed URL %q: want \"\", \"inprocess\" or nats://host:port", url)
	}
}

func checkTurn(session, turn string) error {
	if session == "" {
		return errors.New("feed: empty session ID")
	}
	if turn == "" {
		return errors.New("feed: empty turn ID")
	}
	return nil
}
