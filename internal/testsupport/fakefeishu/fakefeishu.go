// Package fakefeishu is a Feishu/Lark open platform on loopback for tests:
// tenant access token, bot info, message reply/create/patch/get, message
// resources (downloads), CardKit card
// create/update/settings/element content, and the long-connection endpoint
// with a websocket speaking the SDK's own protobuf frames. It records every
// call, deduplicates replies by uuid and checks CardKit sequence numbers as
// the platform does. Tests point the SDK at it with FEISHU_BASE_URL /
// lark.WithOpenBaseUrl / larkws.WithDomain.
package fakefeishu

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	larkws "github.com/larksuite/oapi-sdk-go/v3/ws"
)

// Call is one API call the fake received.
type Call struct {
	// Op names the operation ("im.reply", "cardkit.content", …).
	Op     string
	Method string
	Path   string
	Body   []byte
	// At is when the call arrived.
	At time.Time
}

// Message is a message the bot posted.
type Message struct {
	ID       string
	ReplyTo  string
	InThread bool
	MsgType  string
	Content  string
	UUID     string
	Patches  int
	// ReceiveID and ReceiveIDType are where a created message went.
	ReceiveID, ReceiveIDType string
}

// Upload is a file uploaded with im/v1/files.
type Upload struct {
	Key, Type, Name string
	Data            []byte
}

// Card is a CardKit card entity.
type Card struct {
	ID        string
	Streaming bool
	// Text is the answer element's content.
	Text string
	// Data is the card JSON as last created or replaced (its buttons).
	Data string
	// Seqs are the sequence numbers of the card's updates, in order.
	Seqs    []int
	Updates int
}

// Resource is a file of a message, served by the message-resource API.
type Resource struct {
	// Type is "image" or "file": the type the request must ask for.
	Type string
	Name string
	Data []byte
}

// UserMessage is a message the fake serves through the get-message API
// (a parent a reply-summon loads).
type UserMessage struct {
	ID      string
	MsgType string
	// Content is the content JSON, as the API returns it.
	Content string
	// SenderType is "user" (default) or "app".
	SenderType string
	// Mentions are the message's mentions (key, open_id, name).
	Mentions []Mention
}

// Mention is one mention of a UserMessage.
type Mention struct{ Key, OpenID, Name string }

// Server is the fake open platform.
type Server struct {
	*httptest.Server
	// BotOpenID is answered by the bot info API.
	BotOpenID string

	mu       sync.Mutex
	calls    []Call
	n        int
	messages map[string]*Message
	uuids    map[string]string
	uploads  []Upload
	cards    map[string]*Card
	fail     map[string][]int
	delay    map[string]time.Duration
	res      map[string]Resource
	users    map[string]UserMessage
	// websocket side
	upgrader websocket.Upgrader
	conns    []*wsConn
	connects int
	acks     map[string]chan larkws.Response
	notify   chan struct{}
}

// Errors the fake answers with (the platform's codes where known).
const (
	// CodeSequence answers an update whose sequence does not increase.
	CodeSequence = 300317
	// CodeStreamingClosed answers a content update on a card whose
	// streaming is closed.
	CodeStreamingClosed = 300309
)

// New starts a fake; it is closed by Close.
func New() *Server {
	s := &Server{BotOpenID: "ou_bot0000000000000000000000000000", messages: map[string]*Message{}, uuids: map[string]string{},
		cards: map[string]*Card{}, fail: map[string][]int{},
		delay: map[string]time.Duration{}, res: map[string]Resource{}, users: map[string]UserMessage{}, acks: map[string]chan larkws.Response{}, notify: make(chan struct{}, 1)}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// Fail makes the next calls of op answer with the given API codes.
func (s *Server) Fail(op string, codes ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail[op] = append(s.fail[op], codes...)
}

// Delay makes every call of op wait d before it is answered.
func (s *Server) Delay(op string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay[op] = d
}

// AddResource makes file key of message msg downloadable.
func (s *Server) AddResource(msg, key string, r Resource) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.res[msg+"/"+key] = r
}

// AddUserMessage makes m readable with the get-message API.
func (s *Server) AddUserMessage(m UserMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users[m.ID] = m
}

// Calls returns the calls received of the given ops (all when none).
func (s *Server) Calls(ops ...string) []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Call
	for _, c := range s.calls {
		if len(ops) == 0 {
			out = append(out, c)
			continue
		}
		for _, op := range ops {
			if c.Op == op {
				out = append(out, c)
				break
			}
		}
	}
	return out
}

