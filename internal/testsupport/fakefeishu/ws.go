package fakefeishu

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	larkws "github.com/larksuite/oapi-sdk-go/v3/ws"
)

// wsPath is the fake's long-connection websocket.
const wsPath = "/ws"

type wsConn struct {
	c  *websocket.Conn
	mu sync.Mutex
}

func (w *wsConn) write(f *larkws.Frame) error {
	b, err := f.Marshal()
	if err != nil {
		return fmt.Errorf("fakefeishu: frame: %w", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.c.WriteMessage(websocket.BinaryMessage, b)
}

// serveWS accepts a long connection and answers its frames: pings with
// pongs, event responses (ACKs) to the Push waiting for them.
func (s *Server) serveWS(w http.ResponseWriter, r *http.Request) {
	c, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	conn := &wsConn{c: c}
	s.mu.Lock()
	s.conns = append(s.conns, conn)
	s.calls = append(s.calls, Call{Op: "ws.connect", Method: r.Method, Path: r.URL.String()})
	s.mu.Unlock()
	defer func() {
		_ = c.Close()
		s.mu.Lock()
		for i, x := range s.conns {
			if x == conn {
				s.conns = append(s.conns[:i], s.conns[i+1:]...)
				break
			}
		}
		s.mu.Unlock()
	}()
	for {
		_, msg, err := c.ReadMessage()
		if err != nil {
			return
		}
		var f larkws.Frame
		if f.Unmarshal(msg) != nil {
			continue
		}
		hs := larkws.Headers(f.Headers)
		switch larkws.FrameType(f.Method) {
		case larkws.FrameTypeControl:
			if larkws.MessageType(hs.GetString(larkws.HeaderType)) == larkws.MessageTypePing {
				pong := larkws.Frame{Method: int32(larkws.FrameTypeControl), Service: f.Service,
					Headers: []larkws.Header{{Key: larkws.HeaderType, Value: string(larkws.MessageTypePong)}}}
				_ = conn.write(&pong)
			}
		case larkws.FrameTypeData:
			var resp larkws.Response
			if json.Unmarshal(f.Payload, &resp) != nil {
				resp = larkws.Response{}
			}
			id := hs.GetString(larkws.HeaderMessageID)
			s.mu.Lock()
			ch := s.acks[id]
			delete(s.acks, id)
			s.mu.Unlock()
			if ch != nil {
				ch <- resp
			}
		}
	}
}

// Connected reports how many long connections are open.
func (s *Server) Connected() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Push sends an event (its plaintext JSON) over the newest long connection
// as the platform does and returns the client's ACK status code (200 when
// handled), waiting at most timeout.
func (s *Server) Push(payload []byte, timeout time.Duration) (int, error) {
	code, _, err := s.PushCallback(payload, timeout)
	return code, err
}

// PushCallback is Push returning the ACK's data too: a card callback's
// answer (its toast, its card) as the client sent it.
func (s *Server) PushCallback(payload []byte, timeout time.Duration) (int, []byte, error) {
	s.mu.Lock()
	if len(s.conns) == 0 {
		s.mu.Unlock()
		return 0, nil, errors.New("fakefeishu: no long connection")
	}
	conn := s.conns[len(s.conns)-1]
	s.n++
	id := "msg" + strconv.Itoa(s.n)
	ch := make(chan larkws.Response, 1)
	s.acks[id] = ch
	s.mu.Unlock()
	f := larkws.Frame{SeqID: uint64(s.n), LogID: uint64(s.n), Service: 7, Method: int32(larkws.FrameTypeData),
		Headers: []larkws.Header{
			{Key: larkws.HeaderType, Value: string(larkws.MessageTypeEvent)},
			{Key: larkws.HeaderMessageID, Value: id},
			{Key: larkws.HeaderTraceID, Value: "trace-" + id},
			{Key: larkws.HeaderSum, Value: "1"},
			{Key: larkws.HeaderSeq, Value: "0"},
			{Key: larkws.HeaderTimestamp, Value: strconv.FormatInt(time.Now().UnixMilli(), 10)},
		},
		Payload: payload}
	if err := conn.write(&f); err != nil {
		return 0, nil, fmt.Errorf("fakefeishu: push: %w", err)
	}
	select {
	case resp := <-ch:
		return resp.StatusCode, resp.Data, nil
	case <-time.After(timeout):
		s.mu.Lock()
		delete(s.acks, id)
		s.mu.Unlock()
		return 0, nil, errors.New("fakefeishu: no ACK in time")
	}
}

// Drop closes every long connection from the server side, as a platform
// restart does; the client is expected to reconnect.
func (s *Server) Drop() {
	s.mu.Lock()
	conns := append([]*wsConn(nil), s.conns...)
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.c.Close()
	}
}

// Close drops the long connections and stops the server.
func (s *Server) Close() {
	s.Drop()
	s.Server.Close()
}
