package fakeslack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// socketPath is the websocket URL apps.connections.open hands out.
const socketPath = "/link"

// Socket is a fake Socket Mode endpoint on a Server: apps.connections.open
// (app-level token only) answers with the URL of a websocket that says
// hello, pings like Slack, carries the envelopes a test sends, and records
// the acknowledgements (envelope IDs) the client writes back.
type Socket struct {
	s *Server
	// PingEvery is how often the websocket pings the client (Slack pings
	// every few seconds; socketmode reconnects after 30 s without one).
	PingEvery time.Duration

	mu      sync.Mutex
	conn    *websocket.Conn
	opens   int
	acks    []string
	changed chan struct{} // closed and replaced on every connection or ack
}

// Socket turns on Socket Mode on s and returns it.
func (s *Server) Socket() *Socket {
	k := &Socket{s: s, PingEvery: time.Second, changed: make(chan struct{})}
	s.Handle("apps.connections.open", func(s *Server, c Call) map[string]any {
		if !strings.HasPrefix(c.Header.Get("Authorization"), "Bearer xapp-") {
			return map[string]any{"ok": false, "error": "not_allowed_token_type"}
		}
		return map[string]any{"url": "ws" + strings.TrimPrefix(s.URL, "http") + socketPath}
	})
	s.mu.Lock()
	s.socket = http.HandlerFunc(k.serve)
	s.mu.Unlock()
	return k
}

var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

// serve is one websocket connection: hello, pings, and the read loop that
// records acknowledgements.
func (k *Socket) serve(w http.ResponseWriter, r *http.Request) {
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer func() { _ = conn.Close() }()
	hello := map[string]any{"type": "hello", "num_connections": 1,
		"debug_info":      map[string]any{"host": "applink-fake", "approximate_connection_time": 18060},
		"connection_info": map[string]any{"app_id": "A0FAKE"}}
	k.mu.Lock()
	k.conn = conn
	k.opens++
	err = conn.WriteJSON(hello)
	k.notifyLocked()
	k.mu.Unlock()
	if err != nil {
		return
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		t := time.NewTicker(k.PingEvery)
		defer t.Stop()
		for {
			// Ping at once, then on every tick.
			if conn.WriteControl(websocket.PingMessage, []byte("ping"), time.Now().Add(time.Second)) != nil {
				return
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	for {
		_, msg, err := conn.ReadMessage()
		if err != nil {
			k.mu.Lock()
			if k.conn == conn {
				k.conn = nil
			}
			k.mu.Unlock()
			return
		}
		var ack struct {
			EnvelopeID string `json:"envelope_id"`
		}
		if json.Unmarshal(msg, &ack) == nil && ack.EnvelopeID != "" {
			k.mu.Lock()
			k.acks = append(k.acks, ack.EnvelopeID)
			k.notifyLocked()
			k.mu.Unlock()
		}
	}
}

func (k *Socket) notifyLocked() {
	close(k.changed)
	k.changed = make(chan struct{})
}

// wait blocks until cond (checked under the lock) holds or ctx ends.
func (k *Socket) wait(ctx context.Context, cond func() bool) error {
	for {
		k.mu.Lock()
		ok, ch := cond(), k.changed
		k.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// WaitConnected blocks until at least n websocket connections were opened.
func (k *Socket) WaitConnected(ctx context.Context, n int) error {
	return k.wait(ctx, func() bool { return k.opens >= n && k.conn != nil })
}

// Connections is how many websocket connections were opened.
func (k *Socket) Connections() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.opens
}

// Acks returns the acknowledged envelope IDs in order.
func (k *Socket) Acks() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.acks...)
}

// WaitAck blocks until envelope is acknowledged.
func (k *Socket) WaitAck(ctx context.Context, envelope string) error {
	return k.wait(ctx, func() bool {
		for _, a := range k.acks {
			if a == envelope {
				return true
			}
		}
		return false
	})
}

// SendEvent sends an events_api envelope carrying payload (an Events API
// event_callback body) on the open connection.
func (k *Socket) SendEvent(envelope string, payload []byte, retryAttempt int) error {
	if !json.Valid(payload) {
		return errors.New("fakeslack: payload is not JSON")
	}
	return k.send(map[string]any{"type": "events_api", "envelope_id": envelope, "payload": json.RawMessage(payload),
		"accepts_response_payload": false, "retry_attempt": retryAttempt, "retry_reason": ""})
}

// SendInteractive sends an interactive envelope (a button click) with
// payload, the interaction's JSON.
func (k *Socket) SendInteractive(envelope string, payload []byte) error {
	if !json.Valid(payload) {
		return errors.New("fakeslack: payload is not JSON")
	}
	return k.send(map[string]any{"type": "interactive", "envelope_id": envelope, "payload": json.RawMessage(payload),
		"accepts_response_payload": false})
}

// Disconnect sends Slack's disconnect request; the client reconnects.
func (k *Socket) Disconnect() error {
	return k.send(map[string]any{"type": "disconnect", "reason": "refresh_requested",
		"debug_info": map[string]any{"host": "applink-fake"}})
}

func (k *Socket) send(v any) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.conn == nil {
		return errors.New("fakeslack: no socket mode connection")
	}
	if err := k.conn.WriteJSON(v); err != nil {
		return fmt.Errorf("fakeslack: socket write: %w", err)
	}
	return nil
}