// Messages returns copies of the messages posted, in ID order.
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Message, 0, len(s.messages))
	for i := 1; i <= s.n; i++ {
		if m, ok := s.messages[fmt.Sprintf("om_fake%d", i)]; ok {
			out = append(out, *m)
		}
	}
	return out
}

// Card returns a copy of card id.
func (s *Server) Card(id string) (Card, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.cards[id]
	if !ok {
		return Card{}, false
	}
	cp := *c
	cp.Seqs = append([]int(nil), c.Seqs...)
	return cp, true
}

// Cards returns the number of cards created.
func (s *Server) Cards() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.cards)
}

// CloseStreaming closes a card's streaming mode (as the platform does
// after a while): content updates then fail.
func (s *Server) CloseStreaming(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.cards[id]; ok {
		c.Streaming = false
	}
}

// Changed returns a channel that receives after every recorded call (one
// pending notification at most), for tests waiting on the fake.
func (s *Server) Changed() <-chan struct{} { return s.notify }

type apiAnswer struct {
	status int
	body   map[string]any
	// file and name answer a download.
	file []byte
	name string
}

func ok(data any) apiAnswer {
	return apiAnswer{status: http.StatusOK, body: map[string]any{"code": 0, "msg": "success", "data": data}}
}

func apiErr(code int, msg string) apiAnswer {
	return apiAnswer{status: http.StatusBadRequest, body: map[string]any{"code": code, "msg": msg}}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == wsPath {
		s.serveWS(w, r)
		return
	}
	raw, _ := io.ReadAll(r.Body)
	op, args := route(r.Method, r.URL.Path)
	s.mu.Lock()
	s.calls = append(s.calls, Call{Op: op, Method: r.Method, Path: r.URL.RequestURI(), Body: raw, At: time.Now()})
	wait := s.delay[op]
	s.mu.Unlock()
	if wait > 0 {
		select {
		case <-time.After(wait):
		case <-r.Context().Done():
			return
		}
	}
	s.mu.Lock()
	var ans apiAnswer
	if q := s.fail[op]; len(q) > 0 {
		s.fail[op] = q[1:]
		ans = apiErr(q[0], "injected failure")
	} else if op == "im.resource" {
		ans = s.resource(args, r.URL.Query().Get("type"))
	} else if op == "im.file" {
		ans = s.upload(r.Header.Get("Content-Type"), raw)
	} else if op == "im.create" {
		ans = s.answer(op, []string{r.URL.Query().Get("receive_id_type")}, raw)
	} else {
		ans = s.answer(op, args, raw)
	}
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
	if ans.file != nil {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", ans.name))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(ans.file)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(ans.status)
	_ = json.NewEncoder(w).Encode(ans.body)
}

// upload keeps a file uploaded with im/v1/files (multipart); s.mu is held.
func (s *Server) upload(contentType string, raw []byte) apiAnswer {
	_, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return apiErr(234001, "not multipart")
	}
	form, err := multipart.NewReader(bytes.NewReader(raw), params["boundary"]).ReadForm(64 << 20)
	if err != nil || len(form.File["file"]) == 0 || len(form.Value["file_type"]) == 0 || len(form.Value["file_name"]) == 0 {
		return apiErr(234001, "no file")
	}
	f, err := form.File["file"][0].Open()
	if err != nil {
		return apiErr(234001, "unreadable file")
	}
	data, _ := io.ReadAll(f)
	_ = f.Close()
	up := Upload{Key: fmt.Sprintf("file_fake%d", len(s.uploads)+1), Type: form.Value["file_type"][0], Name: form.Value["file_name"][0], Data: data}
	s.uploads = append(s.uploads, up)
	return ok(map[string]any{"file_key": up.Key})
}

// Uploads returns the files uploaded, in order.
func (s *Server) Uploads() []Upload {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Upload(nil), s.uploads...)
}

// resource serves a message resource; s.mu is held.
func (s *Server) resource(args []string, typ string) apiAnswer {
	res, found := s.res[args[0]+"/"+args[1]]
	switch {
	case !found:
		return apiErr(234003, "file not in message")
	case typ != res.Type:
		return apiErr(234001, "invalid type: "+typ)
	}
	return apiAnswer{status: http.StatusOK, file: res.Data, name: res.Name}
}

// userMessage answers the get-message API; s.mu is held.
func (s *Server) userMessage(id string) apiAnswer {
	m, found := s.users[id]
	if !found {
		return apiErr(230001, "message not found")
	}
	sender := m.SenderType
	if sender == "" {
		sender = "user"
	}
	var mentions []map[string]any
	for _, mn := range m.Mentions {
		mentions = append(mentions, map[string]any{"key": mn.Key, "id": mn.OpenID, "id_type": "open_id", "name": mn.Name})
	}
	return ok(map[string]any{"items": []any{map[string]any{
		"message_id": m.ID, "msg_type": m.MsgType, "body": map[string]any{"content": m.Content},
		"sender": map[string]any{"id": "ou_sender", "id_type": "open_id", "sender_type": sender}, "mentions": mentions}}})
}

