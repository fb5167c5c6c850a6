package slack_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/channels/slack"
	"github.com/fastagent/fastagent/internal/testsupport/fakeslack"
	"github.com/fastagent/fastagent/internal/wire"
)

// starter is a fake Temporal client: it records Signal-With-Start calls,
// with how many envelopes were acknowledged when each came in, and fails
// the calls fail says to.
type starter struct {
	sock *fakeslack.Socket
	// fail answers a call with an error when it returns true.
	fail func(n int, m wire.ChatMessage) bool

	mu    sync.Mutex
	calls []call
	// called receives every call (buffered).
	called chan call
}

type call struct {
	id, signal string
	msg        wire.ChatMessage
	// acked are the envelopes acknowledged when the call came in.
	acked []string
	err   error
}

func newStarter(sock *fakeslack.Socket) *starter {
	return &starter{sock: sock, called: make(chan call, 16)}
}

func (s *starter) SignalWithStartWorkflow(_ context.Context, id, signal string, arg interface{},
	_ client.StartWorkflowOptions, _ interface{}, _ ...interface{}) (client.WorkflowRun, error) {
	m, _ := arg.(wire.ChatMessage)
	s.mu.Lock()
	c := call{id: id, signal: signal, msg: m, acked: s.sock.Acks()}
	if s.fail != nil && s.fail(len(s.calls), m) {
		c.err = errors.New("temporal unavailable")
	}
	s.calls = append(s.calls, c)
	s.mu.Unlock()
	s.called <- c
	return nil, c.err
}

// socketChannel builds the channel from a transport: socket file against
// the fake.
func socketChannel(t *testing.T, fake *fakeslack.Server) *channels.Channel {
	t.Helper()
	env := map[string]string{"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APP_TOKEN": "xapp-1-A0FAKE-1-abc", "SLACK_API_URL": fake.APIURL()}
	ch, err := slack.New([]byte("transport: socket\n"), func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if ch.Door.Path() != "" || ch.Conn == nil {
		t.Fatalf("socket channel: path %q, conn %v; want no route and a connector", ch.Door.Path(), ch.Conn)
	}
	return ch
}

// running is a connector's Run in a goroutine.
type running struct {
	ready chan struct{}
	// done is closed when Run returned err.
	done   chan struct{}
	err    error
	cancel context.CancelFunc
}

func run(t *testing.T, conn channels.Connector, st channels.Starter) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{ready: make(chan struct{}), done: make(chan struct{}), cancel: cancel}
	// close panics if ready is called twice.
	go func() {
		defer close(r.done)
		r.err = conn.Run(ctx, channels.Hand(st, ""), func() { close(r.ready) })
	}()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

// bound is the most any step may take before the test gives up.
const bound = 15 * time.Second

func waitCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	t.Cleanup(cancel)
	return ctx
}

