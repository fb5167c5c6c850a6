package serve

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/testsupport/wait"
	"github.com/fastagent/fastagent/internal/wire"
)

// connDoor is the door of a channel that only has a long connection.
type connDoor struct{}

func (connDoor) Kind() string { return "fake" }
func (connDoor) Path() string { return "" }
func (connDoor) Verify(channels.Request) error {
	return errors.New("no route")
}
func (connDoor) Parse(channels.Request) (channels.Parsed, error) { return channels.Parsed{}, nil }

// fakeConn is a Connector: its first Run fails at once (the restart is
// tested), the second hands one message off, waits for release, calls
// ready, and runs until ctx ends.
type fakeConn struct {
	release chan struct{}

	mu      sync.Mutex
	runs    int
	handErr []error
	ended   chan struct{}
}

func (f *fakeConn) Run(ctx context.Context, hand func(context.Context, channels.Parsed) error, ready func()) error {
	f.mu.Lock()
	f.runs++
	n := f.runs
	f.mu.Unlock()
	if n == 1 {
		return errors.New("connection refused")
	}
	err := hand(ctx, channels.Parsed{Messages: []wire.ChatMessage{{Kind: "fake", Chat: "T1:C1", ID: "1.5", Text: "hi"}}})
	f.mu.Lock()
	f.handErr = append(f.handErr, err)
	f.mu.Unlock()
	<-f.release
	ready()
	<-ctx.Done()
	close(f.ended)
	return nil
}

// A channel's long connection is started with hand wired to Dispatch
// (Signal-With-Start on the chat workflow), restarted when Run returns
// early, reported as waiting until it calls ready, and stopped by stop.
func TestConnectionsHandToDispatch(t *testing.T) {
	t.Parallel()
	conn := &fakeConn{release: make(chan struct{}), ended: make(chan struct{})}
	st := &fakeStarter{}
	p := &Parts{Config: Config{Logger: slog.Default()}, connRestart: time.Millisecond,
		Channels: []*channels.Channel{{File: "channels/fake.yaml", Door: connDoor{}, Conn: conn}}}
	c := p.startConnections(context.Background(), st)
	if c == nil {
		t.Fatal("startConnections = nil with a long connection")
	}
	defer c.stop()
	if got := c.Waiting(); !slices.Equal(got, []string{"fake"}) {
		t.Errorf("Waiting before ready = %v, want [fake]", got)
	}
	wait.For(t, 15*time.Second, "the connection's hand-off to reach the starter", func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return len(st.calls) > 0
	})
	if got := c.Waiting(); !slices.Equal(got, []string{"fake"}) {
		t.Errorf("Waiting before ready = %v, want [fake]", got)
	}
	close(conn.release)
	wait.For(t, 15*time.Second, "Waiting to be empty after ready", func() bool { return len(c.Waiting()) == 0 })
	st.mu.Lock()
	calls := strings.Join(st.calls, ";")
	st.mu.Unlock()
	if want := "chat:fake:T1:C1 " + wire.SignalChatMessage + " 1.5"; calls != want {
		t.Errorf("signal-with-start calls %q, want %q", calls, want)
	}
	conn.mu.Lock()
	runs, handErr := conn.runs, conn.handErr
	conn.mu.Unlock()
	if runs != 2 || len(handErr) != 1 || handErr[0] != nil {
		t.Errorf("runs %d, hand errors %v; want a restart and one successful hand-off", runs, handErr)
	}
	c.stop()
	select {
	case <-conn.ended:
	default:
		t.Error("stop returned before Run saw its context end")
	}
}

// Without a long connection nothing is started.
func TestConnectionsNone(t *testing.T) {
	t.Parallel()
	p := &Parts{Config: Config{Logger: slog.Default()}}
	if c := p.startConnections(context.Background(), &fakeStarter{}); c != nil {
		t.Errorf("startConnections = %v, want nil", c)
	}
}

// Another agent's long connection (served with --agent) hands its messages
// to that agent's chat workflow (chat:<agent>/…), and /health names it
// "<agent>/<kind>" while it connects.
func TestConnectionsOfAnotherAgent(t *testing.T) {
	t.Parallel()
	conn := &fakeConn{release: make(chan struct{}), ended: make(chan struct{})}
	st := &fakeStarter{}
	p := &Parts{Config: Config{Logger: slog.Default()}, connRestart: time.Millisecond,
		agentDoors: []agentDoors{{name: "reviewer", chans: []*channels.Channel{{File: "channels/fake.yaml", Door: connDoor{}, Conn: conn}}}}}
	c := p.startConnections(context.Background(), st)
	if c == nil {
		t.Fatal("startConnections = nil with another agent's long connection")
	}
	defer c.stop()
	if got := c.Waiting(); !slices.Equal(got, []string{"reviewer/fake"}) {
		t.Errorf("Waiting = %v, want [reviewer/fake]", got)
	}
	var calls string
	wait.For(t, 15*time.Second, "the connection's hand-off to reach the starter", func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		calls = strings.Join(st.calls, ";")
		return calls != ""
	})
	if want := "chat:reviewer/fake:T1:C1 " + wire.SignalChatMessage + " 1.5"; calls != want {
		t.Errorf("signal-with-start calls %q, want %q", calls, want)
	}
	close(conn.release)
}