// route names the operation of a request and its path arguments.
func route(method, path string) (string, []string) {
	p := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case method == http.MethodPost && path == "/open-apis/auth/v3/tenant_access_token/internal":
		return "auth.tenant", nil
	case method == http.MethodPost && path == "/open-apis/auth/v3/app_access_token/internal":
		return "auth.app", nil
	case method == http.MethodGet && path == "/open-apis/bot/v3/info":
		return "bot.info", nil
	case method == http.MethodPost && path == larkws.GenEndpointUri:
		return "ws.endpoint", nil
	case method == http.MethodGet && len(p) == 7 && p[1] == "im" && p[3] == "messages" && p[5] == "resources":
		return "im.resource", []string{p[4], p[6]}
	case method == http.MethodGet && len(p) == 5 && p[1] == "im" && p[3] == "messages":
		return "im.get", []string{p[4]}
	case method == http.MethodPost && len(p) == 4 && p[1] == "im" && p[3] == "messages":
		return "im.create", nil
	case method == http.MethodPost && len(p) == 4 && p[1] == "im" && p[3] == "files":
		return "im.file", nil
	case method == http.MethodPost && len(p) == 6 && p[1] == "im" && p[3] == "messages" && p[5] == "reply":
		return "im.reply", []string{p[4]}
	case method == http.MethodPatch && len(p) == 5 && p[1] == "im" && p[3] == "messages":
		return "im.patch", []string{p[4]}
	case method == http.MethodPost && path == "/open-apis/cardkit/v1/cards":
		return "cardkit.create", nil
	case method == http.MethodPut && len(p) == 5 && p[1] == "cardkit" && p[3] == "cards":
		return "cardkit.update", []string{p[4]}
	case method == http.MethodPatch && len(p) == 6 && p[1] == "cardkit" && p[5] == "settings":
		return "cardkit.settings", []string{p[4]}
	case method == http.MethodPut && len(p) == 8 && p[1] == "cardkit" && p[5] == "elements" && p[7] == "content":
		return "cardkit.content", []string{p[4], p[6]}
	}
	return method + " " + path, nil
}