// An app_mention envelope reaches the chat workflow with Signal-With-Start
// before it is acknowledged; ready is called once connected; cancelling
// the context ends Run.
func TestSocketHandsOffThenAcks(t *testing.T) {
	t.Parallel()
	fake := fakeslack.New()
	t.Cleanup(fake.Close)
	sock := fake.Socket()
	st := newStarter(sock)
	r := run(t, socketChannel(t, fake).Conn, st)
	ctx := waitCtx(t)
	select {
	case <-r.ready:
	case <-ctx.Done():
		t.Fatal("ready was not called")
	}
	if err := sock.WaitConnected(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := sock.SendEvent("env-1", fixture(t, "app_mention.json"), 0); err != nil {
		t.Fatal(err)
	}
	if err := sock.WaitAck(ctx, "env-1"); err != nil {
		t.Fatalf("envelope not acknowledged: %v", err)
	}
	c := <-st.called
	if c.id != "chat:slack:T061EG9R6:C0LAN2Q65" || c.signal != wire.SignalChatMessage ||
		c.msg.ID != "1515449522.000016" || c.msg.Text != "what is the capital of France?" || c.msg.Event != "Ev0LAN670R" {
		t.Errorf("signal-with-start %s %s %+v", c.id, c.signal, c.msg)
	}
	if len(c.acked) != 0 {
		t.Errorf("envelopes %v were acknowledged before the hand-off", c.acked)
	}
	for _, call := range fake.Calls("apps.connections.open") {
		if got := call.Header.Get("Authorization"); got != "Bearer xapp-1-A0FAKE-1-abc" {
			t.Errorf("apps.connections.open with %q, want the app-level token", got)
		}
	}
	r.cancel()
	select {
	case <-r.done:
		if r.err != nil {
			t.Errorf("Run after cancel = %v, want nil", r.err)
		}
	case <-ctx.Done():
		t.Fatal("Run did not return after its context ended")
	}
}

// A failed hand-off leaves the envelope unacknowledged; Slack's redelivery
// is handed off and acknowledged. Envelopes that are not turns (a bot's
// message, an event type the door does not read) are acknowledged without
// a hand-off. Envelopes keep flowing after Slack asks for a reconnect.
func TestSocketAcks(t *testing.T) {
	t.Parallel()
	fake := fakeslack.New()
	t.Cleanup(fake.Close)
	sock := fake.Socket()
	st := newStarter(sock)
	// The first hand-off fails.
	st.fail = func(n int, _ wire.ChatMessage) bool { return n == 0 }
	r := run(t, socketChannel(t, fake).Conn, st)
	ctx := waitCtx(t)
	if err := sock.WaitConnected(ctx, 1); err != nil {
		t.Fatal(err)
	}
	unknown := []byte(`{"type":"event_callback","team_id":"T061EG9R6","event_id":"Ev9","event":{"type":"no_such_event","ts":"1.2"}}`)
	steps := []struct {
		envelope string
		payload  []byte
		retry    int
		// handed is true when the envelope must reach the starter.
		handed bool
	}{
		{"env-fail", fixture(t, "app_mention.json"), 0, true},
		{"env-bot", fixture(t, "bot_message.json"), 0, false},
		{"env-unknown", unknown, 0, false},
		{"env-im", fixture(t, "message_im.json"), 0, true},
		// Slack redelivers the unacknowledged envelope.
		{"env-fail", fixture(t, "app_mention.json"), 1, true},
	}
	for _, s := range steps {
		if err := sock.SendEvent(s.envelope, s.payload, s.retry); err != nil {
			t.Fatal(err)
		}
		if s.handed {
			select {
			case <-st.called:
			case <-ctx.Done():
				t.Fatalf("%s was not handed off", s.envelope)
			}
		}
	}
	if err := sock.WaitAck(ctx, "env-fail"); err != nil {
		t.Fatalf("redelivery not acknowledged: %v", err)
	}
	// Envelopes are handled in order and acks written in order: the
	// failed delivery's ack would precede env-bot's.
	want := []string{"env-bot", "env-unknown", "env-im", "env-fail"}
	if got := sock.Acks(); !slices.Equal(got, want) {
		t.Errorf("acks %v, want %v (the failed hand-off not acknowledged)", got, want)
	}

	if err := sock.Disconnect(); err != nil {
		t.Fatal(err)
	}
	if err := sock.WaitConnected(ctx, 2); err != nil {
		t.Fatalf("no reconnect after disconnect: %v", err)
	}
	if err := sock.SendEvent("env-after", fixture(t, "message_thread_reply.json"), 0); err != nil {
		t.Fatal(err)
	}
	if err := sock.WaitAck(ctx, "env-after"); err != nil {
		t.Fatalf("envelope after reconnect not acknowledged: %v", err)
	}
	select {
	case <-r.ready:
	default:
		t.Error("ready was not called")
	}
}

// A refused app-level token ends Run with an error, ready never called.
func TestSocketRefusedToken(t *testing.T) {
	t.Parallel()
	fake := fakeslack.New()
	t.Cleanup(fake.Close)
	sock := fake.Socket()
	fake.Fail("apps.connections.open", fakeslack.Failure{Error: "invalid_auth"})
	r := run(t, socketChannel(t, fake).Conn, newStarter(sock))
	ctx := waitCtx(t)
	select {
	case <-r.done:
		if r.err == nil {
			t.Error("Run = nil, want an error for the refused token")
		}
	case <-ctx.Done():
		t.Fatal("Run did not return")
	}
	select {
	case <-r.ready:
		t.Error("ready was called without a connection")
	default:
	}
}

// A Stop click over Socket Mode is handed off as the stop command, then
// acknowledged (as on the HTTP route).
func TestSocketStopClick(t *testing.T) {
	t.Parallel()
	fake := fakeslack.New()
	t.Cleanup(fake.Close)
	sock := fake.Socket()
	st := newStarter(sock)
	r := run(t, socketChannel(t, fake).Conn, st)
	ctx := waitCtx(t)
	if err := sock.WaitConnected(ctx, 1); err != nil {
		t.Fatal(err)
	}
	payload := []byte(`{"type":"block_actions","team":{"id":"T1"},"user":{"id":"U1"},"channel":{"id":"C1"},` +
		`"actions":[{"action_id":"fastagent_stop","block_id":"fastagent_stop","type":"button","action_ts":"1800.1",` +
		`"value":"{\"m\":\"1700.1\",\"r\":\"1700.1\",\"u\":\"U1\",\"t\":\"T1\"}"}]}`)
	if err := sock.SendInteractive("env-stop", payload); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-st.called:
		if c.msg.Command != wire.CommandStop || c.msg.StopTurn != "1700.1" || c.msg.Chat != "T1:C1" || len(c.acked) != 0 {
			t.Errorf("handed off %+v (acked before: %v), want the stop command before the ack", c.msg, c.acked)
		}
	case <-ctx.Done():
		t.Fatal("the stop click was not handed off")
	}
	if err := sock.WaitAck(ctx, "env-stop"); err != nil {
		t.Fatalf("the stop click was not acknowledged: %v", err)
	}
	r.cancel()
	<-r.done
}
