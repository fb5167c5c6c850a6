package serve

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/workflows"
)

// fakeConn is a long connection a test drives: it connects when told,
// hands one message, and stops with err (nil: when ctx ends).
type fakeConn struct {
	connect chan struct{}
	msg     *workflows.ChatMessage
	handed  chan error
	err     error
}

func (f *fakeConn) Run(ctx context.Context, hand func(context.Context, channels.Parsed) error, ready func()) error {
	select {
	case <-f.connect:
	case <-ctx.Done():
		return nil
	}
	ready()
	ready() // a second call (a reconnect) must not count twice
	if f.msg != nil {
		f.handed <- hand(ctx, channels.Parsed{Messages: []workflows.ChatMessage{*f.msg}})
	}
	if f.err != nil {
		return f.err
	}
	<-ctx.Done()
	return nil
}

type connDoor struct{ kind string }

func (d connDoor) Kind() string                                    { return d.kind }
func (d connDoor) Path() string                                    { return "" }
func (d connDoor) Verify(channels.Request) error                   { return errors.New("no webhook") }
func (d connDoor) Parse(channels.Request) (channels.Parsed, error) { return channels.Parsed{}, nil }

func TestRunConnectors(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	t.Run("none: ready at once", func(t *testing.T) {
		t.Parallel()
		var ready atomic.Int32
		RunConnectors(context.Background(), nil, &fakeStarter{}, "q", func() { ready.Add(1) }, log)
		if ready.Load() != 1 {
			t.Errorf("ready called %d times", ready.Load())
		}
	})
	t.Run("ready when all connected, events dispatched", func(t *testing.T) {
		t.Parallel()
		st := &fakeStarter{}
		a := &fakeConn{connect: make(chan struct{}), handed: make(chan error, 1),
			msg: &workflows.ChatMessage{Kind: "feishu", Chat: "oc_1", ID: "om_1", Text: "hi"}}
		b := &fakeConn{connect: make(chan struct{})}
		chans := []*channels.Channel{{Door: connDoor{"feishu"}, Conn: a}, {Door: connDoor{"lark"}, Conn: b}, {Door: connDoor{"slack"}}}
		ctx, cancel := context.WithCancel(context.Background())
		var ready atomic.Int32
		errc := RunConnectors(ctx, chans, st, "q", func() { ready.Add(1) }, log)
		close(a.connect)
		if err := <-a.handed; err != nil {
			t.Fatalf("hand: %v", err)
		}
		if ready.Load() != 0 {
			t.Error("ready before every connection connected")
		}
		close(b.connect)
		deadline := time.Now().Add(5 * time.Second)
		for ready.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if ready.Load() != 1 {
			t.Errorf("ready called %d times, want once", ready.Load())
		}
		st.mu.Lock()
		calls := strings.Join(st.calls, "\n")
		st.mu.Unlock()
		if !strings.Contains(calls, workflows.ChatWorkflowID("feishu", "oc_1")+" "+workflows.SignalChatMessage) {
			t.Errorf("dispatched %q, want the chat workflow signalled", calls)
		}
		cancel()
		select {
		case err := <-errc:
			t.Errorf("shutdown reported %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	})
	t.Run("a connection that stops is reported", func(t *testing.T) {
		t.Parallel()
		c := &fakeConn{connect: make(chan struct{}), err: errors.New("bad credentials")}
		close(c.connect)
		errc := RunConnectors(context.Background(), []*channels.Channel{{Door: connDoor{"feishu"}, Conn: c}}, &fakeStarter{}, "q", func() {}, log)
		select {
		case err := <-errc:
			if !strings.Contains(err.Error(), "bad credentials") {
				t.Errorf("err = %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the stopped connection was not reported")
		}
	})
}

// TestWithChannelsLongConnection: a channel without a route (a long
// connection) mounts nothing and breaks nothing.
func TestWithChannelsLongConnection(t *testing.T) {
	t.Parallel()
	p := &Parts{Config: Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		Channels: []*channels.Channel{{Door: connDoor{"feishu"}, Conn: &fakeConn{}}}}
	h := p.WithChannels(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }), &fakeStarter{})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/feishu", nil))
	if rec.Code != http.StatusTeapot {
		t.Errorf("POST /feishu = %d, want it to fall through to the API", rec.Code)
	}
}