// answer serves one API call; s.mu is held.
func (s *Server) answer(op string, args []string, raw []byte) apiAnswer {
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	get := func(k string) string { v, _ := body[k].(string); return v }
	switch op {
	case "auth.tenant", "auth.app":
		return apiAnswer{status: http.StatusOK, body: map[string]any{"code": 0, "msg": "ok",
			"tenant_access_token": "t-fake", "app_access_token": "a-fake", "expire": 7200}}
	case "bot.info":
		return apiAnswer{status: http.StatusOK, body: map[string]any{"code": 0, "msg": "ok",
			"bot": map[string]any{"open_id": s.BotOpenID, "app_name": "fastagent", "activate_status": 2}}}
	case "ws.endpoint":
		s.connects++
		u := strings.Replace(s.URL, "http://", "ws://", 1) + wsPath + "?device_id=dev" + strconv.Itoa(s.connects) + "&service_id=7"
		return apiAnswer{status: http.StatusOK, body: map[string]any{"code": 0, "msg": "ok", "data": map[string]any{
			"URL": u, "ClientConfig": map[string]any{"ReconnectCount": -1, "ReconnectInterval": 1, "ReconnectNonce": 0, "PingInterval": 120}}}}
	case "im.reply", "im.create":
		if id, dup := s.uuids[get("uuid")]; dup && get("uuid") != "" {
			return ok(s.messageData(s.messages[id]))
		}
		s.n++
		m := &Message{ID: fmt.Sprintf("om_fake%d", s.n), MsgType: get("msg_type"), Content: get("content"), UUID: get("uuid")}
		if op == "im.reply" {
			m.ReplyTo = args[0]
			m.InThread, _ = body["reply_in_thread"].(bool)
		} else {
			m.ReceiveID, m.ReceiveIDType = get("receive_id"), args[0]
		}
		s.messages[m.ID] = m
		if m.UUID != "" {
			s.uuids[m.UUID] = m.ID
		}
		return ok(s.messageData(m))
	case "im.get":
		return s.userMessage(args[0])
	case "im.patch":
		m, found := s.messages[args[0]]
		if !found {
			return apiErr(230001, "message not found")
		}
		if m.MsgType != "interactive" {
			return apiErr(230001, "only cards can be patched")
		}
		m.Content = get("content")
		m.Patches++
		return ok(map[string]any{})
	case "cardkit.create":
		if get("type") != "card_json" {
			return apiErr(300301, "bad card type")
		}
		text, streaming, err := parseCard(get("data"))
		if err != nil {
			return apiErr(300301, err.Error())
		}
		id := fmt.Sprintf("card_fake%d", len(s.cards)+1)
		s.cards[id] = &Card{ID: id, Streaming: streaming, Text: text, Data: get("data")}
		return ok(map[string]any{"card_id": id})
	case "cardkit.content":
		c, found := s.cards[args[0]]
		if !found {
			return apiErr(300300, "card not found")
		}
		if !c.Streaming {
			return apiErr(CodeStreamingClosed, "card streaming mode is closed")
		}
		if a := s.sequence(c, body); a != nil {
			return *a
		}
		c.Text = get("content")
		c.Updates++
		return ok(map[string]any{})
	case "cardkit.update":
		c, found := s.cards[args[0]]
		if !found {
			return apiErr(300300, "card not found")
		}
		if a := s.sequence(c, body); a != nil {
			return *a
		}
		card, _ := body["card"].(map[string]any)
		data, _ := card["data"].(string)
		text, streaming, err := parseCard(data)
		if err != nil {
			return apiErr(300301, err.Error())
		}
		c.Text, c.Streaming, c.Data = text, streaming, data
		c.Updates++
		return ok(map[string]any{})
	case "cardkit.settings":
		c, found := s.cards[args[0]]
		if !found {
			return apiErr(300300, "card not found")
		}
		var set struct {
			Config struct {
				StreamingMode *bool `json:"streaming_mode"`
			} `json:"config"`
		}
		_ = json.Unmarshal([]byte(get("settings")), &set)
		if set.Config.StreamingMode != nil {
			c.Streaming = *set.Config.StreamingMode
		}
		return ok(map[string]any{})
	}
	return apiAnswer{status: http.StatusNotFound, body: map[string]any{"code": 404, "msg": "not found: " + op}}
}

// sequence checks and records an update's sequence on a streaming card.
func (s *Server) sequence(c *Card, body map[string]any) *apiAnswer {
	f, has := body["sequence"].(float64)
	if !has {
		if c.Streaming {
			a := apiErr(CodeSequence, "sequence is required in streaming mode")
			return &a
		}
		return nil
	}
	seq := int(f)
	if len(c.Seqs) > 0 && seq <= c.Seqs[len(c.Seqs)-1] {
		a := apiErr(CodeSequence, fmt.Sprintf("sequence %d is not above %d", seq, c.Seqs[len(c.Seqs)-1]))
		return &a
	}
	c.Seqs = append(c.Seqs, seq)
	return nil
}

func (s *Server) messageData(m *Message) map[string]any {
	return map[string]any{"message_id": m.ID, "msg_type": m.MsgType, "parent_id": m.ReplyTo,
		"body": map[string]any{"content": m.Content}, "create_time": strconv.FormatInt(time.Now().UnixMilli(), 10)}
}

// parseCard reads a card JSON 2.0's streaming mode and its markdown text.
func parseCard(data string) (string, bool, error) {
	var c struct {
		Schema string `json:"schema"`
		Config struct {
			StreamingMode bool `json:"streaming_mode"`
		} `json:"config"`
		Body struct {
			Elements []struct {
				Tag     string `json:"tag"`
				Content string `json:"content"`
			} `json:"elements"`
		} `json:"body"`
	}
	if err := json.Unmarshal([]byte(data), &c); err != nil {
		return "", false, fmt.Errorf("card json: %w", err)
	}
	if c.Schema != "2.0" {
		return "", false, errors.New("card json: schema 2.0 expected")
	}
	var parts []string
	for _, e := range c.Body.Elements {
		if e.Tag == "markdown" {
			parts = append(parts, e.Content)
		}
	}
	return strings.Join(parts, "\n"), c.Config.StreamingMode, nil
}

// CardText returns the markdown text of a message's content: an inline
// card JSON, or the card entity it references.
func (s *Server) CardText(m Message) string {
	var ref struct {
		Type string `json:"type"`
		Data struct {
			CardID string `json:"card_id"`
		} `json:"data"`
	}
	if json.Unmarshal([]byte(m.Content), &ref) == nil && ref.Type == "card" {
		c, _ := s.Card(ref.Data.CardID)
		return c.Text
	}
	text, _, _ := parseCard(m.Content)
	return text
}
